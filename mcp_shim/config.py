"""The shim's settings, read at the edge: flags, `MNEMOSYNC_*` variables, Claude Code's environment.

Both entry points (`mnemosync-mcp` and `mnemosync hook …`) take the agent's
connection options (`mnemosync.agent.cli_options`), build one frozen
`ClientSettings` here and hand it to the library; nothing below this module
reads the environment.

Scope precedence (the scope new memories go to, and the session's home scope
for search, lists and core memories): `--scope`, then `MNEMOSYNC_SCOPE`, then
`project:<basename>` of the project directory (the hook's `cwd`, or
`CLAUDE_PROJECT_DIR`, which Claude Code sets for MCP servers and hooks), then
the settings file's `[client] scope`, then `user`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # the settings load NumPy; `mnemosync-mcp`'s relay takes `scope_option` without them
    from mnemosync.agent.client_settings import ClientSettings

TOOL_SETS = ("compact", "all")
"""`--tools`: the default set, or every tool (`mnemosync.shim.app`)."""
ALL_TOOLS = ("add_memory", "get", "update", "forget", "restore", "link_memories", "set_governance_layer", "search",
             "keyword_search", "list_recent", "list_topics", "get_timeline", "stats", "agent_sync", "check_conflicts",
             "resolve_conflict", "recall", "mark_used", "decay_sweep", "traverse", "get_causal_chain",
             "get_event_timeline", "consolidate", "verify_memories", "graph_search")
"""Every tool, the `all` set (here, not in `mnemosync.shim.app`, so `mnemosync-mcp --help` counts them cheaply)."""
COMPACT_TOOLS = ("search", "add_memory", "get", "update", "forget", "check_conflicts")
"""The default tool set."""


def tool_names(tools: str) -> frozenset[str]:
    """The tools a set offers: what its texts may send the model to."""
    return frozenset(COMPACT_TOOLS if tools == "compact" else ALL_TOOLS)
CORE_BUDGET_RANGE = (200, 8000)
"""Least and most tokens `--core-budget` may give the memory://core resource."""
CHANNEL_INTERVAL_RANGE = (1.0, 3600.0)
"""Least and most seconds `--channel-interval` may put between two channel pushes."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@-]+")


def project_scope(directory: str | os.PathLike[str]) -> str | None:
    """`project:<basename>` for a project directory, made a valid scope; None if it has no usable name.

    Characters a scope may not hold become `-`, so `~/src/My App` gives `project:My-App`.
    """
    name = _UNSAFE.sub("-", PurePath(os.fspath(directory).rstrip("/\\") or "/").name).strip("-.")
    return f"project:{name}"[:128] if name else None


def load_settings(
    *,
    environ: Mapping[str, str] | None = None,
    config_file: Path | None = None,
    project_dir: str | None = None,
    scope: str | None = None,
    timeout: float | None = None,
    **connection: Any,
) -> ClientSettings:
    """Builds the client settings (see the module docstring for the scope rule).

    Args:
        environ: The environment to read (default `os.environ`).
        config_file: TOML file with a `[client]` table (default `MNEMOSYNC_CONFIG`).
        project_dir: The project directory (default `CLAUDE_PROJECT_DIR`).
        scope, timeout: Flag values; None leaves the setting to the environment, the file or the default.
        **connection: The connection options' values (`mnemosync.agent.cli_options.CONNECTION_FIELDS`; None: not given).

    Raises:
        SettingsError: A malformed value in the file or the environment.
    """
    from mnemosync.agent import client_settings

    environ = os.environ if environ is None else environ
    if config_file is None and environ.get("MNEMOSYNC_CONFIG"):
        config_file = Path(environ["MNEMOSYNC_CONFIG"])
    if scope is None and not environ.get("MNEMOSYNC_SCOPE"):
        project = project_dir or environ.get("CLAUDE_PROJECT_DIR")
        if project:
            scope = project_scope(project)
    return client_settings.load(settings_file=config_file, environ=environ,
                                overrides={**connection, "scope": scope, "timeout": timeout})


def scope_option(func):
    """--scope: the session's scope for new memories and default reads (see the module docstring)."""
    return click.option("--scope", help="Scope for new memories and default reads [env MNEMOSYNC_SCOPE; default "
                                        "project:<basename of CLAUDE_PROJECT_DIR> when set, else user].")(func)
