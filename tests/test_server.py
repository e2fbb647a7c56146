"""The server core through its real gRPC interface on a loopback port."""

from __future__ import annotations

import threading
import time
import uuid

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from mnemosync.v1 import memory_pb2 as pb
from server.app import run_server
from server.identity import Caller
from server.sqlite_store import SqliteStore

from conftest import TEST_MODEL, RawAgent, add_op, fake_vector, update_op


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


def test_a_write_from_a_stale_version_is_recorded_as_a_conflict_and_the_first_write_stays_visible(agents):
    a, b = agents("agent-a"), agents("agent-b")
    added = a.add("The cache TTL is 60s")
    a.append(update_op(added.memory_id, 1, "The cache TTL is 120s"))
    stale = b.append(update_op(added.memory_id, 1, "The cache TTL is 30s")).results[0]
    assert stale.conflict_id == stale.seq == 3 and stale.version == 3
    memory = a.get(added.memory_id)
    assert memory.content == "The cache TTL is 120s" and memory.version == 3
    assert list(memory.open_conflicts) == [3]
    assert len(a.sync(0)) == 3


def test_a_stale_restore_or_set_layer_is_still_refused_with_the_current_version(agents):
    a = agents("agent-a")
    added = a.add("The cache TTL is 60s")
    a.append(update_op(added.memory_id, 1, "The cache TTL is 120s"))
    with pytest.raises(grpc.RpcError) as err:
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=added.memory_id, base_version=1,
                              set_layer=pb.SetLayerOp(layer=pb.LAYER_LEGISLATIVE)))
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "is at version 2" in err.value.details() and "base_version=2" in err.value.details()


def test_a_batch_with_one_bad_operation_writes_nothing(agents):
    a = agents("agent-a")
    good = add_op("fine")
    bad = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), base_version=1,
                       forget=pb.ForgetOp())
    with pytest.raises(grpc.RpcError) as err:
        a.append(good, bad)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert a.sync(0) == []


def test_versions_grow_with_each_change_and_links_do_not_change_them(agents):
    a = agents("agent-a")
    m1, m2 = a.add("one").memory_id, a.add("two").memory_id
    assert a.append(update_op(m1, 1, tags=["x"], replace_tags=True)).results[0].version == 2
    forget = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, base_version=2, forget=pb.ForgetOp())
    assert a.append(forget).results[0].version == 3
    restore = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, base_version=3, restore=pb.RestoreOp())
    assert a.append(restore).results[0].version == 4
    link = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, link=pb.LinkOp(target_id=m2, relation="causes"))
    assert a.append(link).results[0].version == 4
    memory = a.get(m1)
    assert memory.version == 4 and not memory.archived and memory.tags == ["x"]
    assert [(lk.target_id, lk.relation) for lk in memory.links] == [(m2, "causes")]


def test_search_finds_a_memory_by_keyword_and_by_vector(agents):
    a = agents("agent-a")
    target = a.add("Postgres connection pool exhausted: raise max_connections to 200").memory_id
    for i in range(20):
        a.add(f"unrelated memory number {i} about gardening")
    by_keyword = a.search("max_connections", limit=3)
    assert by_keyword[0].memory.id == target and by_keyword[0].score.keyword_rank == 1
    assert by_keyword[0].score.vector_rank == 0
    vector = fake_vector("Postgres connection pool exhausted: raise max_connections to 200")
    by_vector = a.search(vector=vector, limit=3)
    assert by_vector[0].memory.id == target and by_vector[0].score.vector_rank == 1
    assert by_vector[0].score.vector_distance == pytest.approx(0.0, abs=1e-5)
    hybrid = a.search("connection pool", vector=vector, limit=3)
    top = hybrid[0].score
    assert hybrid[0].memory.id == target
    assert top.rrf == pytest.approx(1 / 61 + 1 / 61) and top.final == top.rrf


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "NEAR(a b)", "a* OR b:c", "content:secret", "-x AND (y", "^start", "'; DROP TABLE memories; --",
     "ümlaut café", "日本語のテキスト", "*", "\"\"\"", "a\tb\nc"],
)
def test_any_user_text_is_a_safe_keyword_query(agents, query):
    a = agents("agent-a")
    a.add("café NEAR the station; DROP TABLE is text here")
    a.search(query)  # must not raise


