"""Starts `mnemosync hook …` for the plugin's launcher without the interpreter's site set-up (`python -S`).

Claude Code waits for the prompt hook on every prompt. A normal start of the
installation's interpreter runs `site`, which for an editable install (a
checkout installed with `pip install -e`, as `ops/bootstrap.sh` does) loads
setuptools' import hook with pathlib, importlib.util and what they import:
about half of a bare interpreter start, before the hook imports anything. The
hooks need only the standard library and mnemosync's own standard-library
modules (`mnemosync.__main__.FAST`), so `mnemosync-plugin` runs this file with
`-S -P` and the interpreter that `mnemosync`'s first line names, and this file
finds mnemosync itself (`package_dirs`):

* installed from a wheel: `mnemosync/` in that interpreter's site-packages, which is put on `sys.path`;
* an editable install: the checkout its `direct_url.json` names (PEP 610), its folders mapped as
  pyproject.toml's `package-dir` maps them (`CHECKOUT_DIRS`; a test keeps the two equal).

Otherwise (another layout, anything unexpected) it runs `site` after all, so
the command behaves exactly as `mnemosync` does; `mnemosync.__main__` runs it
too before it hands a command on to the command table (click and the other
dependencies live in site-packages).
"""

import json
import os
import sys
from importlib.machinery import ModuleSpec, SourceFileLoader

CHECKOUT_DIRS = {"mnemosync": "proto/mnemosync", "mnemosync.server": "server", "mnemosync.agent": "agent_client",
                 "mnemosync.shim": "mcp_shim"}
"""pyproject.toml's `package-dir`: a package name to its folder in the checkout."""


def site_packages(executable: str) -> str:
    """The site-packages folder of the virtual environment `executable` (its `bin/python`) belongs to."""
    prefix = os.path.dirname(os.path.dirname(executable))
    return os.path.join(prefix, "lib", f"python{sys.version_info[0]}.{sys.version_info[1]}", "site-packages")


def package_dirs(site_dir: str) -> dict[str, str] | None:
    """Where mnemosync's packages are for the installation in `site_dir`: {} when `site_dir` holds them (a wheel),
    a package name -> folder map for an editable install of a checkout, None when neither can be told."""
    if os.path.isfile(os.path.join(site_dir, "mnemosync", "__init__.py")):
        return {}
    try:
        infos = [n for n in os.listdir(site_dir) if n.startswith("mnemosync-") and n.endswith(".dist-info")]
        if len(infos) != 1:
            return None
        with open(os.path.join(site_dir, infos[0], "direct_url.json"), encoding="utf-8") as handle:
            origin = json.load(handle)
    except (OSError, ValueError):
        return None
    url = origin.get("url") if isinstance(origin, dict) else None
    if not (isinstance(url, str) and url.startswith("file://") and origin.get("dir_info", {}).get("editable")):
        return None
    from urllib.parse import unquote

    root = unquote(url[len("file://"):])
    dirs = {name: os.path.join(root, folder) for name, folder in CHECKOUT_DIRS.items()}
    return dirs if all(os.path.isfile(os.path.join(d, "__init__.py")) for d in dirs.values()) else None


class CheckoutFinder:
    """Finds the mapped packages of an editable install (`package_dirs`); their modules are found as usual."""

    def __init__(self, dirs: dict[str, str]):
        self.dirs = dirs

    def find_spec(self, name: str, path=None, target=None) -> ModuleSpec | None:
        folder = self.dirs.get(name)
        if folder is None:
            return None
        init = os.path.join(folder, "__init__.py")
        spec = ModuleSpec(name, SourceFileLoader(name, init), origin=init, is_package=True)
        spec.submodule_search_locations = [folder]
        spec.has_location = True
        return spec


def main() -> None:
    """Makes mnemosync importable (see the module docstring), then runs `mnemosync` with this process's arguments."""
    site_dir = site_packages(sys.executable)
    dirs = package_dirs(site_dir) if sys.flags.no_site else None
    if dirs is None:
        if sys.flags.no_site:
            import site

            site.main()
    elif dirs:
        sys.meta_path.insert(0, CheckoutFinder(dirs))
    else:
        sys.path.append(site_dir)
    from mnemosync.__main__ import main as mnemosync

    mnemosync()


if __name__ == "__main__":
    main()
