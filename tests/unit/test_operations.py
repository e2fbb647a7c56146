"""`mnemosync.kernel.operations`: every field of an operation is checked, and a refusal names the field and the
limit and writes nothing.
"""

from __future__ import annotations

import uuid

import grpc
import pytest

from mnemosync.v1 import memory_pb2 as pb

from helpers import fake_vector, refused


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
    ("event time past year 9999", [_op(add=_add(event_time_ms=253_402_300_800_000))],
     grpc.StatusCode.INVALID_ARGUMENT, "event_time_ms must be milliseconds since 1970-01-01 UTC from"),
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
    got_code, details = refused(lambda: a.append(*ops))
    assert got_code == code
    assert message in details
    assert a.sync(0) == []


def test_the_size_limit_is_part_of_the_gate(agents):
    with pytest.raises(grpc.RpcError) as err:
        agents("agent-a").add("x" * 40_000)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "content is 40000 bytes; the limit is 32768 bytes" in err.value.details()
