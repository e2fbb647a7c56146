"""`mnemosync.agent.sync`: the history check before a catch-up, and live updates reconnecting."""

from __future__ import annotations

import logging
import threading

import pytest

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import TamperDetected
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import LiveUpdates, catch_up

from helpers import RawAgent, ServeProcess, TlsAgent, add_op, free_port, tls_remote, wait_until


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


def test_a_catch_up_refused_on_a_later_page_keeps_the_pages_before_it_and_leaves_no_reader_behind(server, tmp_path):
    """Pages are received ahead of the one being applied; a page refused as tamper must still stop the
    catch-up there, with every page before it committed and acknowledged, the stream cancelled and its reader
    thread gone, and the next catch-up (the cache's expectation met) continues from that offset."""
    agent = RawAgent(server.address, "writer")
    for i in range(9):
        agent.add(f"memory {i}")
    agent.close()
    cache = Cache(tmp_path / "c" / "cache.db")
    remote = Remote(server.address, "reader", timeout=10)
    cache._conn.execute("INSERT INTO expected_hashes VALUES (5, ?, 'a hash this test made up')", ("ab" * 32,))
    with pytest.raises(TamperDetected, match="the server's entry 5 .* is not a hash this test made up"):
        catch_up(cache, remote, batch=2)
    assert cache.offset == 4
    assert not [t for t in threading.enumerate() if t.name == "mnemosync-sync-read"]
    cache._conn.execute("DELETE FROM expected_hashes")
    assert catch_up(cache, remote, batch=2).applied == 5 and cache.offset == 9
    remote.close()
    cache.close()


def test_live_updates_reconnect_promptly_after_every_interruption_of_a_connected_stream(tmp_path):
    """Each outage of a stream that was connected starts the backoff again at 0.2 s, so the sixth reconnection
    waits no longer than the first (it used to double every time: 0.2, 0.4, … 6.4 s). The server is killed
    (SIGKILL), so the stream breaks off with an error rather than ending; the waits are read from what the client
    says it will wait, not from a clock, so a loaded machine does not change the verdict."""
    listen = f"127.0.0.1:{free_port()}"
    cache = Cache(tmp_path / "c" / "cache.db")
    remote = Remote(listen, "agent-a", timeout=5)
    events: list = []
    live = LiveUpdates(cache, remote, on_connect=lambda: events.append("connected"))
    recorder = _Recorder(events)
    logger = logging.getLogger("mnemosync.agent.sync")
    logger.addHandler(recorder)
    level, logger.level = logger.level, logging.INFO
    try:
        for _ in range(7):
            with ServeProcess(tmp_path / "server", listen=listen) as server:
                if not live._thread.is_alive():
                    live.start()
                wait_until(lambda: events[-1:] == ["connected"], message="the live stream never connected")
                server.kill()
                wait_until(lambda: events[-1] != "connected", message="the client never saw the stream break")
    finally:
        live.stop()
        logger.removeHandler(recorder)
        logger.level = level
    remote.close()
    cache.close()
    first_waits = [events[i + 1] for i, e in enumerate(events[:-1]) if e == "connected"]
    assert len(first_waits) == 7 and set(first_waits) == {0.2}, f"after each outage the client waited {events}"


class _Recorder(logging.Handler):
    """Appends the backoff of each "live updates interrupted ... retrying in" message to a list."""

    def __init__(self, events: list):
        super().__init__(logging.INFO)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("live updates interrupted"):
            self.events.append(record.args[-1])
