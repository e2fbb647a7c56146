"""Hybrid search: exact vector KNN and FTS5 BM25 fused with coverage-weighted Reciprocal Rank Fusion.

Runs on any database holding the projections (the server's, or an agent's
cache), so the offline search an agent does is the server's search.

User text never reaches FTS5 as query syntax: `keyword_query` keeps only word
tokens and quotes each one, so operators such as `NEAR`, `*`, `:` or unbalanced
quotes are searched for as text (or dropped), never interpreted.

Fusion. Each channel adds 1 / (k + rank) for the memories it ranks. Plain RRF
lets a memory that is mediocre in both lists beat one that a single channel
ranks first, and the keyword channel always returns *something*: for a
question phrased in other words than the memory (a paraphrase) its list is
memories sharing one common word with the question. So in hybrid search a
keyword contribution is weighted by the memory's coverage of the query: the
IDF-weighted share of the query's terms it contains, squared. Hybrid search
also leaves out terms that cannot rank anything (stop words, and terms in
more than half of the memories, whose BM25 IDF is zero). A memory that
matches the whole query (an error code, a file path, every word) keeps the full
1 / (k + rank); one that shares a single common word keeps almost nothing. On
the labelled set (ops/bench/data/retrieval) this lifts hybrid recall@10 from
below vector-only to above both channels; see ops/bench.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from server.core import vectors
from server.core.memory import MEMORY_COLUMNS, MemoryRow, row_to_memory
from server.core.projections import get_links

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


def keyword_terms(text: str, *, stop_word_fallback: bool = True) -> list[str]:
    """The quoted FTS5 phrases a query text searches for (see `keyword_query`).

    Args:
        stop_word_fallback: Search the stop words when nothing else is left
            (off in hybrid search, where the vector channel carries such a query).
    """
    tokens = _TOKEN.findall(text)
    content = [t for t in tokens if t.lower() not in STOP_WORDS] or (tokens if stop_word_fallback else [])
    unique = list(dict.fromkeys(t.lower() for t in content))[:MAX_KEYWORD_TERMS]
    return [f'"{t}"' for t in unique]


def keyword_query(text: str) -> str | None:
    """Turns free text into a safe FTS5 query, or None if it has no searchable words.

    Each token becomes a quoted phrase (so `src/auth/jwt.py` or `ERR_CONN_RESET`
    match as phrases of their parts), stop words are dropped unless nothing
    else is left, and the phrases are OR-ed so BM25 ranks documents matching
    more of them higher.
    """
    terms = keyword_terms(text)
    return " OR ".join(terms) if terms else None


def idf_weights(conn, terms: list[str]) -> list[float]:
    """BM25's IDF of each term over the memories (0 for a term in more than half of them).

    FTS5 computes the same IDF and clamps the non-positive ones to ~0, so a term
    in most memories adds nothing to any BM25 score.
    """
    total = conn.execute("SELECT max(num) FROM memories").fetchone()[0] or 0
    weights = []
    for term in terms:
        df = conn.execute("SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", (term,)).fetchone()[0]
        weights.append(max(0.0, math.log((total - df + 0.5) / (df + 0.5))))
    return weights


def keyword_coverage(conn, terms: list[str], weights: list[float], nums: list[int]) -> dict[int, float]:
    """For each memory in `nums`, the IDF-weighted share of `terms` it contains (0 to 1).

    One statement: each term's matches are gathered once (an IN subquery SQLite
    materialises) and tested against the candidates.
    """
    whole = sum(weights)
    if not terms or not nums or whole <= 0:
        return {}
    candidates = ", ".join(f"({int(n)})" for n in nums)
    tests = ", ".join("(id IN (SELECT rowid FROM memory_fts WHERE memory_fts MATCH ?))" for _ in terms)
    rows = conn.execute(f"WITH c(id) AS (VALUES {candidates}) SELECT id, {tests} FROM c", terms).fetchall()
    return {row[0]: sum(w for w, hit in zip(weights, row[1:], strict=True) if hit) / whole for row in rows}


def _placeholders(values) -> str:
    return ", ".join("?" for _ in values)


def _tag_clause(column: str, tags: tuple[str, ...]) -> tuple[str, list]:
    sql = (
        f"{column} IN (SELECT num FROM memory_tags WHERE tag IN ({_placeholders(tags)}) "
        "GROUP BY num HAVING count(*) = ?)"
    )
    return sql, [*tags, len(set(tags))]


def _tagged_nums(conn, tags: tuple[str, ...]) -> tuple[int, ...]:
    clause, params = _tag_clause("num", tags)
    return tuple(n for (n,) in conn.execute(f"SELECT DISTINCT num FROM memory_tags WHERE {clause}", params))


def _vector_channel(conn, vector: bytes, depth: int, f: Filter) -> list[tuple[int, float]]:
    restrict = vectors.Restrict(
        scopes=f.scopes, types=f.types, layers=f.layers, authors=f.authors,
        include_archived=f.include_archived, created_after_ms=f.created_after_ms,
        created_before_ms=f.created_before_ms, nums=_tagged_nums(conn, f.tags) if f.tags else None,
    )
    return vectors.knn(conn, vector, depth, restrict=restrict)


def _memory_conditions(f: Filter) -> tuple[list[str], list]:
    where, params = [], []
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
    return where, params


_BM25 = "bm25(memory_fts, 1.0, 0.5)"


def _keyword_channel(conn, fts_query: str, depth: int, f: Filter) -> list[tuple[int, float]]:
    """The `depth` best BM25 matches that pass the filter, best first (ties: smaller num).

    Ranking every match and joining each to `memories` costs time in proportion
    to the number of matches, so the unfiltered ranking is read first in
    growing pages and only its top rows are checked against the filter; the
    join is the fallback when a narrow filter leaves too few rows in the pages.
    """
    where, params = _memory_conditions(f)
    check_sql = ("SELECT m.num FROM memories m WHERE m.num IN ({})"
                 + "".join(f" AND {w}" for w in where))
    page = max(depth * 2, 100)
    for _ in range(3):
        ranked = conn.execute(
            f"SELECT rowid, {_BM25} AS score FROM memory_fts WHERE memory_fts MATCH ? "
            "ORDER BY score, rowid LIMIT ?", (fts_query, page),
        ).fetchall()
        if not ranked:
            return []
        nums = ", ".join(str(int(num)) for num, _ in ranked)
        allowed = {num for (num,) in conn.execute(check_sql.format(nums), params)}
        passed = [(num, score) for num, score in ranked if num in allowed]
        if len(passed) >= depth or len(ranked) < page:
            return passed[:depth]
        page *= 8
    sql = (
        f"SELECT m.num, {_BM25} AS score FROM memory_fts JOIN memories m ON m.num = memory_fts.rowid "
        f"WHERE memory_fts MATCH ?{''.join(f' AND {w}' for w in where)} ORDER BY score, m.num LIMIT ?"
    )
    return conn.execute(sql, [fts_query, *params, depth]).fetchall()


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
        rrf_k: Reciprocal Rank Fusion constant: a vector rank adds 1 / (k + rank), a keyword
            rank coverage² / (k + rank) when both channels run (see the module docstring).
    """
    depth = max(limit * 5, 50)
    hits: dict[int, Hit] = {}
    if vector is not None and mode in ("hybrid", "vector"):
        for rank, (num, distance) in enumerate(_vector_channel(conn, vector, depth, filter), 1):
            hit = hits.setdefault(num, Hit(memory=None))
            hit.vector_rank, hit.vector_distance = rank, float(distance)
            hit.rrf += 1.0 / (rrf_k + rank)
    fused = bool(hits) and mode == "hybrid"
    terms = keyword_terms(query, stop_word_fallback=not fused) if mode in ("hybrid", "keyword") else []
    weights: list[float] = []
    if fused and terms:  # terms in most memories can only add noise to the fusion
        weights = idf_weights(conn, terms)
        terms, weights = [t for t, w in zip(terms, weights, strict=True) if w > 0], [w for w in weights if w > 0]
    if terms:
        found = _keyword_channel(conn, " OR ".join(terms), depth, filter)
        coverage = keyword_coverage(conn, terms, weights, [num for num, _ in found]) if fused else {}
        for rank, (num, score) in enumerate(found, 1):
            hit = hits.setdefault(num, Hit(memory=None))
            hit.keyword_rank, hit.bm25 = rank, float(score)
            weight = 1.0
            if fused:
                hit.extra["keyword_coverage"] = round(coverage.get(num, 1.0), 4)
                weight = coverage.get(num, 1.0) ** 2
            hit.rrf += weight / (rrf_k + rank)
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
