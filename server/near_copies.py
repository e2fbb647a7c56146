"""Near copies by their words: the part of the semantic conflict check the server can make without a model.

The semantic conflict check (`mnemosync.server.admission`) compares a new memory's vector with the stored ones,
and the vector is the writer's own: a bot that copied a human's rule, changed one word to say the opposite and
sent the human's vector nudged to cosine 0.87 passed under the 0.95 threshold (issue 37, item 11). The server
cannot recompute the vector (it has no model, only the pinned model's fingerprint), nor refuse one as
inconsistent with its text: the model moves a lot on one word (a one-word change of a memory of the retrieval
set leaves its honest cosine anywhere from 0.27 to 0.99), so no bound on the cosine of a near copy would stop a
nudged vector without stopping honest ones. What it can trust is the text. So an add by an automated agent
(authority `WEAK_VECTOR_FROM` or weaker, the same agents whose vectors do not buy rank on their own) whose words
are, in order, at least `NEAR_COPY` alike those of a stronger authority's live memory of the same scope is a
semantic conflict with it, and blocked as one, whatever its vector says.

How alike: `difflib`'s ratio over the two texts' words (lower-cased, a plural's `s` dropped): a one-word change in
a six-word sentence gives 0.83. Measured on the retrieval set (`ops/bench/data/retrieval/memories.jsonl`, 307
memories, with the real model): the most alike pair of *different* memories is 0.47, a copy with one word
changed is above 0.8 in 87% of cases. The candidates are found by the keyword index (`PAIRS`), without ranking:
ranking every match by BM25 cost 10 ms per add at 4,000 memories and grows with the store.
"""

from __future__ import annotations

import difflib
import re

from mnemosync.kernel import search
from mnemosync.kernel.entry import LEGACY_AUTHORITY

NEAR_COPY = 0.8
"""How alike (word sequence ratio) a new text must be to a stronger authority's to count as a copy of it."""
PAIRS = 4
"""Candidates hold both words of one of this many pairs of the new text's longest words (a copy with a word or two
changed still holds both of most pairs; a pair of long words is rare in other memories)."""
MATCHES = 200
"""Memories compared per add at most."""
WEAK_VECTOR_FROM = search.WEAK_VECTOR_FROM

_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """The words compared: lower-cased, a trailing `s` dropped from words of four letters or more."""
    return [w[:-1] if len(w) > 3 and w.endswith("s") else w for w in _WORD.findall(text.lower())]


def alike(first: str, second: str) -> float:
    """How alike two texts' word sequences are, 0 to 1 (`difflib.SequenceMatcher.ratio`)."""
    return difflib.SequenceMatcher(None, words(first), words(second), autojunk=False).ratio()


def stronger_copy(conn, agent_id: str, authority: int, content: str, scope: str) -> tuple[str, float] | None:
    """(id, how alike) of the live memory of `scope` by a stronger authority than `authority`, not written by
    `agent_id`, whose text `content` is a near copy of, the most alike first; None when there is none (or the
    writer is not automated)."""
    if authority < WEAK_VECTOR_FROM:
        return None
    terms = sorted(search.keyword_terms(content), key=len, reverse=True)[:2 * PAIRS]
    if len(terms) < 2:
        return None
    query = " OR ".join(f"({a} AND {b})" for a, b in zip(terms[::2], terms[1::2], strict=False))
    matched = [num for (num,) in conn.execute("SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? LIMIT ?",
                                              (query, MATCHES))]
    best = conn.execute(
        f"SELECT id, content FROM memories WHERE num IN ({', '.join('?' for _ in matched)}) AND scope = ? "
        "AND archived = 0 AND author_agent != ? AND (CASE WHEN authority = 0 THEN ? ELSE authority END) < ? "
        "ORDER BY num", (*matched, scope, agent_id, LEGACY_AUTHORITY, authority)).fetchall() if matched else []
    found = sorted(((alike(content, text), memory_id) for memory_id, text in best), reverse=True)
    if found and found[0][0] >= NEAR_COPY:
        return found[0][1], round(found[0][0], 2)
    return None
