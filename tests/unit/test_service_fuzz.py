"""`mnemosync.server.service` under fuzzing: no request, however malformed, crashes the server or writes anything."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemosync.server import maintenance
from mnemosync.server.app import run_server
from mnemosync.server.settings import ServerSettings
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc

from helpers import STORE_KINDS, TEST_MODEL, fake_vector, snapshot

# A precise refusal is fine; INTERNAL, UNKNOWN (an uncaught exception), UNAVAILABLE (a crash) are not.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ABORTED, grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
}


SERVICE = pb.DESCRIPTOR.services_by_name["MemoryService"]


METHODS = {m.name: (getattr(pb, m.input_type.name), m.server_streaming) for m in SERVICE.methods}


LONG_LIVED = {"Subscribe"}


INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)


FTS5 = ['"', '""', "NEAR(a b, 2)", "a OR b", "a AND NOT b", "*", "content:x", "^start", "(", ")", "-x", "+",
        "'", "{content tags}: x", "a*", "NOT", "\x00", "x\x00y", "🙂", "\u202e", "\ufeff"]


# Each example is a few real RPCs: no per-example deadline; the number of examples comes from the
# profile (conftest: `ci` bounded, `thorough` long).
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


HUGE = [0, 1, 31, 32, 33, 64, 65, 2000, 2001, 32_767, 32_768, 32_769, 200_000]


def _sized_text(n: int) -> str:
    return "x" * n


texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from(FTS5),
    st.sampled_from(HUGE).map(_sized_text),
    st.just("user"), st.just("project:mnemosync"), st.just("fact"),
)


ids = st.one_of(st.uuids().map(str), texts)


floats = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64),
                   st.sampled_from([0.0, 0.5, 1.0, -0.0, -1.0, 1e308, math.nan, math.inf]))


components = st.one_of(st.floats(width=32, allow_nan=False, allow_infinity=False),
                       st.sampled_from([math.nan, math.inf, -math.inf]))


vectors = st.one_of(
    st.just([]),
    st.builds(fake_vector, st.text(max_size=10)),
    st.lists(components, max_size=40),
    st.builds(lambda v, i, x: v[:i] + [x] + v[i + 1:], st.builds(fake_vector, st.text(max_size=5)),
              st.integers(0, 15), st.sampled_from([math.nan, math.inf, -math.inf, 2.0**59, -(2.0**59), 3.4e38, 1e-30])),
    st.integers(4097, 5000).map(lambda n: [0.01] * n),
)


models = st.one_of(
    st.none(), st.just(TEST_MODEL),
    st.builds(pb.EmbeddingModel, name=texts, dimensions=INT32, sha256=st.one_of(texts, st.just("ab" * 32))),
)


layers = st.one_of(st.integers(0, 4), INT32)


tag_lists = st.lists(texts, max_size=40)


add_ops = st.builds(pb.AddOp, scope=texts, type=texts, layer=layers, tags=tag_lists, content=texts,
                    embedding=vectors, importance=st.one_of(st.none(), floats),
                    confidence=st.one_of(st.none(), floats), protected=st.booleans())


update_ops = st.builds(pb.UpdateOp, content=st.one_of(st.none(), texts), embedding=vectors,
                       type=st.one_of(st.none(), texts), replace_tags=st.booleans(), tags=tag_lists,
                       importance=st.one_of(st.none(), floats), confidence=st.one_of(st.none(), floats),
                       protected=st.one_of(st.none(), st.booleans()))


kinds = st.one_of(
    st.builds(lambda x: {"add": x}, add_ops),
    st.builds(lambda x: {"update": x}, update_ops),
    st.builds(lambda r: {"forget": pb.ForgetOp(reason=r)}, texts),
    st.just({"restore": pb.RestoreOp()}),
    st.builds(lambda t, r: {"link": pb.LinkOp(target_id=t, relation=r)}, ids, texts),
    st.builds(lambda t, r: {"unlink": pb.UnlinkOp(target_id=t, relation=r)}, ids, texts),
    st.builds(lambda layer: {"set_layer": pb.SetLayerOp(layer=layer)}, layers),
    st.builds(lambda r: {"redact": pb.RedactOp(reason=r)}, texts),
    st.just({}),
)


signatures = st.one_of(st.none(), st.builds(pb.OperationSignature, salt=st.binary(max_size=40),
                                            signature=st.binary(max_size=80)))


operations = st.builds(lambda op_id, memory_id, base, kind, signature: pb.Operation(
    op_id=op_id, memory_id=memory_id, base_version=base, signature=signature, **kind), ids, ids,
    st.one_of(st.integers(-2, 3), INT64), kinds, signatures)


append_requests = st.builds(pb.AppendRequest, operations=st.lists(operations, max_size=4), embedding_model=models)


def _bulk(n: int) -> pb.AppendRequest:
    """n valid adds: around the batch limit (500)."""
    return pb.AppendRequest(
        operations=[pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                                 add=pb.AddOp(scope="user", content=f"bulk {i}", embedding=fake_vector(str(i))))
                    for i in range(n)],
        embedding_model=TEST_MODEL)


filters = st.builds(pb.SearchFilter, scopes=st.lists(texts, max_size=3), types=st.lists(texts, max_size=3),
                    tags=st.lists(texts, max_size=3), layers=st.lists(layers, max_size=3),
                    authors=st.lists(texts, max_size=3), created_after_ms=INT64, created_before_ms=INT64,
                    include_archived=st.booleans())


search_requests = st.builds(pb.SearchRequest, query=texts, query_vector=vectors, embedding_model=models,
                            limit=st.one_of(st.integers(-1, 101), INT32), filter=st.one_of(st.none(), filters),
                            mode=st.one_of(st.integers(0, 2), INT32))


other_requests = st.one_of(
    st.builds(lambda i: ("Get", pb.GetRequest(id=i)), ids),
    st.builds(lambda s, m: ("Sync", pb.SyncRequest(since_seq=s, max_entries=m)),
              st.one_of(st.integers(-2, 5), INT64), st.one_of(st.integers(-2, 5), INT64)),
    st.builds(lambda s: ("Subscribe", pb.SubscribeRequest(since_seq=s)), st.one_of(st.integers(-2, 5), INT64)),
    st.builds(lambda s: ("Ack", pb.AckRequest(seq=s)), st.one_of(st.integers(-2, 5), INT64)),
    st.just(("Stats", pb.StatsRequest())),
)


def messages(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Any message of a type, from its descriptor: every field drawn from the extreme values above."""
    from google.protobuf.descriptor import FieldDescriptor as F
    from google.protobuf.message_factory import GetMessageClass

    scalar = {
        F.TYPE_STRING: texts, F.TYPE_BYTES: st.binary(max_size=40), F.TYPE_BOOL: st.booleans(),
        F.TYPE_INT64: st.one_of(st.integers(-2, 5), INT64), F.TYPE_INT32: st.one_of(st.integers(-2, 5), INT32),
        F.TYPE_ENUM: st.one_of(st.integers(0, 5), INT32), F.TYPE_DOUBLE: floats,
        F.TYPE_FLOAT: components,
        F.TYPE_UINT32: st.integers(0, 2**32 - 1), F.TYPE_UINT64: st.integers(0, 2**64 - 1),
    }
    message_class = GetMessageClass(descriptor)
    fields = {}
    for field in descriptor.fields:
        if field.type == F.TYPE_MESSAGE:
            if depth >= 2 or field.message_type.GetOptions().map_entry:
                continue
            value = messages(field.message_type, depth + 1)
        elif field.type in scalar:
            value = scalar[field.type]
        else:
            continue
        repeated = field.is_repeated
        fields[field.name] = st.lists(value, max_size=3) if repeated else st.one_of(st.none(), value)

    def build(values: dict):
        message = message_class()
        for name, value in values.items():
            if value is None:
                continue
            target = getattr(message, name)
            if isinstance(value, list):
                target.extend(value)
            elif hasattr(value, "SerializeToString"):
                target.CopyFrom(value)
            else:
                setattr(message, name, value)
        return message

    return st.fixed_dictionaries(fields).map(build)


