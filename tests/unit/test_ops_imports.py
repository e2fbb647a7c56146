"""`ops.imports --write-path` books every thread's modules to the process the thread runs in, in production."""

from __future__ import annotations

import sys
import threading

import pytest

from mnemosync.kernel import addresses
from ops.imports import READER, RELAY, SERVER_SIDE, WRITER, Recorder, side_of


@pytest.mark.parametrize("name", ["mnemosync-rpc-loop", "store_0", "store_11", "mnemosync-writer",
                                  "mnemosync-listen", "mnemosync-snapshots"])
def test_the_servers_named_threads_are_booked_to_the_server_whoever_started_them(name):
    """The trace starts the server from the thread that plays Claude Code: only the names tell its threads."""
    assert side_of(name) == SERVER_SIDE
    assert side_of(name, started_by=WRITER) == SERVER_SIDE


@pytest.mark.parametrize("name", ["mnemosync-live", "mnemosync-sync-read", "mnemosync-local-socket",
                                  "mnemosync-session-3", "mnemosync-boot", "mnemosync-add-many_0",
                                  "Thread-3 (channel_spin)"])
def test_an_agents_threads_belong_to_the_agent_that_started_them(name):
    """Every agent names its threads alike, so two agents in one trace are told apart by who started what."""
    assert side_of(name, started_by=READER) == READER
    assert side_of(name, started_by=WRITER) == WRITER


def test_a_thread_of_no_known_starter_is_the_writing_agents():
    assert side_of("MainThread") == WRITER


def test_the_stdio_relays_threads_are_booked_to_the_relay_process():
    assert side_of("mnemosync-relay") == RELAY
    assert side_of("mnemosync-relay", started_by=WRITER) == RELAY
    assert side_of("Thread-2 (_downstream)", started_by=RELAY) == RELAY
    assert RELAY not in (WRITER, READER, SERVER_SIDE)


def _started(name: str, target, *args) -> None:
    thread = threading.Thread(target=target, args=args, name=name)
    thread.start()
    thread.join()


def test_the_recorder_books_a_thread_to_the_process_of_the_thread_that_started_it():
    recorder = Recorder()
    recorder.recording = True
    reader = threading.Thread(target=_started, name="first-thread-of-the-reader",
                              args=("mnemosync-live", _started, "mnemosync-sync-read", addresses.is_loopback, "::1"))
    recorder.book(reader, READER)
    sys.setprofile(recorder)  # this thread's start of the reader's first thread is seen too
    threading.setprofile(recorder)
    try:
        reader.start()
        reader.join()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    assert "mnemosync.kernel.addresses" in recorder.seen[READER]
    assert set(recorder.seen) == {READER}, "a thread booked by hand keeps its side when it starts"
