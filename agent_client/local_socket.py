"""The private local socket of the local agent process, `mnemosync agent` (standard library only).

A hook is a new process for every prompt, and `mnemosync-mcp` one per
session, so neither loads the model or opens gRPC itself: they ask the one
process that has both, the local agent, over a Unix socket (started on
demand). This module is what every end shares (the hooks, the relay, the
agent, `mnemosync status` and `doctor`), and it imports nothing but the
standard library, because the prompt hook and the relay import it on their
fast paths.

Which socket: one per agent, that is per (user, server, agent identity,
cache). `agent_key` hashes those four as the environment, the flags and the
settings file's `[client]` table resolve them (the defaults filled in, paths
made real), so two sessions whose environments differ in anything else (one
sets `MNEMOSYNC_DATA_HOME` to its default, the other leaves it unset) find
the same warm process, and a hook with other settings never gets another
agent's memories. The socket lives in a private
directory: `$XDG_RUNTIME_DIR/mnemosync`, else `$TMPDIR/mnemosync-<uid>` (`/tmp` without TMPDIR), made
0700 and refused when it is not the user's own or when others (its group
included) can enter it. The socket itself is 0600, and both ends check the
other's user id (`SO_PEERCRED`) where the system has it: the serving side
refuses another user, and `connect` refuses a socket another user serves, so
a folder swapped between the owner check and the connect (a world-writable,
non-sticky TMPDIR) cannot answer a hook: the check is of the connection
itself, not of a path looked at before.

Ownership: a warm process holds an exclusive `flock` on `<socket>.lock` for
as long as it serves, so two processes never serve one socket and a hook can
tell "a warm process is starting" (the lock is held) from "nobody" (it is
free). The wire: one JSON object per line, a request then its answer, then
the connection closes; except a session's (`{"op": "mcp", ...}`), which stays
open and carries the session's MCP messages (`mnemosync.shim.agent_sessions`).
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Mapping
from pathlib import Path

try:  # CPython's own sha256: `hashlib` would load OpenSSL, 3.7 MB more in every relay and hook process
    from _sha2 import sha256  # 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256  # 3.11
    except ImportError:
        from hashlib import sha256

KEY_VARIABLES = (
    "MNEMOSYNC_SERVER", "MNEMOSYNC_AGENT_ID", "MNEMOSYNC_INSECURE", "MNEMOSYNC_CERT_DIR",
    "MNEMOSYNC_TLS_SERVER_NAME", "MNEMOSYNC_CACHE_DIR", "MNEMOSYNC_EMBED_MODEL", "MNEMOSYNC_DATA_HOME",
    "MNEMOSYNC_CONFIG", "XDG_DATA_HOME",
)
"""The variables an agent's settings are read from: a started agent gets them (`agent_environment`), and
`agent_key` resolves the agent from them."""
DEFAULT_SERVER = "127.0.0.1:50051"
"""The server when none is configured (`mnemosync.agent.client_settings.ClientSettings.server`)."""

FLAG_VARIABLES = {
    "server": "MNEMOSYNC_SERVER", "agent_id": "MNEMOSYNC_AGENT_ID", "insecure": "MNEMOSYNC_INSECURE",
    "cert_dir": "MNEMOSYNC_CERT_DIR", "tls_server_name": "MNEMOSYNC_TLS_SERVER_NAME",
    "cache_dir": "MNEMOSYNC_CACHE_DIR", "embed_model": "MNEMOSYNC_EMBED_MODEL", "config_file": "MNEMOSYNC_CONFIG",
}
"""Connection option names (`mnemosync.agent.cli_options`) and the variable each stands for."""

_BOOLEAN = {"MNEMOSYNC_INSECURE"}
_PATHS = {"MNEMOSYNC_CERT_DIR", "MNEMOSYNC_CACHE_DIR", "MNEMOSYNC_EMBED_MODEL", "MNEMOSYNC_DATA_HOME",
          "MNEMOSYNC_CONFIG", "XDG_DATA_HOME"}
MAX_MESSAGE = 1 << 20
"""Bytes; a longer request or answer is refused."""
MAX_PATH = 104
"""Bytes in a Unix socket path that every system accepts (macOS allows 104, Linux 108)."""


class SocketUnusable(OSError):
    """The socket directory is missing, not private, or the path is too long: recall is off."""


def effective_environment(environ: Mapping[str, str], connection: Mapping[str, object] | None = None
                          ) -> dict[str, str]:
    """The key variables as a process sees them: its environment, overridden by the connection flags it got.

    Args:
        environ: The process environment.
        connection: Connection option values (`mnemosync.agent.cli_options`; None: not given).
    """
    effective = {name: environ.get(name, "") for name in KEY_VARIABLES}
    for option, value in (connection or {}).items():
        name = FLAG_VARIABLES.get(option)
        if name and value is not None:
            effective[name] = ("1" if value else "0") if isinstance(value, bool) else str(value)
    return effective


def agent_environment(environ: Mapping[str, str], connection: Mapping[str, object] | None) -> dict[str, str]:
    """The environment to start `mnemosync agent` with: `environ` with the connection flags folded in, so the
    agent serves the socket these settings name."""
    return {**environ, **{k: v for k, v in effective_environment(environ, connection).items() if v}}


def _normal(name: str, value: str) -> str:
    value = value.strip()
    if name in _BOOLEAN:
        return "1" if value.lower() in {"1", "true", "yes", "on"} else ""
    if name in _PATHS and value:
        return os.path.realpath(os.path.expanduser(value))
    return value


def default_agent_id() -> str:
    """`user@host`, made safe for an agent id (the id of an agent that names none and has no certificate)."""
    import getpass
    import re

    raw = f"{getpass.getuser()}@{socket.gethostname().split('.')[0]}"
    return re.sub(r"[^A-Za-z0-9_.@-]", "-", raw)[:64]


def _client_table(config: str) -> dict:
    """The settings file's `[client]` table ({} when there is none or it cannot be read: the agent itself then
    says what is wrong with it)."""
    if not config:
        return {}
    import tomllib

    try:
        with open(os.path.expanduser(config), "rb") as handle:
            table = tomllib.load(handle).get("client", {})
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def agent_identity(environ: Mapping[str, str]) -> tuple[str, str, str]:
    """(server, agent identity, cache folder) of the agent `environ` configures, as its settings resolve them:
    each variable, else the settings file's `[client]` key, else the default; the identity is the certificate
    folder under mTLS, else the agent id; the cache is `<data home>/agents/<identity>` unless one is named."""
    table = _client_table(environ.get("MNEMOSYNC_CONFIG", ""))

    def get(name: str, key: str) -> str:
        value = environ.get(name, "").strip() or str(table.get(key, "") or "").strip()
        return _normal(name, value)

    server = get("MNEMOSYNC_SERVER", "server") or DEFAULT_SERVER
    cert = "" if get("MNEMOSYNC_INSECURE", "insecure") else get("MNEMOSYNC_CERT_DIR", "cert_dir")
    identity = f"certificate {cert}" if cert else get("MNEMOSYNC_AGENT_ID", "agent_id") or default_agent_id()
    cache = get("MNEMOSYNC_CACHE_DIR", "cache_dir")
    if not cache:
        data_home = get("MNEMOSYNC_DATA_HOME", "data_home") or _normal(
            "XDG_DATA_HOME", os.path.join(environ.get("XDG_DATA_HOME") or "~/.local/share", "mnemosync"))
        cache = os.path.join(data_home, "agents", identity)
    return server, identity, cache


def agent_key(environ: Mapping[str, str]) -> str:
    """A short hash of the agent `environ` configures: this user, and its server, identity and cache
    (`agent_identity`); nothing else in the environment changes it."""
    material = json.dumps([os.getuid(), *agent_identity(environ)])
    return sha256(material.encode()).hexdigest()[:20]


def runtime_dir(environ: Mapping[str, str]) -> Path:
    """The directory that holds this user's sockets (see the module docstring)."""
    base = environ.get("XDG_RUNTIME_DIR")
    if base and os.path.isdir(base):
        return Path(base) / "mnemosync"
    return Path(environ.get("TMPDIR") or "/tmp") / f"mnemosync-{os.getuid()}"


