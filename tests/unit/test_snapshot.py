"""`mnemosync.kernel.snapshot`: the signed manifest binds an image to the log, and says what does not match."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemosync.kernel import merkle, snapshot
from mnemosync.kernel.signing import public_hex


def _manifest(key, size: int = 5) -> snapshot.Manifest:
    hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(1, size + 1)]
    frontier, nodes = merkle.Frontier(), {}
    for h in hashes:
        for level, index, node in frontier.append(merkle.leaf_hash(h)):
            nodes[(level, index)] = node
    path = merkle.inclusion_proof(lambda level, index: nodes[(level, index)], size - 1, size)
    sections = tuple(sorted((snapshot.Section(snapshot.scope_hash(s), hashlib.sha256(s.encode()).hexdigest(), s, 10, 1)
                             for s in ("user", "team")), key=lambda s: s.scope_hash))
    return snapshot.sign(snapshot.Manifest("log-1", size, frontier.root().hex(), hashes[-1], tuple(path),
                                           tuple(frontier.hashes), 123, sections), key)


def test_a_manifest_signed_by_the_checkpoint_key_binds_its_content_position_and_root():
    key = Ed25519PrivateKey.generate()
    made = _manifest(key)
    assert made.problem(public_hex(key)) == ""
    assert snapshot.Manifest.from_json(made.to_json()) == made
    assert "not signed by the server's checkpoint key" in made.problem(public_hex(Ed25519PrivateKey.generate()))
    assert "not signed" in replace(made, size=4).problem(public_hex(key))
    changed = replace(made, sections=(replace(made.sections[0], sha256="0" * 64), made.sections[1]))
    assert "not signed" in changed.problem(public_hex(key))


def test_a_frontier_or_last_entry_that_does_not_give_the_signed_root_is_named():
    key = Ed25519PrivateKey.generate()
    made = _manifest(key)
    bad_frontier = snapshot.sign(replace(made, frontier=(b"\0" * 32, *made.frontier[1:])), key)
    assert "Merkle frontier" in bad_frontier.problem(public_hex(key))
    bad_last = snapshot.sign(replace(made, last_hash="ab" * 32), key)
    assert f"entry {made.size} of the snapshot" in bad_last.problem(public_hex(key))


def test_a_reader_sees_other_scopes_only_by_hash_and_the_digest_still_checks():
    key = Ed25519PrivateKey.generate()
    seen = _manifest(key).for_reader(lambda scope: scope == "team")
    assert [s.scope for s in seen.served()] == ["team"]
    hidden = next(s for s in seen.sections if not s.scope)
    assert hidden.scope_hash == snapshot.scope_hash("user") and hidden.length == 0
    assert seen.problem(public_hex(key)) == ""
