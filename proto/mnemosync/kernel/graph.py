"""Graph queries over the projections: traverse, causal chains, timelines, neighbours of search hits.

One implementation for both ends: the server's store calls these on its
projections, the agent client on its cache (offline too), so the same
changelog gives the same answers. They read `memories` and `links` only.

Visibility is the caller's business, passed in as `readable`, a test of a
scope: a memory in a scope it fails is never returned, not even as an id,
and a walk does not pass through it. Archived memories are left out (and
not walked through) unless asked for, as in search.

Bounds: a walk goes at most MAX_DEPTH links away and returns at most
MAX_LIMIT memories. The recursive CTE keeps one row per (memory, depth),
so its work grows with the memories within reach times the depth, never
with the number of paths. Its joins are pinned (CROSS JOIN, `+column`) to go
from a memory to its links by index, never outwards from the scope index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemosync.kernel import links as link_types
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.memory import MEMORY_COLUMNS, MemoryRow, row_to_memory

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

DIRECTIONS = ("out", "in", "both")
MAX_DEPTH = 6
DEFAULT_DEPTH = 2
DEFAULT_CAUSAL_DEPTH = 3
MAX_LIMIT = 1000
DEFAULT_LIMIT = 100
MAX_NEIGHBOURS = 10
"""Neighbours attached to one search hit at most (memory-v3 expands each result by up to 10)."""
MAX_AROUND = 500
DEFAULT_AROUND = 10

Readable = Callable[[str], bool]


@dataclass(frozen=True)
class Step:
    """A memory reached by a walk: how far, and the link that reached it first.

    `direction` is "out" when `via_id` links to the memory, "in" when the
    memory links to `via_id`.
    """

    memory: MemoryRow
    depth: int
    via_id: str
    relation: str
    weight: float
    reason: str
    direction: str


@dataclass(frozen=True)
class Walk:
    """What a walk found: nearest first, at one depth by memory id; `truncated` when `limit` cut it."""

    start: MemoryRow
    steps: list[Step]
    truncated: bool = False


@dataclass(frozen=True)
class Timeline:
    """Memories oldest first by event time; `anchor_index` is the position of the memory asked about (-1: none)."""

    memories: list[MemoryRow]
    anchor_index: int = -1


def check_walk(*, direction: str, depth: int, limit: int, edge_types: Sequence[str] = (),
               default_depth: int = DEFAULT_DEPTH) -> tuple[str, int, int, tuple[str, ...]]:
    """A walk's arguments with defaults filled in (depth 0: `default_depth`, limit 0: DEFAULT_LIMIT).

    Raises:
        InvalidArgument: naming the argument and its bounds.
    """
    if direction not in DIRECTIONS:
        raise InvalidArgument(f"direction must be one of {', '.join(DIRECTIONS)}, got {str(direction)[:20]!r}")
    depth = depth or default_depth
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidArgument(f"depth must be 1 to {MAX_DEPTH}, got {depth}")
    limit = limit or DEFAULT_LIMIT
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be 1 to {MAX_LIMIT}, got {limit}")
    return direction, depth, limit, link_types.validate_types(edge_types)


def _marks(values: Sequence[object]) -> str:
    return ", ".join("?" for _ in values)


_DISTINCT_SCOPES = (
    "WITH RECURSIVE s(scope) AS (SELECT min(scope) FROM memories UNION ALL "
    "SELECT (SELECT min(scope) FROM memories WHERE scope > s.scope) FROM s WHERE s.scope IS NOT NULL) "
    "SELECT scope FROM s WHERE scope IS NOT NULL"
)
"""The scopes present, one index step each (a skip scan: a plain DISTINCT reads every row)."""


def _scopes(conn: Conn, readable: Readable | None, scopes: Sequence[str] = ()) -> list[str] | None:
    """The scopes holding memories that the caller may read (and, when given, that are among `scopes`);
    None when nothing restricts them."""
    if readable is None and not scopes:
        return None
    present = [s for (s,) in conn.execute(_DISTINCT_SCOPES)]
    return [s for s in present if (readable is None or readable(s)) and (not scopes or s in scopes)]


def _in_scopes(column: str, scopes: list[str] | None) -> tuple[str, list[str]]:
    """` AND column IN (...)` for `_scopes`' answer ("" when it restricts nothing), and its parameters."""
    return ("", []) if scopes is None else (f" AND {column} IN ({_marks(scopes)})", scopes)


