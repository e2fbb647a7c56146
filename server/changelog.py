"""The append-only changelog: entries, their canonical encoding and hash chain.

Every mutation is one row here with a gap-free, increasing `seq`. Each entry's
hash is SHA-256 over a canonical encoding of the entry together with the
previous entry's hash, so changing, removing or reordering any row breaks the
chain from that row on (`verify_chain`).

The canonical encoding is JSON with sorted keys and no insignificant white
space; the embedding is represented by the SHA-256 of its little-endian
float32 bytes. Agents can recompute it from a `ChangelogEntry` message.
The writer's authority and the conflict mark (schema version 2) are part of
the encoding only when set, so entries written before them keep their hashes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

GENESIS_HASH = "0" * 64

OPS = ("add", "update", "forget", "restore", "link", "unlink", "set_layer", "resolve_conflict")

LEGACY_AUTHORITY = 3
"""How entries written before authorities were recorded (authority 0) count: as the
default agent authority."""

SCHEMA = """
CREATE TABLE changelog (
    seq INTEGER PRIMARY KEY,
    op_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    op TEXT NOT NULL,
    base_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT NOT NULL,
    server_time_ms INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    UNIQUE (agent_id, op_id)
);
CREATE INDEX changelog_memory ON changelog (memory_id, seq);
CREATE TRIGGER changelog_no_update BEFORE UPDATE ON changelog
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only'); END;
CREATE TRIGGER changelog_no_delete BEFORE DELETE ON changelog
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only'); END;
"""

SCHEMA_V2 = """
ALTER TABLE changelog ADD COLUMN authority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE changelog ADD COLUMN conflict TEXT NOT NULL DEFAULT '';
"""

_COLUMNS = (
    "seq, op_id, agent_id, memory_id, op, base_version, version, payload, embedding, "
    "embedding_model, server_time_ms, prev_hash, hash, authority, conflict"
)


@dataclass(frozen=True)
class Entry:
    """One changelog entry, as stored and as replicated to caches.

    Attributes:
        authority: The writer's authority (1 human … 6 automated; 0 before it was recorded).
        conflict: The conflict this entry opened or joined, as the server decided it:
            `{"id": seq, "kind": "write"}` or `{"id": seq, "kind": "semantic",
            "with": memory_id, "similarity": float}`; None otherwise.
        redacted: Received in place of an entry of a scope this agent is not
            granted: only seq, prev_hash, hash and server_time_ms are real.
    """

    seq: int
    op_id: str
    agent_id: str
    memory_id: str
    op: str
    base_version: int
    version: int
    payload: dict[str, Any]
    embedding: bytes | None
    embedding_model: str
    server_time_ms: int
    prev_hash: str
    hash: str = field(default="")
    authority: int = 0
    conflict: dict[str, Any] | None = None
    redacted: bool = False

    @property
    def effective_authority(self) -> int:
        """The writer's authority, counting unrecorded (0) as LEGACY_AUTHORITY."""
        return self.authority or LEGACY_AUTHORITY

    def canonical_bytes(self) -> bytes:
        """The bytes the hash covers: every field but `hash` itself."""
        doc = {
            "seq": self.seq,
            "op_id": self.op_id,
            "agent_id": self.agent_id,
            "memory_id": self.memory_id,
            "op": self.op,
            "base_version": self.base_version,
            "version": self.version,
            "payload": self.payload,
            "embedding_sha256": hashlib.sha256(self.embedding).hexdigest()
            if self.embedding
            else "",
            "embedding_model": self.embedding_model,
            "server_time_ms": self.server_time_ms,
            "prev_hash": self.prev_hash,
        }
        if self.authority:
            doc["authority"] = self.authority
        if self.conflict:
            doc["conflict"] = self.conflict
        return canonical_json(doc).encode()

    def computed_hash(self) -> str:
        """SHA-256 of `canonical_bytes()`, lower-case hex."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()


def redacted(e: Entry) -> Entry:
    """What an agent not granted an entry's scope receives in its place: only the chain links."""
    return Entry(seq=e.seq, op_id="", agent_id="", memory_id="", op="", base_version=0, version=0, payload={},
                 embedding=None, embedding_model="", server_time_ms=e.server_time_ms, prev_hash=e.prev_hash,
                 hash=e.hash, redacted=True)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, compact separators and non-ASCII kept as is."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def head(conn) -> tuple[int, str]:
    """The newest entry's (seq, hash), or (0, GENESIS_HASH) when empty."""
    row = conn.execute("SELECT seq, hash FROM changelog ORDER BY seq DESC LIMIT 1").fetchone()
    return (row[0], row[1]) if row else (0, GENESIS_HASH)


