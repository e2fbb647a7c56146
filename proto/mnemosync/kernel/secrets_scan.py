"""Credential scan: the intake gate's check that no secret gets into shared memory.

Memories replicate to every agent's cache and the changelog keeps them for
ever, so a key that gets in is a key that has leaked. `find` looks for the
shapes in `mnemosync.kernel.secret_patterns` (cloud keys, private keys, API
tokens, JWTs, passwords in URLs, commands and assignments) and names the kind
it found. The refusal (`check`) names the kind and where it starts, never the
text itself, so the secret does not travel on into error messages and logs.
The operations' validation (`mnemosync.kernel.operations.validate`) runs it on
every text field of every operation, before anything else looks at them.

A secret is looked for in three readings of a text:

* as written, with invisible characters (zero-width spaces and joiners, soft
  hyphens, bidirectional marks, BOMs) taken out, since they hide a key from a
  pattern but not from whoever copies it;
* with line breaks inside a token taken out (a key split over lines, or a
  string literal continued on the next line), for the provider-prefixed shapes;
* decoded, for each base64 run of 16 characters or more that decodes to text
  (a key pasted base64-encoded, as in a Kubernetes secret);
* with one disguise undone (`mnemosync.kernel.secret_disguises`: hex, %XX,
  base64 twice, spaced characters, dashed groups, look-alike letters, reversed,
  HTML character references, string pieces joined with `+`, a key in two pieces
  with words between), for the provider-prefixed shapes.

`mask` uses the same readings on the way out, so what the gate would refuse
is also hidden in what was stored before the gate knew its shape.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar

from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.secret_disguises import Reading, base64_decoded, piece_heads, pieces, readings
from mnemosync.kernel.secret_patterns import RULES, Rule

if TYPE_CHECKING:
    from mnemosync.kernel.memory import MemoryRow

_T = TypeVar("_T", bound="MemoryRow")

_INVISIBLE = re.compile("[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e"
                        "\u2060-\u2064\u206a-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]")
_LINE_BREAK = re.compile(r"[\"']?[ \t]*\+?[ \t]*\\?\r?\n[ \t]*[\"']?")
_BASE64_RUN = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{16,}={0,2}")
CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""A UUID as `str(uuid.UUID(...))` writes it, which no rule can match in any reading: its only readings are the
text as written and reversed (its one base64 run never decodes to text: the first dash makes its 7th byte 0xF9 or
0xFB, which UTF-8 never has), hex digits and dashes, and every rule needs a hint with another character or a longer
text (`tests/unit/test_secrets_scan_uuids.py` proves it). So `find` passes one unscanned: every operation's ids."""
_COMMON = "etaoinsrhldcumfpgwybvkxjqz"
"""English letters, most frequent first (anything else is rarer still): how a hint's rarest character is chosen."""


def _rarest(hint: str) -> str:
    return max(hint, key=lambda c: _COMMON.find(c) if c in _COMMON else len(_COMMON))


class _RuleSet:
    """Rules and the hints that select them, so each hint is looked for once per text and not rule by rule: the
    rules run are exactly those whose `Rule.may_match` holds. Hints are grouped by their rarest character, and a
    group is looked at only when the text has that character (most texts have few of them): a handful of character
    searches instead of one regex pass trying every hint at every position."""

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self._always = [i for i, rule in enumerate(rules) if not rule.hints]
        hints = sorted({h for rule in rules for h in rule.hints})
        self._groups: dict[str, list[str]] = {}
        for hint in hints:
            self._groups.setdefault(_rarest(hint), []).append(hint)
        self._rules_of = {h: [i for i, rule in enumerate(rules) if h in rule.hints] for h in hints}

    def candidates(self, lowered: str) -> list[Rule]:
        """The rules that may match the lower-cased text, in their order."""
        return self.of_hints(self.hints_in(lowered)) if self._groups else self.rules

    def of_hints(self, held: Iterable[str]) -> list[Rule]:
        """The rules that may match a text holding the hints `held` (those of other rules are ignored)."""
        chosen = set(self._always)
        for hint in held:
            chosen.update(self._rules_of.get(hint, ()))
        return [self.rules[i] for i in sorted(chosen)]

    def hints_in(self, lowered: str) -> Iterator[str]:
        """The rules' hints the lower-cased text holds."""
        for character, hints in self._groups.items():
            if character in lowered:
                for hint in hints:
                    if hint in lowered:
                        yield hint


_ALL = _RuleSet(RULES)
_ANCHORED = _RuleSet([rule for rule in RULES if rule.anchored])
_PIECE_PREFIXES = frozenset(h for rule in _ANCHORED.rules for h in rule.hints)
_PIECE_HEADS = piece_heads(_PIECE_PREFIXES)


