"""`mnemosync-mcp`'s relay: carries one Claude Code session's stdio to the local agent (standard library only).

The session's MCP server lives in the agent (`mnemosync.shim.agent_sessions`),
which holds the one model, cache and connection of every session of that
agent on the machine; the process Claude Code starts only relays lines, so it
starts at once and holds a few megabytes. It imports nothing heavy: not the
MCP SDK, not the settings, not NumPy.

What it does:

* Connects to the agent's socket (`mnemosync.agent.local_socket`); when
  nobody serves it and nobody is starting it, starts `mnemosync agent` (the
  socket's lock makes two sessions starting at once end with one agent) and
  waits for it, at most `START_WAIT` seconds.
* Sends the session request (scope, project, tool set), reads the agent's
  acknowledgement, then copies lines both ways: stdin to the agent, the
  agent's to stdout.
* When the agent goes away mid-session (killed, crashed), answers every
  request still waiting with an error saying so, starts a new agent, and
  replays the session's `initialize` (its answer swallowed) and
  `notifications/initialized`, so the session carries on. A write the old
  agent had acknowledged is in the changelog; one it had queued is in the
  durable outbox, sent by the next agent. A request that was waiting is not
  sent again (a write may have landed): the error says to check first.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from mnemosync.agent import local_socket

START_WAIT = 30.0
"""Seconds to wait for a started agent to serve the socket."""
CONNECT_TIMEOUT = 15.0
"""Seconds to wait for a running agent's acknowledgement of a session (one that was not serving yet when the relay
came may take what is left of `START_WAIT`: its first session loads the MCP server's modules beside its boot).
About 1 s on a quiet machine; 4.6 s was measured on a loaded one (load 6 on 2 cores), so 5 s failed there."""
GONE = -32000
"""The JSON-RPC error code of a request the agent did not answer because it stopped."""
GONE_MESSAGE = ("the mnemosync agent stopped before answering; a new one has started. If this was a write, search "
                "for it before trying again.")


class RelayError(Exception):
    """The agent cannot be reached or refused the session; the message says what to do."""


def _log(message: str) -> None:
    sys.stderr.write(f"mnemosync-mcp: {message}\n")
    sys.stderr.flush()


def _log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def _said_since(log: Path, start: int, count: int = 5) -> str:
    """What an agent that exited at once wrote to its log after `start` (its error names what to fix), without
    the "Error: " its command line put first: the relay's own error edge says that once, and an earlier
    agent's lines in the same log are not this one's."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(line.removeprefix("Error: ") for line in lines[-count:])


def _gone(request_id: object, method: str) -> dict:
    """The answer to a request the agent stopped before answering: a tool error for a tool call (the model reads
    it), a JSON-RPC error for anything else."""
    if method == "tools/call":
        return {"jsonrpc": "2.0", "id": request_id, "result": {
            "content": [{"type": "text", "text": GONE_MESSAGE}], "isError": True}}
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": GONE, "message": GONE_MESSAGE}}


def _id_key(message: object) -> tuple[str | None, bool]:
    """(the JSON-encoded id of a request or a response, whether it is a response); (None, False) otherwise."""
    if not isinstance(message, dict) or "id" not in message:
        return None, False
    return json.dumps(message["id"]), "method" not in message


