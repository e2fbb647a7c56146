"""`mnemosync.kernel.blanking`: the rule of which entries a redaction blanks, and the proof a blanked entry owes."""

from __future__ import annotations

from dataclasses import replace

from mnemosync.kernel import blanking
from mnemosync.kernel.entry import BLANKED_FIELDS, REDACTED_TEXT, TEXT_FIELDS, Entry, scrub_payload


def _entry(seq: int, memory_id: str, op: str, payload: dict, **fields) -> Entry:
    return Entry(seq=seq, op_id=f"op{seq}", agent_id="alice", memory_id=memory_id, op=op, base_version=0, version=1,
                 payload=payload, embedding=None, embedding_model="", server_time_ms=seq, prev_hash="", **fields)


SEMANTIC = {7: ("semantic", "existing"), 8: ("write", "")}


def test_the_rule_covers_the_memorys_own_entries_and_resolutions_that_merged_into_it():
    add = _entry(1, "m", "add", {"content": "x"})
    merged_away = _entry(9, "new", "resolve_conflict", {"conflict_id": 7, "merged_content": "y", "note": "z"})
    kept = _entry(9, "new", "resolve_conflict", {"conflict_id": 7, "keep_revision": 1})
    write_resolution = _entry(9, "m", "resolve_conflict", {"conflict_id": 8, "merged_content": "y"})
    assert blanking.covers(add, "m", SEMANTIC.get) == (BLANKED_FIELDS, True)
    assert blanking.covers(add, "other", SEMANTIC.get) is None
    assert blanking.covers(merged_away, "new", SEMANTIC.get) == (("note",), False)  # the text is existing's now
    assert blanking.covers(merged_away, "existing", SEMANTIC.get) == (BLANKED_FIELDS, True)
    assert blanking.covers(kept, "existing", SEMANTIC.get) == (BLANKED_FIELDS, True)
    assert blanking.covers(write_resolution, "m", SEMANTIC.get) == (BLANKED_FIELDS, True)


def test_a_blanked_entry_must_be_exactly_what_its_redaction_recorded():
    original = _entry(1, "m", "add", {"content": "secret", "layer": 3}, payload_commit="c", payload_salt="s")
    blanked = replace(original, payload=scrub_payload(original.payload), payload_salt="", redacted_by=5)
    redaction = _entry(5, "m", "redact", {"reason": "leak"},
                       blanked=(blanking.record(original, TEXT_FIELDS, True),))
    assert blanking.problem(blanked, redaction, SEMANTIC.get) == ""
    moved = replace(blanked, payload={**blanked.payload, "layer": 1})
    assert blanking.problem(moved, redaction, SEMANTIC.get) == (
        "entry 1's blanked payload is not what redaction 5 left: it was changed since")
    assert "does not list it" in blanking.problem(blanked, replace(redaction, blanked=(
        blanking.record(replace(original, seq=2), TEXT_FIELDS, True),)), SEMANTIC.get)
    assert "still carries its salt" in blanking.problem(replace(blanked, payload_salt="s"), redaction, SEMANTIC.get)
    assert "not a later redact entry" in blanking.problem(blanked, replace(redaction, op="forget"), SEMANTIC.get)


def test_blanked_entries_of_redactions_before_the_record_must_at_least_read_redacted():
    original = _entry(1, "m", "add", {"content": "secret", "quote": ""}, payload_commit="c")
    redaction = _entry(5, "m", "redact", {"reason": "leak"})
    genuine = replace(original, payload={"content": REDACTED_TEXT, "quote": ""}, redacted_by=5)
    assert blanking.problem(genuine, redaction, SEMANTIC.get) == ""
    forged = replace(genuine, payload={"content": "something else", "quote": ""})
    assert blanking.problem(forged, redaction, SEMANTIC.get) == (
        "entry 1's texts are not in the redacted form redaction 5 leaves: it was changed since")
    legacy = replace(genuine, payload_commit="")
    assert "predates payload commitments" in blanking.problem(legacy, redaction, SEMANTIC.get)