@functools.lru_cache(maxsize=256)
def _heads_among(prefixes: frozenset[str]) -> re.Pattern[str]:
    return piece_heads(prefixes)


def _piece_heads(text: str, held: set[str]) -> re.Pattern[str] | None:
    """What `pieces` looks for in `text`, found exactly as `_PIECE_HEADS` finds it but far faster (trying ~80
    prefixes at every position was a third of scanning a memory's content): in an ASCII text a head can begin only
    with a prefix the lower-cased text holds (its case-insensitive match is the lower-cased text's), so the pattern
    of those few finds the same heads; None when the text holds none. `held`: every rule's hints the lower-cased
    text holds."""
    if not text.isascii():  # case-insensitive matching folds a few letters outside ASCII (the Kelvin sign, long s)
        return _PIECE_HEADS
    prefixes = _PIECE_PREFIXES.intersection(held)
    return _heads_among(prefixes) if prefixes else None


@dataclass(frozen=True)
class Finding:
    """A credential found in a text: what kind, and the character offset where it starts."""

    kind: str
    start: int


@dataclass(frozen=True)
class _Span:
    start: int
    """Where the credential's match starts (the key name of an assignment, the prefix of a token)."""
    secret_start: int
    secret_end: int
    """The secret itself (a named group of the pattern, else the whole match): what `mask` replaces."""
    kind: str
    specific: bool
    """Found by a provider's shape (or hidden, split, encoded): named in preference to a generic rule's find of
    the same secret (`api_key=sk-ant-…` is an Anthropic key, not just "a secret")."""


def _without(text: str, pattern: re.Pattern[str]) -> tuple[str, Sequence[int]]:
    """`text` with every match of `pattern` removed, and where each kept character was in `text`."""
    if pattern.search(text) is None:  # the common case: nothing to remove, every character where it was
        return text, range(len(text))
    kept: list[str]
    where: list[int]
    kept, where, position = [], [], 0
    for match in pattern.finditer(text):
        kept.append(text[position:match.start()])
        where.extend(range(position, match.start()))
        position = match.end()
    kept.append(text[position:])
    where.extend(range(position, len(text)))
    return "".join(kept), where


def _matches(text: str, rules: _RuleSet, held: set[str] | None = None) -> Iterator[tuple[int, int, int, int, Rule]]:
    """(match start, secret start, secret end, match end, rule) of every credential in `text` (`held`: the hints
    the lower-cased text holds, when known)."""
    for rule in rules.candidates(text.lower()) if held is None else rules.of_hints(held):
        for match in rule.pattern.finditer(text):
            if rule.accepts(match):
                named = [g for g in match.groupdict() if match.group(g)]
                start, end = match.span(named[0]) if named else match.span()
                yield match.start(), start, end, match.end(), rule


def _undone(reading: Reading) -> Iterator[tuple[int, int, int, Rule]]:
    """(match start, secret start, secret end, rule) in the scanned text of each anchored credential in a reading with
    a character map (`Reading.where`) that its disguise hid."""
    text, at = reading.text, reading.where
    assert at is not None
    rules = _ANCHORED.candidates(text.lower())
    if not rules:
        return
    for offset in reading.starts or (0,):
        for rule in rules:
            for match in rule.pattern.finditer(text[offset:] if offset else text):
                if not rule.accepts(match):
                    continue
                named = [g for g in match.groupdict() if match.group(g)]
                start, end = (match.span(named[0]) if named else match.span())
                start, end = start + offset, end + offset
                first, last = at(start), at(end - 1)
                low, high = min(first, last), max(first, last)
                hidden = (first > last or high - low != end - 1 - start if reading.changed is None
                          else any(i in reading.changed for i in range(start, end)))
                if hidden:
                    yield min(at(match.start() + offset), low), low, high + 1, rule


