"""The hybrid search as it was before issue 14, kept as the benchmark's same-run baseline for search latency.

Coverage-weighted Reciprocal Rank Fusion (k = 60) of 50 candidates per
channel, with the old, shorter stop list; the channels themselves are today's
(`mnemosync.kernel.search`). `ops.bench.bench_search.fusion_cost` times it against
today's `mnemosync.kernel.search.search` on the same database, query by query.
Nothing outside the benchmark uses it.
"""

from __future__ import annotations

from mnemosync.kernel import projections
from mnemosync.kernel import search as current
from mnemosync.kernel.memory import MEMORY_COLUMNS, row_to_memory

STOP_WORDS = frozenset(
    """a about an and are as at be been but by can did do does for from had has have how i if
    in into is it its me my of on or our so that the their them then there these they this to
    was we were what when where which who whom why will with would you your""".split()
)


def _terms(text: str, *, stop_word_fallback: bool) -> list[str]:
    tokens = current._TOKEN.findall(text)
    content = [t for t in tokens if t.lower() not in STOP_WORDS] or (tokens if stop_word_fallback else [])
    return [f'"{t}"' for t in dict.fromkeys(t.lower() for t in content)][:current.MAX_KEYWORD_TERMS]


def search(conn, *, query: str, vector: bytes | None, limit: int = 10, filter: current.Filter = current.Filter(),  # noqa: B008
           rrf_k: int = 60) -> list[current.Hit]:
    """Hybrid search as `mnemosync.kernel.search.search` ran it before issue 14 (hits carry rrf and final only)."""
    depth = max(limit * 5, 50)
    hits: dict[int, current.Hit] = {}
    if vector is not None:
        for rank, (num, distance) in enumerate(current._vector_channel(conn, vector, depth, filter), 1):
            hit = hits.setdefault(num, current.Hit(memory=None))
            hit.vector_rank, hit.vector_distance = rank, float(distance)
            hit.rrf += 1.0 / (rrf_k + rank)
    fused = bool(hits)
    terms = _terms(query, stop_word_fallback=not fused)
    weights: list[float] = []
    if fused and terms:
        weights = current.idf_weights(conn, terms)
        terms, weights = [t for t, w in zip(terms, weights, strict=True) if w > 0], [w for w in weights if w > 0]
    if terms:
        found = current._keyword_channel(conn, " OR ".join(terms), depth, filter)
        coverage = current.keyword_coverage(conn, terms, weights, [num for num, _ in found]) if fused else {}
        for rank, (num, score) in enumerate(found, 1):
            hit = hits.setdefault(num, current.Hit(memory=None))
            hit.keyword_rank, hit.bm25 = rank, float(score)
            hit.rrf += (coverage.get(num, 1.0) ** 2 if fused else 1.0) / (rrf_k + rank)
    ranked = sorted(
        hits.items(),
        key=lambda item: (-item[1].rrf, item[1].vector_rank or depth + 1, item[1].keyword_rank or depth + 1, item[0]),
    )[:limit]
    results = []
    for num, hit in ranked:
        row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE num = ?", (num,)).fetchone()
        hit.memory = row_to_memory(row, projections.get_links(conn, row[1]))
        hit.final = hit.rrf
        results.append(hit)
    return results