any_requests = st.sampled_from(sorted(METHODS)).flatmap(
    lambda name: st.tuples(st.just(name), messages(METHODS[name][0].DESCRIPTOR)))


agent_ids = st.one_of(st.just("fuzzer"), st.just("fuzzer-2"),
                      st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=70))


@pytest.fixture(scope="module", params=STORE_KINDS)
def server(request, tmp_path_factory):
    """One server per store for the whole module (the fuzzing is the bad-input half of the conformance suite)."""
    settings = ServerSettings(data_dir=tmp_path_factory.mktemp("fuzz") / "server", listen="127.0.0.1:0",
                              insecure=True, synchronous="normal")
    if request.param == "postgresql":
        settings = replace(settings, store=request.getfixturevalue("module_postgres_url"))
    with run_server(settings) as running:
        yield running


@pytest.fixture(scope="module")
def channel(server):
    with grpc.insecure_channel(server.address) as ch:
        yield ch


def _state(channel) -> tuple[int, int, int]:
    stats = pb_grpc.MemoryServiceStub(channel).Stats(pb.StatsRequest(), metadata=(("x-mnemosync-agent", "observer"),),
                                                    timeout=30)
    return stats.head_seq, stats.live_memories, stats.archived_memories


def _invoke(channel, method: str, request: bytes | object, agent_id: str = "fuzzer") -> tuple[grpc.StatusCode, str]:
    """Calls `method` with a message or raw bytes; returns the status and its details (streams are drained
    or cancelled)."""
    raw = isinstance(request, bytes)
    path = f"/mnemosync.v1.MemoryService/{method}"
    serialize = (lambda b: b) if raw else (lambda m: m.SerializeToString())
    metadata = (("x-mnemosync-agent", agent_id),)
    if not METHODS[method][1]:
        call = channel.unary_unary(path, request_serializer=serialize, response_deserializer=bytes)
        try:
            call(request, metadata=metadata, timeout=60)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as exc:
            return exc.code(), exc.details()
    call = channel.unary_stream(path, request_serializer=serialize, response_deserializer=bytes)(
        request, metadata=metadata, timeout=60)
    if method in LONG_LIVED:  # never ends by itself: wait for the server's headers (sent once accepted)
        call.initial_metadata()
        call.cancel()
        code = call.code()
        return (grpc.StatusCode.OK, "") if code == grpc.StatusCode.CANCELLED else (code, call.details())
    try:
        for _ in call:
            pass
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details()


