"""`mnemosync agent`: the small per-user warm process that answers Claude Code's hooks when no session shim does.

The prompt hook starts it in the background when nothing answers on this
agent's local socket (hooks configured without the MCP server, or a prompt
sent before the session's shim has booted). It opens the agent client (model
loaded, cache kept live), serves `mnemosync.shim.hook_answers` on the socket
(`mnemosync.shim.local_service`) and exits after `--idle-minutes` without a
request, or on SIGTERM/SIGINT. If another process already serves the socket
it exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import ErrorEdgeCommand
from mnemosync.shim import local_socket
from mnemosync.shim.config import load_settings

log = logging.getLogger(__name__)

LIVE_WAIT_SECONDS = 2.0
"""How long a starting agent waits for its live stream before serving: recall searches the cache alone while
the stream is down, and a first prompt must not be answered from a cache that has not caught up."""


@click.command(cls=ErrorEdgeCommand)
@connection_options
@click.option("--idle-minutes", type=click.FloatRange(0.05, 1440), default=30.0, show_default=True,
              help="Exit after this long without a request.")
def agent(idle_minutes, connection):
    """Run the warm agent process that answers Claude Code's prompt hook.

    Started on demand by `mnemosync hook prompt`; run it by hand to keep one
    warm (it uses the same MNEMOSYNC_* settings as the hooks).

    \b
    Examples:
      mnemosync agent --insecure --agent-id alice --idle-minutes 120
      MNEMOSYNC_CERT_DIR=~/certs/alice mnemosync agent
    """
    logging.basicConfig(level=logging.INFO, format="mnemosync agent %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    settings = load_settings(**connection)
    path = local_socket.socket_path(os.environ, connection, create=True)
    from mnemosync.shim.local_service import LocalService

    idle, stopping = threading.Event(), []
    service = LocalService(path, on_idle=idle.set, idle_seconds=idle_minutes * 60)
    if not service.take_lock():
        click.echo(f"another process already answers on {path}", err=True)
        return
    for sig in (signal.SIGTERM, signal.SIGINT):  # the loop below notices; a handler takes no locks
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))

    from mnemosync.agent.client import AgentClient
    from mnemosync.shim.hook_answers import HookAnswers

    client = AgentClient(settings, live=True)
    try:
        client.start()
        client.embedder  # noqa: B018 - load llama.cpp before the first prompt, not during it
        if client.live is not None:
            client.live.connected.wait(LIVE_WAIT_SECONDS)
        service.start(HookAnswers(client, scope=settings.scope))
        log.info("agent %s answering on %s", client.agent_id, path)
        while not stopping and not idle.wait(0.5) and service.running:
            pass
    finally:
        service.stop()
        client.close()
