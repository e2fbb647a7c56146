"""Signed checkpoints of the changelog's Merkle tree, and entries proven to be in one.

A checkpoint is a tree head (`mnemosync.kernel.merkle`) the server signs with its
Ed25519 checkpoint key: which log, how many entries, the root over them, and
when. The signed bytes are a short text, one field per line::

    mnemosync-checkpoint/v1
    <log id>
    <size>
    <root, lower-case hex>
    <time, ms since the epoch>

Agents keep the last checkpoint they accepted; a later checkpoint must come with
a consistency proof from it, so the server cannot change anything an agent has
already seen without the agent noticing (`mnemosync.agent.transparency`). An
`Attested` entry is one sent ahead of the receiver's position (the redaction that
blanked an entry) together with a checkpoint that includes it and its audit path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemosync.kernel import merkle
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.signing import public_hex, valid

FORMAT = "mnemosync-checkpoint/v1"
"""The first line of the signed text; a new format gets a new version."""


@dataclass(frozen=True)
class Checkpoint:
    """A signed tree head.

    Attributes:
        log_id: The log it belongs to (fixed when the server's database is created).
        size: Entries covered (seq 1 to size).
        root: The Merkle root over them, lower-case hex.
        time_ms: When the server signed it.
        key: The signer's Ed25519 public key, lower-case hex.
        signature: Ed25519 over `body()`.
    """

    log_id: str
    size: int
    root: str
    time_ms: int
    key: str = ""
    signature: bytes = b""

    def body(self) -> bytes:
        """The signed text (see the module docstring)."""
        return f"{FORMAT}\n{self.log_id}\n{self.size}\n{self.root}\n{self.time_ms}\n".encode()

    def signed_by(self, key_hex: str) -> bool:
        """True when `key_hex` made this checkpoint's signature."""
        return bool(self.signature) and self.key == key_hex and valid(key_hex, self.signature, self.body())

    def describe(self) -> str:
        """`size N, root abcd…` for messages."""
        return f"size {self.size}, root {self.root[:16]}…"

    def to_json(self) -> dict[str, Any]:
        """Plain data (how an agent's cache keeps the checkpoint it accepted)."""
        return {"log_id": self.log_id, "size": self.size, "root": self.root, "time_ms": self.time_ms,
                "key": self.key, "signature": self.signature.hex()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Checkpoint:
        """The inverse of `to_json`."""
        return cls(doc["log_id"], doc["size"], doc["root"], doc["time_ms"], doc["key"],
                   bytes.fromhex(doc["signature"]))


def sign(key: Ed25519PrivateKey, log_id: str, size: int, root: bytes, time_ms: int) -> Checkpoint:
    """A checkpoint of the tree (size, root), signed with `key`."""
    unsigned = Checkpoint(log_id, size, root.hex(), time_ms, public_hex(key))
    return Checkpoint(log_id, size, root.hex(), time_ms, unsigned.key, key.sign(unsigned.body()))


@dataclass(frozen=True)
class CheckpointReply:
    """The server's answer to GetCheckpoint.

    Attributes:
        checkpoint: The signed checkpoint.
        consistency: The proof that it extends the checkpoint the caller named (`mnemosync.kernel.merkle`).
        certificate: DER of the server certificate naming the checkpoint key (b"" when none does).
    """

    checkpoint: Checkpoint
    consistency: tuple[bytes, ...]
    certificate: bytes = b""
    proven: tuple[Attested, ...] = ()
    """The entries the request asked to prove, each with its audit path in `checkpoint`'s tree."""


@dataclass(frozen=True)
class Attested:
    """An entry with a signed checkpoint that includes it, and its audit path in that checkpoint's tree."""

    entry: Entry
    checkpoint: Checkpoint
    path: tuple[bytes, ...]

    def problem(self, key_hex: str | None) -> str:
        """Why this does not prove the entry is in the log, or "" when it does.

        The entry's own hash must verify, and its leaf must be in the checkpoint's
        tree; with `key_hex` (the server key the receiver trusts) the checkpoint
        must also carry that key's signature.
        """
        e, cp = self.entry, self.checkpoint
        if e.computed_hash() != e.hash:
            return f"the attached entry {e.seq} does not match its own hash"
        if key_hex is not None and not cp.signed_by(key_hex):
            return f"the checkpoint attached to entry {e.seq} is not signed by the server's checkpoint key"
        if not merkle.verify_inclusion(merkle.leaf_hash(e.hash), e.seq - 1, cp.size, self.path,
                                       bytes.fromhex(cp.root)):
            return f"entry {e.seq} is not in the log of {cp.size} entries its checkpoint signs"
        return ""
