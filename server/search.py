"""Hybrid search: sqlite-vec KNN and FTS5 BM25 fused with Reciprocal Rank Fusion.

Runs on any database holding the projections (the server's, or an agent's
cache), so the offline search an agent does is the server's search.

User text never reaches FTS5 as query syntax: `keyword_query` keeps only word
tokens and quotes each one, so operators such as `NEAR`, `*`, `:` or unbalanced
quotes are searched for as text (or dropped), never interpreted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from server import vectors
from server.projections import MEMORY_COLUMNS, MemoryRow, get_links, row_to_memory

MODES = ("hybrid", "vector", "keyword")
MAX_KEYWORD_TERMS = 32

# Words so common in questions that matching them says nothing about relevance.
STOP_WORDS = frozenset(
    """a about an and are as at be been but by can did do does for from had has have how i if
    in into is it its me my of on or our so that the their them then there these they this to
    was we were what when where which who whom why will with would you your""".split()
)

_TOKEN = re.compile(r"\w+(?:[./:\-]\w+)*", re.UNICODE)


@dataclass(frozen=True)
class Filter:
    """Restricts results; empty fields do not restrict."""

    scopes: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()
    authors: tuple[str, ...] = ()
    created_after_ms: int = 0
    created_before_ms: int = 0
    include_archived: bool = False


@dataclass
class Hit:
    """A search result with the parts of its score."""

    memory: MemoryRow
    vector_rank: int = 0
    vector_distance: float = 0.0
    keyword_rank: int = 0
    bm25: float = 0.0
    rrf: float = 0.0
    final: float = 0.0
    extra: dict = field(default_factory=dict)


def keyword_query(text: str) -> str | None:
    """Turns free text into a safe FTS5 query, or None if it has no searchable words.

    Each token becomes a quoted phrase (so `src/auth/jwt.py` or `ERR_CONN_RESET`
    match as phrases of their parts), stop words are dropped unless nothing
    else is left, and the phrases are OR-ed so BM25 ranks documents matching
    more of them higher.
    """
    tokens = _TOKEN.findall(text)
    if not tokens:
        return None
    content = [t for t in tokens if t.lower() not in STOP_WORDS] or tokens
    unique = list(dict.fromkeys(t.lower() for t in content))[:MAX_KEYWORD_TERMS]
    return " OR ".join(f'"{t}"' for t in unique)


def _placeholders(values) -> str:
    return ", ".join("?" for _ in values)


def _tag_clause(column: str, tags: tuple[str, ...]) -> tuple[str, list]:
    sql = (
        f"{column} IN (SELECT num FROM memory_tags WHERE tag IN ({_placeholders(tags)}) "
        "GROUP BY num HAVING count(*) = ?)"
    )
    return sql, [*tags, len(set(tags))]


def _vector_channel(conn, vector: bytes, depth: int, f: Filter) -> list[tuple[int, float]]:
    where, params = [], []
    for column, values in (("scope", f.scopes), ("type", f.types), ("layer", f.layers),
                           ("author", f.authors)):
        if values:
            where.append(f"{column} IN ({_placeholders(values)})")
            params.extend(values)
    if not f.include_archived:
        where.append("archived = 0")
    if f.created_after_ms:
        where.append("created_ms >= ?")
        params.append(f.created_after_ms)
    if f.created_before_ms:
        where.append("created_ms < ?")
        params.append(f.created_before_ms)
    if f.tags:
        clause, tag_params = _tag_clause("rowid", f.tags)
        where.append(clause)
        params.extend(tag_params)
    return vectors.knn(conn, vector, depth, where=where, params=params)


def _keyword_channel(conn, fts_query: str, depth: int, f: Filter) -> list[tuple[int, float]]:
    where, params = ["memory_fts MATCH ?"], [fts_query]
    for column, values in (("m.scope", f.scopes), ("m.type", f.types), ("m.layer", f.layers),
                           ("m.author_agent", f.authors)):
        if values:
            where.append(f"{column} IN ({_placeholders(values)})")
            params.extend(values)
    if not f.include_archived:
        where.append("m.archived = 0")
    if f.created_after_ms:
        where.append("m.created_at_ms >= ?")
        params.append(f.created_after_ms)
    if f.created_before_ms:
        where.append("m.created_at_ms < ?")
        params.append(f.created_before_ms)
    if f.tags:
        clause, tag_params = _tag_clause("m.num", f.tags)
        where.append(clause)
        params.extend(tag_params)
    sql = (
        "SELECT m.num, bm25(memory_fts, 1.0, 0.5) AS score FROM memory_fts "
        "JOIN memories m ON m.num = memory_fts.rowid "
        f"WHERE {' AND '.join(where)} ORDER BY score LIMIT ?"
    )
    return conn.execute(sql, [*params, depth]).fetchall()


def search(
    conn,
    *,
    query: str = "",
    vector: bytes | None = None,
    limit: int = 10,
    filter: Filter = Filter(),  # noqa: B008 - immutable
    mode: str = "hybrid",
    rrf_k: int = 60,
) -> list[Hit]:
    """Runs a search and returns up to `limit` hits, best first.

    Args:
        conn: A connection to a database holding the projections.
        query: Free text for the keyword channel.
        vector: The query embedding as float32 bytes, for the vector channel.
        limit: Most results to return.
        filter: Restrictions on scope, type, tags, layer, author and time.
        mode: "hybrid", "vector" or "keyword".
        rrf_k: Reciprocal Rank Fusion constant (rank contributions are 1 / (k + rank)).
    """
    depth = max(limit * 5, 50)
    hits: dict[int, Hit] = {}
    if vector is not None and mode in ("hybrid", "vector"):
        for rank, (num, distance) in enumerate(_vector_channel(conn, vector, depth, filter), 1):
            hit = hits.setdefault(num, Hit(memory=None))
            hit.vector_rank, hit.vector_distance = rank, float(distance)
            hit.rrf += 1.0 / (rrf_k + rank)
    fts_query = keyword_query(query) if mode in ("hybrid", "keyword") else None
    if fts_query:
        for rank, (num, score) in enumerate(_keyword_channel(conn, fts_query, depth, filter), 1):
            hit = hits.setdefault(num, Hit(memory=None))
            hit.keyword_rank, hit.bm25 = rank, float(score)
            hit.rrf += 1.0 / (rrf_k + rank)
    ranked = sorted(
        hits.items(),
        key=lambda item: (-item[1].rrf, item[1].vector_rank or depth + 1, item[1].keyword_rank or depth + 1, item[0]),
    )[:limit]
    results = []
    for num, hit in ranked:
        row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE num = ?", (num,)).fetchone()
        hit.memory = row_to_memory(row, get_links(conn, row[1]))
        hit.final = hit.rrf
        results.append(hit)
    return results
