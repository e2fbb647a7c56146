"""The local agent's MCP sessions: every Claude Code session of one agent on a machine, served by one process.

`mnemosync-mcp` is a relay (`mnemosync.shim.relay`): it connects to the agent's
local socket and sends one line, `{"op": "mcp", "scope", "project_dir", "cwd",
"tools", "core_budget", "channel", "channel_interval", "session_id"}`; the agent answers
`{"ok": true, "session": n, "pid": pid}` (or `{"error": ...}` and closes), and
from then on the connection carries the session's MCP messages, one JSON-RPC
message per line each way, exactly as stdio would.

Each connection gets a thread with its own event loop and its own MCP server
(`mnemosync.shim.app.build_server`, hosted) over a `Session` of its own (its
scope, its news since its previous call), all sharing the agent's one client:
one model, one cache, one live stream, one outbox, and one lock that
serialises tool calls and the prompt hook's recall on it.

`session_id` names the session's record of what its model was shown
(`mnemosync.agent.shown`): Claude Code's session id when the relay has it, else
one the relay made. The relay sends the same request to a new agent after a
restart, so the session keeps its record; a request without one gets a new id.

The agent boots in the background (`SessionHost.boot`): sessions are served at
once, and until the cache has caught up their reads go to the server, which is
what the client does anyway; only a failed boot is noted on results.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from mnemosync.agent import local_socket
from mnemosync.kernel.errors import CodedError
from mnemosync.shim.config import CHANNEL_INTERVAL_RANGE, CORE_BUDGET_RANGE, TOOL_SETS
from mnemosync.shim.core_memories import DEFAULT_BUDGET_TOKENS

log = logging.getLogger(__name__)

SESSION_VARIABLES = ("MNEMOSYNC_SCOPE", "CLAUDE_PROJECT_DIR")
"""Variables that belong to a session, sent by its relay (`scope`, `project_dir`), never the agent's own."""
MAX_SCOPE_CHARS = 128
MAX_PATH_CHARS = 4096
MAX_SESSION_ID_CHARS = 200
MAX_UNANSWERED = 32
"""A session's requests read and not yet answered, at most (`mnemosync.shim.protocol.McpServer.serve`): a session
that never reads its answers costs the agent a bounded amount of memory (the rest wait in the socket, then in the
relay)."""
SEND_TIMEOUT = 30.0
"""Seconds an answer may wait for its session to read it before the session is ended (the socket's send timeout)."""


@dataclass(frozen=True)
class SessionRequest:
    """What a relay asks for when it opens a session (the first line on its connection)."""

    scope: str | None = None
    project_dir: str | None = None
    tools: str = "compact"
    core_budget: int = DEFAULT_BUDGET_TOKENS
    channel: bool = False
    channel_interval: float = 30.0
    cwd: str | None = None
    """The relay's working directory: the tree a session without a project directory reads sources in (never
    the agent's own, which is the directory of whichever session started it)."""
    session_id: str | None = None

    @classmethod
    def parse(cls, request: dict) -> SessionRequest:
        """The request's fields, checked.

        Raises:
            ValueError: a field of the wrong kind or out of range (the message names it).
        """
        def text(name: str, limit: int) -> str | None:
            value = request.get(name)
            if value is None or value == "":
                return None
            if not isinstance(value, str) or len(value) > limit:
                raise ValueError(f"{name} must be a string of at most {limit} characters")
            return value

        tools = request.get("tools") or "compact"
        if tools not in TOOL_SETS:
            raise ValueError(f"tools must be one of {', '.join(TOOL_SETS)}, got {tools!r}")
        budget, (least, most) = request.get("core_budget", DEFAULT_BUDGET_TOKENS), CORE_BUDGET_RANGE
        if not isinstance(budget, int) or not least <= budget <= most:
            raise ValueError(f"core_budget must be an integer from {least} to {most}, got {budget!r}")
        interval, (shortest, longest) = request.get("channel_interval", 30.0), CHANNEL_INTERVAL_RANGE
        if not isinstance(interval, int | float) or not shortest <= interval <= longest:
            raise ValueError(f"channel_interval must be from {shortest:g} to {longest:g} seconds, got {interval!r}")
        return cls(scope=text("scope", MAX_SCOPE_CHARS), project_dir=text("project_dir", MAX_PATH_CHARS),
                   cwd=text("cwd", MAX_PATH_CHARS), tools=tools, core_budget=budget,
                   channel=bool(request.get("channel")), channel_interval=float(interval),
                   session_id=text("session_id", MAX_SESSION_ID_CHARS))


def own_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the variables that belong to a session (`SESSION_VARIABLES`): what the agent's own
    settings are read from, so no session inherits the scope or project of the session that started the agent."""
    return {k: v for k, v in environ.items() if k not in SESSION_VARIABLES}


class CatchUpProgress:
    """Where the boot's catch-up is (`mnemosync.agent.sync.Progress`): (offset, head) while it runs, else None."""

    def __init__(self) -> None:
        self.position: tuple[int, int] | None = None

    def __call__(self, applied: int, offset: int, head: int) -> None:
        self.position = (offset, head)


@dataclass
class _Attached:
    number: int
    scope: str
    since: float