def private_dir(path: Path, *, create: bool) -> Path:
    """`path` as a directory only this user can enter, made 0700 when `create` and it is missing.

    Raises:
        SocketUnusable: it is missing (and not created), not a real directory, not this user's, or open to
            others.
    """
    if create:
        try:
            path.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass
        except OSError as exc:
            raise SocketUnusable(f"cannot create {path}: {exc}") from None
    try:
        info = os.lstat(path)
    except OSError:
        raise SocketUnusable(f"{path} does not exist") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:  # the group too
        raise SocketUnusable(f"{path} is not a directory private to this user (owner {info.st_uid}, mode "
                             f"{stat.S_IMODE(info.st_mode):o}); remove it so mnemosync can recreate it")
    return path


def ingest_log(environ: Mapping[str, str]) -> Path:
    """The log of the background ingestions the capture hooks start for the agent `environ` configures: its own
    file in the private runtime directory (created 0700 when missing), named by its agent key as its socket is.

    Raises:
        SocketUnusable: see `private_dir`.
    """
    key = agent_key(effective_environment(environ))
    return private_dir(runtime_dir(environ), create=True) / f"ingest-{key}.log"


def socket_path(environ: Mapping[str, str], connection: Mapping[str, object] | None = None, *,
                create: bool = False) -> Path:
    """The socket of the agent that `environ` and the connection flags configure (`agent_key` of
    `effective_environment`), in the private runtime directory.

    Raises:
        SocketUnusable: see `private_dir`, or the path is longer than `MAX_PATH`.
    """
    key = agent_key(effective_environment(environ, connection))
    path = private_dir(runtime_dir(environ), create=create) / f"agent-{key}.sock"
    if len(os.fsencode(path)) > MAX_PATH:
        raise SocketUnusable(f"socket path {path} is longer than {MAX_PATH} bytes; set XDG_RUNTIME_DIR or TMPDIR "
                             "to a shorter directory")
    return path


