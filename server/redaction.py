"""Redaction: removing a leaked secret from a memory everywhere, without breaking the hash chain.

A redaction is an admin operation on one memory (`RedactOp`). It is itself a
changelog entry (op "redact", the audit record: who, when, why), and it
does two things in the same transaction:

* **Projections** (`mnemosync.kernel.projections`, on the server and in every agent
  cache, from the entry alone): the memory's content and quote become
  `REDACTED_TEXT` in its current state, its history and its conflict
  revisions; the notes of conflicts it is part of too; its vector and keyword
  index rows go; it is archived at a new version.
* **Changelog** (server only, here): every earlier entry whose text ended up
  in that memory is blanked (`changelog.blank`): texts replaced, embedding and
  salt dropped, `redacted_by` set. Those entries were written with a salted
  payload commitment (schema version 3), so their hashes still verify and a
  cache or a rebuild that folds the blanked entries ends in the same state as
  one that saw the originals and then the redaction.

Which entries count is `mnemosync.kernel.blanking.covers`: those of the memory itself
(earlier redactions of it too, so a second redaction can remove a reason that
leaked), and resolutions whose merged content went into it. The redact entry
lists what it left of each (`Entry.blanked`), which is what makes a blanked
entry provable (`mnemosync.kernel.blanking.problem`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mnemosync.kernel import blanking, conflict_projection
from mnemosync.kernel.entry import BlankedEntry, Entry, scrub_payload
from mnemosync.kernel.errors import FailedPrecondition
from mnemosync.server import changelog


@dataclass(frozen=True)
class Blanking:
    """One earlier entry a redaction blanks: which texts, and whether its embedding goes."""

    entry: Entry
    fields: tuple[str, ...]
    drop_embedding: bool


def plan(conn, memory_id: str, redact_seq: int) -> list[Blanking]:
    """The entries a redaction of `memory_id` at `redact_seq` blanks, in seq order.

    Raises:
        FailedPrecondition: one of them predates schema version 3 (its hash
            covers the payload itself, so blanking it would break the chain).
    """
    def conflict_of(conflict_id: int) -> tuple[str, str] | None:
        found = conflict_projection.get(conn, conflict_id)
        return (found.kind, found.other_memory_id) if found is not None else None

    candidates = changelog.for_memory(conn, memory_id, redact_seq)
    candidates += [entry for (seq,) in conn.execute(
        "SELECT resolved_seq FROM conflicts WHERE other_memory_id = ? AND resolved_seq > 0 AND resolved_seq < ?",
        (memory_id, redact_seq),
    ).fetchall() if (entry := changelog.get(conn, seq)) is not None]
    planned = []
    for e in candidates:
        covered = blanking.covers(e, memory_id, conflict_of)
        if covered is not None:
            planned.append(Blanking(e, *covered))
    planned = [b for b in planned if not b.entry.redacted_by and _changes(b)]
    legacy = [b.entry.seq for b in planned if not b.entry.payload_commit]
    if legacy:
        raise FailedPrecondition(
            f"memory {memory_id} has text in changelog entries written before redaction existed (seq "
            f"{', '.join(map(str, legacy[:10]))}); their hashes cover the text itself, so it cannot be removed "
            "without breaking the hash chain"
        )
    return sorted(planned, key=lambda b: b.entry.seq)


def listing(planned: list[Blanking]) -> tuple[BlankedEntry, ...]:
    """What the redact entry records of the entries it blanks (`Entry.blanked`)."""
    return tuple(blanking.record(b.entry, b.fields, b.drop_embedding) for b in planned)


def blank(conn, planned: Sequence[Blanking], redact_seq: int) -> None:
    """Blanks the planned entries (the redact entry at `redact_seq` is already written)."""
    for b in planned:
        changelog.blank(conn, b.entry, redact_seq, b.fields, drop_embedding=b.drop_embedding)


def _changes(b: Blanking) -> bool:
    return scrub_payload(b.entry.payload, b.fields) != b.entry.payload or (
        b.drop_embedding and b.entry.embedding is not None)
