"""The disguises a credential can wear, undone: the other readings of a text the secret scan looks in.

A key does not stop being a key when it is written hex-encoded, %XX-encoded,
base64-encoded twice, with a space between its characters or dashes between
groups of them, with Cyrillic or Greek letters that look like the Latin ones,
backwards (each run of 16 key characters or more), with HTML character references (`&#65;KIA…`, `ghp&#95;…`), or as
string pieces joined with `+` on one line. `readings` undoes
each of these on the spans of a text that have the shape, and
`mnemosync.kernel.secrets_scan` runs the provider-anchored credential shapes
(those with a fixed prefix, specific enough that a match is no accident) on
what comes out.

A reading only exists where its shape is: a hex run must decode to printable
text, a %XX run must hold escapes, a spaced run must be single characters, a
homoglyph reading needs a look-alike letter. So ordinary hashes, UUIDs, URL
paths, spaced headings, Greek or Cyrillic prose and reversed words give either
no reading or one in which no anchored shape matches.
"""

from __future__ import annotations

import base64
import binascii
import functools
import html
import re
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from urllib.parse import unquote

_DECODED_MIN = 12
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX_RUN = re.compile(r"(?<![0-9A-Za-z\\])(?:(?:\\x[0-9A-Fa-f]{2}){10,}|(?:0x)?[0-9A-Fa-f]{20,}"
                      r"|[0-9A-Fa-f]{2}(?:[ :][0-9A-Fa-f]{2}){9,})(?![0-9A-Za-z])")
_HEX_NOISE = re.compile(r"\\x|0x|[ :]")
_PERCENT_RUN = re.compile(r"(?:[A-Za-z0-9._~+/=-]|%[0-9A-Fa-f]{2}){12,}")
_SPACED_RUN = re.compile(r"(?<!\S)(?:[A-Za-z0-9+/=_-][ \t]{1,2}){9,}[A-Za-z0-9+/=_-](?!\S)")
_DASHED_RUN = re.compile(r"(?<![\w-])[A-Za-z0-9]{1,8}(?:-[A-Za-z0-9]{1,8}){3,}(?![\w-])")
_CHARACTER = re.compile(r"[A-Za-z0-9+/=_-]")
_GROUP = re.compile(r"[A-Za-z0-9]+")
_PIECE = r"(?:\"[^\"\n]*\"|'[^'\n]*')"
_CONCATENATION = re.compile(_PIECE + r"(?:[ \t]*[+.][ \t]*" + _PIECE + r")+")
_QUOTED = re.compile(_PIECE)
_TOKEN = re.compile(r"[A-Za-z0-9_\-.+/=:~]{16,}")
_ENTITY = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});?")
_WORD = re.compile(r"[A-Za-z0-9_\-+/=.:~]{2,}")
"""A word that may be one piece of a key (a key cut in two with words between)."""
_PIECE_TAILS = 64
"""How many later words a key's first piece is tried with."""
"""A run long enough to be a provider's key (each is read backwards, one after another)."""

_LOOK_ALIKES = {
    # Cyrillic
    "А": "A", "В": "B", "Е": "E", "К": "K", "М": "M", "Н": "H", "О": "O", "Р": "P", "С": "C", "Т": "T",
    "Х": "X", "У": "Y", "Ѕ": "S", "І": "I", "Ј": "J", "Ԛ": "Q", "Ԝ": "W", "а": "a", "е": "e", "о": "o",
    "р": "p", "с": "c", "у": "y", "х": "x", "ѕ": "s", "і": "i", "ј": "j", "ԁ": "d", "һ": "h", "ԛ": "q",
    "ԝ": "w", "ɡ": "g",
    # Greek
    "Α": "A", "Β": "B", "Ε": "E", "Ζ": "Z", "Η": "H", "Ι": "I", "Κ": "K", "Μ": "M", "Ν": "N", "Ο": "O",
    "Ρ": "P", "Τ": "T", "Υ": "Y", "Χ": "X", "ο": "o", "ν": "v", "ι": "i", "κ": "k", "α": "a", "τ": "t",
    "ρ": "p", "χ": "x", "υ": "u",
}
_FOLD = str.maketrans({**_LOOK_ALIKES, **{chr(c): chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)}})


@dataclass(frozen=True)
class Reading:
    """A text with one disguise undone.

    Attributes:
        text: The undone text.
        label: The disguise, for the finding's kind ("hex-encoded").
        where: The position in the scanned text of each position of `text`; None for a decoded run, which
            maps as a whole to `span`.
        span: (start, end) in the scanned text of a decoded run (None when `where` is given).
        starts: Positions of `text` where a key may begin (the groups of a joined run, so that `\\b` holds at
            each), or () for the text as a whole.
        changed: Positions of `text` that the disguise changed (folded look-alikes): a match must hold one,
            else the text as written already showed it; None when any match is new.
    """

    text: str
    label: str
    where: Callable[[int], int] | None = None
    span: tuple[int, int] | None = None
    starts: tuple[int, ...] = ()
    changed: frozenset[int] | None = None


def _printable(raw: bytes) -> str | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    return text if len(text) >= _DECODED_MIN and printable >= 0.95 * len(text) else None


@functools.lru_cache(maxsize=256)
def base64_decoded(run: str) -> str | None:
    """The text a base64 (or URL-safe base64) run decodes to, if it is mostly printable text (kept for the last few
    runs: a scan decodes each run once for its own reading and once more looking for a second encoding)."""
    body = run.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _printable(raw)


def _hex_decoded(run: str) -> str | None:
    digits = _HEX_NOISE.sub("", run)
    if len(digits) % 2:
        return None
    try:
        return _printable(bytes.fromhex(digits))
    except ValueError:
        return None


