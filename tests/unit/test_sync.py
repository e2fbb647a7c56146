"""`agent_client.sync`: the history check before a catch-up, and live updates reconnecting."""

from __future__ import annotations

import time

from agent_client.cache import Cache
from agent_client.remote import Remote
from agent_client.sync import LiveUpdates, catch_up

from helpers import ServeProcess, TlsAgent, add_op, free_port, tls_remote, wait_until


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


def test_live_updates_reconnect_promptly_after_every_interruption_of_a_connected_stream(tmp_path):
    """Each outage of a stream that was connected starts the backoff again, so the sixth reconnection is as quick
    as the first (it used to double every time: 0.2, 0.4, … 6.4 s). The server is killed (SIGKILL), so the
    stream breaks off with an error rather than ending."""
    listen = f"127.0.0.1:{free_port()}"
    cache = Cache(tmp_path / "c" / "cache.db")
    remote = Remote(listen, "agent-a", timeout=5)
    live = LiveUpdates(cache, remote)
    waits = []
    with ServeProcess(tmp_path / "server", listen=listen) as server:
        live.start()
        wait_until(live.connected.is_set, message="the live stream never connected")
        server.kill()
    for _ in range(6):
        with ServeProcess(tmp_path / "server", listen=listen) as server:
            started = time.monotonic()
            wait_until(live.connected.is_set, message="the live stream never reconnected")
            waits.append(time.monotonic() - started)
            server.kill()
    live.stop()
    remote.close()
    cache.close()
    assert max(waits) < 2.0, f"reconnections took {[round(w, 1) for w in waits]} s"
