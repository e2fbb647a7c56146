"""Hybrid search: exact vector KNN and FTS5 BM25, fused by their normalised scores.

Runs on any database holding the projections (the server's, or an agent's
cache), so the offline search an agent does is the server's search. An agent's
writes still waiting in its outbox are laid over its cache inside a transaction
that is rolled back (`search_overlaid`), so they are ranked as the server
will rank them once sent.

User text never reaches FTS5 as query syntax: `keyword_query` keeps only word
tokens and quotes each one, so operators such as `NEAR`, `*`, `:` or unbalanced
quotes are searched for as text (or dropped), never interpreted.

Fusion. Rank fusion (RRF) gives the tenth hit of a channel almost what it
gives the first, whatever their scores, so a channel that is weak for a query
(the keyword channel for a paraphrase, the vector channel for chatty turns
that all look alike to the embedding model) drags the other down. Hybrid
search fuses scores instead, each normalised so that it says how far ahead of
the rest of its list a memory is:

* vector part: (similarity - similarity of the deepest candidate) /
  (best similarity - that), 1 for the nearest memory, 0 at the list's depth;
* keyword part: KEYWORD_WEIGHT x sqrt(best coverage in the list) x
  (BM25 / best BM25) x coverage ** COVERAGE_POWER, where a memory's coverage is
  the IDF-weighted share of the query's searchable terms it contains. A memory
  that matches every rare word of the question leads; one that shares a single
  common word with it adds almost nothing; and when no memory covers much of
  the question (a paraphrase), the whole keyword channel counts for less.

Only terms that can rank anything take part (stop words and terms in more
than half of the memories, whose BM25 IDF is zero, are left out), and each
channel contributes its CHANNEL_DEPTH best. The constants were chosen on the
dev split of both labelled sets, with the vector channel as it is and with it
deliberately weakened, and are reported on the test split (see ops/bench).
Every hit keeps its parts (ranks, distance, BM25, coverage, each channel's
part, the fused score), and `final` is what results are ordered by.

Vectors of automated agents (issue 33). Every agent computes its own vectors,
so an automated one (text authority WEAK_VECTOR_FROM or weaker) could give its
memory any query's embedding and be ranked first for it whatever it says. In
the fusion such a memory's vector part counts only as far as its words bear it
out: scaled by its keyword coverage over WEAK_VECTOR_COVERAGE (capped at 1),
nothing without a keyword match. `vector_earned` is the same test for callers
that read similarity directly (the prompt hook's bar).

Cognitive re-ranking (issue 15). With a `Ranking`, the RERANK_DEPTH best fused
candidates are scored again by `mnemosync.kernel.lifecycle.score`: relevance (the fused score over
the best one), ACT-R activation from its use (with the fan effect over the
context tags: the filter's tags and the query's words that are tags),
HaluMem-adjusted confidence and importance, seed 002's 60/25/15 by default;
the hit carries each part and `final` is their sum. Without one (`ranking=None`,
or SearchRequest.fusion_only) `final` is the fused score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from mnemosync.kernel import lifecycle, lifecycle_state, procedures, projections, source_projection, vectors
from mnemosync.kernel.memory import MEMORY_COLUMNS, MemoryRow, row_to_memory, text_authority

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn
    from mnemosync.kernel.graph import Step

MODES = ("hybrid", "vector", "keyword")
MAX_KEYWORD_TERMS = 32
CHANNEL_DEPTH = 100
"""How many candidates each channel contributes to the fusion (more for a limit above 20)."""
WEAK_VECTOR_FROM = 4
"""Text authority from which a memory's vector is not taken on trust (automated agents: see the module docstring)."""
WEAK_VECTOR_COVERAGE = 0.5
"""Keyword coverage at which such a memory's vector part counts in full."""
KEYWORD_WEIGHT = 8.0
"""The keyword part of a memory matching every searchable query term at the best BM25 (the vector part is at
most 1)."""
COVERAGE_POWER = 1.5
"""How steeply the keyword part falls with the share of the query a memory covers."""