def _spans(text: str) -> list[_Span]:
    """Every credential in `text`, in the text's own positions (see the module docstring)."""
    clean, at = _without(text, _INVISIBLE)
    if not clean:
        return []
    hidden = len(clean) != len(text)

    def original(start: int, end: int) -> tuple[int, int]:
        return at[start], at[end - 1] + 1

    spans = []
    held = set(_ALL.hints_in(clean.lower()))
    for start, secret_start, secret_end, end, rule in _matches(clean, _ALL, held):
        whole = original(start, end)
        if hidden and whole[1] - whole[0] != end - start:
            spans.append(_Span(whole[0], *original(secret_start, secret_end),
                               f"{rule.kind} (with invisible characters in it)", True))
        else:
            spans.append(_Span(whole[0], *original(secret_start, secret_end), rule.kind, rule.anchored))
    if "\n" in clean:
        joined, joined_at = _without(clean, _LINE_BREAK)
        for start, secret_start, secret_end, _, rule in _matches(joined, _ANCHORED):
            first, last = joined_at[secret_start], joined_at[secret_end - 1]
            if last - first != secret_end - 1 - secret_start:  # it runs over a line break: not found above
                spans.append(_Span(at[joined_at[start]], at[first], at[last] + 1,
                                   f"{rule.kind} (split across lines)", True))
    for run in _BASE64_RUN.finditer(clean):
        decoded = base64_decoded(run.group())
        if decoded is None:
            continue
        for *_, rule in _matches(decoded, _ALL):
            start, end = original(*run.span())
            spans.append(_Span(start, start, end, f"{rule.kind} (base64-encoded)", True))
            break
    heads = _piece_heads(clean, held)
    for reading in (*readings(clean), *(pieces(clean, heads) if heads is not None else ())):
        if reading.span is not None:
            for *_, rule in _matches(reading.text, _ANCHORED):
                start, end = original(*reading.span)
                spans.append(_Span(start, start, end, f"{rule.kind} ({reading.label})", True))
                break
            continue
        for start, secret_start, secret_end, rule in _undone(reading):
            spans.append(_Span(at[start], *original(secret_start, secret_end), f"{rule.kind} ({reading.label})",
                               True))
    return spans


class _KnownClean:
    """Short texts already scanned and found clean, the most recent `size` of them: the scope, type and tags of an
    Append's operations (and of one agent's next Append) repeat, and rescanning each costs as much as scanning the
    content. `find` is a function of the text alone (the rules are fixed at import), so a text found clean once is
    clean for good; only clean texts are kept, so no secret stays in memory because it was scanned."""

    def __init__(self, size: int = 4096, longest: int = 256):
        self.size, self.longest = size, longest
        self._texts: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, text: str) -> bool:
        return len(text) <= self.longest and text in self._texts

    def add(self, text: str) -> None:
        if len(text) > self.longest:
            return
        with self._lock:
            self._texts[text] = None
            if len(self._texts) > self.size:
                self._texts.popitem(last=False)


_KNOWN_CLEAN = _KnownClean()


def find(text: str) -> Finding | None:
    """The first credential in `text` (earliest position), or None."""
    if text in _KNOWN_CLEAN or CANONICAL_UUID.fullmatch(text):
        return None
    spans = _spans(text)
    if not spans:
        _KNOWN_CLEAN.add(text)
        return None
    first = min(spans, key=lambda s: (s.secret_start, not s.specific))
    if not first.specific:  # the same secret named by its provider's shape says more
        first = next((s for s in spans if s.specific and s.secret_start < first.secret_end
                      and first.secret_start < s.secret_end), first)
    return Finding(first.kind, first.start)


def check(text: str, name: str) -> None:
    """Refuses a text holding a credential, naming the kind and never the text.

    Args:
        text: The value to scan.
        name: Its field name, for the message (for example "content").

    Raises:
        InvalidArgument: rule intake-no-secrets.
    """
    found = find(text)
    if found is not None:
        raise InvalidArgument(
            f"intake-no-secrets: {name} contains what looks like {found.kind} (at character "
            f"{found.start}); secrets are never stored in shared memory. Remove it and say where the "
            "secret is kept instead (for example 'the deploy key is in the team vault under deploy/prod')"
        )


def mask(text: str) -> str:
    """`text` with every credential `find` would report replaced by `[secret: KIND]`.

    Used on the way out (search results, reads), so a secret stored before the
    intake gate knew its shape is not shown even though it is still stored
    (remove it for good with a redaction).
    """
    spans = _spans(text)
    if not spans:
        return text
    chosen: list[_Span] = []
    for span in sorted(spans, key=lambda s: (not s.specific, s.secret_start, -s.secret_end)):  # named shapes first
        if all(span.secret_end <= c.secret_start or c.secret_end <= span.secret_start for c in chosen):
            chosen.append(span)
    out, position = [], 0
    for span in sorted(chosen, key=lambda s: s.secret_start):
        out.append(text[position:span.secret_start])
        out.append(f"[secret: {span.kind}]")
        position = span.secret_end
    out.append(text[position:])
    return "".join(out)


def masked(memory: _T) -> _T:
    """A memory (anything with `content`, `quote` and `tags`) with each text, every tag included, passed through
    `mask`."""
    content, quote = mask(memory.content), mask(memory.quote)
    tags = [mask(t) for t in memory.tags]
    if content == memory.content and quote == memory.quote and tags == list(memory.tags):
        return memory
    return replace(memory, content=content, quote=quote, tags=tags)
