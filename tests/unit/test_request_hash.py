"""An Append's operation is encoded to canonical JSON once on the request thread, for its payload commitment and its
request hash alike: both must be the bytes the full documents give (a replay is matched by the hash, a verify
recomputes the commitment)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from mnemosync.kernel import signing
from mnemosync.kernel.entry import canonical_json, commit_payload
from mnemosync.kernel.operations import ValidOp
from mnemosync.server.identity import Caller
from mnemosync.server.writes import Writes, _request_hash

_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TEXT,
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                       max_leaves=8)
_OPS = st.builds(ValidOp, op_id=_TEXT, memory_id=_TEXT, op=st.sampled_from(["add", "update", "redact", "link"]),
                 base_version=st.integers(0, 9), payload=st.dictionaries(_TEXT, _VALUES, max_size=5),
                 embedding=st.one_of(st.none(), st.binary(min_size=4, max_size=8)))


def _whole_request_hash(op: ValidOp, embedding_sha256: str) -> str:
    """The request hash as the whole document gives it."""
    doc = {"memory_id": op.memory_id, "op": op.op, "base_version": op.base_version, "payload": op.payload,
           "embedding": embedding_sha256}
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


@given(op=_OPS, digest=st.sampled_from(["", "ab" * 32]))
def test_the_request_hash_from_the_payloads_json_is_the_whole_documents(op, digest):
    assert _request_hash(op, digest, canonical_json(op.payload)) == _whole_request_hash(op, digest)
    assert _request_hash(op, digest) == _whole_request_hash(op, digest)


@given(op=_OPS)
def test_a_sealed_operation_commits_to_its_payload_and_hashes_the_request_as_made_from_scratch(op):
    sealed, seal, request_hash = Writes._sealed(Caller("agent-a"), op)
    assert sealed is op
    assert seal.payload_commit == commit_payload(op.payload, seal.payload_salt)
    assert request_hash == _whole_request_hash(op, seal.embedding_sha256)


def test_a_seal_made_from_the_payloads_json_is_the_seal_made_without_it():
    op = ValidOp("id", "m", "add", 0, {"content": "é ü", "tags": ["b", "a"], "n": 1.5}, None, salt=b"\x01" * 16)
    assert signing.seal("a", "", op, canonical_json(op.payload)) == signing.seal("a", "", op)
