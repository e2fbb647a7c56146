"""`mnemosync-mcp`: the stdio MCP server one Claude Code session talks to.

By default it is a relay (`mnemosync.shim.relay`) to this agent's one local
process (`mnemosync agent`, started on demand), which serves every session of
the agent on the machine with one model and one cache. With `--in-process`
(`MNEMOSYNC_IN_PROCESS=1`), or when the private socket directory cannot be
used, the session is a whole agent of its own, as before: its own client,
boot sync and model.

stdout carries the protocol and nothing else: logging goes to stderr, and the
stdio server (`mnemosync.shim.protocol`) points fd 1 at stderr while it serves, so stray output
from native code (llama.cpp) cannot corrupt the stream.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import ErrorEdgeCommand
from mnemosync.shim.config import (
    ALL_TOOLS,
    CHANNEL_INTERVAL_RANGE,
    COMPACT_TOOLS,
    CORE_BUDGET_RANGE,
    TOOL_SETS,
    scope_option,
)
from mnemosync.shim.project_settings import fill_environment


class _ShimCommand(ErrorEdgeCommand):
    """`mnemosync-mcp`: the project's Claude Code settings its environment lacks are added before its options
    are read (`mnemosync.shim.project_settings`: Claude Code does not reliably pass them to MCP servers)."""

    def main(self, *args, **kwargs):
        fill_environment(os.environ)
        return super().main(*args, **kwargs)


@click.command(cls=_ShimCommand, context_settings={"help_option_names": ["-h", "--help"]})
@connection_options
@scope_option
@click.option("--core-budget", type=click.IntRange(*CORE_BUDGET_RANGE), default=1500, show_default=True,
              help="Token budget of the memory://core resource.")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"]), default="WARNING",
              show_default=True, envvar="MNEMOSYNC_LOG_LEVEL", help="stderr log level [env MNEMOSYNC_LOG_LEVEL].")
@click.option("--tools", type=click.Choice(TOOL_SETS), default="compact", show_default=True,
              envvar="MNEMOSYNC_TOOLS", help=f"compact: {', '.join(COMPACT_TOOLS)}; all: every tool "
                                             f"({len(ALL_TOOLS)}) [env MNEMOSYNC_TOOLS].")
@click.option("--channel/--no-channel", default=False, show_default=True, envvar="MNEMOSYNC_CHANNEL",
              help="Also push other agents' news and new conflicts live (Claude Code's experimental "
                   "claude/channel) [env MNEMOSYNC_CHANNEL].")
@click.option("--channel-interval", type=click.FloatRange(*CHANNEL_INTERVAL_RANGE), default=30.0, show_default=True,
              envvar="MNEMOSYNC_CHANNEL_INTERVAL", help="Least seconds between two channel pushes "
                                                        "[env MNEMOSYNC_CHANNEL_INTERVAL].")
@click.option("--hook-socket/--no-hook-socket", default=True, show_default=True, envvar="MNEMOSYNC_HOOK_SOCKET",
              help="Answer this agent's prompt hook on its private local socket [env MNEMOSYNC_HOOK_SOCKET].")
@click.option("--in-process/--relay", "in_process", default=False, show_default=True, envvar="MNEMOSYNC_IN_PROCESS",
              help="Serve this session with its own agent client instead of relaying it to the machine's one local "
                   "agent [env MNEMOSYNC_IN_PROCESS].")
def main(core_budget, log_level, tools, channel, channel_interval, hook_socket, in_process, scope, connection):
    """Serve shared memory to one agent session over stdio (MCP).

    Configure it with flags (the server entry's args, which always arrive) or
    MNEMOSYNC_* variables; started by Claude Code, it also reads those the
    project's .claude/settings.local.json and settings.json set in `env`
    (Claude Code does not reliably pass them). The session is relayed to this
    agent's one local process (`mnemosync agent`, started when none runs),
    which serves every session of the agent on this machine with one model
    and one cache; --in-process serves it with a whole agent of its own.

    \b
    Examples:
      claude mcp add mnemosync --env MNEMOSYNC_INSECURE=1 -- mnemosync-mcp
      mnemosync-mcp --server mem.example:50051 --agent-id alice --scope project:webshop
    """
    logging.basicConfig(level=log_level, format="mnemosync-mcp %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    if not in_process:
        from mnemosync.agent import local_socket
        from mnemosync.shim.relay import Relay, RelayError

        try:
            path = local_socket.socket_path(os.environ, connection, create=True)
        except OSError as exc:
            logging.getLogger(__name__).warning("serving this session in-process: %s", exc)
        else:
            environ = local_socket.agent_environment(os.environ, connection)
            relay = Relay(path, environ, {
                "scope": scope or os.environ.get("MNEMOSYNC_SCOPE") or None,
                "project_dir": os.environ.get("CLAUDE_PROJECT_DIR") or None, "cwd": os.getcwd(), "tools": tools,
                "core_budget": core_budget, "channel": channel, "channel_interval": channel_interval,
                "session_id": _session_id()})
            try:
                sys.exit(relay.run(sys.stdin.buffer, sys.stdout.buffer))
            except RelayError as exc:
                raise click.ClickException(str(exc)) from None
    from mnemosync.shim.config import load_settings

    settings = load_settings(scope=scope, **connection)

    from mnemosync.agent.client import AgentClient
    from mnemosync.shim.app import build_server
    from mnemosync.shim.channel import ChannelNews
    from mnemosync.shim.session import Session

    client = AgentClient(settings, live=True)
    session = Session(client, scope=settings.scope, project_dir=os.environ.get("CLAUDE_PROJECT_DIR") or None,
                      session_id=_session_id())
    logging.getLogger(__name__).info("agent %s, server %s, scope %s, cache %s", client.agent_id, settings.server,
                                     settings.scope, settings.resolved_cache_dir())
    build_server(session, core_budget_tokens=core_budget, tools=tools,
                 channel=ChannelNews(session, interval=channel_interval) if channel else None,
                 local_service=_hook_service(connection) if hook_socket else None).run_stdio()


def _session_id() -> str:
    """The id this session's record of what it was shown goes by (`mnemosync.agent.shown`): Claude Code's own
    (`CLAUDE_CODE_SESSION_ID`, which it gives stdio MCP servers as it gives hooks their `session_id`), so the
    session's tools and hooks share one record; else a new one for this process (kept across agent restarts by
    the relay)."""
    import uuid

    given = os.environ.get("CLAUDE_CODE_SESSION_ID", "").strip()
    return given[:200] if given else str(uuid.uuid4())


def _hook_service(connection: dict):
    """The local service this session answers the prompt hook on, its lock already taken when it is free (so a
    hook arriving while the session boots waits for it rather than starting `mnemosync agent`); None when the
    socket cannot be used."""
    from mnemosync.agent import local_socket
    from mnemosync.shim.local_service import LocalService

    try:
        path = local_socket.socket_path(os.environ, connection, create=True)
    except OSError as exc:
        logging.getLogger(__name__).warning("prompt hook not answered here: %s", exc)
        return None
    service = LocalService(path)
    service.take_lock()
    return service


if __name__ == "__main__":
    main()
