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

Schema version 3 makes entries redactable. The encoding no longer holds the
payload but `payload_commit`, SHA-256 over a random salt and the canonical
payload, and the embedding's digest is stored beside it. A redaction
(`server.redaction`) can then replace an entry's text and drop its embedding
and salt while its hash still verifies; the salt keeps the commitment from
revealing a short secret to anyone who guesses it. The append-only trigger
lets exactly that change through and nothing else. Entries written before
version 3 keep the old encoding and cannot be redacted.

An entry may also carry its writer's Ed25519 signature over `signing_bytes()`
(`server.signatures`); signature and key are covered by the hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
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

SCHEMA_V3 = """
ALTER TABLE changelog ADD COLUMN payload_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN payload_salt TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN embedding_sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN redacted_by INTEGER NOT NULL DEFAULT 0;
ALTER TABLE changelog ADD COLUMN signature BLOB;
ALTER TABLE changelog ADD COLUMN signer_key TEXT NOT NULL DEFAULT '';
DROP TRIGGER changelog_no_update;
CREATE TRIGGER changelog_no_update BEFORE UPDATE ON changelog
WHEN NOT (
    OLD.redacted_by = 0 AND OLD.payload_commit != '' AND NEW.redacted_by > OLD.seq
    AND EXISTS (SELECT 1 FROM changelog WHERE seq = NEW.redacted_by AND op = 'redact')
    AND NEW.payload_salt = '' AND (NEW.embedding IS NULL OR NEW.embedding IS OLD.embedding)
    AND NEW.request_hash = ''
    AND NEW.seq = OLD.seq AND NEW.op_id = OLD.op_id AND NEW.agent_id = OLD.agent_id
    AND NEW.memory_id = OLD.memory_id AND NEW.op = OLD.op AND NEW.base_version = OLD.base_version
    AND NEW.version = OLD.version AND NEW.embedding_model = OLD.embedding_model
    AND NEW.server_time_ms = OLD.server_time_ms AND NEW.prev_hash = OLD.prev_hash AND NEW.hash = OLD.hash
    AND NEW.authority = OLD.authority AND NEW.conflict = OLD.conflict
    AND NEW.payload_commit = OLD.payload_commit AND NEW.embedding_sha256 = OLD.embedding_sha256
    AND NEW.signature IS OLD.signature AND NEW.signer_key = OLD.signer_key
)
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only (only a redaction may blank an entry''s text)'); END;
"""
"""Schema version 3: salted payload commitments, redaction, signatures (see the module docstring)."""

REDACTED_TEXT = "[redacted]"
"""What a redaction leaves in place of every text it removes."""

TEXT_FIELDS = ("content", "quote", "reason", "note", "merged_content")
"""Payload fields that hold free text (what a redaction can blank)."""

_COLUMNS = (
    "seq, op_id, agent_id, memory_id, op, base_version, version, payload, embedding, "
    "embedding_model, server_time_ms, prev_hash, hash, authority, conflict, payload_commit, payload_salt, "
    "embedding_sha256, redacted_by, signature, signer_key"
)


