"""`mnemosync.agent.remote`: calls answer in the core's types, and every failure, streams included, arrives as a
typed error, never a grpc exception: a refusal as the kernel's error of its status, with the server's message.
"""

from __future__ import annotations

import grpc
import pytest

from mnemosync.agent.errors import CallFailed, ServerUnavailable
from mnemosync.agent.remote import Remote, refusal
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import (
    AlreadyExists,
    ChainBroken,
    FailedPrecondition,
    InvalidArgument,
    MnemosyncError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    StaleVersion,
    Unauthenticated,
)
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, validate
from mnemosync.kernel.outcomes import OpResult, Stats
from mnemosync.kernel.search import Filter, Hit

from helpers import TEST_MODEL, fake_vector, free_port

MODEL = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)


@pytest.mark.parametrize(("status", "error"), [
    (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgument), (grpc.StatusCode.NOT_FOUND, NotFound),
    (grpc.StatusCode.ALREADY_EXISTS, AlreadyExists), (grpc.StatusCode.FAILED_PRECONDITION, FailedPrecondition),
    (grpc.StatusCode.ABORTED, StaleVersion), (grpc.StatusCode.OUT_OF_RANGE, OutOfRange),
    (grpc.StatusCode.PERMISSION_DENIED, PermissionDenied), (grpc.StatusCode.UNAUTHENTICATED, Unauthenticated),
    (grpc.StatusCode.DATA_LOSS, ChainBroken),
])
def test_a_refusal_arrives_as_the_kernels_error_of_its_status_with_the_servers_message(status, error):
    refused = refusal(status, "the server's own words")
    assert type(refused) is error and refused.code == status.name and str(refused) == "the server's own words"


def test_a_status_no_kernel_error_stands_for_keeps_its_code():
    failed = refusal(grpc.StatusCode.INTERNAL, "boom")
    assert isinstance(failed, CallFailed) and isinstance(failed, MnemosyncError)
    assert (failed.code, str(failed)) == ("INTERNAL", "boom")


def test_the_server_refusing_a_stale_restore_arrives_as_stale_version_with_its_message(server):
    remote = Remote(server.address, "alice", insecure=True, timeout=5)
    memory_id = "a3c3c0de-0000-4000-8000-000000000012"

    def op(n: int, kind: str, base: int, fields: dict, vector=None):
        request = OpRequest(f"a3c3c0de-0000-4000-8000-00000000002{n}", memory_id, kind, base, fields, vector)
        return validate(request, Limits(), MODEL if vector else None)

    content = "The deploy key rotates monthly"
    remote.append([op(1, "add", 0, {"scope": "user", "content": content}, fake_vector(content))], MODEL)
    remote.append([op(2, "forget", 1, {"reason": ""})], None)
    with pytest.raises(StaleVersion, match="is at version 2, but this write was made from version 1") as stale:
        remote.append([op(3, "restore", 1, {})], None)
    assert stale.value.code == "ABORTED"
    remote.close()


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
    with pytest.raises(CallFailed) as cancelled:
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
