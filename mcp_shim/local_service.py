"""The serving end of the local socket: a warm process answers hooks' requests (`mnemosync.agent.local_socket`).

`LocalService` runs in a background thread of `mnemosync-mcp` or of `mnemosync
agent`. It first takes the socket's lock (waiting and retrying while another
warm process of the same agent holds it, so one takes over when the other
ends), binds the socket 0600 in the private directory (its listen queue
long enough for many hooks at once: `LISTEN_BACKLOG`), then answers one
request per connection, each connection on a thread of its own (at most
`MAX_CONNECTIONS` at once; one more is told the agent is busy), so a slow or
idle connection holds up nobody else; each must send its request within
`CONNECTION_TIMEOUT` seconds.
Requests from another user id are refused where the system reports the peer
(`SO_PEERCRED`). Every request is handed to `handle`, whose answer (a dict)
is sent back; an exception becomes `{"error": "..."}`, never a crash.

A request whose op is `mcp` instead opens a session that stays connected
(`mnemosync.shim.agent_sessions`): the connection is handed to `on_session`,
which serves it on a thread of its own. The idle timer does not run while
`attached()` says a session is connected.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from mnemosync.agent import local_socket

log = logging.getLogger(__name__)

CONNECTION_TIMEOUT = 5.0
"""Seconds a connection may take to send its request and read the answer."""
MAX_CONNECTIONS = 256
"""Connections answered at once (each on its own thread); one more is answered "busy" and closed."""
LISTEN_BACKLOG = 1024
"""Connections the system queues before they are accepted (the system may cap it: `net.core.somaxconn`)."""
RETRY_SECONDS = 5.0
"""How often a process waiting for the lock tries again."""


class LocalService:
    """Serves requests on the socket at `path` from a daemon thread.

    Args:
        path: The socket path (`local_socket.socket_path`).
        on_idle: Called (once) when no request came for `idle_seconds`; the service then stops.
        idle_seconds: See `on_idle`; None never calls it.
    """

    def __init__(self, path: Path, *, on_idle: Callable[[], None] | None = None, idle_seconds: float | None = None):
        self.path = path
        self._on_session: Callable[[dict, socket.socket], None] | None = None
        self._attached: Callable[[], int] = lambda: 0
        self._handle: Callable[[dict], dict] = dict
        self._on_idle = on_idle
        self._idle_seconds = idle_seconds
        self._stop = threading.Event()
        self.serving = threading.Event()
        self._lock_fd: int | None = None
        self._sock: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="mnemosync-local-socket", daemon=True)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._active = 0
        self._active_lock = threading.Lock()
        self.last_request = time.monotonic()

    def start(self, handle: Callable[[dict], dict], *, on_session: Callable[[dict, socket.socket], None] | None = None,
              attached: Callable[[], int] | None = None) -> LocalService:
        """Starts serving `handle` (which turns one request into its answer, on the service thread); waits for
        the lock first if another process holds it.

        Args:
            on_session: Takes over the connection of an `mcp` request (see the module docstring).
            attached: How many sessions are connected (the idle timer waits while any is).
        """
        self._handle = handle
        self._on_session = on_session
        if attached is not None:
            self._attached = attached
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        """True until the service thread ends (stopped, idle, or the socket failed)."""
        return self._thread.is_alive()

    def take_lock(self) -> bool:
        """Takes the socket's lock now if it is free (see the module docstring); True when held."""
        if self._lock_fd is not None:
            return True
        fd = os.open(local_socket.lock_path(self.path), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def stop(self) -> None:
        """Stops serving, removes the socket and releases the lock. Idempotent."""
        self._stop.set()
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        self._release()

    def _release(self) -> None:
        if self._lock_fd is None:
            return
        if self.serving.is_set():
            try:
                self.path.unlink()
            except OSError:
                pass
        os.close(self._lock_fd)
        self._lock_fd = None
        self.serving.clear()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.take_lock():
                    break
                self._stop.wait(RETRY_SECONDS)
            if self._stop.is_set():
                return
            self._bind()
            self.last_request = time.monotonic()  # idle from now: a slow start must not count as idle time
            self.serving.set()
            log.info("answering hooks on %s", self.path)
            self._serve()
        except OSError as exc:
            log.warning("local socket %s not served: %s", self.path, exc)
        finally:
            if not self._stop.is_set():
                self._release()

    def _bind(self) -> None:
        try:
            self.path.unlink()  # left by a process that died: the lock says nobody serves it
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(os.fspath(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        sock.listen(LISTEN_BACKLOG)
        sock.settimeout(1.0)
        self._sock = sock

    def _serve(self) -> None:
        while not self._stop.is_set() and self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                if self._attached() or self._active:
                    self.last_request = time.monotonic()
                elif self._idle_seconds is not None and time.monotonic() - self.last_request > self._idle_seconds:
                    log.info("no request for %.0f s: stopping", self._idle_seconds)
                    if self._on_idle is not None:
                        self._on_idle()
                    return
                continue
            except OSError:
                return
            self.last_request = time.monotonic()
            if not self._slots.acquire(blocking=False):
                _busy(conn)
                continue
            with self._active_lock:
                self._active += 1
            threading.Thread(target=self._connection, args=(conn,), name="mnemosync-local-request",
                             daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        """Answers one connection on its own thread (`_answer`), then gives its slot back."""
        try:
            if not self._answer(conn):
                conn.close()
        finally:
            with self._active_lock:
                self._active -= 1
            self._slots.release()

    def _answer(self, conn: socket.socket) -> bool:
        """Answers one request on `conn`; True when a session took the connection over (it is not closed)."""
        conn.settimeout(CONNECTION_TIMEOUT)
        try:
            if not _same_user(conn):
                conn.sendall(local_socket.encode({"error": "refused: another user"}))
                return False
            request = local_socket.read_line(conn)
            if request.get("op") == "mcp":
                if self._on_session is None:
                    conn.sendall(local_socket.encode({"error": (
                        f"a session started with --in-process serves {self.path} and cannot host other sessions; "
                        "end it, or start this session with --in-process too")}))
                    return False
                conn.settimeout(None)
                self._on_session(request, conn)
                return True
            try:
                answer = self._handle(request)
            except Exception as exc:  # noqa: BLE001 - a failing request must not stop the service
                log.exception("local request failed")
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            conn.sendall(local_socket.encode(answer))
        except (OSError, ValueError) as exc:
            log.info("local connection dropped: %s", exc)
        return False


def _busy(conn: socket.socket) -> None:
    """Tells a connection beyond MAX_CONNECTIONS that the agent is busy, and closes it."""
    try:
        conn.settimeout(0.5)
        conn.sendall(local_socket.encode({"error": f"busy: {MAX_CONNECTIONS} connections are being answered"}))
    except OSError:
        pass
    conn.close()


def _same_user(conn: socket.socket) -> bool:
    """True when the peer runs as this user, or when the system cannot say (the 0600 socket still guards it)."""
    return local_socket.peer_uid(conn) in (None, os.getuid())
