"""`ops.imports --write-path` books every thread's modules to the process the thread runs in, in production."""

from __future__ import annotations

import threading

import pytest

from mnemosync.kernel import addresses
from ops.imports import READER, RELAY, SERVER_SIDE, WRITER, Recorder, side_of


@pytest.mark.parametrize("name", ["mnemosync-rpc-loop", "store_0", "store_11", "mnemosync-writer",
                                  "mnemosync-listen", "mnemosync-snapshots"])
def test_the_servers_named_threads_are_booked_to_the_server(name):
    assert side_of(name) == SERVER_SIDE
    assert side_of(name, started_by=WRITER) == SERVER_SIDE


@pytest.mark.parametrize("name", ["MainThread", "mnemosync-local-socket", "mnemosync-session-3", "mnemosync-boot",
                                  "mnemosync-add-many_0", "Thread-7 (close)"])
def test_the_writing_agents_threads_are_booked_to_the_writer(name):
    assert side_of(name) == WRITER


def test_the_live_thread_is_the_reader_and_a_sync_read_ahead_belongs_to_the_agent_that_started_it():
    assert side_of("mnemosync-live") == READER
    assert side_of("mnemosync-sync-read", started_by=READER) == READER
    assert side_of("mnemosync-sync-read", started_by=WRITER) == WRITER
    assert side_of("Thread-3 (channel_spin)", started_by=SERVER_SIDE) == SERVER_SIDE


def test_the_stdio_relays_threads_are_booked_to_the_relay_process():
    assert side_of("mnemosync-relay") == RELAY
    assert side_of("Thread-2 (_downstream)", started_by=RELAY) == RELAY
    assert RELAY not in (WRITER, READER, SERVER_SIDE)


def test_the_recorder_books_a_thread_to_the_process_of_the_thread_that_started_it():
    recorder = Recorder()
    recorder.recording = True

    def read_ahead():
        addresses.is_loopback("127.0.0.1")

    def live():
        inner = threading.Thread(target=read_ahead, name="mnemosync-sync-read")
        inner.start()
        inner.join()

    threading.setprofile(recorder)
    try:
        outer = threading.Thread(target=live, name="mnemosync-live")
        outer.start()
        outer.join()
    finally:
        threading.setprofile(None)
    assert "mnemosync.kernel.addresses" in recorder.seen[READER]
    assert "mnemosync.kernel.addresses" not in recorder.seen.get(WRITER, {})