def test_search_filters_each_restrict_the_results(agents, server):
    a, b = agents("agent-a"), agents("agent-b")
    text = "release checklist for the mobile app"
    ids = {
        "user": a.add(text, scope="user", type="fact", tags=["release"]).memory_id,
        "project": a.add(text + " v2", scope="project:app", type="decision", tags=["release", "mobile"],
                         layer=2).memory_id,
        "by_b": b.add(text + " v3", scope="user", type="fact", tags=["mobile"]).memory_id,
    }
    cutoff = int(time.time() * 1000) + 1
    time.sleep(0.01)
    ids["late"] = a.add(text + " v4", scope="user", type="fact").memory_id
    vector = fake_vector(text)

    def found(**filter_fields) -> set[str]:
        hits = a.search("release checklist", vector=vector, filter=pb.SearchFilter(**filter_fields), limit=20)
        return {h.memory.id for h in hits}

    assert found() == set(ids.values())
    assert found(scopes=["project:app"]) == {ids["project"]}
    assert found(types=["decision"]) == {ids["project"]}
    assert found(tags=["release", "mobile"]) == {ids["project"]}
    assert found(tags=["mobile"]) == {ids["project"], ids["by_b"]}
    assert found(authors=["agent-b"]) == {ids["by_b"]}
    assert found(layers=[pb.LAYER_LEGISLATIVE]) == {ids["project"]}
    assert found(created_after_ms=cutoff) == {ids["late"]}
    assert found(created_before_ms=cutoff) == set(ids.values()) - {ids["late"]}
    forget = pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids["late"], base_version=1, forget=pb.ForgetOp())
    a.append(forget)
    assert ids["late"] not in found()
    assert ids["late"] in found(include_archived=True)


def _status(callable_) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as err:
        callable_()
    return err.value.code(), err.value.details()


def _op(**kwargs) -> pb.Operation:
    kwargs.setdefault("op_id", str(uuid.uuid4()))
    kwargs.setdefault("memory_id", str(uuid.uuid4()))
    return pb.Operation(**kwargs)


def _add(**fields) -> pb.AddOp:
    fields.setdefault("scope", "user")
    fields.setdefault("content", "some content")
    fields.setdefault("embedding", fake_vector("x"))
    return pb.AddOp(**fields)


BAD_APPENDS = [
    ("empty batch", [], grpc.StatusCode.INVALID_ARGUMENT, "operations must not be empty"),
    ("no operation set", [_op()], grpc.StatusCode.INVALID_ARGUMENT, "exactly one of add"),
    ("op_id not a uuid", [_op(op_id="nope", add=_add())], grpc.StatusCode.INVALID_ARGUMENT, "op_id must be a UUID"),
    ("empty content", [_op(add=_add(content="  "))], grpc.StatusCode.INVALID_ARGUMENT, "content must not be empty"),
    ("content too large", [_op(add=_add(content="x" * 40_000))], grpc.StatusCode.INVALID_ARGUMENT,
     "content is 40000 bytes; the limit is 32768 bytes"),
    ("too many tags", [_op(add=_add(tags=[f"t{i}" for i in range(40)]))], grpc.StatusCode.INVALID_ARGUMENT,
     "tags has 40 tags; the limit is 32"),
    ("tag with space", [_op(add=_add(tags=["a b"]))], grpc.StatusCode.INVALID_ARGUMENT, "without spaces"),
    ("bad scope", [_op(add=_add(scope="has space"))], grpc.StatusCode.INVALID_ARGUMENT, "scope must be"),
    ("bad type", [_op(add=_add(type="Not Snake"))], grpc.StatusCode.INVALID_ARGUMENT, "type must be lower_snake_case"),
    ("bad layer", [_op(add=_add(layer=9))], grpc.StatusCode.INVALID_ARGUMENT, "layer must be one of 1 to 4"),
    ("importance out of range", [_op(add=_add(importance=1.5))], grpc.StatusCode.INVALID_ARGUMENT,
     "importance must be a number from 0 to 1"),
    ("nan importance", [_op(add=_add(importance=float("nan")))], grpc.StatusCode.INVALID_ARGUMENT, "importance"),
    ("wrong dimensions", [_op(add=_add(embedding=[0.1] * 8))], grpc.StatusCode.INVALID_ARGUMENT,
     "embedding has 8 dimensions; the model test-vectors (16 dims"),
    ("nan in vector", [_op(add=_add(embedding=[float("nan")] * 16))], grpc.StatusCode.INVALID_ARGUMENT,
     "NaN or infinite"),
    ("zero vector", [_op(add=_add(embedding=[0.0] * 16))], grpc.StatusCode.INVALID_ARGUMENT, "all zeros"),
    ("missing embedding", [_op(add=_add(embedding=[]))], grpc.StatusCode.INVALID_ARGUMENT, "embedding is required"),
    ("update without base", [_op(update=pb.UpdateOp(type="x"))], grpc.StatusCode.INVALID_ARGUMENT,
     "base_version is required for update"),
    ("update of unknown memory", [_op(base_version=1, update=pb.UpdateOp(type="x"))], grpc.StatusCode.NOT_FOUND,
     "no memory with id"),
    ("link to itself", [_op(memory_id="8d2f5c1e-0000-4000-8000-000000000001",
                            link=pb.LinkOp(target_id="8d2f5c1e-0000-4000-8000-000000000001"))],
     grpc.StatusCode.INVALID_ARGUMENT, "cannot link to itself"),
    ("batch too large", [_op(add=_add()) for _ in range(501)], grpc.StatusCode.RESOURCE_EXHAUSTED,
     "operations has 501 entries; the limit is 500"),
    ("duplicate op ids", [_op(op_id="8d2f5c1e-0000-4000-8000-000000000002", add=_add())] * 2,
     grpc.StatusCode.INVALID_ARGUMENT, "appears twice"),
]


