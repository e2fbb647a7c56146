"""The Merkle tree over the changelog, as certificate-transparency logs build it (RFC 6962 / RFC 9162, section 2.1).

Leaf `i` (0-based) is changelog entry `i + 1`; its leaf hash is
SHA-256(0x00 || entry hash bytes), an inner node is SHA-256(0x01 || left || right),
and the tree of `n` leaves splits at the largest power of two smaller than `n`.
A tree head (size, root) commits to every entry up to `size`, so:

* an **inclusion proof** (audit path) shows that one entry is in a tree of a given size;
* a **consistency proof** shows that a tree of size `m` is a prefix of a tree of size `n`,
  i.e. that none of the first `m` entries changed between the two heads.

Both are O(log n) hashes. The server answers them from the hashes of complete,
aligned subtrees (`NodeSource`: `mnemosync.server.merkle_log` keeps them in SQLite); every
subtree a proof needs is either such a node or splits into O(log n) of them.
An agent keeps only its `Frontier` (the roots of the complete subtrees of what it
has applied, at most log2(n) hashes), which gives it the root of its own prefix.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

NodeSource = Callable[[int, int], bytes]
"""node(level, index): the root of the complete subtree over leaves [index * 2**level, (index + 1) * 2**level)."""

EMPTY_ROOT = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 9162: the hash of the empty string)."""


def leaf_hash(entry_hash_hex: str) -> bytes:
    """The leaf hash of a changelog entry, from its hash (lower-case hex)."""
    return hashlib.sha256(b"\x00" + bytes.fromhex(entry_hash_hex)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """An inner node's hash."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


def subtree(node: NodeSource, lo: int, hi: int) -> bytes:
    """The root over leaves [lo, hi) (hi > lo), for the ranges RFC 6962's recursion produces (lo aligned)."""
    n = hi - lo
    if n & (n - 1) == 0 and lo % n == 0:
        return node(n.bit_length() - 1, lo // n)
    k = _split(n)
    return node_hash(subtree(node, lo, lo + k), subtree(node, lo + k, hi))


def root(node: NodeSource, size: int) -> bytes:
    """The root of the tree of the first `size` leaves."""
    return subtree(node, 0, size) if size else EMPTY_ROOT


def inclusion_proof(node: NodeSource, index: int, size: int) -> list[bytes]:
    """The audit path of leaf `index` in the tree of `size` leaves (RFC 6962 PATH), leaf side first."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            path.append(subtree(node, lo + k, hi))
            hi = lo + k
        else:
            path.append(subtree(node, lo, lo + k))
            lo += k
    return path[::-1]


def consistency_proof(node: NodeSource, old: int, new: int) -> list[bytes]:
    """The proof that the tree of `old` leaves is a prefix of the tree of `new` leaves (RFC 6962 SUBPROOF)."""
    if not 0 <= old <= new:
        raise ValueError(f"no consistency proof from {old} leaves to {new}")
    if old in (0, new):
        return []
    proof: list[bytes] = []
    lo, hi, m, complete = 0, new, old, True
    while True:
        n = hi - lo
        if m == n:
            if not complete:
                proof.append(subtree(node, lo, hi))
            break
        k = _split(n)
        if m <= k:
            proof.append(subtree(node, lo + k, hi))
            hi = lo + k
        else:
            proof.append(subtree(node, lo, lo + k))
            lo, m, complete = lo + k, m - k, False
    return proof[::-1]


def verify_inclusion(leaf: bytes, index: int, size: int, path: Sequence[bytes], expected_root: bytes) -> bool:
    """True when `path` proves leaf hash `leaf` at `index` in the tree of `size` leaves with `expected_root`
    (RFC 9162, section 2.1.3.2)."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == expected_root


def verify_consistency(old: int, old_root: bytes, new: int, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """True when `proof` shows the tree (old, old_root) is a prefix of the tree (new, new_root)
    (RFC 9162, section 2.1.4.2; the empty tree is a prefix of every tree)."""
    if not 0 <= old <= new:
        return False
    if old == 0:
        return not proof
    if old == new:
        return not proof and old_root == new_root
    if not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == old_root and sr == new_root and sn == 0


class Frontier:
    """The roots of the complete subtrees over the first `size` leaves, largest first (a compact range).

    Appending a leaf costs one hash plus one per subtree it completes; `root()` is the
    tree head of everything appended. `completed` reports each subtree node as it is
    finished, (level, index, hash), so a store can keep them and a check can compare them.
    """

    def __init__(self, size: int = 0, hashes: Sequence[bytes] = ()):
        if len(hashes) != bin(size).count("1"):
            raise ValueError(f"a frontier of {size} leaves has {bin(size).count('1')} hashes, got {len(hashes)}")
        self.size = size
        self.hashes = list(hashes)

    def append(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        """Adds the next leaf; returns the nodes it completed, leaf first: (level, index, hash)."""
        completed = [(0, self.size, leaf)]
        node, level, index = leaf, 0, self.size
        while index & 1:
            node = node_hash(self.hashes.pop(), node)
            level, index = level + 1, index >> 1
            completed.append((level, index, node))
        self.hashes.append(node)
        self.size += 1
        return completed

    def root(self) -> bytes:
        """The root of the tree of every leaf appended so far."""
        if not self.hashes:
            return EMPTY_ROOT
        r = self.hashes[-1]
        for h in reversed(self.hashes[:-1]):
            r = node_hash(h, r)
        return r

    def to_text(self) -> str:
        """`size:hex,hex,...` (how a cache stores it)."""
        return f"{self.size}:{','.join(h.hex() for h in self.hashes)}"

    @classmethod
    def from_text(cls, text: str) -> Frontier:
        """The inverse of `to_text` ("" is the empty frontier)."""
        if not text:
            return cls()
        size, _, hashes = text.partition(":")
        return cls(int(size), [bytes.fromhex(h) for h in hashes.split(",") if h])
