"""The `MNEMOSYNC_*` settings of a Claude Code project, read from its settings files (standard library only).

`mnemosync init` writes a project's settings as Claude Code's `env`: what the
team shares in `.claude/settings.json` (checked in) and what is one person's
(the agent id, the certificate folder, the cache, the model) in
`.claude/settings.local.json` (never checked in). Claude Code is meant to
give that `env` to the MCP server and the hooks it starts, but it does not
reliably do so for MCP servers: they may start before it is applied
(anthropics/claude-code#36161), and `claude mcp list` starts them without it.
So `mnemosync-mcp` and the hooks read the files themselves
(`with_project_settings`): a `MNEMOSYNC_*` variable their environment lacks
is taken from `settings.local.json`, else from `settings.json`, of the project
Claude Code names in `CLAUDE_PROJECT_DIR` (set for MCP servers and hooks);
what the environment already holds is kept. Outside Claude Code (no
`CLAUDE_PROJECT_DIR`) nothing is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

SETTINGS_FILES = (".claude/settings.local.json", ".claude/settings.json")
"""Where a project's settings are read from, the first to name a variable winning (Claude Code's own order)."""


def project_values(project: Path) -> dict[str, str]:
    """The `MNEMOSYNC_*` values of the `env` of `project`'s Claude Code settings files; a file that is missing or
    not a JSON object with an `env` object is skipped (Claude Code reports a broken file itself)."""
    found: dict[str, str] = {}
    for name in SETTINGS_FILES:
        try:
            data = json.loads((project / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        env = data.get("env") if isinstance(data, dict) else None
        if isinstance(env, dict):
            for key, value in env.items():
                if isinstance(key, str) and key.startswith("MNEMOSYNC_") and isinstance(value, str):
                    found.setdefault(key, value)
    return found


def with_project_settings(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with the project's settings it lacks added (see the module docstring)."""
    project = environ.get("CLAUDE_PROJECT_DIR")
    if not project:
        return dict(environ)
    return {**project_values(Path(project)), **environ}


def fill_environment(environ) -> None:
    """Adds the project's settings `environ` (the process's `os.environ`) lacks, in place: for an entry point
    Claude Code starts, before it reads its options."""
    for key, value in with_project_settings(environ).items():
        environ.setdefault(key, value)
