"""`mnemosync.kernel.merkle`: RFC 6962 tree heads, inclusion and consistency proofs, and the agent's frontier,
checked against the RFC's recursive definition."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemosync.kernel import merkle


def _leaves(n: int) -> list[bytes]:
    return [merkle.leaf_hash(hashlib.sha256(str(i).encode()).hexdigest()) for i in range(n)]


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962's MTH, written as the RFC states it."""
    if not leaves:
        return merkle.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return merkle.node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


def _nodes(leaves: list[bytes]) -> merkle.NodeSource:
    """A node source over complete subtrees, as the server's table holds them."""
    stored: dict[tuple[int, int], bytes] = {}
    frontier = merkle.Frontier()
    for leaf in leaves:
        for level, index, h in frontier.append(leaf):
            stored[(level, index)] = h
    return lambda level, index: stored[(level, index)]


@given(st.integers(0, 300))
def test_the_root_from_stored_subtrees_and_from_the_frontier_is_the_rfc_tree_head(n):
    leaves = _leaves(n)
    frontier = merkle.Frontier()
    for leaf in leaves:
        frontier.append(leaf)
    assert merkle.root(_nodes(leaves), n) == frontier.root() == _mth(leaves)
    assert merkle.Frontier.from_text(frontier.to_text()).root() == frontier.root()


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_an_inclusion_proof_verifies_for_its_leaf_and_for_no_other(case):
    n, index = case
    leaves = _leaves(n)
    node, head = _nodes(leaves), _mth(leaves)
    path = merkle.inclusion_proof(node, index, n)
    assert merkle.verify_inclusion(leaves[index], index, n, path, head)
    assert not merkle.verify_inclusion(merkle.leaf_hash("00" * 32), index, n, path, head)
    if n > 1:
        assert not merkle.verify_inclusion(leaves[index], (index + 1) % n, n, path, head)


@given(st.integers(1, 200).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_a_consistency_proof_verifies_between_prefixes_and_fails_when_an_old_leaf_changed(case):
    old, new = case
    leaves = _leaves(new)
    proof = merkle.consistency_proof(_nodes(leaves), old, new)
    assert merkle.verify_consistency(old, _mth(leaves[:old]), new, _mth(leaves), proof)
    if old:
        rewritten = list(leaves)
        rewritten[old - 1] = merkle.leaf_hash("11" * 32)
        forged = merkle.consistency_proof(_nodes(rewritten), old, new)
        assert not merkle.verify_consistency(old, _mth(leaves[:old]), new, _mth(rewritten), forged)


def test_proofs_outside_the_tree_are_refused():
    node = _nodes(_leaves(4))
    with pytest.raises(ValueError):
        merkle.inclusion_proof(node, 4, 4)
    with pytest.raises(ValueError):
        merkle.consistency_proof(node, 5, 4)
    assert not merkle.verify_consistency(3, b"x", 2, b"y", [])