class Relay:
    """One session's relay.

    Args:
        path: The agent's socket (`local_socket.socket_path`).
        environ: The environment a started agent gets (the connection flags already folded in).
        session: The session request's fields (`mnemosync.shim.agent_sessions.SessionRequest`).
        start_agent: Start `mnemosync agent` when nobody serves `path` (tests pass False to hold one by hand).
    """

    def __init__(self, path: Path, environ: Mapping[str, str], session: dict, *, start_agent: bool = True):
        self.path = path
        self.environ = dict(environ)
        self.session = {"op": "mcp", **session}
        self.start_agent = start_agent
        self._sock: socket.socket | None = None
        self._reader: BinaryIO | None = None
        self._send_lock = threading.Lock()
        self._out_lock = threading.Lock()
        self._pending: dict[str, str] = {}
        """JSON-encoded id -> method of each request the agent has not answered yet."""
        self._initialize: bytes | None = None
        self._initialized: bytes | None = None
        self._swallow: str | None = None
        self._closing = False
        self._stdout: BinaryIO | None = None
        self.restarts = 0

    # -- connection -----------------------------------------------------------

    def connect(self) -> None:
        """Connects to the agent (starting it when nobody serves the socket) and opens the session.

        Raises:
            RelayError: it did not answer within `START_WAIT` seconds, or refused the session.
        """
        from mnemosync.shim.prompt_hook import agent_log, start_agent

        deadline = time.monotonic() + START_WAIT
        started, launched, logged, starting = None, False, 0, False
        while True:
            try:
                self._sock, self._reader = self._open_session(
                    max(CONNECT_TIMEOUT, deadline - time.monotonic()) if starting else CONNECT_TIMEOUT)
                return
            except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError, EOFError):
                starting = True  # nobody serves the socket, or an agent that was dying took the connection with it
            if not launched and not local_socket.is_starting(self.path):
                if not self.start_agent:
                    raise RelayError(f"no mnemosync agent serves {self.path}")
                logged = _log_size(agent_log(self.path))
                started, launched = start_agent(self.environ, self.path), True
                _log(f"started the local agent (its log: {agent_log(self.path)})")
            if started is not None and started.poll() is not None:
                if started.returncode:
                    raise RelayError(_said_since(agent_log(self.path), logged) or "the local agent could not start")
                started = None  # it exited at once because another one had just started: wait for that one
            if time.monotonic() > deadline:
                raise RelayError(f"the local agent did not start within {START_WAIT:.0f} s; see its log "
                                 f"{agent_log(self.path)}")
            time.sleep(0.05)

    def _open_session(self, timeout: float = CONNECT_TIMEOUT) -> tuple[socket.socket, BinaryIO]:
        """Connects to the socket and opens the session on it.

        Raises:
            FileNotFoundError, ConnectionRefusedError: nobody serves the socket.
            ConnectionResetError, BrokenPipeError, EOFError: the agent went away while answering.
            RelayError: the agent refused the session or did not answer in time.
        """
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(os.fspath(self.path))
            local_socket.check_peer(sock, self.path)  # the connection itself is this user's agent, not the path
            sock.settimeout(timeout)
            reader = sock.makefile("rb")
            sock.sendall(local_socket.encode(self.session))
            line = reader.readline()
            if not line:
                raise EOFError("the agent closed the connection")
            answer = json.loads(line)
        except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, BrokenPipeError, EOFError):
            sock.close()
            raise
        except TimeoutError:
            sock.close()
            raise RelayError(f"the local agent did not open the session within {timeout:.0f} s") from None
        except OSError as exc:
            sock.close()
            raise RelayError(f"cannot reach the local agent at {self.path}: {exc}") from None
        except ValueError as exc:
            sock.close()
            raise RelayError(f"the local agent's answer is not JSON: {exc}") from None
        if not isinstance(answer, dict) or not answer.get("ok"):
            sock.close()
            error = answer.get("error") if isinstance(answer, dict) else answer
            raise RelayError(f"the local agent refused the session: {error}")
        sock.settimeout(None)
        return sock, reader

    def _reconnect(self) -> None:
        """After the agent went away: fails the waiting requests, connects to a new agent, replays the handshake."""
        with self._send_lock:
            waiting, self._pending = self._pending, {}
            for key, method in waiting.items():
                self._write(_gone(json.loads(key), method))
            if self._sock is not None:
                self._sock.close()
            self.connect()
            self.restarts += 1
            _log(f"the local agent went away; reconnected (restart {self.restarts})")
            assert self._sock is not None
            try:
                if self._initialize is not None:
                    self._swallow = _id_key(json.loads(self._initialize))[0]
                    self._sock.sendall(self._initialize)
                if self._initialized is not None:
                    self._sock.sendall(self._initialized)
            except OSError:
                pass  # this agent went away too: the downstream side meets the end and reconnects again

    # -- the two directions ---------------------------------------------------

    def send(self, line: bytes) -> None:
        """One line from the session to the agent (recorded for a replay when it is the handshake)."""
        try:
            message = json.loads(line)
        except ValueError:
            message = None
        method = message.get("method") if isinstance(message, dict) else None
        if method == "initialize":
            self._initialize = line
        elif method == "notifications/initialized":
            self._initialized = line
        key, response = _id_key(message)
        with self._send_lock:
            if key is not None and not response:
                self._pending[key] = method if isinstance(method, str) else ""
            try:
                assert self._sock is not None
                self._sock.sendall(line)
            except OSError:
                pass  # the agent is gone: the downstream side reconnects and answers what was pending

    def _write(self, message: dict | bytes) -> None:
        data = message if isinstance(message, bytes) else json.dumps(message).encode() + b"\n"
        with self._out_lock:
            assert self._stdout is not None
            self._stdout.write(data)
            self._stdout.flush()

    def _downstream(self) -> None:
        while True:
            assert self._reader is not None
            try:
                line = self._reader.readline()
            except OSError:
                line = b""
            if not line:
                if self._closing:
                    return
                try:
                    self._reconnect()
                except RelayError as exc:
                    _log(str(exc))
                    os._exit(1)  # the session cannot go on; Claude Code shows the server as failed
                continue
            try:
                key, response = _id_key(json.loads(line))
            except ValueError:
                key, response = None, False
            if response and key is not None:
                if key == self._swallow:
                    self._swallow = None
                    continue
                with self._send_lock:
                    self._pending.pop(key, None)
            self._write(line if line.endswith(b"\n") else line + b"\n")

    def run(self, stdin: BinaryIO, stdout: BinaryIO) -> int:
        """Relays until the session's stdin ends; returns the exit status."""
        self._stdout = stdout
        self.connect()
        down = threading.Thread(target=self._downstream, name="mnemosync-relay", daemon=True)
        down.start()
        for line in stdin:
            if line.strip():
                self.send(line if line.endswith(b"\n") else line + b"\n")
        self._closing = True
        with self._send_lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        down.join(5)
        for connection in (self._reader, self._sock):  # the session is over, though this process may run on
            if connection is not None:
                connection.close()
        return 0
