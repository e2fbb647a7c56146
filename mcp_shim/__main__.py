"""`mnemosync-mcp`: the stdio MCP server one Claude Code session talks to.

stdout carries the protocol and nothing else: logging goes to stderr, and the
SDK's stdio transport points fd 1 at stderr while it serves, so stray output
from native code (llama.cpp) cannot corrupt the stream.
"""

from __future__ import annotations

import logging
import sys

import click

from agent_client.cli_options import connection_options
from mcp_shim.config import load_settings, scope_option
from server.core.command_line import ErrorEdgeCommand


@click.command(cls=ErrorEdgeCommand, context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
@scope_option
@click.option("--core-budget", type=click.IntRange(200, 8000), default=1500, show_default=True,
              help="Token budget of the memory://core resource.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="WARNING",
              show_default=True, envvar="MNEMOSYNC_LOG_LEVEL", help="stderr log level [env MNEMOSYNC_LOG_LEVEL].")
def main(core_budget, log_level, scope, connection):
    """Serve shared memory to one agent session over stdio (MCP).

    Configure it with flags or MNEMOSYNC_* variables; Claude Code passes them
    through the `env` of the server entry. Each session keeps its own agent
    id and cache directory.

    \b
    Examples:
      claude mcp add mnemosync --env MNEMOSYNC_INSECURE=1 -- mnemosync-mcp
      mnemosync-mcp --server mem.example:50051 --agent-id alice --scope project:webshop
    """
    logging.basicConfig(level=log_level, format="mnemosync-mcp %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    settings = load_settings(scope=scope, **connection)

    from agent_client.client import AgentClient
    from mcp_shim.app import build_server
    from mcp_shim.session import Session

    client = AgentClient(settings, live=True)
    session = Session(client, scope=settings.scope)
    logging.getLogger(__name__).info("agent %s, server %s, scope %s, cache %s", client.agent_id, settings.server,
                                     settings.scope, settings.resolved_cache_dir())
    build_server(session, core_budget_tokens=core_budget).run("stdio")


if __name__ == "__main__":
    main()
