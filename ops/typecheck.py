"""The type checker over the `mnemosync` namespace: mypy with the settings in pyproject.toml's `[tool.mypy]`.

    python -m ops.typecheck            # what ops/test.sh runs
    python -m ops.typecheck FILE...    # other files, checked against the namespace

mypy finds modules by their folders, and the project maps its folders into one
namespace (pyproject.toml's package-dir: server/ is `mnemosync.server`, …), so it
is pointed at a view of the checkout laid out as the namespace, made of symbolic
links (`ops.faults.run.namespace_view`, the same one the fault runner uses); its
findings name the checkout's real files again.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from ops.faults.run import NAMESPACE_VIEW, namespace_view

ROOT = Path(__file__).resolve().parent.parent


def real_paths(text: str, root: Path = ROOT) -> str:
    """mypy's output with the view's paths turned back into the checkout's."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    view = f"{NAMESPACE_VIEW}/mnemosync/"
    for package, folder in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        inside = package.removeprefix("mnemosync").lstrip(".")
        text = text.replace(view + (inside + "/" if inside else ""), folder + "/")
    return text


def run(files: list[str], root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """mypy over the namespace (or over `files`, with the namespace importable), from `root`."""
    view = namespace_view(root, fresh=True)
    target = files or ["-p", "mnemosync"]
    return subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"), *target],
                          cwd=root, capture_output=True, text=True, env={**os.environ, "MYPYPATH": str(view)})


def main(argv: list[str] | None = None) -> int:
    """Runs mypy and prints its findings with real paths; its exit code."""
    done = run(sys.argv[1:] if argv is None else argv)
    sys.stdout.write(real_paths(done.stdout))
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