def _percent_decoded(run: str) -> str | None:
    if "%" not in run:
        return None
    try:
        raw = unquote(run, errors="strict")
    except UnicodeDecodeError:
        return None
    return _printable(raw.encode("utf-8"))


def _joined(text: str, run: re.Match[str], label: str, pieces: re.Pattern[str], inner: int = 0) -> Reading:
    kept: list[str] = []
    where: list[int] = []
    starts: list[int] = []
    for piece in pieces.finditer(text, run.start(), run.end()):
        start, end = piece.start() + inner, piece.end() - inner
        starts.append(len(kept))
        kept.extend(text[start:end])
        where.extend(range(start, end))
    return Reading("".join(kept), label, where=where.__getitem__, starts=tuple(starts))


def decoded(text: str) -> Iterator[Reading]:
    """The decoded readings of `text`: hex and %XX runs, and base64 runs decoded twice (a run decoded once is
    `mnemosync.kernel.secrets_scan`'s own reading)."""
    for run in _HEX_RUN.finditer(text):
        if (plain := _hex_decoded(run.group())) is not None:
            yield Reading(plain, "hex-encoded", span=run.span())
    if "%" in text:
        for run in _PERCENT_RUN.finditer(text):
            if (plain := _percent_decoded(run.group())) is not None:
                yield Reading(plain, "%XX-encoded", span=run.span())
    for run in _BASE64_RUN.finditer(text):
        once = base64_decoded(run.group())
        if once is None:
            continue
        for inner in _BASE64_RUN.finditer(once):
            if (twice := base64_decoded(inner.group())) is not None:
                yield Reading(twice, "base64-encoded twice", span=run.span())


def readings(text: str) -> Iterator[Reading]:
    """Every reading of `text` with one disguise undone (see the module docstring)."""
    yield from decoded(text)
    for run in _SPACED_RUN.finditer(text):
        yield _joined(text, run, "with its characters spaced out", _CHARACTER)
    if "-" in text:
        for run in _DASHED_RUN.finditer(text):
            yield _joined(text, run, "in dashed groups", _GROUP)
    if ("'" in text or '"' in text) and ("+" in text or "." in text):
        for run in _CONCATENATION.finditer(text):
            yield _joined(text, run, "joined from string pieces", _QUOTED, inner=1)
    folded = text if text.isascii() else text.translate(_FOLD)  # every look-alike is outside ASCII
    if folded != text:
        changed = frozenset(i for i, (a, b) in enumerate(zip(text, folded, strict=True)) if a != b)
        yield Reading(folded, "with look-alike letters", where=lambda i: i, changed=changed)
    kept: list[str] = []
    where: list[int] = []
    for token in _TOKEN.finditer(text):
        kept.append(token.group()[::-1] + " ")
        where.extend(range(token.end() - 1, token.start() - 1, -1))
        where.append(token.end() - 1)
    if kept:
        yield Reading("".join(kept), "reversed", where=where.__getitem__)
    if "&" in text:
        yield from _entities(text)


def _entities(text: str) -> Iterator[Reading]:
    """`text` with its HTML character references decoded (each decoded character maps to its reference's start)."""
    kept: list[str] = []
    where: list[int] = []
    position, decoded = 0, False
    for entity in _ENTITY.finditer(text):
        plain = html.unescape(entity.group())
        if plain == entity.group():
            continue
        kept.append(text[position:entity.start()])
        where.extend(range(position, entity.start()))
        kept.append(plain)
        where.extend([entity.start()] * len(plain))
        position, decoded = entity.end(), True
    if decoded:
        kept.append(text[position:])
        where.extend(range(position, len(text)))
        yield Reading("".join(kept), "with HTML entities", where=where.__getitem__)


def piece_heads(prefixes: Collection[str]) -> re.Pattern[str]:
    """What `pieces` looks for: a word beginning with one of `prefixes` (lower-case) followed by some of a key's
    random part (at least two more key characters, a digit or a capital among them)."""
    alternatives = "|".join(re.escape(p) for p in sorted(prefixes, key=len, reverse=True))
    return re.compile(r"(?<![A-Za-z0-9_\-+/=.:~])(?i:" + alternatives + r")(?=[A-Za-z0-9_\-+/=.:~]*[0-9A-Z])"
                      r"[A-Za-z0-9_\-+/=.:~]{2,}")


def pieces(text: str, heads: re.Pattern[str]) -> Iterator[Reading]:
    """A key cut in two with words between the halves (`AKIAIOSFODNN and, later, 7EXAMPLE`): each word `heads`
    finds (`piece_heads`) joined with each of the next `_PIECE_TAILS` words that hold a digit (a key's random part
    nearly always does; prose rarely), one candidate after another (`Reading.starts`). Only a match that takes in
    both pieces is new (`secrets_scan` runs the anchored shapes on it)."""
    for head in heads.finditer(text):
        if head.end() - head.start() > 64:
            continue
        kept: list[str] = []
        where: list[int] = []
        starts: list[int] = []
        tails = 0
        for tail in _WORD.finditer(text, head.end()):
            if tails == _PIECE_TAILS:
                break
            tails += 1
            if not any(c.isdigit() for c in tail.group()):
                continue
            starts.append(len(kept))
            for piece in (head, tail):
                kept.extend(piece.group())
                where.extend(range(piece.start(), piece.end()))
            kept.append(" ")
            where.append(tail.end() - 1)
        if starts:
            yield Reading("".join(kept), "in pieces with words between", where=where.__getitem__,
                          starts=tuple(starts))
