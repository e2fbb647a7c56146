"""`mnemosync.shim.local_service`: a warm process serves one socket at a time, privately, and survives bad requests."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

import pytest

from mnemosync.agent.local_socket import ask, is_starting, socket_path
from mnemosync.shim import local_service
from mnemosync.shim.local_service import LocalService

from helpers import wait_until


@pytest.fixture
def path():
    base = tempfile.mkdtemp(prefix="ms-", dir="/tmp")
    yield socket_path({"XDG_RUNTIME_DIR": base, "MNEMOSYNC_AGENT_ID": "alice"}, create=True)
    shutil.rmtree(base)


def echo(request: dict) -> dict:
    if request.get("op") == "boom":
        raise RuntimeError("broken handler")
    return {"echo": request}


def test_a_request_is_answered_over_a_socket_only_this_user_can_open(path):
    service = LocalService(path)
    assert service.take_lock() and is_starting(path)  # a hook now waits rather than starting another process
    service.start(echo)
    try:
        wait_until(service.serving.is_set, timeout=5, message="the service never bound its socket")
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert ask(path, {"op": "ping", "n": 1}, timeout=2) == {"echo": {"op": "ping", "n": 1}}
        assert ask(path, {"op": "boom"}, timeout=2) == {"error": "RuntimeError: broken handler"}
    finally:
        service.stop()
    assert not path.exists() and not is_starting(path)


def test_a_second_process_waits_for_the_socket_and_takes_over_when_the_first_stops(path, monkeypatch):
    monkeypatch.setattr(local_service, "RETRY_SECONDS", 0.1)
    first = LocalService(path).start(lambda r: {"who": "first"})
    second = LocalService(path)
    try:
        wait_until(first.serving.is_set, timeout=5)
        assert not second.take_lock()
        second.start(lambda r: {"who": "second"})
        assert ask(path, {}, timeout=2) == {"who": "first"}
        first.stop()
        wait_until(second.serving.is_set, timeout=5, message="the waiting service never took over")
        assert ask(path, {}, timeout=2) == {"who": "second"}
    finally:
        first.stop()
        second.stop()


def test_a_service_stops_itself_after_its_idle_time(path):
    idle = []
    service = LocalService(path, on_idle=lambda: idle.append(True), idle_seconds=0.2).start(echo)
    try:
        wait_until(lambda: not service.running, timeout=10, message="the idle service kept running")
        assert idle == [True] and not path.exists()
    finally:
        service.stop()


def test_a_malformed_request_is_dropped_and_the_service_goes_on(path):
    import socket

    service = LocalService(path).start(echo)
    try:
        wait_until(service.serving.is_set, timeout=5)
        with socket.socket(socket.AF_UNIX) as raw:
            raw.settimeout(2)
            raw.connect(str(path))
            raw.sendall(b"this is not json\n")
            assert raw.recv(100) == b""
        assert ask(path, {"op": "ping"}, timeout=2) == {"echo": {"op": "ping"}}
    finally:
        service.stop()


def test_idle_connections_hold_up_no_request_and_many_hooks_at_once_are_all_answered(path):
    """Four connections that never send anything must not delay a status request (they each held the one serving
    thread for 5 s), and sixty prompt hooks connecting at once must all be answered, none refused by a full
    listen queue (EAGAIN)."""
    import socket
    import threading
    import time

    def slow(request: dict) -> dict:
        time.sleep(0.05)  # a recall's search
        return {"echo": request}

    service = LocalService(path)
    service.start(slow)
    idle = []
    try:
        wait_until(service.serving.is_set, timeout=5, message="the service never bound its socket")
        for _ in range(4):
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(path))
            idle.append(s)
        started = time.monotonic()
        assert ask(path, {"op": "status"}, timeout=2) == {"echo": {"op": "status"}}
        assert time.monotonic() - started < 1.0

        answers: list[object] = []
        gate = threading.Barrier(60)

        def hook(n: int) -> None:
            gate.wait()
            try:
                answers.append(ask(path, {"op": "recall", "n": n}, timeout=10)["echo"]["n"])
            except OSError as exc:
                answers.append(exc)

        hooks = [threading.Thread(target=hook, args=(n,)) for n in range(60)]
        for t in hooks:
            t.start()
        for t in hooks:
            t.join(30)
        assert sorted(answers, key=str) == sorted(range(60), key=str)
    finally:
        for s in idle:
            s.close()
        service.stop()
