"""The `mnemosync` command: one table of every command, each loaded only when it runs.

The table names each command by `"module:attribute"` (`COMMANDS`) and imports
none of them, so the server's, the agent's and the MCP shim's commands never
import each other and `mnemosync --help` starts without loading grpc, the
model or the MCP SDK. It sits at the namespace's root because it names all
three packages, and none of them may know the others (the server imports
nothing of the agent side; the agent and the shim nothing of the server).

Every command raises typed errors; the group's error edge prints them and
picks the documented exit code, once (`mnemosync.kernel.command_line`).

    python -m mnemosync ...     # the same command where no script is on PATH
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from mnemosync import __version__
from mnemosync.kernel.command_line import EXIT_CODES_HELP, ErrorEdge

COMMANDS = {
    # the operator's, on a data directory and a CA
    "serve": "mnemosync.serve_cli:serve",
    "rebuild": "mnemosync.server.operator_cli:rebuild",
    "verify": "mnemosync.server.operator_cli:verify",
    "snapshot": "mnemosync.server.operator_cli:snapshot",
    "migrate-store": "mnemosync.server.operator_cli:migrate_store",
    "ca": "mnemosync.server.ca_cli:ca",
    # the agent's
    "add": "mnemosync.agent.cli:add",
    "verify-memories": "mnemosync.agent.cli:verify_memories",
    "search": "mnemosync.agent.cli:search",
    "get": "mnemosync.agent.cli:get",
    "update": "mnemosync.agent.memory_cli:update",
    "forget": "mnemosync.agent.memory_cli:forget",
    "restore": "mnemosync.agent.memory_cli:restore",
    "link": "mnemosync.agent.graph_cli:link",
    "recent": "mnemosync.agent.memory_cli:recent",
    "list": "mnemosync.agent.memory_cli:list_command",
    "redact": "mnemosync.agent.cli:redact",
    "sync": "mnemosync.agent.cli:sync",
    "status": "mnemosync.agent.cli:status",
    "import": "mnemosync.agent.bulk_cli:import_memories",
    "export": "mnemosync.agent.bulk_cli:export_memories",
    "conflicts": "mnemosync.agent.conflicts_cli:conflicts",
    "dashboard": "mnemosync.agent.dashboard.cli:dashboard",
    "model": "mnemosync.agent.model_cli:model",
    "embed": "mnemosync.agent.model_cli:embed",
    "maintain": "mnemosync.agent.lifecycle_cli:maintain",
    "topics": "mnemosync.agent.lifecycle_cli:topics",
    "reflect": "mnemosync.agent.lifecycle_cli:reflect",
    "graph": "mnemosync.agent.graph_cli:graph_group",
    "vault": "mnemosync.agent.vault_cli:vault_group",
    # Claude Code's
    "hook": "mnemosync.shim.hook_cli:hook",
    "agent": "mnemosync.shim.agent_cli:agent",
    "recall": "mnemosync.shim.recall_cli:recall",
    "ingest": "mnemosync.shim.ingest_cli:ingest",
    "init": "mnemosync.shim.init_cli:init",
    "doctor": "mnemosync.agent.doctor_cli:doctor",
}
"""Command name to the `module:attribute` that defines it."""


class CommandTable(ErrorEdge, click.Group):
    """A click group whose commands are imported from `COMMANDS` when they are used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attribute = COMMANDS[name].partition(":")
        return getattr(importlib.import_module(module), attribute)


@click.group(cls=CommandTable, context_settings={"help_option_names": ["-h", "--help"]},
             epilog=EXIT_CODES_HELP)
@click.version_option(__version__, prog_name="mnemosync")
@click.option("-v", "--verbose", is_flag=True, help="Log progress and connection details to stderr.")
def cli(verbose):
    """Shared long-term memory for AI agents.

    \b
    Examples:
      mnemosync serve --insecure                       # start a development server
      mnemosync add "The auth service signs JWTs with RS256" --insecure
      mnemosync search "how are login tokens signed?" --insecure
      mnemosync status --insecure                      # this agent's state
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def main() -> None:
    """Console-script entry point."""
    cli()


if __name__ == "__main__":
    main()
