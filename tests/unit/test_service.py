"""`mnemosync.server.service`: the gRPC edge's own checks of reads, and the Sync and Subscribe streams."""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import grpc

from mnemosync.kernel.metadata import HEAD_METADATA_KEY
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import TEST_MODEL, RawAgent, add_op, dev_settings, refused, wait_until

CONFORMANCE = True  # every test on a `server` runs on SQLite and on PostgreSQL (conftest.STORE_KINDS)


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


def test_sync_closes_every_checkpoint_every_th_entry_and_the_last_with_a_signed_checkpoint(agents):
    from mnemosync.kernel import merkle

    a = agents("agent-a")
    a.append(*[add_op(f"fact {i}") for i in range(8)])
    entries = list(a.call("Sync", pb.SyncRequest(since_seq=1, checkpoint_every=3)))
    assert [e.seq for e in entries if e.HasField("checkpoint")] == [4, 7, 8]
    frontier = merkle.Frontier()
    for e in a.sync(0):
        frontier.append(merkle.leaf_hash(e.hash))
    assert entries[-1].checkpoint.size == 8 and entries[-1].checkpoint.root_hash == frontier.root().hex()
    code, details = refused(lambda: list(a.call("Sync", pb.SyncRequest(checkpoint_every=100_001))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "checkpoint_every must be 0 to 100000" in details


def test_sync_batches_sends_exactly_syncs_entries_one_page_per_message(tmp_path):
    """SyncBatches frames entries serialized once into each ChangelogBatch by hand (`service.batch_bytes`): what
    arrives must parse as the same entries Sync sends, packed embeddings and long contents (multi-byte lengths)
    included, one page of at most checkpoint_every entries per message."""
    with run_server(replace(dev_settings(tmp_path), sync_page_size=3)) as running:
        a = RawAgent(running.address, "agent-a")
        a.append(*[add_op(f"batched {i} " + "x" * (350 * i * i)) for i in range(8)])
        request = pb.SyncRequest(since_seq=1, checkpoint_every=2, packed_embeddings=True)
        batches = list(a.call("SyncBatches", request))
        one_by_one = list(a.call("Sync", request))
        a.close()
    assert [[e.seq for e in b.entries] for b in batches] == [[2, 3], [4, 5], [6, 7], [8]]
    assert [e for b in batches for e in b.entries] == one_by_one
    assert len(one_by_one[-1].SerializeToString()) > 2 ** 14 and one_by_one[-1].operation.add.embedding_f32


def test_get_checkpoint_proves_consistency_and_refuses_sizes_past_the_head(agents):
    from mnemosync.kernel import merkle

    a = agents("agent-a")
    a.append(*[add_op(f"fact {i}") for i in range(5)])
    old = a.call("GetCheckpoint", pb.CheckpointRequest(size=3)).checkpoint
    reply = a.call("GetCheckpoint", pb.CheckpointRequest(consistency_from=3))
    assert reply.checkpoint.size == 5 and reply.server_certificate == b""  # development mode: no certificate
    assert merkle.verify_consistency(3, bytes.fromhex(old.root_hash), 5, bytes.fromhex(reply.checkpoint.root_hash),
                                     reply.consistency_proof)
    code, details = refused(lambda: a.call("GetCheckpoint", pb.CheckpointRequest(size=6)))
    assert code == grpc.StatusCode.OUT_OF_RANGE and details == "size 6 is past the changelog head 5"
    code, details = refused(lambda: a.call("GetCheckpoint", pb.CheckpointRequest(size=2, consistency_from=3)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details == "consistency_from must be 0 to size (2), got 3"


def test_unary_calls_answer_while_more_streams_are_open_than_the_old_thread_pool_had(server):
    """The server used to hold one of its 64 threads per open stream, so 64 idle Subscribe streams stopped every
    call. Here 13 agents hold 208 (13 x the per-agent cap of 16), and calls still answer, and every stream still
    receives the next entry."""
    per_agent, agents = 16, [RawAgent(server.address, f"watcher-{i}") for i in range(13)]
    streams = [agent.stub.Subscribe(pb.SubscribeRequest(since_seq=0), metadata=agent.metadata, timeout=120)
               for agent in agents for _ in range(per_agent)]
    for stream in streams:
        assert int(dict(stream.initial_metadata())[HEAD_METADATA_KEY]) == 0  # open and waiting on the server
    writer = RawAgent(server.address, "writer")

    def call(method: str, request):
        return getattr(writer.stub, method)(request, metadata=writer.metadata, timeout=5)

    written = call("Append", pb.AppendRequest(operations=[add_op("streams do not starve calls")],
                                              embedding_model=TEST_MODEL)).results[0]
    assert call("Get", pb.GetRequest(id=written.memory_id)).memory.content.startswith("streams")
    assert call("Stats", pb.StatsRequest()).head_seq == 1
    assert {next(stream).seq for stream in streams} == {1}
    for stream in streams:
        stream.cancel()
    for agent in [*agents, writer]:
        agent.close()


STATS_POLICY = """
[agents.alice]
scopes = ["user", "project:web"]
[agents.bob]
scopes = ["project:ops"]
[agents.root]
authority = 1
scopes = ["project:web"]
admin = true
"""


def test_stats_show_an_agent_only_its_own_scopes_and_offset_unless_it_is_admin(tmp_path):
    with run_server(dev_settings(tmp_path, policy=STATS_POLICY)) as running:
        alice, bob, root = (RawAgent(running.address, name) for name in ("alice", "bob", "root"))
        alice.add("web fact", scope="project:web")
        alice.add("alice's own note", scope="user")
        for i in range(3):
            bob.add(f"ops fact {i}", scope="project:ops")
        for agent in (alice, bob, root):
            agent.call("Ack", pb.AckRequest(seq=5))

        seen_by_bob = bob.call("Stats", pb.StatsRequest())
        assert dict(seen_by_bob.by_scope) == {"project:ops": 3} and seen_by_bob.live_memories == 3
        assert [a.agent_id for a in seen_by_bob.agents] == ["bob"] and seen_by_bob.data_bytes == 0
        seen_by_alice = alice.call("Stats", pb.StatsRequest())
        assert dict(seen_by_alice.by_scope) == {"project:web": 1, "user": 1}
        assert dict(seen_by_alice.by_layer) == {"factual": 2}
        assert [a.agent_id for a in seen_by_alice.agents] == ["alice"]
        seen_by_root = root.call("Stats", pb.StatsRequest())  # admin: the whole server, whatever its own scopes
        assert dict(seen_by_root.by_scope) == {"project:web": 1, "user": 1, "project:ops": 3}
        assert [a.agent_id for a in seen_by_root.agents] == ["alice", "bob", "root"] and seen_by_root.data_bytes > 0
        assert {s.head_seq for s in (seen_by_alice, seen_by_bob, seen_by_root)} == {5}
        for agent in (alice, bob, root):
            agent.close()


def test_a_small_append_reaches_the_writer_while_every_store_thread_waits_for_it(tmp_path):
    """A small Append is validated on the event loop and waits for its commit there: it needs none of the store's
    threads, so it is queued for the writer even while every thread is held by calls that wait for the writer, and
    is answered, committed, once the writer runs."""
    with run_server(replace(dev_settings(tmp_path), max_workers=2)) as running:
        agents = [RawAgent(running.address, f"acker-{i}") for i in range(2)] + [RawAgent(running.address, "writer")]
        release, holding = threading.Event(), threading.Event()
        holder = threading.Thread(target=running.store.submit, args=(lambda conn: holding.set() or release.wait(20),))
        holder.start()
        try:
            assert holding.wait(20)
            acks = [agent.stub.Ack.future(pb.AckRequest(seq=0), metadata=agent.metadata, timeout=30)
                    for agent in agents[:2]]
            wait_until(lambda: running.store._writes.waiting == 2, message="the Acks never reached the writer")
            writer = agents[2]
            appended = writer.stub.Append.future(pb.AppendRequest(operations=[add_op("queued past the busy threads")],
                                                                  embedding_model=TEST_MODEL),
                                                 metadata=writer.metadata, timeout=30)
            wait_until(lambda: running.store._writes.waiting == 3, timeout=5,
                       message="the Append waited for a store thread")
            assert not appended.done()  # acknowledged only after its commit
        finally:
            release.set()
            holder.join(timeout=20)
        written = appended.result().results[0]
        assert written.seq == 1 and [ack.result().acked_seq for ack in acks] == [0, 0]
        assert writer.get(written.memory_id).content == "queued past the busy threads"
        for agent in agents:
            agent.close()
