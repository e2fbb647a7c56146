"""The per-operation checks made cheaper for the write path give exactly the verdicts of their plain forms: a
vector's length check (`operations.embedding_bytes`: one unwrapped pairwise sum in float64, the input bytes
returned as they are) and an id's UUID check (`operations._uuid`: a canonical UUID taken as written)."""

from __future__ import annotations

import uuid

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mnemosync.kernel import operations
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.model_identity import ModelInfo

MODEL = ModelInfo("m", 8, "ab" * 32)


def _plain_embedding_check(values: bytes) -> str:
    """The check as it was written: np.sum of the squares, np.isfinite, np.sqrt, the packed array returned."""
    array = np.frombuffer(values, dtype="<f4")
    squares = np.sum(array.astype(np.float64) ** 2)
    if not np.isfinite(squares):
        return "NaN or infinite"
    if not squares:
        return "all zeros"
    length = float(np.sqrt(squares))
    if not operations.MIN_VECTOR_LENGTH <= length <= operations.MAX_VECTOR_LENGTH:
        return "has length"
    return array.tobytes().hex()


def _verdict(values: bytes | list[float]) -> str:
    try:
        return operations.embedding_bytes(values, MODEL, "embedding").hex()
    except InvalidArgument as exc:
        return next(k for k in ("NaN or infinite", "all zeros", "has length") if k in str(exc))


_F32 = st.floats(width=32) | st.sampled_from([0.0, -0.0, 1e-45, 3.5e-7, 1e-6 / 2.83, 3.4e38, 3.5e5, 1e6 / 2.83])


@given(st.lists(_F32, min_size=8, max_size=8))
@example([1e-6 / np.sqrt(8)] * 8)  # at the lower bound
@example([1e6 / np.sqrt(8)] * 8)  # at the upper bound
@example([0.0] * 7 + [1e-45])
@settings(max_examples=500, deadline=None)
def test_a_vector_is_refused_or_packed_exactly_as_the_plain_length_check_does(values):
    packed = np.asarray(values, dtype="<f4").tobytes()
    assert _verdict(packed) == _plain_embedding_check(packed)
    assert _verdict(bytearray(packed)) == _plain_embedding_check(packed)
    assert _verdict(np.frombuffer(packed, dtype="<f4").tolist()) == _plain_embedding_check(packed)


def _plain_uuid(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        return "refused"


def _checked_uuid(value: str) -> str:
    try:
        return operations._uuid(value, "memory_id")
    except InvalidArgument:
        return "refused"


@given(st.uuids().flatmap(lambda u: st.sampled_from([str(u), str(u).upper(), u.hex, f"{{{u}}}", f"urn:uuid:{u}",
                                                     f"{u}\n", f" {u}", str(u)[:-1], str(u) + "0"]))
       | st.text(alphabet="0123456789abcdefABCDEF-{}:", max_size=40))
@settings(max_examples=500, deadline=None)
def test_an_id_is_taken_normalised_or_refused_exactly_as_uuid_parsing_does(value):
    assert _checked_uuid(value) == _plain_uuid(value)