@dataclass(frozen=True)
class Entry:
    """One changelog entry, as stored and as replicated to caches.

    Attributes:
        authority: The writer's authority (1 human … 6 automated; 0 before it was recorded).
        conflict: The conflict this entry opened or joined, as the server decided it:
            `{"id": seq, "kind": "write"}` or `{"id": seq, "kind": "semantic",
            "with": memory_id, "similarity": float}`; None otherwise.
        withheld: Received in place of an entry of a scope this agent is not
            granted: only seq, prev_hash, hash and server_time_ms are real.
        payload_commit: SHA-256(salt || canonical payload), hex ("" before schema version 3).
        payload_salt: The commitment's salt, hex ("" once redacted).
        embedding_sha256: SHA-256 of the embedding bytes, hex (schema version 3; "" without one).
        redacted_by: The seq of the redact entry that blanked this one (0: intact).
        signature: The writer's Ed25519 signature over `signing_bytes()`, or None.
        signer_key: The writer's Ed25519 public key, hex ("" when unsigned).
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
    withheld: bool = False
    payload_commit: str = ""
    payload_salt: str = ""
    embedding_sha256: str = ""
    redacted_by: int = 0
    signature: bytes | None = None
    signer_key: str = ""

    @property
    def effective_authority(self) -> int:
        """The writer's authority, counting unrecorded (0) as LEGACY_AUTHORITY."""
        return self.authority or LEGACY_AUTHORITY

    def canonical_bytes(self) -> bytes:
        """The bytes the hash covers: every field but `hash` itself (see the module docstring)."""
        doc: dict[str, Any] = {
            "seq": self.seq,
            "op_id": self.op_id,
            "agent_id": self.agent_id,
            "memory_id": self.memory_id,
            "op": self.op,
            "base_version": self.base_version,
            "version": self.version,
            "embedding_model": self.embedding_model,
            "server_time_ms": self.server_time_ms,
            "prev_hash": self.prev_hash,
        }
        if self.payload_commit:
            doc["payload_commit"] = self.payload_commit
            doc["embedding_sha256"] = self.embedding_sha256
        else:
            doc["payload"] = self.payload
            doc["embedding_sha256"] = embedding_digest(self.embedding)
        if self.authority:
            doc["authority"] = self.authority
        if self.conflict:
            doc["conflict"] = self.conflict
        if self.signature:
            doc["signature"] = self.signature.hex()
            doc["signer_key"] = self.signer_key
        return canonical_json(doc).encode()

    def computed_hash(self) -> str:
        """SHA-256 of `canonical_bytes()`, lower-case hex."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    def signing_bytes(self) -> bytes:
        """What the writer signs: who, which operation, and the commitments to its payload and embedding."""
        return signing_document(self.agent_id, self.op_id, self.memory_id, self.op, self.base_version,
                                self.payload_commit, self.embedding_sha256)

    def problem(self) -> str:
        """Why this entry does not verify, or "" when it does.

        Checks the hash, and for schema-version-3 entries that the payload and
        embedding match their commitments (a redacted entry can no longer be
        checked against them: its hash still covers the commitments).
        """
        if self.computed_hash() != self.hash:
            return f"entry {self.seq} was changed after it was written"
        if not self.payload_commit or self.redacted_by:
            return ""
        if commit_payload(self.payload, self.payload_salt) != self.payload_commit:
            return f"entry {self.seq}'s payload does not match its commitment"
        if embedding_digest(self.embedding) != self.embedding_sha256:
            return f"entry {self.seq}'s embedding does not match its digest"
        return ""


def embedding_digest(embedding: bytes | None) -> str:
    """SHA-256 of the embedding bytes, lower-case hex ("" for none)."""
    return hashlib.sha256(embedding).hexdigest() if embedding else ""


def commit_payload(payload: dict[str, Any], salt_hex: str) -> str:
    """SHA-256(salt || canonical payload JSON), lower-case hex."""
    return hashlib.sha256(bytes.fromhex(salt_hex) + canonical_json(payload).encode()).hexdigest()


def signing_document(agent_id: str, op_id: str, memory_id: str, op: str, base_version: int,
                     payload_commit: str, embedding_sha256: str) -> bytes:
    """The canonical bytes an agent signs for one operation (see memory.proto, "Signatures")."""
    return canonical_json({
        "agent_id": agent_id, "op_id": op_id, "memory_id": memory_id, "op": op, "base_version": base_version,
        "payload_commit": payload_commit, "embedding_sha256": embedding_sha256,
    }).encode()


def scrub_payload(payload: dict[str, Any], fields: tuple[str, ...] = TEXT_FIELDS) -> dict[str, Any]:
    """The payload with every non-empty text in `fields` replaced by REDACTED_TEXT."""
    return {k: (REDACTED_TEXT if k in fields and isinstance(v, str) and v else v) for k, v in payload.items()}


def scrub_state(state: dict[str, Any]) -> dict[str, Any]:
    """A memory state (`server.revisions.STATE_FIELDS`) with its content, and quote when set, redacted."""
    return {**state, "content": REDACTED_TEXT, "quote": REDACTED_TEXT if state.get("quote") else ""}


def withheld(e: Entry) -> Entry:
    """What an agent not granted an entry's scope receives in its place: only the chain links."""
    return Entry(seq=e.seq, op_id="", agent_id="", memory_id="", op="", base_version=0, version=0, payload={},
                 embedding=None, embedding_model="", server_time_ms=e.server_time_ms, prev_hash=e.prev_hash,
                 hash=e.hash, withheld=True)


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
        "conflict, payload_commit, payload_salt, embedding_sha256, signature, signer_key) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
            entry.payload_commit,
            entry.payload_salt,
            entry.embedding_sha256,
            entry.signature,
            entry.signer_key,
        ),
    )


