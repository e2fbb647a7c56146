"""The local agents (`mnemosync agent`) a test or a benchmark starts: a private runtime directory for their
sockets, and stopping them afterwards.

`mnemosync-mcp` and the hooks start the agent on demand, detached, so it
outlives the process that started it; a suite that left them running would
leave models in memory for their idle time. Like `ops.serve_process`, this is
a development tool, not part of the product.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mnemosync.agent import local_socket


def runtime_dir() -> Path:
    """A new private runtime directory, short enough for socket paths (`local_socket.MAX_PATH`)."""
    return Path(tempfile.mkdtemp(prefix="mr-", dir="/tmp"))


def statuses(runtime: Path) -> list[dict]:
    """What each agent serving in `runtime` says of itself (`{"op": "status"}`), skipping any that does not
    answer."""
    sockets = sorted((runtime / "mnemosync").glob("agent-*.sock"))
    answers = (local_socket.status_at(sock, timeout=5.0) for sock in sockets)
    return [status for status in answers if status is not None]


def stop_agents(runtime: Path, timeout: float = 10.0) -> int:
    """Stops every agent serving in `runtime` (SIGTERM, then SIGKILL after `timeout` s); returns how many."""
    pids = [s["pid"] for s in statuses(runtime) if isinstance(s.get("pid"), int)]
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
    return len(pids)


@contextmanager
def private_runtime() -> Iterator[Path]:
    """A runtime directory (for `XDG_RUNTIME_DIR`) whose agents are stopped and which is removed at the end."""
    runtime = runtime_dir()
    try:
        yield runtime
    finally:
        stop_agents(runtime)
        shutil.rmtree(runtime, ignore_errors=True)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (our own child, not yet reaped) is gone for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True