def _rows(conn: Conn, ids: Iterable[str]) -> dict[str, MemoryRow]:
    ids = list(ids)
    found: dict[str, MemoryRow] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for row in conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id IN ({_marks(chunk)})", chunk):
            found[row[1]] = row_to_memory(row)
    return found


_WAYS = {"out": ("memory_id", "target_id"), "in": ("target_id", "memory_id")}
"""For each way a walk goes: the links column it leaves from and the one it arrives at."""


def _ways(direction: str) -> tuple[str, ...]:
    return ("out", "in") if direction == "both" else (direction,)


def _type_filter(types: Sequence[str], alias: str = "l") -> str:
    return f" AND {alias}.relation IN ({_marks(types)})" if types else ""


def traverse(conn: Conn, start: MemoryRow, *, readable: Readable | None = None, edge_types: Sequence[str] = (),
             direction: str = "out", depth: int = DEFAULT_DEPTH, limit: int = DEFAULT_LIMIT,
             include_archived: bool = False) -> Walk:
    """The memories within `depth` links of `start` along `edge_types` (empty: all) in `direction`.

    Each memory comes once, at the fewest links away; the link shown is the
    first, in (via id, relation, direction) order, from a memory one link
    nearer. The caller has checked that it may read `start`.

    Raises:
        InvalidArgument: a bad direction, depth, limit or edge type.
    """
    direction, depth, limit, types = check_walk(direction=direction, depth=depth, limit=limit, edge_types=edge_types)
    scopes = _scopes(conn, readable)
    if scopes == []:
        return Walk(start, [])
    in_scope, scope_params = _in_scopes("+m.scope", scopes)
    visible = in_scope + ("" if include_archived else " AND +m.archived = 0")
    kinds = _type_filter(types)
    steps_sql: list[str] = []
    params: list[Any] = [start.id]
    for way in _ways(direction):
        src, dst = _WAYS[way]
        steps_sql.append(f"SELECT l.{dst}, w.depth + 1 FROM walk w CROSS JOIN links l ON l.{src} = w.id "
                         f"CROSS JOIN memories m ON m.id = l.{dst} WHERE w.depth < ?{kinds}{visible}")
        params += [depth, *types, *scope_params]
    reach_sql = []
    for way in _ways(direction):
        src, dst = _WAYS[way]
        reach_sql.append(f"SELECT r.id, r.depth, l.{src}, l.relation, l.weight, l.reason, '{way}' FROM reached r "
                         f"CROSS JOIN links l ON l.{dst} = r.id CROSS JOIN reached p ON p.id = l.{src} "
                         f"AND p.depth = r.depth - 1 WHERE r.depth > 0{kinds}")
        params += types
    sql = (f"WITH RECURSIVE walk(id, depth) AS (SELECT ?, 0 UNION {' UNION '.join(steps_sql)}), "
           f"reached(id, depth) AS MATERIALIZED (SELECT id, min(depth) FROM walk GROUP BY id) "
           f"{' UNION ALL '.join(reach_sql)} ORDER BY 2, 1, 3, 4, 7")
    first: dict[str, tuple[Any, ...]] = {}
    for row in conn.execute(sql, params):
        first.setdefault(row[0], row)
        if len(first) > limit:
            break
    chosen = list(first.values())[:limit]
    memories = _rows(conn, (r[0] for r in chosen))
    steps = [Step(memories[i], d, via, rel, w, why, how) for i, d, via, rel, w, why, how in chosen]
    return Walk(start, steps, truncated=len(first) > limit)


def causal_chain(conn: Conn, start: MemoryRow, *, readable: Readable | None = None, direction: str = "both",
                 depth: int = DEFAULT_CAUSAL_DEPTH, limit: int = DEFAULT_LIMIT) -> Walk:
    """Causes ("in": memories with causal links towards `start`, and theirs) and effects ("out") of `start`.

    With "both", causes first, then effects, each nearest first; `limit` holds
    for each. Archived memories are left out.
    """
    direction, depth, limit, _ = check_walk(direction=direction, depth=depth, limit=limit,
                                            default_depth=DEFAULT_CAUSAL_DEPTH)
    ways = ("in", "out") if direction == "both" else (direction,)
    walks = [traverse(conn, start, readable=readable, edge_types=("causal",), direction=way, depth=depth,
                      limit=limit) for way in ways]
    return Walk(start, [s for w in walks for s in w.steps], truncated=any(w.truncated for w in walks))