def blank(conn, entry: Entry, redact_seq: int, fields: tuple[str, ...], *, drop_embedding: bool) -> None:
    """Replaces an entry's texts in `fields` by REDACTED_TEXT, drops its salt and request hash (and, with
    `drop_embedding`, its embedding), recording `redact_seq` (the redact entry, already written in this
    transaction). The hash, the commitments and the signature stay, so the chain still verifies."""
    conn.execute(
        "UPDATE changelog SET payload = ?, embedding = CASE WHEN ? THEN NULL ELSE embedding END, "
        "payload_salt = '', request_hash = '', redacted_by = ? WHERE seq = ?",
        (canonical_json(scrub_payload(entry.payload, fields)), int(drop_embedding), redact_seq, entry.seq),
    )


def get(conn, seq: int) -> Entry | None:
    """The entry at `seq`, or None."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM changelog WHERE seq = ?", (seq,)).fetchone()
    return _entry(row) if row else None


def for_memory(conn, memory_id: str, before_seq: int) -> list[Entry]:
    """The entries that changed `memory_id` before `before_seq`, in seq order (redactions excepted)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM changelog WHERE memory_id = ? AND seq < ? AND op != 'redact' ORDER BY seq",
        (memory_id, before_seq),
    ).fetchall()
    return [_entry(row) for row in rows]


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
        payload_commit=row[15],
        payload_salt=row[16],
        embedding_sha256=row[17],
        redacted_by=row[18],
        signature=row[19],
        signer_key=row[20],
    )


@dataclass(frozen=True)
class ChainReport:
    """The outcome of walking the hash chain."""

    entries: int
    head_seq: int
    head_hash: str
    first_bad_seq: int | None = None
    problem: str = ""
    signed: int = 0
    redacted: int = 0

    @property
    def ok(self) -> bool:
        """True when every entry verified."""
        return self.first_bad_seq is None


def verify_chain(conn, check: Callable[[Entry], str] | None = None) -> ChainReport:
    """Walks the whole changelog and reports the first entry that does not verify.

    Detects a changed entry (its hash, payload commitment or embedding digest no
    longer match), a removed or reordered entry (a seq gap, or a prev_hash that
    is not the previous entry's hash), and an entry blanked without a redaction.

    Args:
        check: Further per-entry check (for example signatures); returns a problem or "".
    """
    expected_seq, prev_hash, count, signed, redacted = 1, GENESIS_HASH, 0, 0, 0
    for entry in iterate(conn):
        if entry.seq != expected_seq:
            return ChainReport(count, expected_seq - 1, prev_hash, expected_seq,
                               f"entry {expected_seq} is missing (next is {entry.seq})")
        if entry.prev_hash != prev_hash:
            return ChainReport(count, entry.seq - 1, prev_hash, entry.seq,
                               f"entry {entry.seq} does not follow entry {entry.seq - 1}")
        problem = entry.problem() or _redaction_problem(conn, entry) or (check(entry) if check else "")
        if problem:
            return ChainReport(count, entry.seq - 1, prev_hash, entry.seq, problem)
        prev_hash, expected_seq, count = entry.hash, expected_seq + 1, count + 1
        signed, redacted = signed + bool(entry.signature), redacted + bool(entry.redacted_by)
    return ChainReport(count, expected_seq - 1, prev_hash, signed=signed, redacted=redacted)


def _redaction_problem(conn, entry: Entry) -> str:
    """A blanked entry must name a later redact entry of its memory (or of a memory its resolution wrote to)."""
    if not entry.redacted_by:
        return ""
    row = conn.execute("SELECT op FROM changelog WHERE seq = ?", (entry.redacted_by,)).fetchone()
    if row is None or row[0] != "redact" or entry.redacted_by <= entry.seq:
        return (f"entry {entry.seq} was blanked without a redaction (it names seq {entry.redacted_by}, "
                "which is not a later redact entry)")
    return ""
