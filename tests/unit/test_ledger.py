"""`mnemosync.server.ledger` over the SQLite record: group commit, op_id idempotency, atomic batches, the pinned
model, offsets, rebuild and restart, through the real gRPC server on a loopback port.
"""

from __future__ import annotations

import threading
import uuid

import grpc
import numpy as np
import pytest

from mnemosync.server import maintenance
from mnemosync.server.app import run_server
from mnemosync.server.ledger import Ledger
from mnemosync.v1 import memory_pb2 as pb

from helpers import TEST_MODEL, RawAgent, add_op, fake_vector, refused, snapshot, update_op, wait_until


def test_two_agents_appending_at_once_replicate_to_a_third_in_order_with_no_gaps(agents):
    writers = [agents("writer-1"), agents("writer-2")]
    acknowledged: dict[str, list[int]] = {"writer-1": [], "writer-2": []}

    def write(agent: RawAgent) -> None:
        for i in range(60):
            acknowledged[agent.agent_id].append(agent.add(f"{agent.agent_id} note {i}").seq)

    threads = [threading.Thread(target=write, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = agents("reader").sync(0)
    assert [e.seq for e in entries] == list(range(1, 121))
    assert sorted(acknowledged["writer-1"] + acknowledged["writer-2"]) == list(range(1, 121))
    by_agent = {a: [e.seq for e in entries if e.agent_id == a] for a in acknowledged}
    assert by_agent == {a: sorted(s) for a, s in acknowledged.items()}
    assert all(e.prev_hash == p.hash for p, e in zip(entries, entries[1:], strict=False))


def test_replaying_an_op_id_returns_the_original_result_and_writes_nothing(agents):
    a = agents("agent-a")
    op = add_op("Use uv for Python installs")
    first = a.append(op).results[0]
    again = a.append(op).results[0]
    assert (again.seq, again.memory_id, again.version) == (first.seq, first.memory_id, first.version)
    assert again.replayed and not first.replayed
    assert len(a.sync(0)) == 1


def test_reusing_an_op_id_for_a_different_operation_is_refused(agents):
    a = agents("agent-a")
    op_id = str(uuid.uuid4())
    a.append(add_op("first", op_id=op_id))
    with pytest.raises(grpc.RpcError) as err:
        a.append(add_op("second", op_id=op_id))
    assert err.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert "already used by this agent for a different operation" in err.value.details()


def test_the_same_op_id_from_two_agents_is_two_operations(agents):
    op_id = str(uuid.uuid4())
    agents("agent-a").append(add_op("from a", op_id=op_id))
    agents("agent-b").append(add_op("from b", op_id=op_id))
    assert len(agents("reader").sync(0)) == 2


def test_a_batch_with_one_bad_operation_writes_nothing(agents):
    a = agents("agent-a")
    good = add_op("fine")
    bad = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), base_version=1,
                       forget=pb.ForgetOp())
    with pytest.raises(grpc.RpcError) as err:
        a.append(good, bad)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert a.sync(0) == []


def test_vectors_from_another_model_are_refused_naming_the_expected_model(agents):
    a = agents("agent-a")
    a.add("pins the test model")
    other = pb.EmbeddingModel(name="nomic-embed-text", dimensions=16, sha256="cd" * 32)
    code, details = refused(lambda: a.append(add_op("x"), model=other))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "test-vectors (16 dims, sha256 abababababab)" in details and "nomic-embed-text" in details
    request = pb.SearchRequest(query_vector=fake_vector("x"), embedding_model=other)
    code, details = refused(lambda: a.call("Search", request))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "test-vectors" in details


def test_acknowledged_offsets_only_move_forward_and_show_as_lag(agents):
    a, b = agents("agent-a"), agents("agent-b")
    for i in range(5):
        a.add(f"m{i}")
    assert b.call("Ack", pb.AckRequest(seq=3)).acked_seq == 3
    assert b.call("Ack", pb.AckRequest(seq=2)).acked_seq == 3
    stats = b.call("Stats", pb.StatsRequest())
    assert stats.head_seq == 5 and stats.live_memories == 5
    assert [(x.agent_id, x.acked_seq, x.lag) for x in stats.agents] == [("agent-b", 3, 2)]
    assert stats.embedding_model.name == "test-vectors"


