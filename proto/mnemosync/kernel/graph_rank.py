"""Graph search (issue 31, seed 002's graph_search): Personalized PageRank over the typed link graph.

The walk starts from seed memories (a search's hits) and spreads along links
in both directions, each link weighted by its weight; with probability
`alpha` it jumps back to a seed (the seeds share the restart evenly). A
memory without usable links returns to the seeds too, so the scores always
sum to 1. Power iteration until no score moves more than `TOLERANCE`.

Only live memories of the scopes the caller may read take part: the walk
neither reaches nor passes through anything else, as the other graph queries
(`mnemosync.kernel.graph`) behave. Each result carries the path that reached
it: the fewest links from a seed (ties: the seed and via memory first by id).
Run alike by the server (`GraphSearch`) and a cache, so both rank the same.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mnemosync.kernel import graph, procedures, source_projection
from mnemosync.kernel import links as link_types
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.memory import MemoryRow

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

DEFAULT_ALPHA = 0.15
DEFAULT_SEEDS = 5
MAX_SEEDS = 50
DEFAULT_LIMIT = 10
MAX_LIMIT = 100
MAX_NODES = 20_000
"""The walk considers at most this many memories (the nearest to the seeds)."""
TOLERANCE = 1e-9
MAX_ITERATIONS = 500


@dataclass(frozen=True)
class Ranked:
    """One memory the walk reached: its score, the path from a seed (ids, then the link types), whether a seed."""

    memory: MemoryRow
    score: float
    path: tuple[str, ...]
    relations: tuple[str, ...]
    seed: bool


@dataclass(frozen=True)
class GraphRank:
    """A graph search's answer: best first, and the iterations the power method ran."""

    results: list[Ranked]
    iterations: int


def check(*, seeds: int, alpha: float, limit: int, edge_types: Sequence[str] = ()) -> tuple[int, float, int,
                                                                                               tuple[str, ...]]:
    """A graph search's arguments with defaults filled in (0: the default).

    Raises:
        InvalidArgument: naming the argument and its bounds.
    """
    seeds = seeds or DEFAULT_SEEDS
    if not 1 <= seeds <= MAX_SEEDS:
        raise InvalidArgument(f"seeds must be 1 to {MAX_SEEDS}, got {seeds}")
    alpha = alpha or DEFAULT_ALPHA
    if not 0.0 < alpha < 1.0:
        raise InvalidArgument(f"alpha must be between 0 and 1 (exclusive), got {alpha}")
    limit = limit or DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be 1 to {MAX_LIMIT}, got {limit}")
    return seeds, alpha, limit, link_types.validate_types(edge_types)


def pagerank(adjacency: dict[str, dict[str, float]], seeds: Sequence[str], alpha: float) -> tuple[dict[str, float],
                                                                                                 int]:
    """Personalized PageRank by power iteration over a symmetric weighted adjacency (node -> neighbour -> weight).

    r' = alpha * p + (1 - alpha) * (sum over u of r[u] * w(u, v) / W(u) + dangling mass * p), p uniform over the
    seeds; returns the scores (summing to 1) and the iterations run."""
    nodes = sorted(adjacency)
    p = {n: 0.0 for n in nodes}
    for s in seeds:
        p[s] = 1.0 / len(seeds)
    totals = {n: sum(adjacency[n].values()) for n in nodes}
    r = dict(p)
    for iteration in range(1, MAX_ITERATIONS + 1):
        dangling = sum(r[n] for n in nodes if totals[n] <= 0)
        nxt = {n: (alpha + (1 - alpha) * dangling) * p[n] for n in nodes}
        for u in nodes:
            if totals[u] > 0 and r[u]:
                share = (1 - alpha) * r[u] / totals[u]
                for v, w in adjacency[u].items():
                    nxt[v] += share * w
        moved = max(abs(nxt[n] - r[n]) for n in nodes)
        r = nxt
        if moved < TOLERANCE:
            return r, iteration
    return r, MAX_ITERATIONS


def graph_search(conn: Conn, seed_ids: Sequence[str], *, readable: graph.Readable | None = None,
                 scopes: Sequence[str] = (), edge_types: Sequence[str] = (), alpha: float = DEFAULT_ALPHA,
                 limit: int = DEFAULT_LIMIT) -> GraphRank:
    """Ranks the live, readable memories linked (at any distance) to the seeds by Personalized PageRank.

    Args:
        conn: A connection holding the projections.
        seed_ids: The seeds, best first (unreadable or archived ones are dropped).
        readable: The test of the scopes the caller may read (None: every scope).
        scopes: Keep the walk within these scopes (empty: every readable one).
        edge_types: Follow only these link types (empty: all).
        alpha: The restart probability.
        limit: Most results.
    """
    allowed = graph._scopes(conn, readable, scopes)
    allowed_set = None if allowed is None else set(allowed)
    type_filter = graph._type_filter(edge_types)
    live: dict[str, bool] = {}

    def usable(ids: list[str]) -> None:
        todo = [i for i in ids if i not in live]
        for start in range(0, len(todo), 500):
            chunk = todo[start:start + 500]
            for memory_id, scope, archived in conn.execute(
                    f"SELECT id, scope, archived FROM memories WHERE id IN ({graph._marks(chunk)})", chunk):
                live[memory_id] = not archived and (allowed_set is None or scope in allowed_set)
            for memory_id in chunk:
                live.setdefault(memory_id, False)

    usable(list(seed_ids))
    seeds = list(dict.fromkeys(s for s in seed_ids if live[s]))
    if not seeds:
        return GraphRank([], 0)
    parent: dict[str, tuple[str, str] | None] = {s: None for s in seeds}
    edges: dict[tuple[str, str, str], float] = {}
    queue = deque(sorted(seeds))
    while queue:
        u = queue.popleft()
        rows = conn.execute(
            "SELECT 1, target_id, relation, weight FROM links l WHERE memory_id = ?" + type_filter
            + " UNION ALL SELECT 0, memory_id, relation, weight FROM links l WHERE target_id = ?" + type_filter
            + " ORDER BY 2, 3", (u, *edge_types, u, *edge_types)).fetchall()
        usable([v for _, v, _, _ in rows])
        for outgoing, v, relation, weight in rows:
            if not live[v] or v == u:
                continue
            if v not in parent:
                if len(parent) >= MAX_NODES:
                    continue
                parent[v] = (u, relation)
                queue.append(v)
            edges[(u, v, relation) if outgoing else (v, u, relation)] = weight
    adjacency: dict[str, dict[str, float]] = {n: {} for n in parent}
    for (a, b, _), weight in edges.items():
        adjacency[a][b] = adjacency[a].get(b, 0.0) + weight
        adjacency[b][a] = adjacency[b].get(a, 0.0) + weight
    scores, iterations = pagerank(adjacency, seeds, alpha)
    best = sorted(scores, key=lambda n: (-scores[n], n))[:limit]
    shown = graph._rows(conn, best)
    attached = {m.id: m for m in procedures.attach(conn, source_projection.attach(conn, list(shown.values())))}
    results = []
    for n in best:
        path, relations, step = [n], [], parent[n]
        while step is not None:
            at, relation = step
            path.append(at)
            relations.append(relation)
            step = parent[at]
        results.append(Ranked(attached[n], scores[n], tuple(reversed(path)), tuple(reversed(relations)),
                              n in seeds))
    return GraphRank(results, iterations)