def insert(conn, entry: Entry, request_hash: str) -> None:
    """Writes one entry; the caller holds the write transaction."""
    conn.execute(
        "INSERT INTO changelog (seq, op_id, agent_id, memory_id, op, base_version, version, "
        "payload, embedding, embedding_model, server_time_ms, prev_hash, hash, request_hash, authority, "
        "conflict) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            entry.seq,
            entry.op_id,
            entry.agent_id,
            entry.memory_id,
            entry.op,
            entry.base_version,
            entry.version,
            canonical_json(entry.payload),
            entry.embedding,
            entry.embedding_model,
            entry.server_time_ms,
            entry.prev_hash,
            entry.hash,
            request_hash,
            entry.authority,
            canonical_json(entry.conflict) if entry.conflict else "",
        ),
    )


def find_op(conn, agent_id: str, op_id: str) -> tuple[Entry, str] | None:
    """The entry an agent wrote with `op_id`, and its request hash, if any."""
    row = conn.execute(
        f"SELECT {_COLUMNS}, request_hash FROM changelog WHERE agent_id = ? AND op_id = ?",
        (agent_id, op_id),
    ).fetchone()
    return (_entry(row[:-1]), row[-1]) if row else None


def read(conn, since_seq: int, limit: int) -> list[Entry]:
    """Up to `limit` entries with seq > since_seq, in seq order."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM changelog WHERE seq > ? ORDER BY seq LIMIT ?",
        (since_seq, limit),
    ).fetchall()
    return [_entry(row) for row in rows]


def iterate(conn, since_seq: int = 0, page: int = 1000) -> Iterator[Entry]:
    """Every entry after `since_seq`, in seq order, read page by page."""
    while True:
        entries = read(conn, since_seq, page)
        if not entries:
            return
        yield from entries
        since_seq = entries[-1].seq


def _entry(row) -> Entry:
    return Entry(
        seq=row[0],
        op_id=row[1],
        agent_id=row[2],
        memory_id=row[3],
        op=row[4],
        base_version=row[5],
        version=row[6],
        payload=json.loads(row[7]),
        embedding=row[8],
        embedding_model=row[9],
        server_time_ms=row[10],
        prev_hash=row[11],
        hash=row[12],
        authority=row[13],
        conflict=json.loads(row[14]) if row[14] else None,
    )


@dataclass(frozen=True)
class ChainReport:
    """The outcome of walking the hash chain."""

    entries: int
    head_seq: int
    head_hash: str
    first_bad_seq: int | None = None
    problem: str = ""

    @property
    def ok(self) -> bool:
        """True when every entry verified."""
        return self.first_bad_seq is None


def verify_chain(conn) -> ChainReport:
    """Walks the whole changelog and reports the first entry that does not verify.

    Detects a changed entry (its hash no longer matches its content), a removed
    or reordered entry (a seq gap, or a prev_hash that is not the previous
    entry's hash).
    """
    expected_seq, prev_hash, count = 1, GENESIS_HASH, 0
    for entry in iterate(conn):
        if entry.seq != expected_seq:
            return ChainReport(count, expected_seq - 1, prev_hash, expected_seq,
                               f"entry {expected_seq} is missing (next is {entry.seq})")
        if entry.prev_hash != prev_hash:
            return ChainReport(count, entry.seq - 1, prev_hash, entry.seq,
                               f"entry {entry.seq} does not follow entry {entry.seq - 1}")
        if entry.computed_hash() != entry.hash:
            return ChainReport(count, entry.seq - 1, prev_hash, entry.seq,
                               f"entry {entry.seq} was changed after it was written")
        prev_hash, expected_seq, count = entry.hash, expected_seq + 1, count + 1
    return ChainReport(count, expected_seq - 1, prev_hash)