def test_rebuilt_projections_equal_the_live_ones(server_settings):
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        ids = [a.add(f"memory {i}", tags=[f"t{i % 3}"]).memory_id for i in range(30)]
        a.append(update_op(ids[0], 1, "memory zero, revised", tags=["new"], replace_tags=True))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[1], base_version=1, forget=pb.ForgetOp()))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[2], link=pb.LinkOp(target_id=ids[3])))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[4], base_version=1,
                              set_layer=pb.SetLayerOp(layer=pb.LAYER_LEGISLATIVE)))
        live = snapshot(running.store)
        assert maintenance.rebuild(running.store) == 34
        assert snapshot(running.store) == live
        a.close()


def test_everything_is_still_there_after_a_restart(server_settings):
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        ids = [a.add(f"durable {i}").memory_id for i in range(10)]
        a.call("Ack", pb.AckRequest(seq=10))
        before = snapshot(running.store)
        a.close()
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        assert snapshot(running.store) == before
        assert a.get(ids[7]).content == "durable 7"
        stats = a.call("Stats", pb.StatsRequest())
        assert stats.head_seq == 10 and stats.agents[0].acked_seq == 10
        assert running.store.log.verify().ok
        a.close()


def test_a_store_owns_one_vector_mirror_shared_by_its_writer_and_readers(tmp_path):
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.kernel.search import Filter
    from mnemosync.server.identity import Caller

    model = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)
    with Ledger.sqlite(tmp_path / "one.db", synchronous="normal") as one, \
            Ledger.sqlite(tmp_path / "two.db", synchronous="normal") as two:
        one.writes.append(Caller("a"), [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                           {"scope": "user", "content": "x"}, fake_vector("x"))], model)
        hits = one.reads.search(query="", vector=fake_vector("x"), model=model, limit=1, filter=Filter(), mode="vector")
        assert [h.vector_rank for h in hits] == [1]
        mirror = one.mirror
        assert one._writer.vector_mirror is mirror and one.context.reader().vector_mirror is mirror
        assert mirror.base.n == 1  # the search was answered from it
        assert two.context.reader().vector_mirror is two.mirror is not mirror
    assert mirror._conn is None  # closing the store closed its mirror


def test_a_refused_operation_inside_a_batch_is_named_by_its_position_and_nothing_is_written(agents):
    a = agents("agent-a")
    kept = a.add("a memory to update")
    batch = [add_op("first of the batch"), update_op(kept.memory_id, 1, importance=0.2),
             add_op("constitution by an agent", layer=1), add_op("last of the batch")]
    code, details = refused(lambda: a.append(*batch))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("operations[2]: layer-1-human-only:")
    code, details = refused(lambda: a.append(add_op("fine"), update_op(str(uuid.uuid4()), 1, importance=0.2)))
    assert code == grpc.StatusCode.NOT_FOUND and details.startswith("operations[1]: no memory with id")
    code, details = refused(lambda: a.append(add_op("constitution alone", layer=1)))
    assert details.startswith("layer-1-human-only:")  # a single operation needs no position
    assert [e.seq for e in a.sync(0)] == [1]