class SessionHost:
    """The sessions one agent process serves, and its boot.

    Args:
        client: The agent's `AgentClient` (not started: `boot` starts it), made with `progress`.
        connection: The agent's connection options (`mnemosync.agent.cli_options`), to resolve each session's
            scope with the same settings.
    """

    def __init__(self, client, *, connection: dict, progress: CatchUpProgress | None = None):
        self.client = client
        self.progress = progress or CatchUpProgress()
        """The client's catch-up progress callback, as the agent passed it to the client."""
        self.connection = connection
        self.lock = threading.Lock()
        """Held while a tool call or a hook's request uses the client."""
        self.started = time.time()
        self.booted = threading.Event()
        self.boot_error: str | None = None
        self._attached: dict[int, _Attached] = {}
        self._numbers = itertools.count(1)
        self._guard = threading.Lock()
        client.remote.sessions_report = self.attached

    # -- boot ----------------------------------------------------------------

    def boot(self) -> None:
        """Sends queued writes, catches the cache up, starts live updates and loads the model
        (`mnemosync.shim.session.boot`; the agent runs it on a thread of its own). Never raises: a failure is kept
        for `note`."""
        from mnemosync.shim.session import boot

        try:
            self.boot_error = boot(self.client)
        finally:
            self.progress.position = None
            self.booted.set()

    def note(self) -> str | None:
        """What every tool result should say about the agent: a failed boot, else nothing."""
        return self.boot_error

    # -- sessions ------------------------------------------------------------

    def attached(self) -> int:
        """How many sessions are connected."""
        with self._guard:
            return len(self._attached)

    def attach(self, request: dict, conn: socket.socket) -> None:
        """Serves the session `request` opens on `conn`, on a thread of its own (`LocalService`'s `on_session`)."""
        try:
            wanted = SessionRequest.parse(request)
        except ValueError as exc:
            _refuse(conn, f"bad session request: {exc}")
            return
        number = next(self._numbers)
        threading.Thread(target=self._serve, args=(number, wanted, conn), name=f"mnemosync-session-{number}",
                         daemon=True).start()

    def _serve(self, number: int, wanted: SessionRequest, conn: socket.socket) -> None:
        import anyio

        try:
            with conn:
                anyio.run(self._run, number, wanted, conn)
        except Exception:  # noqa: BLE001 - one session's failure must not end the agent
            log.exception("session %d failed", number)
        finally:
            with self._guard:
                self._attached.pop(number, None)
            log.info("session %d ended; %d attached", number, self.attached())
            self._report()

    async def _run(self, number: int, wanted: SessionRequest, conn: socket.socket) -> None:
        import anyio

        from mnemosync.shim.app import build_server
        from mnemosync.shim.channel import ChannelNews
        from mnemosync.shim.config import load_settings
        from mnemosync.shim.session import Session

        # the session's scope is its relay's: not the environment of whichever session started this agent
        environ = own_environment(os.environ)
        try:
            scope = load_settings(environ=environ, scope=wanted.scope, project_dir=wanted.project_dir,
                                  **self.connection).scope
        except CodedError as exc:  # the relay says it and exits, rather than wait for an answer
            conn.sendall(local_socket.encode({"error": f"the session's settings: {exc}"}))
            return
        session = Session(self.client, scope=scope, project_dir=wanted.project_dir or wanted.cwd, lock=self.lock,
                          shared=True, agent_note=self.note, session_id=wanted.session_id)
        server = build_server(session, core_budget_tokens=wanted.core_budget, tools=wanted.tools, hosted=True,
                              channel=ChannelNews(session, interval=wanted.channel_interval) if wanted.channel
                              else None)
        with self._guard:
            self._attached[number] = _Attached(number, scope, time.time())
        conn.sendall(local_socket.encode({"ok": True, "session": number, "pid": os.getpid()}))
        log.info("session %d attached (scope %s); %d attached", number, scope, self.attached())
        threading.Thread(target=self._report, name=f"mnemosync-report-{number}", daemon=True).start()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", int(SEND_TIMEOUT), 0))
        reader = conn.makefile("r", encoding="utf-8", errors="replace", newline="\n")
        writer = conn.makefile("w", encoding="utf-8", newline="\n")
        with reader, writer:
            await server.serve(anyio.wrap_file(reader), anyio.wrap_file(writer), most=MAX_UNANSWERED)

    def _report(self) -> None:
        """Tells the server how many sessions are attached now (ListAgents, the dashboard), with an Ack. It reads
        the cache's offset, which waits while a boot's catch-up applies a batch: a new session reports on a thread
        of its own, so its `initialize` never waits for the cache."""
        try:
            self.client.remote.ack_in_background(self.client.cache.offset)
        except Exception:  # noqa: BLE001 - the agent is closing; the count is only shown, never relied on
            log.debug("sessions not reported", exc_info=True)

    # -- status --------------------------------------------------------------

    def describe(self) -> dict:
        """The agent as `mnemosync status` and `doctor` show it: pid, uptime, sessions, cache position, and
        `offline` once it has booted and knows the server is unreachable (the hooks then do not wait for a live
        cache)."""
        with self._guard:
            sessions = [{"session": a.number, "scope": a.scope, "seconds": round(time.time() - a.since, 1)}
                        for a in self._attached.values()]
        offset = self.client.cache.offset
        catching_up = self.progress.position
        head = catching_up[1] if catching_up else (self.client.last_sync.head if self.client.last_sync else None)
        live = self.client.live
        connected = bool(live is not None and live.connected.is_set())
        return {"ok": True, "agent": self.client.agent_id, "pid": os.getpid(),
                "uptime_seconds": round(time.time() - self.started, 1), "sessions": sessions,
                "booted": self.booted.is_set(), "live": connected,
                "offline": self.booted.is_set() and not connected and (
                    not self.client.online or bool(live is not None and live.outage)),
                "cache_offset": offset, "cache_head": head,
                "cache_lag": None if head is None or (live is not None and live.connected.is_set())
                else max(head - offset, 0),
                "boot_error": self.boot_error}


def _refuse(conn: socket.socket, message: str) -> None:
    try:
        conn.sendall(local_socket.encode({"error": message}))
    except OSError:
        pass
    conn.close()