@pytest.mark.parametrize("name,ops,code,message", BAD_APPENDS, ids=[b[0] for b in BAD_APPENDS])
def test_bad_appends_get_a_precise_status_and_write_nothing(agents, name, ops, code, message):
    a = agents("agent-a")
    got_code, details = _status(lambda: a.append(*ops))
    assert got_code == code
    assert message in details
    assert a.sync(0) == []


def test_bad_reads_get_a_precise_status(agents):
    a = agents("agent-a")
    assert _status(lambda: a.get(str(uuid.uuid4())))[0] == grpc.StatusCode.NOT_FOUND
    code, details = _status(lambda: a.search("x", limit=1000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "limit must be 1 to 100" in details
    code, details = _status(lambda: a.search("x" * 3000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "the limit is 2000" in details
    code, details = _status(lambda: a.search(""))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "give a query" in details
    code, details = _status(lambda: a.call("Ack", pb.AckRequest(seq=5)))
    assert code == grpc.StatusCode.OUT_OF_RANGE and "past the changelog head 0" in details
    code, details = _status(lambda: list(a.call("Sync", pb.SyncRequest(since_seq=-1))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT


def test_a_call_without_an_agent_identity_is_unauthenticated(server):
    channel = grpc.insecure_channel(server.address)
    stub = __import__("mnemosync.v1.memory_pb2_grpc", fromlist=["x"]).MemoryServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.Stats(pb.StatsRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "x-mnemosync-agent" in err.value.details()
    channel.close()


def test_vectors_from_another_model_are_refused_naming_the_expected_model(agents):
    a = agents("agent-a")
    a.add("pins the test model")
    other = pb.EmbeddingModel(name="nomic-embed-text", dimensions=16, sha256="cd" * 32)
    code, details = _status(lambda: a.append(add_op("x"), model=other))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert "test-vectors (16 dims, sha256 abababababab)" in details and "nomic-embed-text" in details
    request = pb.SearchRequest(query_vector=fake_vector("x"), embedding_model=other)
    code, details = _status(lambda: a.call("Search", request))
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


def test_rebuilt_projections_equal_the_live_ones(server_settings):
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        ids = [a.add(f"memory {i}", tags=[f"t{i % 3}"]).memory_id for i in range(30)]
        a.append(update_op(ids[0], 1, "memory zero, revised", tags=["new"], replace_tags=True))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[1], base_version=1, forget=pb.ForgetOp()))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[2], link=pb.LinkOp(target_id=ids[3])))
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[4], base_version=1,
                              set_layer=pb.SetLayerOp(layer=pb.LAYER_LEGISLATIVE)))
        live = running.store.snapshot()
        assert running.store.rebuild() == 34
        assert running.store.snapshot() == live
        a.close()


def test_everything_is_still_there_after_a_restart(server_settings):
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        ids = [a.add(f"durable {i}").memory_id for i in range(10)]
        a.call("Ack", pb.AckRequest(seq=10))
        before = running.store.snapshot()
        a.close()
    with run_server(server_settings) as running:
        a = RawAgent(running.address, "agent-a")
        assert running.store.snapshot() == before
        assert a.get(ids[7]).content == "durable 7"
        stats = a.call("Stats", pb.StatsRequest())
        assert stats.head_seq == 10 and stats.agents[0].acked_seq == 10
        assert running.store.verify().ok
        a.close()


def test_health_checking_and_reflection_answer(server):
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    response = health.Check(health_pb2.HealthCheckRequest(service="mnemosync.v1.MemoryService"), timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                             timeout=10))
    names = {s.name for s in answers[0].list_services_response.service}
    assert "mnemosync.v1.MemoryService" in names
    channel.close()


def test_plain_text_on_a_non_loopback_address_is_refused(tmp_path):
    from server.core.errors import FailedPrecondition
    from server.settings import ServerSettings

    settings = ServerSettings(data_dir=tmp_path, listen="0.0.0.0:0", insecure=True)
    with pytest.raises(FailedPrecondition, match="allowed only on a loopback address"):
        with run_server(settings):
            pass


def test_the_store_keeps_the_changelog_append_only(tmp_path):
    with SqliteStore(tmp_path / "db.sqlite", synchronous="normal") as store:
        from server.core.model_identity import ModelInfo
        from server.core.operations import OpRequest

        model = ModelInfo(TEST_MODEL.name, 16, TEST_MODEL.sha256)
        store.append(Caller("a"), [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                     {"scope": "user", "content": "x"}, fake_vector("x"))], model)
        with pytest.raises(Exception, match="append-only"):
            store._writer.execute("UPDATE changelog SET payload = '{}'")
        with pytest.raises(Exception, match="append-only"):
            store._writer.execute("DELETE FROM changelog")
