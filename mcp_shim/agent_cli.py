"""`mnemosync agent`: the one local agent of an OS user, a server and an agent identity on a machine.

It owns the agent client (cache, model, live stream, outbox) and serves, on
the agent's private local socket (`mnemosync.shim.local_service`), both every
Claude Code session of that agent (`mnemosync-mcp` relays the session's stdio
to it: `mnemosync.shim.agent_sessions`) and the hooks' requests
(`mnemosync.shim.hook_answers`; the capture hooks' through
`mnemosync.agent.captures`, stored with the model it holds). The first relay or hook that finds nobody on
the socket starts it; its socket lock makes sure two sessions starting at the
same moment end with one agent. It answers at once and boots in the
background (queued writes, catch-up, live stream, model), so a session never
waits on a catch-up. It exits after `--idle-minutes` with no session
attached and no request, or on SIGTERM/SIGINT. If another process already
serves the socket it exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

import click

from mnemosync.agent import local_socket
from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import ErrorEdgeCommand
from mnemosync.shim.config import load_settings

log = logging.getLogger(__name__)


@click.command(cls=ErrorEdgeCommand)
@connection_options
@click.option("--idle-minutes", type=click.FloatRange(0.01, 1440), default=30.0, show_default=True,
              envvar="MNEMOSYNC_AGENT_IDLE_MINUTES",
              help="Exit after this long with no session attached and no request [env MNEMOSYNC_AGENT_IDLE_MINUTES].")
def agent(idle_minutes, connection):
    """Run this agent's local process: the sessions' MCP server and the hooks' answers.

    Started on demand by `mnemosync-mcp` and `mnemosync hook prompt`; run it by
    hand to keep one warm (it uses the same MNEMOSYNC_* settings as they do).

    \b
    Examples:
      mnemosync agent --insecure --agent-id alice --idle-minutes 120
      MNEMOSYNC_CERT_DIR=~/certs/alice mnemosync agent
    """
    logging.basicConfig(level=logging.INFO, format="mnemosync agent %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    from mnemosync.kernel import heap
    from mnemosync.shim.agent_sessions import own_environment

    heap.lean()  # one process for every session, with a thread for each: see `mnemosync.kernel.heap`

    settings = load_settings(environ=own_environment(os.environ), **connection)  # no session's scope or project
    path = local_socket.socket_path(os.environ, connection, create=True)
    from mnemosync.shim.local_service import LocalService

    idle, stopping = threading.Event(), []
    service = LocalService(path, on_idle=idle.set, idle_seconds=idle_minutes * 60)
    if not service.take_lock():
        click.echo(f"another process already answers on {path}", err=True)
        return
    for sig in (signal.SIGTERM, signal.SIGINT):  # the loop below notices; a handler takes no locks
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))

    from mnemosync.agent.captures import CaptureWorker
    from mnemosync.agent.client import AgentClient
    from mnemosync.shim.agent_sessions import CatchUpProgress, SessionHost
    from mnemosync.shim.hook_answers import HookAnswers

    def scope_for(scope: str | None, cwd: str | None) -> str:
        """A capture's scope, resolved as a session's is (its own, else its project's: not this agent's)."""
        return load_settings(environ=own_environment(os.environ), scope=scope, project_dir=cwd, **connection).scope

    progress = CatchUpProgress()
    client = AgentClient(settings, live=True, progress=progress)
    host = SessionHost(client, connection=connection, progress=progress)
    answers = HookAnswers(client, scope=settings.scope, lock=host.lock)
    captures = CaptureWorker(client, scope_for)

    def handle(request: dict) -> dict:
        op = request.get("op")
        if op == "status":  # asked after its own call reached the server, perhaps: try the stream now
            if client.live is not None:
                client.live.retry_now()
            return host.describe()
        if op == "session-start":
            from mnemosync.shim.hook_cli import session_start_answer

            return session_start_answer(client, request, status=host.describe(), connection=connection,
                                        lock=host.lock)
        if op == "capture":  # the capture hooks: `mnemosync.agent.captures`
            return captures.request(request)
        return answers(request)

    def boot() -> None:
        host.boot()
        captures.start()

    try:
        service.start(handle, on_session=host.attach, attached=host.attached)
        log.info("agent %s answering on %s (pid %d)", client.agent_id, path, os.getpid())
        threading.Thread(target=boot, name="mnemosync-boot", daemon=True).start()
        while not stopping and not idle.wait(0.5) and service.running:
            pass
    finally:
        service.stop()
        captures.stop()
        with host.lock:
            client.close()