# Words that say nothing about which memory is meant: the Snowball English stop list, the modal verbs, and the
# pieces the tokenizer leaves of contractions ("Maya's" -> "maya", "s").
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could d did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself ll m may me might more most must my myself no nor
    not of off on once only or other ought our ours ourselves out over own re s same shall she should so some such
    t than that the their theirs them themselves then there these they this those through to too under until up ve
    very was we were what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
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
    """A search result with the parts of its score (0 for a part that does not apply).

    Attributes:
        vector_rank: 1-based rank in the vector channel (0: not found by it).
        vector_distance: Cosine distance to the query vector.
        keyword_rank: 1-based rank in the keyword channel (0: not found by it).
        bm25: FTS5 BM25 score (more negative is better).
        keyword_coverage: IDF-weighted share of the query's searchable terms the memory contains (hybrid only).
        vector_score: The vector channel's part of `fused` (see the module docstring).
        keyword_score: The keyword channel's part of `fused`.
        rrf: Plain Reciprocal Rank Fusion of the two ranks, for comparison; not used for ordering.
        fused: vector_score + keyword_score.
        relevance: fused / the best fused score of the search (re-ranking only, as all below).
        activation: ACT-R activation A (floored by layer).
        confidence: Confidence as ranked (HaluMem: x0.7 when stale).
        relevance_part, activation_part, confidence_part, importance_part: The weighted parts; they add up to
            `final` when re-ranked.
        final: What results are ordered by: the sum of the parts, or `fused` without re-ranking.
        neighbours: The hit's graph neighbours, when asked for.
    """

    memory: MemoryRow
    vector_rank: int = 0
    vector_distance: float = 0.0
    keyword_rank: int = 0
    bm25: float = 0.0
    keyword_coverage: float = 0.0
    vector_score: float = 0.0
    keyword_score: float = 0.0
    rrf: float = 0.0
    fused: float = 0.0
    relevance: float = 0.0
    activation: float = 0.0
    confidence: float = 0.0
    relevance_part: float = 0.0
    activation_part: float = 0.0
    confidence_part: float = 0.0
    importance_part: float = 0.0
    final: float = 0.0
    neighbours: tuple[Step, ...] = ()
    """`mnemosync.kernel.graph.Step`s one link away, when the search asked for them (`graph.neighbours`)."""


@dataclass(frozen=True)
class Ranking:
    """How to re-rank fused candidates with the lifecycle's signals.

    Attributes:
        now_ms: The time activation and staleness are computed for.
        usage: (conn, memory ids) -> their `lifecycle.Usage` (the server passes its access statistics;
            caches read the lifecycle projection, the default).
        settings: Weights and model parameters.
        layers: Activation floors per layer.
    """

    now_ms: int
    usage: Callable[[Conn, Iterable[str]], Mapping[str, lifecycle.Usage]] = lifecycle_state.usage_for
    settings: lifecycle.LifecycleSettings = lifecycle.DEFAULT
    layers: Mapping[int, lifecycle.LayerRule] = field(default_factory=lambda: lifecycle.DEFAULT_LAYERS)


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


def idf_weights(conn: Conn, terms: list[str]) -> list[float]:
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


def keyword_coverage(conn: Conn, terms: list[str], weights: list[float], nums: list[int]) -> dict[int, float]:
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


def _placeholders(values: Iterable[object]) -> str:
    return ", ".join("?" for _ in values)


def _tag_clause(column: str, tags: tuple[str, ...]) -> tuple[str, list[Any]]:
    sql = (
        f"{column} IN (SELECT num FROM memory_tags WHERE tag IN ({_placeholders(tags)}) "
        "GROUP BY num HAVING count(*) = ?)"
    )
    return sql, [*tags, len(set(tags))]


def _tagged_nums(conn: Conn, tags: tuple[str, ...]) -> tuple[int, ...]:
    clause, params = _tag_clause("num", tags)
    return tuple(n for (n,) in conn.execute(f"SELECT DISTINCT num FROM memory_tags WHERE {clause}", params))


def _vector_channel(conn: Conn, vector: bytes, depth: int, f: Filter) -> list[tuple[int, float]]:
    restrict = vectors.Restrict(
        scopes=f.scopes, types=f.types, layers=f.layers, authors=f.authors,
        include_archived=f.include_archived, created_after_ms=f.created_after_ms,
        created_before_ms=f.created_before_ms, nums=_tagged_nums(conn, f.tags) if f.tags else None,
    )
    return vectors.knn(conn, vector, depth, restrict=restrict)


def _memory_conditions(f: Filter) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
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


def _keyword_channel(conn: Conn, fts_query: str, depth: int, f: Filter) -> list[tuple[int, float]]:
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
    best: list[tuple[int, float]] = conn.execute(sql, [fts_query, *params, depth]).fetchall()
    return best


