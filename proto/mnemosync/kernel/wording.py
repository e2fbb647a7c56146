"""How counts, values and texts read to people: "1 entry", "2 entries", "db, staging", one line per memory.

Every count a person reads (the command line, the hooks' blocks, tool notes, the dashboard) goes through
`counted` or `plural`, so none says "1 entries"; a value shown to a person goes through `shown`, never
Python's `repr` (`['db', 'staging']`). Standard library only: the fast hooks import it.
"""

from __future__ import annotations

from typing import Any


def plural(count: int, one: str, many: str | None = None) -> str:
    """`one` for a count of 1, else `many` (default: `one` + "s", or "y" to "ies" after a consonant).

    Also for verbs that agree with a count: `plural(n, "waits", "wait")`.
    """
    if count == 1:
        return one
    if many is not None:
        return many
    if one.endswith("y") and len(one) > 1 and one[-2] not in "aeiou":
        return one[:-1] + "ies"
    return one + "s"


def counted(count: int, one: str, many: str | None = None) -> str:
    """The count and its noun: `counted(1, "entry")` is "1 entry", `counted(1200, "entry")` "1,200 entries"."""
    return f"{count:,} {plural(count, one, many)}"


def shown(value: Any) -> str:
    """A field's value as a person reads it: a list as "a, b" ("none" when empty), a flag as yes / no, a number
    without trailing zeros, nothing as "none", text as it is."""
    if value is None or value == "" or value == [] or value == ():
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple | set | frozenset):
        return ", ".join(shown(v) for v in value)
    return str(value)


def one_line(text: str, width: int) -> str:
    """A text on one line (every run of whitespace, line breaks included, one space), cut to `width` characters
    with "…" when longer: what a list of one line per memory shows."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"