def test_a_large_append_validated_a_chunk_at_a_time_refuses_as_a_whole_and_in_the_same_order(server, agents,
                                                                                                 tmp_path):
    """An Append of `2 * FEED_CHUNK` operations or more is validated while the writer admits its first chunks; it
    must still be all or nothing, and name the same refusal a whole validation first would."""
    from mnemosync.server.writes import FEED_CHUNK

    a = agents("agent-a")
    kept = a.add("a memory to update")
    size = FEED_CHUNK * 2 + 50

    def batch(**bad) -> list[pb.Operation]:
        ops = [add_op(f"fed note {i}", tags=[f"t{i % 4}"]) for i in range(size)]
        for at, op in bad.items():
            ops[int(at[1:])] = op
        return ops

    twice = str(uuid.uuid4())
    bad_type = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                            add=pb.AddOp(scope="user", type="no spaces allowed", content="x",
                                         embedding=fake_vector("x")))
    missing = update_op(str(uuid.uuid4()), 1, importance=0.2)
    cases = [  # (operations, the refusal's start)
        (batch(a230=bad_type), "operations[230]: type"),  # after the writer admitted the first chunks
        (batch(a10=add_op("one", op_id=twice), a150=add_op("two", op_id=twice)), f"op_id {twice} appears twice"),
        (batch(a10=add_op("one", op_id=twice), a150=add_op("two", op_id=twice), a240=bad_type),
         "operations[240]: type"),  # validation of any operation before the repeated op_id
        (batch(a20=missing, a245=bad_type), "operations[245]: type"),  # before what the writer refused
        (batch(a20=missing), "operations[20]: no memory with id"),
    ]
    for ops, says in cases:
        code, details = refused(lambda ops=ops: a.append(*ops))
        assert details.startswith(says), details
    assert [e.seq for e in a.sync(0)] == [1]
    results = a.append(*batch(a3=update_op(kept.memory_id, 1, importance=0.3))).results
    assert len(results) == size and [r.seq for r in results] == list(range(2, size + 2))
    assert [e.op for e in a.sync(0)][1:5] == ["add", "add", "add", "update"]
    assert maintenance.compare_projections(server.store, tmp_path / "scratch.db") == [] and server.store.log.verify().ok


def test_batches_of_adds_folded_together_leave_the_projections_a_fold_one_by_one_gives(server, agents, tmp_path):
    a, b = agents("agent-a"), agents("agent-b")
    a.append(*(add_op(f"note {i}", tags=[f"t{i % 3}"], scope=("user", "project:x")[i % 2]) for i in range(6)))
    kept = str(uuid.uuid4())
    results = b.append(add_op("note 0"), add_op("note 7", memory_id=kept), add_op("note 7", scope="project:x"),
                       add_op("note 7", memory_id=str(uuid.uuid4())), add_op("note 1", scope="project:x"),
                       add_op("note 8", tags=["t1", "t2"], vector=fake_vector("note 2"))).results
    assert [r.deduplicated for r in results] == [True, False, False, True, True, False]
    assert results[3].memory_id == kept and results[5].conflict_id  # close to agent-a's "note 2": a conflict
    a.append(update_op(kept, 1, "note 7, revised"), add_op("note 9"))
    assert maintenance.compare_projections(server.store, tmp_path / "scratch.db") == []


def test_an_add_is_flagged_as_near_another_agents_add_written_before_it_in_the_same_commit_group(tmp_path):
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.server.identity import Caller

    model = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)
    base = np.asarray(fake_vector("The staging database is on port 5432"))
    nearby = base + 0.01 * np.asarray(fake_vector("noise"))
    nearby = (nearby / np.linalg.norm(nearby)).tolist()

    def add(agent: str, content: str, vector, scope: str = "user"):
        return OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0, {"scope": scope, "content": content}, vector)

    with Ledger.sqlite(tmp_path / "group.db", synchronous="normal") as store:
        store.writes.append(Caller("seed"), [add("seed", "An unrelated note", fake_vector("unrelated"))], model)
        release, holding = threading.Event(), threading.Event()
        holder = threading.Thread(target=store.submit, args=(lambda conn: holding.set() or release.wait(20),))
        holder.start()
        assert holding.wait(20)
        results: dict[str, list] = {}
        filler = [add("agent-b", f"Unrelated note {i}", fake_vector(f"unrelated {i}")) for i in range(16)]
        requests = [("agent-a", [add("agent-a", "The staging database is on port 5432", base.tolist())]),
                    ("agent-b", [add("agent-b", "The staging database listens on 5432", nearby),
                                 add("agent-b", "Another scope, same vector", nearby, scope="team"), *filler])]
        threads = []
        for queued, (agent, ops) in enumerate(requests, start=1):  # queued one after the other behind the holder
            threads.append(threading.Thread(
                target=lambda agent=agent, ops=ops: results.setdefault(agent, store.writes.append(Caller(agent), ops,
                                                                                           model).results)))
            threads[-1].start()
            wait_until(lambda queued=queued: store._writes.waiting == queued, message="the Append never queued")
        release.set()
        for t in [holder, *threads]:
            t.join(timeout=20)
        [a], [b, other_scope, *others] = results["agent-a"], results["agent-b"]
        assert a.conflict_id == 0 and other_scope.conflict_id == 0 and not any(r.conflict_id for r in others)
        assert b.conflict_id == b.seq  # agent a's add, written earlier in the same commit, was not yet committed