def search(
    conn: Conn,
    *,
    query: str = "",
    vector: bytes | None = None,
    limit: int = 10,
    filter: Filter = Filter(),  # noqa: B008 - immutable
    mode: str = "hybrid",
    rrf_k: int = 60,
    ranking: Ranking | None = None,
) -> list[Hit]:
    """Runs a search and returns up to `limit` hits, best first.

    Args:
        conn: A connection to a database holding the projections.
        query: Free text for the keyword channel.
        vector: The query embedding as float32 bytes, for the vector channel.
        limit: Most results to return.
        filter: Restrictions on scope, type, tags, layer, author and time.
        mode: "hybrid", "vector" or "keyword". A single channel ranks by its own score (similarity, or
            BM25), normalised as in the fusion.
        rrf_k: The constant of the plain RRF score each hit reports (1 / (k + rank) per channel).
        ranking: Re-rank the candidates with the lifecycle's signals (None: order by the fused score).
    """
    depth = max(limit * 5, CHANNEL_DEPTH)
    hits: dict[int, Hit] = {}
    nearest = _vector_channel(conn, vector, depth, filter) if vector is not None and mode != "keyword" else []
    fused = bool(nearest) and mode == "hybrid"
    terms = keyword_terms(query, stop_word_fallback=not fused) if mode in ("hybrid", "keyword") else []
    weights: list[float] = []
    if fused and terms:  # terms in most memories can only add noise to the fusion
        weights = idf_weights(conn, terms)
        terms, weights = [t for t, w in zip(terms, weights, strict=True) if w > 0], [w for w in weights if w > 0]
    matched = _keyword_channel(conn, " OR ".join(terms), depth, filter) if terms else []

    if nearest:
        best, floor = 1.0 - nearest[0][1], 1.0 - nearest[-1][1]
        for rank, (num, distance) in enumerate(nearest, 1):
            hit = hits.setdefault(num, Hit(memory=cast(MemoryRow, None)))  # set below, before it is returned
            hit.vector_rank, hit.vector_distance = rank, float(distance)
            hit.vector_score = (1.0 - distance - floor) / (best - floor) if best > floor else 1.0
            hit.rrf += 1.0 / (rrf_k + rank)
    if matched:
        coverage = keyword_coverage(conn, terms, weights, [num for num, _ in matched]) if fused else {}
        weight = KEYWORD_WEIGHT * math.sqrt(max(coverage.values(), default=1.0)) if fused else 1.0
        best_bm25 = matched[0][1]
        for rank, (num, score) in enumerate(matched, 1):
            hit = hits.setdefault(num, Hit(memory=cast(MemoryRow, None)))  # set below, before it is returned
            hit.keyword_rank, hit.bm25 = rank, float(score)
            share = score / best_bm25 if best_bm25 < 0 else 1.0
            if fused:
                hit.keyword_coverage = coverage.get(num, 1.0)
                share *= hit.keyword_coverage ** COVERAGE_POWER
            hit.keyword_score = weight * share
            hit.rrf += 1.0 / (rrf_k + rank)
    if fused:
        for num in _weak_vectors(conn, [num for num, hit in hits.items() if hit.vector_rank]):
            hit = hits[num]
            hit.vector_score *= min(1.0, hit.keyword_coverage / WEAK_VECTOR_COVERAGE) if hit.keyword_rank else 0.0
    for hit in hits.values():
        hit.fused = hit.final = hit.vector_score + hit.keyword_score
    rows: dict[int, MemoryRow] = {}
    if ranking is not None and hits:
        rows = _rerank(conn, hits, ranking, query, filter, limit)
    ranked = sorted(
        hits.items(),
        key=lambda item: (-item[1].final, item[1].vector_rank or depth + 1, item[1].keyword_rank or depth + 1,
                          item[0]),
    )[:limit]
    results = []
    for num, hit in ranked:
        if num in rows:
            hit.memory = replace(rows[num], links=tuple(projections.shown_links(conn, rows[num].id)))
        else:
            row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE num = ?", (num,)).fetchone()
            [hit.memory] = procedures.attach(conn, source_projection.attach(
                conn, [row_to_memory(row, projections.shown_links(conn, row[1]))]))
        results.append(hit)
    return results


