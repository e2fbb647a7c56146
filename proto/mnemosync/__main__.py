"""The `mnemosync` console script: the hooks Claude Code runs on every prompt start here, before anything heavy.

Claude Code starts `mnemosync hook prompt` for every prompt and waits for it,
so it must not pay for click, the command table or anything they import
(about 35 ms before it does anything). `main` sends the fast hooks (`FAST`,
standard library only) straight to their function and everything else to
the command table (`mnemosync.cli`), as well as what a fast hook hands on
(its function returns None). `--help` always goes to the table, which
documents the fast hooks like every other command. The plugin's launcher
starts the hooks with `python -S` (`claude_plugin/bin/fast_start.py`), so
`full_start` runs the interpreter's site set-up before the table loads.
"""

from __future__ import annotations

import importlib
import os
import sys

FAST: dict[tuple[str, ...], str] = {
    ("hook", "prompt"): "mnemosync.shim.prompt_hook:main",
    ("hook", "session-start"): "mnemosync.shim.session_start_hook:main",
    ("hook", "precompact"): "mnemosync.shim.capture_hook:precompact",
    ("hook", "session-end"): "mnemosync.shim.capture_hook:session_end",
}
"""`mnemosync` arguments to the `module:function(argv) -> exit code` that answers them without the table (None: the
table answers after all)."""


def full_start() -> None:
    """Runs the interpreter's site set-up when this process started without it (`python -S`: the plugin's
    launcher starts the hooks so, `fast_start.py`); the command table's dependencies live in site-packages."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def main() -> None:
    """Console-script entry point."""
    args = sys.argv[1:]
    if args[:1] == ["hook"]:  # the project's settings Claude Code may not have passed, as mnemosync-mcp reads them
        from mnemosync.shim.project_settings import fill_environment

        fill_environment(os.environ)
    target = FAST.get(tuple(args[:2]))
    if target is None or {"-h", "--help"} & set(args[2:]):
        full_start()
        from mnemosync.cli import main as table

        table()
        return
    module, _, function = target.partition(":")
    code = getattr(importlib.import_module(module), function)(args[2:])
    if code is None:
        full_start()
        from mnemosync.cli import main as table

        table()
        return
    sys.exit(code)


if __name__ == "__main__":
    main()
