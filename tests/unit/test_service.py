"""`server.service`: the gRPC edge's own checks of reads, and the Sync and Subscribe streams."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import grpc

from mnemosync.v1 import memory_pb2 as pb
from server.app import run_server

from helpers import RawAgent, add_op, dev_settings, refused


def test_bad_reads_get_a_precise_status(agents):
    a = agents("agent-a")
    assert refused(lambda: a.get(str(uuid.uuid4())))[0] == grpc.StatusCode.NOT_FOUND
    code, details = refused(lambda: a.search("x", limit=1000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "limit must be 1 to 100" in details
    code, details = refused(lambda: a.search("x" * 3000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "the limit is 2000" in details
    code, details = refused(lambda: a.search(""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "give a query" in details
    code, details = refused(lambda: a.call("Ack", pb.AckRequest(seq=5)))
    assert code == grpc.StatusCode.OUT_OF_RANGE and "past the changelog head 0" in details
    code, details = refused(lambda: list(a.call("Sync", pb.SyncRequest(since_seq=-1))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_sync_honours_since_and_max_entries(agents):
    a = agents("agent-a")
    ops = [add_op(f"bulk {i}") for i in range(2500)]  # more than one Sync page
    for start in range(0, 2500, 500):
        a.append(*ops[start:start + 500])
    assert [e.seq for e in a.sync(0)] == list(range(1, 2501))
    assert [e.seq for e in a.sync(2490)] == list(range(2491, 2501))
    assert [e.seq for e in a.sync(100, max_entries=3)] == [101, 102, 103]


def test_subscribe_delivers_new_entries_as_they_are_committed(agents):
    a, b = agents("agent-a"), agents("agent-b")
    a.add("before")
    stream = b.stub.Subscribe(pb.SubscribeRequest(since_seq=0), metadata=b.metadata)
    received = []

    def read():
        for entry in stream:
            received.append(entry.seq)
            if len(received) == 3:
                return

    reader = threading.Thread(target=read)
    reader.start()
    a.add("after 1")
    a.add("after 2")
    reader.join(timeout=20)
    stream.cancel()
    assert received == [1, 2, 3]


def test_sync_and_subscribe_cross_page_boundaries_without_losing_or_repeating_an_entry(tmp_path):
    with run_server(replace(dev_settings(tmp_path), sync_page_size=2)) as running:
        a = RawAgent(running.address, "agent-a")
        a.append(*[add_op(f"paged {i}") for i in range(7)])
        assert [e.seq for e in a.sync(0)] == list(range(1, 8))
        assert [e.seq for e in a.sync(3)] == list(range(4, 8))
        assert [e.seq for e in a.sync(2, max_entries=3)] == [3, 4, 5]
        stream = a.stub.Subscribe(pb.SubscribeRequest(since_seq=1), metadata=a.metadata)
        received = []
        for entry in stream:
            received.append(entry.seq)
            if len(received) == 6:
                break
        stream.cancel()
        a.close()
    assert received == list(range(2, 8))
