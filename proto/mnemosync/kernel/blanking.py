"""Which entries a redaction blanks, and whether an entry that claims to be blanked really was.

A redaction of memory M (`mnemosync.server.redaction` applies it on the server) blanks,
among the entries before it:

* every entry of M itself (its add, updates, forgets, links, conflict resolutions
  and earlier redactions, whose reasons go too): every text becomes REDACTED_TEXT,
  its tags are emptied and the embedding is dropped; except a resolution of M's *semantic* conflict
  that merged text into the other memory: that text is the other memory's now,
  so only the note goes and the embedding stays;
* every resolution of a semantic conflict whose other memory is M (its merged
  text went into M): every text and the embedding.

`covers` states this rule and is the only statement of it: the server plans a
redaction with it and every checker judges a blanked entry by it. A blanked entry
(`Entry.redacted_by` set) is genuine only if the entry it names is a later redact
entry whose rule covers it and, for redactions since schema version 4, whose
`blanked` list holds this entry with the SHA-256 of exactly this payload and the
embedding's fate. Anything else is tamper (`problem`), found by `mnemosync verify`,
`mnemosync rebuild`, the server at start-up, and every agent before it applies
the entry. Blanked entries from redactions before version 4 have no such record:
their texts must be the redacted form, but their other fields cannot be proven.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from mnemosync.kernel.entry import (
    BLANKED_FIELDS,
    REDACTED_TEXT,
    TEXT_FIELDS,
    BlankedEntry,
    Entry,
    canonical_json,
    embedding_digest,
    scrub_payload,
)

ConflictKind = Callable[[int], tuple[str, str] | None]
"""conflict_of(conflict_id): (kind, other memory id) of the conflict opened at that seq, or None if unknown."""


def covers(entry: Entry, memory_id: str, conflict_of: ConflictKind) -> tuple[tuple[str, ...], bool] | None:
    """What a redaction of `memory_id` does to an earlier `entry`: (text fields blanked, embedding dropped),
    or None when the rule does not reach it (see the module docstring)."""
    semantic_other = None
    if entry.op == "resolve_conflict":
        kind = conflict_of(entry.payload.get("conflict_id", 0))
        if kind is not None and kind[0] == "semantic":
            semantic_other = kind[1]
    if entry.memory_id == memory_id:
        if semantic_other is not None and "merged_content" in entry.payload:
            return ("note",), False
        return BLANKED_FIELDS, True
    if semantic_other == memory_id:
        return BLANKED_FIELDS, True
    return None


def payload_digest(payload: dict[str, Any]) -> str:
    """SHA-256 of a payload's canonical JSON, lower-case hex (what `BlankedEntry.payload_sha256` records)."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def record(entry: Entry, fields: tuple[str, ...], drop_embedding: bool) -> BlankedEntry:
    """What blanking `fields` of `entry` (and its embedding, with `drop_embedding`) leaves, for the redact entry."""
    return BlankedEntry(entry.seq, payload_digest(scrub_payload(entry.payload, fields)), drop_embedding)


def problem(entry: Entry, redaction: Entry | None, conflict_of: ConflictKind) -> str:
    """Why `entry`'s blanking is not genuine, or "" when it is (or it is not blanked).

    Args:
        entry: The entry as stored or received.
        redaction: The entry at `entry.redacted_by` (None when there is none).
        conflict_of: The conflicts of the log, for the rule's semantic case.
    """
    if not entry.redacted_by:
        return ""
    seq, by = entry.seq, entry.redacted_by
    if redaction is None or redaction.seq != by or redaction.op != "redact" or by <= seq:
        return f"entry {seq} was blanked without a redaction (it names seq {by}, which is not a later redact entry)"
    covered = covers(entry, redaction.memory_id, conflict_of)
    if covered is None:
        return (f"entry {seq} (memory {entry.memory_id}) is marked as blanked by redaction {by}, which redacted "
                f"memory {redaction.memory_id} and does not cover it: a forged redaction mark")
    fields, drop = covered
    if not entry.payload_commit:
        return f"entry {seq} predates payload commitments, so no redaction can have blanked it: a forged mark"
    if entry.payload_salt:
        return f"entry {seq} is marked as blanked but still carries its salt: a forged redaction mark"
    if redaction.blanked:
        listed = next((b for b in redaction.blanked if b.seq == seq), None)
        if listed is None:
            return f"entry {seq} is marked as blanked by redaction {by}, which does not list it: a forged mark"
        if payload_digest(entry.payload) != listed.payload_sha256:
            return f"entry {seq}'s blanked payload is not what redaction {by} left: it was changed since"
        drop = listed.embedding_dropped
    else:
        texts = tuple(f for f in fields if f in TEXT_FIELDS)  # redactions before version 4 kept the tags
        if scrub_payload(entry.payload, texts) != entry.payload or any(
                entry.payload.get(f) not in (None, "", REDACTED_TEXT) for f in texts):
            return f"entry {seq}'s texts are not in the redacted form redaction {by} leaves: it was changed since"
    if drop and entry.embedding is not None:
        return f"entry {seq} still carries an embedding that redaction {by} removed"
    if not drop and embedding_digest(entry.embedding) != entry.embedding_sha256:
        return f"entry {seq}'s embedding does not match its digest"
    return ""


def listing_problem(redaction: Entry, entry_at: Callable[[int], Entry | None]) -> str:
    """Why a redact entry's `blanked` list does not match the log, or "": every entry it lists must be blanked
    by it (an entry it blanked that shows its text again was restored from elsewhere)."""
    for item in redaction.blanked:
        listed = entry_at(item.seq)
        if listed is None or listed.redacted_by != redaction.seq:
            return (f"redaction {redaction.seq} blanked entry {item.seq}, which is no longer blanked by it: "
                    "its text was put back")
    return ""
