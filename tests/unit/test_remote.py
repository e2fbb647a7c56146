"""`mnemosync.agent.remote`: calls answer in the core's types, and every failure, streams included, arrives as one of
the client's typed errors, never a grpc exception.
"""

from __future__ import annotations

import pytest

from mnemosync.agent.errors import PermissionDenied, Refused, ServerUnavailable, refused
from mnemosync.agent.remote import Remote
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, validate
from mnemosync.kernel.outcomes import OpResult, Stats
from mnemosync.kernel.search import Filter, Hit

from helpers import TEST_MODEL, fake_vector, free_port

MODEL = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)


def test_the_client_maps_permission_denied_to_its_own_typed_error():
    assert isinstance(refused("PERMISSION_DENIED", "no"), PermissionDenied)


def test_calls_answer_in_the_cores_types(server):
    remote = Remote(server.address, "alice", insecure=True, timeout=5)
    op = validate(OpRequest("a3c3c0de-0000-4000-8000-000000000001", "a3c3c0de-0000-4000-8000-000000000002", "add",
                            0, {"scope": "user", "content": "The build cache lives in S3"},
                            fake_vector("The build cache lives in S3")), Limits(), MODEL)
    [result] = remote.append([op], MODEL)
    assert result == OpResult(op.op_id, op.memory_id, 1, 1, False)
    memory = remote.get(op.memory_id)
    assert isinstance(memory, MemoryRow) and memory.content == "The build cache lives in S3"
    [hit] = remote.search("build cache", vector=fake_vector("build cache"), model=MODEL, limit=5, filter=Filter(),
                          mode="hybrid")
    assert isinstance(hit, Hit) and hit.memory.id == op.memory_id and hit.vector_rank == 1
    [entry] = remote.sync(0)
    assert isinstance(entry, Entry) and entry.computed_hash() == entry.hash
    assert remote.ack(1) == (1, 1)
    stats = remote.stats()
    assert isinstance(stats, Stats) and (stats.head_seq, stats.live_memories) == (1, 1)
    assert [(a.agent_id, a.acked_seq, a.lag) for a in stats.agents] == [("alice", 1, 0)]
    assert stats.embedding_model == MODEL
    remote.close()


def test_a_cancelled_stream_and_a_closed_connection_fail_with_the_clients_errors(server):
    remote = Remote(server.address, "alice", insecure=True, timeout=5)
    stream = remote.subscribe(0)
    stream.wait_accepted()
    stream.cancel()
    with pytest.raises(Refused) as cancelled:
        list(stream)
    assert cancelled.value.code == "CANCELLED"
    remote.close()
    closed = f"the connection to the mnemosync server at {server.address} was closed"
    with pytest.raises(ServerUnavailable, match=closed):
        list(remote.sync(0))
    with pytest.raises(ServerUnavailable, match=closed):
        remote.stats()


def test_an_unreachable_server_is_server_unavailable_for_calls_and_streams():
    remote = Remote(f"127.0.0.1:{free_port()}", "alice", insecure=True, timeout=2)
    with pytest.raises(ServerUnavailable, match="is unreachable"):
        remote.stats()
    with pytest.raises(ServerUnavailable, match="is unreachable"):
        list(remote.sync(0))
    with pytest.raises(ServerUnavailable, match="is unreachable"):
        remote.subscribe(0).wait_accepted()
    remote.close()