def _weak_vectors(conn: Conn, nums: list[int]) -> list[int]:
    """The rows among `nums` whose visible text an automated agent wrote (WEAK_VECTOR_FROM or weaker)."""
    found = []
    for start in range(0, len(nums), 500):
        chunk = nums[start:start + 500]
        found += [num for (num,) in conn.execute(
            f"SELECT num FROM memories WHERE num IN ({_placeholders(chunk)}) "
            "AND coalesce(nullif(content_authority, 0), authority) >= ?", (*chunk, WEAK_VECTOR_FROM))]
    return found


def vector_earned(hit: Hit) -> bool:
    """False when `hit`'s similarity alone cannot be trusted: an automated agent wrote its text and its words do
    not bear it out (no keyword match covering WEAK_VECTOR_COVERAGE of the query)."""
    if text_authority(hit.memory) < WEAK_VECTOR_FROM:
        return True
    return bool(hit.keyword_rank) and hit.keyword_coverage >= WEAK_VECTOR_COVERAGE


def context_tags(conn: Conn, query: str, f: Filter) -> dict[str, int]:
    """The tags a search primes (the filter's, and the query's words that are tags) with their fan: how many
    memories carry each."""
    words = {t.lower() for t in _TOKEN.findall(query) if t.lower() not in STOP_WORDS}
    wanted = sorted(set(f.tags) | words)[:MAX_KEYWORD_TERMS]
    if not wanted:
        return {}
    return dict(conn.execute(f"SELECT tag, count(*) FROM memory_tags WHERE tag IN ({_placeholders(wanted)}) "
                             "GROUP BY tag", wanted).fetchall())


RERANK_DEPTH = 50
"""How many of the best fused candidates are re-ranked (more for a limit above 10: five times the limit). The
rest keep their fused order below them: a candidate that far down would need a relevance near the top's to rise."""


def _rerank(conn: Conn, hits: dict[int, Hit], ranking: Ranking, query: str, f: Filter,
            limit: int) -> dict[int, MemoryRow]:
    """Scores the best fused candidates with `lifecycle.score`; returns their rows (without links) by num.

    Candidates past the re-ranking depth get a final below every re-ranked one (their fused order kept)."""
    order = sorted(hits, key=lambda n: (-hits[n].fused, hits[n].vector_rank or CHANNEL_DEPTH * 10,
                                        hits[n].keyword_rank or CHANNEL_DEPTH * 10, n))
    nums = order[:max(RERANK_DEPTH, limit * 5)]
    for rest, num in enumerate(order[len(nums):]):
        hits[num].final = -10.0 - rest
    rows = {m.num: m for m in procedures.attach(conn, source_projection.attach(conn, [
        row_to_memory(r) for r in conn.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE num IN ({', '.join(str(int(n)) for n in nums)})")]))}
    usage = ranking.usage(conn, [m.id for m in rows.values()])
    context = context_tags(conn, query, f)
    best = max(h.fused for h in hits.values())
    for num in nums:
        hit, m = hits[num], rows[num]
        s = lifecycle.score(m, usage.get(m.id, lifecycle.NO_USE), hit.fused / best if best > 0 else 0.0,
                            ranking.now_ms, context, ranking.settings, ranking.layers)
        hit.relevance, hit.activation, hit.confidence = s.relevance, s.activation, s.confidence
        hit.relevance_part, hit.activation_part = s.relevance_part, s.activation_part
        hit.confidence_part, hit.importance_part, hit.final = s.confidence_part, s.importance_part, s.final
    return rows


def search_overlaid(conn: Conn, overlay: Sequence[tuple[MemoryRow, bytes | None]], **kwargs: Any) -> list[Hit]:
    """`search` as if `overlay`'s memories (with their vectors) replaced or joined those `conn` holds.

    An agent's writes waiting in its outbox are searched this way over its
    cache, so they rank exactly as the server will rank them once sent: the
    normalisations and BM25's statistics are those of one combined set of
    memories, not of two lists merged afterwards. The overlay is written
    inside a savepoint that is always rolled back; nothing of it stays.

    Args:
        conn: A connection to a database holding the projections, outside any transaction.
        overlay: (memory, its vector or None) to show in place of the stored memory of the same id.
        **kwargs: As for `search`.
    """
    if not overlay:
        return search(conn, **kwargs)
    conn.execute("SAVEPOINT search_overlay")
    try:
        for memory, vector in overlay:
            num = projections.remove_memory(conn, memory.id)
            projections.put_memory(conn, replace(memory, num=num or 0), vector)
        return search(conn, **kwargs)
    finally:
        conn.execute("ROLLBACK TO search_overlay")
        conn.execute("RELEASE search_overlay")
