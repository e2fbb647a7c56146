"""`agent_client.sync`: the history check before a catch-up."""

from __future__ import annotations

from agent_client.cache import Cache
from agent_client.sync import catch_up

from helpers import TlsAgent, add_op, tls_remote


def test_an_unchanged_server_passes_the_history_check(tls_server, pki, tmp_path):
    agent = TlsAgent(tls_server.address, pki / "agents/alice")
    agent.append(add_op("one"), add_op("two"))
    cache = Cache(tmp_path / "c" / "cache.db")
    remote = tls_remote(tls_server.address, pki / "agents/alice")
    assert catch_up(cache, remote).offset == 2
    agent.add("three")
    assert catch_up(cache, remote).applied == 1
    for thing in (agent, remote, cache):
        thing.close()