def test_appends_of_one_commit_group_chain_on_from_each_other_and_from_what_another_job_wrote_between(tmp_path):
    """An Append that follows another Append of its group starts from the head that one left, without reading it;
    one that follows another kind of job (here a large Append, fed to the writer a chunk at a time) reads it. The
    chain, the transparency log and the projections come out as if each had read it."""
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.server.identity import Caller
    from mnemosync.server.writes import FED_FROM

    model = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)

    def add(content: str) -> OpRequest:
        return OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0, {"scope": "user", "content": content},
                         fake_vector(content))

    with Ledger.sqlite(tmp_path / "group.db", synchronous="normal") as store:
        release, holding = threading.Event(), threading.Event()
        holder = threading.Thread(target=store.submit, args=(lambda conn: holding.set() or release.wait(20),))
        holder.start()
        assert holding.wait(20)
        requests = [("a", [add("first alone")]), ("b", [add("second alone")]),
                    ("c", [add(f"fed {i}") for i in range(FED_FROM)]), ("d", [add("after the fed one")]),
                    ("e", [add("last alone")])]
        results: dict[str, list] = {}
        threads = []
        for queued, (agent, ops) in enumerate(requests, start=1):  # one group, in this order, behind the holder
            threads.append(threading.Thread(
                target=lambda agent=agent, ops=ops: results.setdefault(
                    agent, store.writes.append(Caller(agent), ops, model).results)))
            threads[-1].start()
            wait_until(lambda queued=queued: store._writes.waiting == queued, message="the Append never queued")
        release.set()
        for t in [holder, *threads]:
            t.join(timeout=30)
        assert [[r.seq for r in results[agent]] for agent in "abde"] == [[1], [2], [FED_FROM + 3], [FED_FROM + 4]]
        assert [r.seq for r in results["c"]] == list(range(3, FED_FROM + 3))
        assert store.log.verify().ok
        assert maintenance.compare_projections(store, tmp_path / "scratch.db") == []


def test_the_writer_answers_a_groups_jobs_from_an_event_loop_with_one_call_onto_that_loop(tmp_path):
    """Jobs submitted from an event loop get their answers on it, all of one group in one call (each call wakes
    the loop through its socket, and the writer waits for the interpreter lock again after each); a refused job
    gets its own error and the others their results, as with `submit`."""
    import asyncio

    with Ledger.sqlite(tmp_path / "loop.db", synchronous="normal") as store:
        release, holding = threading.Event(), threading.Event()

        async def main() -> list:
            loop = asyncio.get_running_loop()
            calls = []
            threadsafe = loop.call_soon_threadsafe

            def counted(callback, *args):
                calls.append(callback)
                return threadsafe(callback, *args)

            loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
            holder = store.context.submit_async(lambda conn: holding.set() or release.wait(20))
            assert await asyncio.to_thread(holding.wait, 20)
            calls.clear()  # from here on: the answers of the holder's group and of the group queued behind it

            def refuse(conn):
                conn.execute("INSERT INTO meta (key, value) VALUES ('loop-test', '1')")
                raise ValueError("refused")

            waiters = [store.context.submit_async(lambda conn, n=n: n) for n in range(3)]
            waiters.insert(1, store.context.submit_async(refuse))
            release.set()
            answers = await asyncio.gather(*waiters, return_exceptions=True)
            assert await holder
            return [answers, len(calls)]

        (answers, wakes) = asyncio.run(main())
        assert answers[0] == 0 and isinstance(answers[1], ValueError) and answers[2:] == [1, 2]
        assert wakes == 2  # one per group
        assert store.context.reader().execute("SELECT count(*) FROM meta WHERE key = 'loop-test'").fetchone()[0] == 0
