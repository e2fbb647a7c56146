"""`mnemosync.agent.local_socket`: which socket a hook and a warm process agree on, and that it stays private."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import pytest

from mnemosync.agent import local_socket
from mnemosync.agent.local_socket import SocketUnusable, agent_key, effective_environment, socket_path


@pytest.fixture
def runtime() -> dict[str, str]:
    """An environment whose runtime directory is a fresh short one (socket paths have a length limit)."""
    base = tempfile.mkdtemp(prefix="ms-", dir="/tmp")
    yield {"XDG_RUNTIME_DIR": base}
    shutil.rmtree(base)


def test_flags_and_the_environment_that_say_the_same_give_the_same_socket(runtime):
    env = {**runtime, "MNEMOSYNC_SERVER": "mem:50051", "MNEMOSYNC_INSECURE": "true", "MNEMOSYNC_AGENT_ID": "alice"}
    from_flags = socket_path(runtime, {"server": "mem:50051", "insecure": True, "agent_id": "alice"}, create=True)
    assert socket_path(env) == from_flags
    assert agent_key({"MNEMOSYNC_INSECURE": "1"}) == agent_key({"MNEMOSYNC_INSECURE": "yes"})


def test_another_agent_server_or_certificate_gets_another_socket():
    base = agent_key({"MNEMOSYNC_AGENT_ID": "alice"})
    assert agent_key({"MNEMOSYNC_AGENT_ID": "bob"}) != base
    assert agent_key({"MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_SERVER": "other:1"}) != base
    assert agent_key({"MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_CERT_DIR": "/certs/alice"}) != base
    assert agent_key({"MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_SCOPE": "project:x"}) == base  # scope is per request


def test_unset_flags_leave_the_environment_alone():
    env = {"MNEMOSYNC_SERVER": "mem:1"}
    assert effective_environment(env, {"server": None, "insecure": None})["MNEMOSYNC_SERVER"] == "mem:1"


def test_the_socket_directory_is_made_private_and_a_shared_one_is_refused(runtime):
    path = socket_path(runtime, create=True)
    assert (os.stat(path.parent).st_mode & 0o777) == 0o700
    os.chmod(path.parent, 0o755)
    with pytest.raises(SocketUnusable, match="not a directory private to this user"):
        socket_path(runtime)


def test_a_socket_path_over_the_system_limit_is_refused(tmp_path):
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    with pytest.raises(SocketUnusable, match="longer than 104 bytes"):
        socket_path({"XDG_RUNTIME_DIR": str(deep)}, create=True)


def test_a_message_over_the_limit_is_refused_before_it_is_sent():
    with pytest.raises(ValueError, match="over the"):
        local_socket.encode({"prompt": "x" * local_socket.MAX_MESSAGE})


def test_asking_where_nothing_serves_raises_connection_errors(runtime):
    path = socket_path(runtime, create=True)
    with pytest.raises(FileNotFoundError):
        local_socket.ask(path, {"op": "ping"}, timeout=1)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # bound, never listening: what a crashed process leaves
    with pytest.raises(ConnectionRefusedError):
        local_socket.ask(path, {"op": "ping"}, timeout=1)
    assert local_socket.is_starting(path) is False


def test_an_agent_started_for_flags_gets_them_as_its_environment_and_serves_the_same_socket(tmp_path):
    environ = {"MNEMOSYNC_SERVER": "a:1", "MNEMOSYNC_AGENT_ID": "alice", "XDG_RUNTIME_DIR": str(tmp_path)}
    flags = {"server": "b:2", "agent_id": None, "insecure": True}
    started = local_socket.agent_environment(environ, flags)
    assert started["MNEMOSYNC_SERVER"] == "b:2" and started["MNEMOSYNC_AGENT_ID"] == "alice"
    assert started["MNEMOSYNC_INSECURE"] == "1" and started["XDG_RUNTIME_DIR"] == str(tmp_path)
    assert socket_path(started, create=True) == socket_path(environ, flags)


def test_an_agent_whose_stream_is_not_live_is_reconnecting_when_the_caller_just_reached_the_server():
    """`mnemosync status` never says the server is online and, of the agent, that it may be unreachable."""
    status = {"pid": 7, "uptime_seconds": 30, "sessions": [], "booted": True, "live": False, "cache_lag": None}
    assert local_socket.describe_agent(status, server_reached=True).endswith(
        "0 sessions attached, cache not live yet: reconnecting to the server")
    assert "server unreachable?" in local_socket.describe_agent(status)
