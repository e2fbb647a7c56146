"""The `mnemosync` command: one table of every command, each loaded only when it runs.

The table names each command by `"module:attribute"` (`COMMANDS`) and imports
none of them, so the server's, the agent's and the MCP shim's commands never
import each other and `mnemosync --help` starts without loading grpc, the
model or the MCP SDK. It sits in `server` because the table must name all
three packages and only `server` may know the other two (`agent_client` and
`mcp_shim` use nothing of `server` but its core).

Every command raises typed errors; the group's error edge prints them and
picks the documented exit code, once (`server.core.command_line`).

    python -m server.cli ...     # the same command where no script is on PATH
"""

from __future__ import annotations

import importlib
import logging
import sys

import click

from server import __version__
from server.core.command_line import EXIT_CODES_HELP, ErrorEdge

COMMANDS = {
    # the operator's, on a data directory and a CA
    "serve": "server.operator_cli:serve",
    "rebuild": "server.operator_cli:rebuild",
    "verify": "server.operator_cli:verify",
    "migrate-store": "server.operator_cli:migrate_store",
    "ca": "server.ca_cli:ca",
    # the agent's
    "add": "agent_client.cli:add",
    "search": "agent_client.cli:search",
    "get": "agent_client.cli:get",
    "redact": "agent_client.cli:redact",
    "sync": "agent_client.cli:sync",
    "status": "agent_client.cli:status",
    "import": "agent_client.bulk_cli:import_memories",
    "export": "agent_client.bulk_cli:export_memories",
    "conflicts": "agent_client.conflicts_cli:conflicts",
    "dashboard": "agent_client.dashboard.cli:dashboard",
    "model": "agent_client.model_cli:model",
    "embed": "agent_client.model_cli:embed",
    "maintain": "agent_client.lifecycle_cli:maintain",
    "topics": "agent_client.lifecycle_cli:topics",
    "reflect": "agent_client.lifecycle_cli:reflect",
    "graph": "agent_client.graph_cli:graph_group",
    # Claude Code's
    "hook": "mcp_shim.hook_cli:hook",
    "agent": "mcp_shim.agent_cli:agent",
    "ingest": "mcp_shim.ingest_cli:ingest",
    "init": "mcp_shim.init_cli:init",
    "doctor": "agent_client.doctor_cli:doctor",
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
