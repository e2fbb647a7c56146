"""A canonical UUID (lower-case hex digits, 8-4-4-4-12, as `str(uuid.UUID(...))` writes it) holds no credential, so
`mnemosync.kernel.secrets_scan.find` passes one without scanning it: an operation's op_id and memory_id are fresh
UUIDs, and scanning them was ~0.14 ms of every add. These tests prove the skip changes no answer.

What the full scan (`secrets_scan._spans`) looks at in such a text: no invisible character, no line break; one
base64 run (the whole text), which never decodes to text (proven below for every UUID); of the disguises
(`secret_disguises.readings`) only the reversed reading, since there is no run of 20 hex digits (the longest group
has 12), no `%`, white space, quote, `&` or letter outside ASCII, and a dashed run needs groups of at most 8
characters up to the text's end; and no key in pieces (the only word is the whole text, with no word after it).
The two readings left are hex digits and dashes (and a space), and every rule runs only on a text holding one of
its hints (`Rule.hints`), or, without hints, needs a longer text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import itertools
import json
import re
import uuid
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemosync.kernel import secrets_scan
from mnemosync.kernel.secret_disguises import base64_decoded, pieces, readings

CORPUS = Path(__file__).resolve().parents[1] / "data" / "secrets" / "corpus.jsonl"
HEX = "0123456789abcdef"
READING_CHARACTERS = set(HEX + "- ")  # the reversed reading ends in a space
UUIDS = st.uuids().map(str) | st.text(HEX, min_size=32, max_size=32).map(
    lambda h: f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")


def _first_characters(items: list) -> set[str] | None:
    """The characters a match of the parsed pattern `items` can begin with (None: not known here, e.g. a class or a
    piece that may be empty), for the simple shapes the rules are made of."""
    c = re._constants  # type: ignore[attr-defined]
    for op, arg in items:
        if op in (c.AT, c.ASSERT, c.ASSERT_NOT):  # zero-width
            continue
        if op == c.LITERAL:
            return {chr(arg)}
        if op == c.IN:
            if any(kind != c.LITERAL for kind, _ in arg):
                return None
            return {chr(value) for _, value in arg}
        if op == c.SUBPATTERN:
            return None if arg[1] & re.IGNORECASE else _first_characters(list(arg[-1]))
        if op == c.BRANCH:
            firsts = [_first_characters(list(branch)) for branch in arg[1]]
            return None if any(f is None for f in firsts) else set().union(*firsts)  # type: ignore[arg-type]
        if op in (c.MAX_REPEAT, c.MIN_REPEAT) and arg[0] >= 1:
            return _first_characters(list(arg[2]))
        return None
    return None


def test_no_rule_can_match_a_text_of_hex_digits_and_dashes():
    """Every rule needs a hint with a character no such text has (so it never runs on one), or begins, case
    sensitively, with a character none has (the AWS key id's `ACCA`, whose hint `acca` a UUID can hold)."""
    for rule in secrets_scan.RULES:
        if rule.hints and all(set(hint) - READING_CHARACTERS for hint in rule.hints):
            continue
        first = _first_characters(list(re._parser.parse(rule.pattern.pattern, rule.pattern.flags)))  # type: ignore
        assert not rule.pattern.flags & re.IGNORECASE, rule.kind
        assert first and not first & READING_CHARACTERS, rule.kind


def test_the_base64_run_of_a_uuid_never_decodes_to_text():
    """The run is the whole UUID (its dashes are URL-safe base64): characters 8 to 11 decode to bytes 6 to 8, and
    byte 6 is 0xF9 or 0xFB whatever the hex digits are (every case below), which is never in UTF-8."""
    sixth = set()
    for digits in itertools.product(HEX, repeat=3):
        group = "-" + "".join(digits)
        sixth.add(base64.urlsafe_b64decode(group)[0])
    assert sixth == {0xF9, 0xFB}
    for byte in sixth:
        try:
            bytes([byte]).decode("utf-8")
            raise AssertionError(f"{byte:#x} decodes")
        except UnicodeDecodeError:
            pass


@given(UUIDS)
@settings(max_examples=500, deadline=None)
def test_the_full_scan_finds_nothing_in_any_canonical_uuid_and_looks_only_where_the_proof_says(text):
    assert str(uuid.UUID(text)) == text and secrets_scan.CANONICAL_UUID.fullmatch(text)
    assert [run.group() for run in secrets_scan._BASE64_RUN.finditer(text)] == [text]
    assert base64_decoded(text) is None
    assert [r.label for r in readings(text)] == ["reversed"]
    assert list(pieces(text, secrets_scan._PIECE_HEADS)) == []
    assert secrets_scan._spans(text) == [] and secrets_scan.mask(text) == text


def _uuid_shaped(text: str) -> list[str]:
    """Canonical UUIDs made from a corpus text: its bytes in hex at every offset, and its own hex digits."""
    digits = text.encode().hex()
    own = "".join(c for c in text.lower() if c in HEX)
    candidates = [digits[i:i + 32] for i in range(0, max(1, len(digits) - 31), 2)] + [own[:32], own[-32:]]
    return [f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}" for h in candidates if len(h) == 32]


@functools.cache
def _group_choices(group: int) -> list[str]:
    """The four characters of a UUID's `group`-th base64 group: those decoding to printable ASCII where the group
    holds no dash (groups 2 to 5 each hold one, which no choice makes printable)."""
    dash = {2: 0, 3: 1, 4: 2, 5: 3}.get(group)
    choices = []
    for digits in itertools.product(HEX, repeat=4 if dash is None else 3):
        chunk = "".join(digits)
        if dash is not None:
            choices.append(chunk[:dash] + "-" + chunk[dash:])
        elif all(32 <= b < 127 for b in base64.urlsafe_b64decode(chunk)):
            choices.append(chunk)
    return choices


def _printable_base64_uuid(seed: int) -> str:
    """A UUID crafted so that as much of its base64 reading as can be is printable text."""
    return "".join((c := _group_choices(g))[(seed * 7919 + g * 104729) % len(c)] for g in range(9))


def test_no_uuid_shaped_from_the_corpus_or_crafted_to_decode_holds_a_secret_for_any_rule():
    """Every credential and look-alike of the corpus put into UUID shape (hex-encoded, or its own hex digits), and
    UUIDs crafted so that their base64 groups decode to printable text: nothing found, reading by reading."""
    shaped = [u for line in CORPUS.read_text(encoding="utf-8").splitlines()
              for u in _uuid_shaped(json.loads(line)["text"].replace("‖", ""))]
    shaped += [_printable_base64_uuid(seed) for seed in range(100)]
    assert len(shaped) > 500
    for text in shaped:
        assert str(uuid.UUID(text)) == text
        assert secrets_scan._spans(text) == [], text
        for rule in secrets_scan.RULES:  # each rule alone, hints or not, on each reading
            for reading in (text, text[::-1]):
                assert not any(rule.accepts(m) for m in rule.pattern.finditer(reading)), (rule.kind, text)
        try:
            raw = base64.urlsafe_b64decode(text)
        except binascii.Error:
            continue
        assert raw[6] in (0xF9, 0xFB)


def test_a_uuid_is_passed_unscanned_and_not_kept_among_the_clean_texts_only_in_its_canonical_form():
    """Fresh ids must not push an Append's scopes and tags out of the memo of clean texts; an id in any other form
    (upper case, braces, no dashes) is scanned as before, and so is a secret, whatever surrounds it."""
    known = secrets_scan._KNOWN_CLEAN
    ids = [str(uuid.uuid4()) for _ in range(50)]
    for text in ids:
        assert secrets_scan.find(text) is None
    assert not any(text in known for text in ids)
    for text in (ids[0].upper(), "{" + ids[0] + "}", uuid.UUID(ids[0]).hex):
        assert secrets_scan.find(text) is None and text in known
    assert not secrets_scan.CANONICAL_UUID.fullmatch(ids[0] + "\n")
    key_id = next(case["text"].replace("‖", "").split()[-1] for case in map(json.loads, CORPUS.read_text(
        encoding="utf-8").splitlines()) if case["case"] == "aws-access-key-id" and case["secret"])
    assert secrets_scan.find(f"{ids[0]} {key_id}") is not None