def lock_path(path: Path) -> Path:
    """The lock file a warm process holds while it serves `path`."""
    return path.with_name(path.name + ".lock")


def is_starting(path: Path) -> bool:
    """True while some process holds the socket's lock (serving, or booting to serve)."""
    import fcntl

    try:
        fd = os.open(lock_path(path), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def encode(message: dict) -> bytes:
    """One wire line.

    Raises:
        ValueError: it is longer than `MAX_MESSAGE`.
    """
    data = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"message of {len(data)} bytes is over the {MAX_MESSAGE}-byte limit")
    return data


def read_line(sock: socket.socket) -> dict:
    """One wire line from `sock`, decoded.

    Raises:
        ValueError: it is too long, not JSON, or not an object.
        OSError: the connection failed or timed out.
    """
    chunks, size = [], 0
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if chunk.endswith(b"\n"):
            break
        if size > MAX_MESSAGE:
            raise ValueError(f"message over the {MAX_MESSAGE}-byte limit")
    message = json.loads(b"".join(chunks) or b"null")
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


def peer_uid(sock: socket.socket) -> int | None:
    """The user id the other end of `sock` runs as, or None where the system does not say (no `SO_PEERCRED`)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    import struct

    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i")))
    return int(uid)


def check_peer(sock: socket.socket, path: Path) -> None:
    """Refuses a connection whose other end runs as another user (where the system says: `peer_uid`).

    Raises:
        PermissionError: it does.
    """
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        raise PermissionError(f"the process serving {path} runs as user {uid}, not as this user: refused")


def connect(path: Path, *, timeout: float | None) -> socket.socket:
    """A connection to the process serving `path`, checked to be this user's (`check_peer`). A listen queue that
    is full for the moment (EAGAIN: many hooks at once) is tried again until `timeout` seconds have passed.

    Raises:
        FileNotFoundError, ConnectionRefusedError: nothing serves `path`.
        PermissionError: another user serves it.
        OSError: the connection failed or took longer than `timeout` seconds.
    """
    import time

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        sock.settimeout(timeout)
        while True:
            try:
                sock.connect(os.fspath(path))
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"the process serving {path} did not take the connection in time") from None
                time.sleep(0.005)
        check_peer(sock, path)
    except BaseException:
        sock.close()
        raise
    return sock


def ask(path: Path, request: dict, *, timeout: float) -> dict:
    """Sends one request to the process serving `path` (`connect`) and returns its answer.

    Raises:
        FileNotFoundError, ConnectionRefusedError: nothing serves `path`.
        PermissionError: another user serves it.
        OSError: the connection failed or the answer took longer than `timeout` seconds.
        ValueError: the answer was malformed.
    """
    with connect(path, timeout=timeout) as sock:
        sock.sendall(encode(request))
        return read_line(sock)


def agent_status(environ: Mapping[str, str], connection: Mapping[str, object] | None = None) -> dict | None:
    """What the local agent of these settings says of itself (`status_at` its socket), or None."""
    try:
        path = socket_path(environ, connection)
    except OSError:
        return None
    return status_at(path)


def status_at(path: Path, timeout: float = 2.0) -> dict | None:
    """What the agent serving `path` says of itself (`mnemosync agent`'s `{"op": "status"}`: pid, uptime,
    sessions, cache position), or None when nothing answers it (an in-process session serving only the hooks
    does not)."""
    try:
        status = ask(path, {"op": "status"}, timeout=timeout)
    except (OSError, ValueError):
        return None
    return status if status.get("ok") else None


def describe_agent(status: Mapping[str, object] | None, *, server_reached: bool = False) -> str:
    """One line about the local agent for `mnemosync status` and `doctor`; `server_reached`: the caller's own call
    reached the server just now (then an agent whose stream is not live is reconnecting, not cut off)."""
    from mnemosync.kernel.wording import counted

    if status is None:
        return "no local agent runs (the first session or prompt hook starts one)"
    sessions = status.get("sessions") or []
    assert isinstance(sessions, list)
    lag = status.get("cache_lag")
    not_live = ("cache not live yet: reconnecting to the server" if server_reached
                else "cache not live (server unreachable?)")
    cache = ("cache live" if status.get("live") else f"cache {counted(int(lag), 'entry')} behind, catching up"
             if isinstance(lag, int) and lag else not_live if status.get("booted") else "booting")
    return (f"pid {status.get('pid')}, up {_duration(status.get('uptime_seconds'))}, {len(sessions)} "
            f"session{'' if len(sessions) == 1 else 's'} attached, {cache}")


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min" if seconds < 7200 else (
        f"{seconds / 3600:.1f} h")
