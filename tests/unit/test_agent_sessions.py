"""`mnemosync.shim.agent_sessions`: what a relay may ask for when it opens a session on the local agent."""

from __future__ import annotations

import pytest

from mnemosync.shim.agent_sessions import SessionRequest


def test_a_bare_request_gets_the_defaults_of_mnemosync_mcp():
    assert SessionRequest.parse({"op": "mcp"}) == SessionRequest(scope=None, project_dir=None, tools="compact",
                                                                 core_budget=1500, channel=False,
                                                                 channel_interval=30.0)


def test_every_field_is_taken_as_given():
    got = SessionRequest.parse({"op": "mcp", "scope": "project:web", "project_dir": "/src/web", "tools": "all",
                                "core_budget": 800, "channel": True, "channel_interval": 5})
    assert got == SessionRequest("project:web", "/src/web", "all", 800, True, 5.0)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("tools", "most", "tools must be one of compact, all, got 'most'"),
    ("core_budget", 50, "core_budget must be an integer from 200 to 8000, got 50"),
    ("core_budget", "big", "core_budget must be an integer from 200 to 8000, got 'big'"),
    ("channel_interval", 0.5, "channel_interval must be from 1 to 3600 seconds, got 0.5"),
    ("scope", "x" * 129, "scope must be a string of at most 128 characters"),
    ("project_dir", 7, "project_dir must be a string of at most 4096 characters"),
])
def test_a_bad_field_is_refused_with_its_name_and_limit(field, value, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)") + "$"):
        SessionRequest.parse({"op": "mcp", field: value})


def test_a_session_that_never_reads_its_answers_is_read_no_further_and_then_ended(server, make_client, monkeypatch):
    """A session that sends and never reads made the agent buffer every answer (267 to 550 MB): it is read only
    while a few of its requests wait for their answers, so its sends soon block, and once an answer has waited
    SEND_TIMEOUT seconds the session is ended."""
    import json
    import socket

    from mnemosync.agent.cli_options import CONNECTION_FIELDS
    from mnemosync.shim import agent_sessions
    from mnemosync.shim.agent_sessions import SessionHost

    from helpers import wait_until

    monkeypatch.setattr(agent_sessions, "SEND_TIMEOUT", 1.0, raising=False)
    host = SessionHost(make_client(server.address, "alice"),
                       connection={**dict.fromkeys(CONNECTION_FIELDS), "config_file": None})
    ours, theirs = socket.socketpair()
    try:
        host.attach({"op": "mcp"}, theirs)
        assert json.loads(ours.makefile("rb").readline())["ok"] is True
        ours.settimeout(3)
        sent = 0
        try:
            for n in range(20_000):  # 1.2 MB of pings, several times what the sockets' buffers hold
                ours.sendall(json.dumps({"jsonrpc": "2.0", "id": n, "method": "ping"}).encode() + b"\n")
                sent += 1
        except TimeoutError:
            pass
        assert sent < 20_000, "the agent read every request of a session that never reads its answers"
        wait_until(lambda: host.attached() == 0, timeout=30, message="the session that never reads was not ended")
    finally:
        ours.close()


def test_a_session_opened_while_a_catch_up_batch_holds_the_cache_is_answered_at_once(server, make_client):
    """A booting agent's catch-up holds its cache for each batch it applies (`Cache.apply`: the whole batch of
    2,000 entries, hundreds of ms under load; holding the cache's lock here stands for it). A session opened then
    used to wait for the batch before its `initialize` was read, because telling the server how many sessions are
    attached read the cache's offset first: a session's start must not wait for the cache."""
    import json
    import socket

    from mnemosync.agent.cli_options import CONNECTION_FIELDS
    from mnemosync.shim.agent_sessions import SessionHost

    client = make_client(server.address, "alice")
    host = SessionHost(client, connection={**dict.fromkeys(CONNECTION_FIELDS), "config_file": None})
    ours, theirs = socket.socketpair()
    answers = ours.makefile("rb")
    ours.settimeout(10)  # a warm agent answers in ~5 ms; the batch below is held until the answer came
    try:
        with client.cache._lock:
            host.attach({"op": "mcp"}, theirs)
            assert json.loads(answers.readline())["ok"] is True
            ours.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
            }).encode() + b"\n")
            try:
                answer = json.loads(answers.readline())
            except TimeoutError:
                pytest.fail("initialize was not answered while the cache was held")
        assert answer["result"]["serverInfo"]["name"] == "mnemosync"
    finally:
        answers.close()
        ours.close()