def _check(channel, method: str, request, agent_id: str = "fuzzer") -> grpc.StatusCode:
    before = _state(channel)
    code, details = _invoke(channel, method, request, agent_id)
    after = _state(channel)  # also proves the server is still up
    assert code == grpc.StatusCode.OK or code in REFUSALS, f"{method} answered {code.name}: {details}"
    if code != grpc.StatusCode.OK or method != "Append":
        assert after == before, f"refused or read-only {method} changed the state: {before} -> {after}"
    return code


@FUZZ
@given(request=append_requests, bulk=st.one_of(st.none(), st.integers(499, 502)), agent_id=agent_ids)
def test_no_append_crashes_the_server_and_a_refused_one_writes_nothing(channel, request, bulk, agent_id):
    _check(channel, "Append", _bulk(bulk) if bulk else request, agent_id)


@FUZZ
@given(request=search_requests)
def test_no_search_crashes_the_server_whatever_the_query_vector_filter_or_mode(channel, request):
    _check(channel, "Search", request)


@FUZZ
@given(call=other_requests, agent_id=agent_ids)
def test_get_sync_subscribe_ack_and_stats_refuse_extreme_values_precisely(channel, call, agent_id):
    method, request = call
    _check(channel, method, request, agent_id)


@FUZZ
@given(call=any_requests, agent_id=agent_ids)
def test_every_rpc_survives_any_value_in_any_field(channel, call, agent_id):
    method, request = call
    _check(channel, method, request, agent_id)


@FUZZ
@given(method=st.sampled_from(sorted(METHODS)), data=st.binary(max_size=300))
def test_random_bytes_sent_to_any_method_are_refused_not_crashed(channel, method, data):
    _check(channel, method, data)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _nested_string(path: tuple[int, ...], payload: bytes) -> bytes:
    """A serialized message with `payload` as the string at `path` (field numbers, outermost first)."""
    data = payload
    for number in reversed(path):
        data = _varint(number << 3 | 2) + _varint(len(data)) + data
    return data


STRING_FIELDS = [  # (method, field-number path to a string field)
    ("Append", (1, 1)), ("Append", (1, 2)), ("Append", (1, 10, 1)), ("Append", (1, 10, 5)),
    ("Append", (1, 10, 4)), ("Append", (1, 11, 1)), ("Append", (1, 14, 1)), ("Append", (2, 1)),
    ("Get", (1,)), ("Search", (1,)), ("Search", (5, 1)), ("Search", (5, 3)), ("Search", (5, 5)),
    ("Search", (3, 3)),
]


invalid_utf8 = st.one_of(
    st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"ok\x80"]),
    st.binary(min_size=1, max_size=20).filter(lambda b: _not_utf8(b)),
)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@FUZZ
@given(field=st.sampled_from(STRING_FIELDS), payload=invalid_utf8)
def test_invalid_utf8_in_any_string_field_is_invalid_argument(channel, field, payload):
    method, path = field
    assert _check(channel, method, _nested_string(path, payload)) == grpc.StatusCode.INVALID_ARGUMENT


def test_a_message_over_the_size_limit_is_resource_exhausted_and_writes_nothing(channel):
    op = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                      add=pb.AddOp(scope="user", content="x" * (33 * 1024 * 1024), embedding=fake_vector("x")))
    assert _check(channel, "Append", pb.AppendRequest(operations=[op], embedding_model=TEST_MODEL)) \
        == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_after_all_that_the_changelog_verifies_and_rebuilds_to_the_same_state(server):
    report = server.store.log.verify()
    assert report.ok, report.problem
    assert report.head_seq > 0  # some fuzzed writes were valid, so the deep paths ran too
    before = snapshot(server.store)
    maintenance.rebuild(server.store)
    assert snapshot(server.store) == before


@pytest.mark.parametrize("method", ["Append", "Search"])
def test_a_vector_whose_length_overflows_float32_is_refused_precisely(channel, method):
    vector = fake_vector("huge")
    vector[0] = 3.4e38
    if method == "Append":
        op = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()),
                          add=pb.AddOp(scope="user", content="huge", embedding=vector))
        request = pb.AppendRequest(operations=[op], embedding_model=TEST_MODEL)
    else:
        request = pb.SearchRequest(query="huge", query_vector=vector, embedding_model=TEST_MODEL)
    assert _check(channel, method, request) == grpc.StatusCode.INVALID_ARGUMENT
