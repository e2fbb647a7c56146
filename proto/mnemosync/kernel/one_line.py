"""One line of a block a model reads: every field printed into an injected block goes through `one_line`.

The prompt hook's block, the session start's core memories and the MCP results are read by a model as text
whose lines have meanings: `- [2f1c0b7e v3, decision, alice, authority 1 …]` is a memory and its author,
`## Ground rules (constitutional)` a heading only a human's memories reach. A field that carried its own line
break (a source path, a verified path, a procedure step, a tag) would start a line of its own, and whoever
wrote that field would write the block's structure: a forged memory line at authority 1, a forged heading.

So every field is printed as one line: line breaks and every other control or line-separating character
(C0 and C1 controls, U+2028 and U+2029, the bidirectional overrides that reorder what a reader sees) are
written as visible escapes (`\\n`, `\\x1b`, `\\u2028`), and the line is cut to a bound with "…". Prose
(`fold=True`: a memory's content) has its runs of whitespace folded to one space first, as a reader expects,
and is then escaped the same way. The result never holds a line break, so no field can begin a line of the
block: only the block's own code starts lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

DEFAULT_LIMIT = 300
"""Characters a field takes at most when the caller names no bound."""

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""The characters `one_line` escapes (and paths may not hold: `mnemosync.kernel.text_fields.check_one_line`)."""
_CUT_ESCAPE = re.compile(r"\\(?:u[0-9a-f]{0,3}|x[0-9a-f]?)?$")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def one_line(value: object, limit: int = DEFAULT_LIMIT, *, fold: bool = False) -> str:
    """`value` as text that is one line of at most `limit` characters (see the module docstring).

    Args:
        value: The field (anything; `str()` of it is printed).
        limit: Most characters of the result (at least 2), "…" included when it is cut.
        fold: Fold every run of whitespace (line breaks included) to one space first, for prose.
    """
    text = str(value)
    if fold:
        text = " ".join(text.split())
    text = CONTROLS.sub(_escape, text[: limit * 6])
    if len(text) <= limit:
        return text
    return _CUT_ESCAPE.sub("", text[: max(limit - 1, 1)]).rstrip() + "…"


def one_lines(values: Iterable[object], limit: int = DEFAULT_LIMIT, *, separator: str = ", ",
              most: int | None = None) -> str:
    """Several fields as one line: each through `one_line` (each to `limit`), joined by `separator`; with `most`,
    only the first `most`, and "and N more" for the rest."""
    values = list(values)
    shown = [one_line(v, limit) for v in (values if most is None else values[:most])]
    if most is not None and len(values) > most:
        shown.append(f"and {len(values) - most} more")
    return separator.join(shown)
