"""A changelog entry: its fields, canonical encoding, payload commitments, and the hash chain.

Every mutation is one entry with a gap-free, increasing `seq`. Each entry's
hash is SHA-256 over a canonical encoding of the entry together with the
previous entry's hash, so changing, removing or reordering any entry breaks the
chain from that entry on (`walk_chain`).

The canonical encoding is JSON with sorted keys and no insignificant white
space; the embedding is represented by the SHA-256 of its little-endian
float32 bytes. Agents recompute it from a received `ChangelogEntry` message,
the server from its stored rows (`mnemosync.server.changelog`), with the same code here.
The writer's authority and the conflict mark (schema version 2) are part of
the encoding only when set, so entries written before them keep their hashes.

Schema version 3 makes entries redactable. The encoding no longer holds the
payload but `payload_commit`, SHA-256 over a random salt and the canonical
payload, and the embedding's digest is stored beside it. A redaction
(`mnemosync.server.redaction`) can then replace an entry's text and drop its embedding
and salt while its hash still verifies; the salt keeps the commitment from
revealing a short secret to anyone who guesses it. Entries written before
version 3 keep the old encoding and cannot be redacted.

An entry may also carry its writer's Ed25519 signature over `signing_bytes()`
(`mnemosync.kernel.signing`); signature and key are covered by the hash.

Schema version 4 makes a blanked entry provable: the redact entry records, for
every entry it blanks, the SHA-256 of the exact payload the blanking leaves and
whether the embedding goes (`blanked`, covered by the redact entry's hash), so a
payload passed off as blanked must be byte for byte what the redaction left
(`mnemosync.kernel.blanking` checks it, on the server and in every agent).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

GENESIS_HASH = "0" * 64

SYSTEM_AGENT = "mnemosync:system"
"""Who writes the server's own entries (the decay sweep, consolidation). No certificate can carry this name (agent
names are DNS-like, without ':')."""
SYSTEM_AUTHORITY = 6
"""The authority recorded on the system agent's entries: automated, the weakest (it never outranks an agent's
write)."""
LEGACY_AUTHORITY = 3
"""How entries written before authorities were recorded (authority 0) count: as the
default agent authority."""

REDACTED_TEXT = "[redacted]"
"""What a redaction leaves in place of every text it removes."""

TEXT_FIELDS = ("content", "quote", "reason", "note", "merged_content")
"""Payload fields that hold free text (what a redaction can blank)."""

LIST_FIELDS = ("tags", "steps", "preconditions", "postconditions", "sources", "paths")
"""Payload fields that are lists holding free text (tags, a procedure's three lists, the cited sources and a
verification's paths): a redaction empties the tags and blanks every text in the others, item by item (so the
blanked payload reads the same once sent: an empty list and none are one on the wire for some ops)."""

BLANKED_FIELDS = (*TEXT_FIELDS, *LIST_FIELDS)
"""What a redaction blanks of an entry it covers: every free text and every list of them
(`mnemosync.kernel.blanking`). Redactions recorded before tags (or, later, the other lists) were blanked still
verify: their `blanked` records name the exact payloads they left."""


@dataclass(frozen=True)
class BlankedEntry:
    """What a redaction left of one earlier entry (an item of the redact entry's `blanked`).

    Attributes:
        seq: The blanked entry.
        payload_sha256: SHA-256 of the canonical JSON of its payload as blanked, lower-case hex.
        embedding_dropped: Its embedding was removed (else it was kept and still matches its digest).
    """

    seq: int
    payload_sha256: str
    embedding_dropped: bool

    def to_json(self) -> dict[str, Any]:
        """The canonical form inside the redact entry's hash."""
        return {"seq": self.seq, "payload_sha256": self.payload_sha256, "embedding_dropped": self.embedding_dropped}


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
        blanked: On a redact entry (schema version 4): what it left of each entry it blanked.
        checkpoint: Received only: a signed checkpoint of the log up to this entry
            (`mnemosync.kernel.checkpoint.Checkpoint`), sent at the end of each page of a stream.
        redaction: Received only, on a blanked entry: the redact entry that blanked it, with
            the proof that it is in the log (`mnemosync.kernel.checkpoint.Attested`).
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
    blanked: tuple[BlankedEntry, ...] = ()
    checkpoint: Any = field(default=None, compare=False, repr=False)
    redaction: Any = field(default=None, compare=False, repr=False)

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
        if self.blanked:
            doc["blanked"] = [b.to_json() for b in self.blanked]
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
        return self.payload_problem()

    def payload_problem(self) -> str:
        """Why the payload or embedding does not match what the hash covers ("" when they do; see `problem`)."""
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


def commit_payload(payload: dict[str, Any], salt_hex: str, payload_json: str | None = None) -> str:
    """SHA-256(salt || canonical payload JSON), lower-case hex (`payload_json`: that JSON, when the caller has it)."""
    json_text = canonical_json(payload) if payload_json is None else payload_json
    return hashlib.sha256(bytes.fromhex(salt_hex) + json_text.encode()).hexdigest()


def signing_document(agent_id: str, op_id: str, memory_id: str, op: str, base_version: int,
                     payload_commit: str, embedding_sha256: str) -> bytes:
    """The canonical bytes an agent signs for one operation (see memory.proto, "Signatures")."""
    return canonical_json({
        "agent_id": agent_id, "op_id": op_id, "memory_id": memory_id, "op": op, "base_version": base_version,
        "payload_commit": payload_commit, "embedding_sha256": embedding_sha256,
    }).encode()


def scrub_payload(payload: dict[str, Any], fields: tuple[str, ...] = TEXT_FIELDS) -> dict[str, Any]:
    """The payload with every non-empty text in `fields` replaced by REDACTED_TEXT, its tags emptied, and every
    text inside the other lists of `LIST_FIELDS` among them (a step, a cited path or URL) replaced too."""
    def item(x: Any) -> Any:
        if isinstance(x, str):
            return REDACTED_TEXT
        if isinstance(x, dict):
            return {k: REDACTED_TEXT if isinstance(v, str) and v else v for k, v in x.items()}
        return x

    def scrubbed(k: str, v: Any) -> Any:
        if k not in fields or not v:
            return v
        if isinstance(v, str):
            return REDACTED_TEXT
        if k in LIST_FIELDS and isinstance(v, list):
            return [] if k == "tags" else [item(x) for x in v]
        return v
    return {k: scrubbed(k, v) for k, v in payload.items()}


def scrub_state(state: dict[str, Any]) -> dict[str, Any]:
    """A memory state (`mnemosync.kernel.revisions.STATE_FIELDS`) with its content, and quote when set, redacted
    and its tags emptied."""
    return {**state, "content": REDACTED_TEXT, "quote": REDACTED_TEXT if state.get("quote") else "", "tags": []}


def withheld(e: Entry) -> Entry:
    """What an agent not granted an entry's scope receives in its place: only the chain links."""
    return Entry(seq=e.seq, op_id="", agent_id="", memory_id="", op="", base_version=0, version=0, payload={},
                 embedding=None, embedding_model="", server_time_ms=e.server_time_ms, prev_hash=e.prev_hash,
                 hash=e.hash, withheld=True)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, compact separators and non-ASCII kept as is."""
    return _CANONICAL.encode(value)


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""What `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` builds on every call (the
same encoder, so the same bytes), made once: every entry is hashed with it twice."""


MAX_PROBLEMS = 100
"""How many problems a chain walk lists (it counts them all)."""


@dataclass(frozen=True)
class ChainReport:
    """The outcome of walking the hash chain.

    Attributes:
        entries: Entries whose links verified (up to the first break in the chain, if any).
        head_seq: The last of them.
        head_hash: Its hash.
        problems: (seq, what is wrong), oldest first, at most MAX_PROBLEMS of them.
        problem_count: Every problem found (also those not listed).
        signed: Signed entries among `entries`.
        redacted: Blanked entries among `entries`.
        stopped: The chain itself broke (the last problem): nothing after it was walked.
    """

    entries: int
    head_seq: int
    head_hash: str
    problems: tuple[tuple[int, str], ...] = ()
    problem_count: int = 0
    signed: int = 0
    redacted: int = 0
    stopped: bool = False

    @property
    def ok(self) -> bool:
        """True when every entry verified."""
        return not self.problem_count

    @property
    def first_bad_seq(self) -> int | None:
        """The seq of the first entry that failed, or None."""
        return self.problems[0][0] if self.problems else None

    @property
    def problem(self) -> str:
        """What is wrong with the first entry that failed ("" when none did)."""
        return self.problems[0][1] if self.problems else ""


def walk_chain(entries: Iterable[Entry], check: Callable[[Entry], str] | None = None,
               progress: Callable[[int], None] | None = None, *,
               after: tuple[int, str] = (0, GENESIS_HASH)) -> ChainReport:
    """Walks a whole changelog, oldest first, and reports every entry that does not verify.

    A removed or reordered entry (a seq gap, or a prev_hash that is not the
    previous entry's hash) or one whose hash no longer matches breaks the chain:
    the walk stops there, since nothing after it can be trusted. Anything else
    (a payload that does not match its commitment, `check`'s findings such as
    signatures and blanked entries) is listed and the walk goes on.

    Args:
        entries: Every entry, in seq order.
        check: Further per-entry check; returns a problem or "".
        progress: Called with the number of entries walked, every 10 000.
        after: (seq, hash) of the entry the walk continues from, already verified (the start-up check's mark,
            `mnemosync.server.boot_check`); `entries` then begin after it.
    """
    expected_seq, prev_hash, count, signed, redacted = after[0] + 1, after[1], 0, 0, 0
    problems: list[tuple[int, str]] = []
    total, stopped = 0, False

    def found(seq: int, problem: str) -> None:
        nonlocal total
        total += 1
        if len(problems) < MAX_PROBLEMS:
            problems.append((seq, problem))

    for entry in entries:
        at, broke = entry.seq, ""
        if entry.seq != expected_seq:
            at, broke = expected_seq, f"entry {expected_seq} is missing (next is {entry.seq})"
        elif entry.prev_hash != prev_hash:
            broke = f"entry {entry.seq} does not follow entry {entry.seq - 1}"
        elif entry.computed_hash() != entry.hash:
            broke = entry.problem()
        if broke:
            found(at, broke)
            stopped = True
            break
        for problem in (entry.payload_problem(), check(entry) if check else ""):
            if problem:
                found(entry.seq, problem)
        prev_hash, expected_seq, count = entry.hash, expected_seq + 1, count + 1
        signed, redacted = signed + bool(entry.signature), redacted + bool(entry.redacted_by)
        if progress and count % 10_000 == 0:
            progress(count)
    return ChainReport(count, expected_seq - 1, prev_hash, tuple(problems), total, signed, redacted, stopped)
