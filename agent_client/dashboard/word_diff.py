"""A word-level diff of two texts, for showing revisions and versions against each other.

`word_diff` splits both texts into words and the spaces between them and
returns the second text as pieces, each kept, added (only in the second) or
removed (only in the first, kept in place so the reader sees what was
replaced); the templates strike removed words through and highlight added ones.
"""

from __future__ import annotations

import difflib
import re
from typing import NamedTuple

_PIECES = re.compile(r"\s+|[^\s]+")


class Piece(NamedTuple):
    """A run of text and what happened to it: "same", "removed" or "added"."""

    kind: str
    text: str


def word_diff(before: str, after: str) -> list[Piece]:
    """`after` as pieces against `before`: words kept, words added, and the words of `before` they replaced."""
    a, b = _PIECES.findall(before), _PIECES.findall(after)
    pieces: list[Piece] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            pieces.append(Piece("same", "".join(b[j1:j2])))
            continue
        if i2 > i1:
            pieces.append(Piece("removed", "".join(a[i1:i2])))
        if j2 > j1:
            pieces.append(Piece("added", "".join(b[j1:j2])))
    return pieces