def neighbours(conn: Conn, memory_ids: Sequence[str], *, readable: Readable | None = None,
               count: int = MAX_NEIGHBOURS) -> dict[str, list[Step]]:
    """Up to `count` live memories one link away (either way) from each of `memory_ids`, strongest link first
    (then by relation, memory id and direction).

    Raises:
        InvalidArgument: `count` outside 1 to MAX_NEIGHBOURS.
    """
    if not 1 <= count <= MAX_NEIGHBOURS:
        raise InvalidArgument(f"neighbours must be 0 to {MAX_NEIGHBOURS}, got {count}")
    scopes = _scopes(conn, readable)
    found: dict[str, list[tuple[Any, ...]]] = {i: [] for i in memory_ids}
    if scopes == [] or not memory_ids:
        return {i: [] for i in memory_ids}
    ids = list(dict.fromkeys(memory_ids))
    in_scope, scope_params = _in_scopes("+m.scope", scopes)
    parts, params = [], []
    for way, (src, dst) in _WAYS.items():
        parts.append(f"SELECT l.{src}, l.{dst}, l.relation, l.weight, l.reason, '{way}' FROM links l "
                     f"CROSS JOIN memories m ON m.id = l.{dst} WHERE l.{src} IN ({_marks(ids)}) AND +m.archived = 0"
                     f"{in_scope}")
        params += [*ids, *scope_params]
    sql = f"{' UNION ALL '.join(parts)} ORDER BY 1, 4 DESC, 3, 2, 6"
    for row in conn.execute(sql, params):
        if len(found[row[0]]) < count and all(r[1] != row[1] for r in found[row[0]]):
            found[row[0]].append(row)
    memories = _rows(conn, {r[1] for rows in found.values() for r in rows})
    return {i: [Step(memories[dst], 1, src, rel, w, why, how) for src, dst, rel, w, why, how in found[i]]
            for i in memory_ids}


_EVENT = "coalesce(event_time_ms, created_at_ms)"


def timeline(conn: Conn, *, readable: Readable | None = None, around: MemoryRow | None = None, limit: int = 0,
             start_ms: int | None = None, end_ms: int | None = None, scopes: Sequence[str] = (),
             tags: Sequence[str] = (), include_archived: bool = False) -> Timeline:
    """Memories by their own event time (`mnemosync.kernel.event_time`; a memory without one by its creation time),
    oldest first, ties by id.

    Around a memory: up to `limit` (default DEFAULT_AROUND, at most MAX_AROUND)
    before it and as many after it, the memory itself between them. Otherwise
    the first `limit` (default DEFAULT_LIMIT, at most MAX_LIMIT) at or after
    `start_ms` and before `end_ms`. `scopes` (empty: every readable one) and
    `tags` (all of them) narrow both.

    Raises:
        InvalidArgument: a limit out of bounds.
    """
    most, default = (MAX_AROUND, DEFAULT_AROUND) if around is not None else (MAX_LIMIT, DEFAULT_LIMIT)
    limit = limit or default
    if not 1 <= limit <= most:
        raise InvalidArgument(f"limit must be 1 to {most}, got {limit}")
    allowed = _scopes(conn, readable, scopes)
    if allowed == []:
        return Timeline([around] if around is not None else [], 0 if around is not None else -1)
    where, params = [], []
    if allowed is not None:
        where.append(f"scope IN ({_marks(allowed)})")
        params += allowed
    if not include_archived:
        where.append("archived = 0")
    for tag in tags:
        where.append("EXISTS (SELECT 1 FROM memory_tags t WHERE t.num = memories.num AND t.tag = ?)")
        params.append(tag.lower())

    def rows(conditions: list[str], values: list[Any], order: str) -> list[MemoryRow]:
        sql = (f"SELECT {MEMORY_COLUMNS} FROM memories WHERE {' AND '.join([*where, *conditions]) or 1} "
               f"ORDER BY {order} LIMIT ?")
        return [row_to_memory(r) for r in conn.execute(sql, [*params, *values, limit])]

    if around is None:
        bounds = [(f"{_EVENT} >= ?", start_ms), (f"{_EVENT} < ?", end_ms)]
        chosen = [(c, v) for c, v in bounds if v is not None]
        return Timeline(rows([c for c, _ in chosen], [v for _, v in chosen], f"{_EVENT}, id"))
    key = [around.event_time_ms if around.event_time_ms is not None else around.created_at_ms, around.id]
    before = rows([f"({_EVENT}, id) < (?, ?)"], key, f"{_EVENT} DESC, id DESC")
    after = rows([f"({_EVENT}, id) > (?, ?)"], key, f"{_EVENT}, id")
    return Timeline([*reversed(before), around, *after], len(before))
