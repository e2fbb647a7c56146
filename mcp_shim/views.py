"""Read-only views over the agent's local cache: recent memories, topics, a timeline, counts.

The cache is a live fold of the changelog (kept current by the client's
Subscribe stream), so these lists need no server round trip and work the same
offline. Queries go through `Cache.execute` and only read the `memories`,
`memory_tags` and `links` projections. Memories come back as the
projections' own `MemoryRow`, with links and open conflicts left empty (the
lists built from them do not show those).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from mcp_shim.errors import ShimError
from server.core import secrets_scan
from server.core.memory import LAYERS, MEMORY_COLUMNS, MemoryRow, row_to_memory

_ID_PREFIX = re.compile(r"^[0-9a-fA-F-]{6,36}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _in(column: str, values: Sequence) -> tuple[str, list]:
    return f"{column} IN ({', '.join('?' for _ in values)})", list(values)


def _filters(*, scopes: Sequence[str] = (), types: Sequence[str] = (), tags: Sequence[str] = (),
             include_archived: bool = False) -> tuple[list[str], list]:
    where, params = [], []
    if not include_archived:
        where.append("archived = 0")
    for column, values in (("scope", scopes), ("type", types)):
        if values:
            clause, values_ = _in(column, values)
            where.append(clause)
            params += values_
    for tag in tags:
        where.append("EXISTS (SELECT 1 FROM memory_tags t WHERE t.num = memories.num AND t.tag = ?)")
        params.append(tag.lower())
    return where, params


def _sql_where(where: list[str]) -> str:
    return f"WHERE {' AND '.join(where)}" if where else ""


def recent(cache, *, since_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
           tags: Sequence[str] = (), limit: int = 20, offset: int = 0) -> list[MemoryRow]:
    """Live memories created since `since_ms`, newest first (one page, `limit` after `offset`)."""
    where, params = _filters(scopes=scopes, types=types, tags=tags)
    where.append("created_at_ms >= ?")
    params.append(since_ms)
    rows = cache.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories {_sql_where(where)} ORDER BY created_at_ms DESC, num DESC "
        "LIMIT ? OFFSET ?", (*params, limit, offset))
    return [secrets_scan.masked(row_to_memory(r)) for r in rows]


class TopicRow(NamedTuple):
    """A tag or type, its live-memory count and the newest change among them."""

    name: str
    count: int
    last_ms: int


def tag_topics(cache, *, scopes: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TopicRow]:
    """Tags of live memories, most used first."""
    where, params = _filters(scopes=scopes)
    rows = cache.execute(
        "SELECT t.tag, count(*), max(memories.updated_at_ms) FROM memory_tags t "
        f"JOIN memories ON memories.num = t.num {_sql_where(where)} "
        "GROUP BY t.tag ORDER BY count(*) DESC, t.tag LIMIT ? OFFSET ?", (*params, limit, offset))
    return [TopicRow(*r) for r in rows]


def type_topics(cache, *, scopes: Sequence[str] = ()) -> list[TopicRow]:
    """Types of live memories, most used first."""
    where, params = _filters(scopes=scopes)
    rows = cache.execute(
        f"SELECT type, count(*), max(updated_at_ms) FROM memories {_sql_where(where)} "
        "GROUP BY type ORDER BY count(*) DESC, type", params)
    return [TopicRow(*r) for r in rows]


class TimelineRow(NamedTuple):
    """One event: a memory created at `at_ms`, or its last change."""

    event: str
    at_ms: int
    memory_id: str
    by: str
    version: int
    scope: str
    type: str
    content: str


def timeline(cache, *, start_ms: int, end_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
             tags: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TimelineRow]:
    """Creations and last changes of memories between two times, oldest first.

    The cache holds each memory's current state, not its whole history, so a
    memory changed several times shows its creation and its latest change.
    """
    where, params = _filters(scopes=scopes, types=types, tags=tags, include_archived=True)
    base = _sql_where(where)
    sql = (
        f"SELECT * FROM ("
        f"SELECT 'created' AS event, created_at_ms AS at_ms, id, author_agent, 1, scope, type, content, num "
        f"FROM memories {base} "
        f"UNION ALL SELECT CASE WHEN archived THEN 'forgotten' ELSE 'changed' END, updated_at_ms, id, "
        f"updated_by, version, scope, type, content, num FROM memories {base}"
        f"{' AND' if base else ' WHERE'} updated_at_ms > created_at_ms"
        f") WHERE at_ms >= ? AND at_ms < ? ORDER BY at_ms, num LIMIT ? OFFSET ?"
    )
    rows = cache.execute(sql, (*params, *params, start_ms, end_ms, limit, offset))
    return [TimelineRow(*r[:7], secrets_scan.mask(r[7])) for r in rows]


def candidates(cache, *, scopes: Sequence[str], limit: int = 2000) -> list[MemoryRow]:
    """Live memories in the scopes that can rank for core memories (higher layers, importance and
    newer changes first, so the cut at `limit` drops only the least likely)."""
    where, params = _filters(scopes=scopes)
    rows = cache.execute(
        f"SELECT {MEMORY_COLUMNS} FROM memories {_sql_where(where)} "
        "ORDER BY layer, importance DESC, updated_at_ms DESC LIMIT ?", (*params, limit))
    return [secrets_scan.masked(row_to_memory(r)) for r in rows]


def counts(cache) -> dict:
    """Live and forgotten memories in the cache, live ones by layer, scope and type."""
    live, archived = cache.execute(
        "SELECT coalesce(sum(archived = 0), 0), coalesce(sum(archived), 0) FROM memories")[0]
    grouped = {}
    for column in ("layer", "scope", "type"):
        grouped[column] = {str(k): n for k, n in cache.execute(
            f"SELECT {column}, count(*) FROM memories WHERE archived = 0 GROUP BY {column} "
            "ORDER BY count(*) DESC LIMIT 50")}
    by_layer = {LAYERS.get(int(k), k): n for k, n in grouped["layer"].items()}
    return {"live": live, "forgotten": archived, "by_layer": by_layer, "by_scope": grouped["scope"],
            "by_type": grouped["type"]}


def resolve_id(cache, text: str, *, also: Sequence[str] = ()) -> str:
    """A full memory id from a full id or a unique prefix of at least 6 characters.

    Args:
        cache: The agent's cache (where prefixes are looked up).
        text: What the caller gave.
        also: Other known ids (memories pending in the outbox).

    Raises:
        ShimError: the text is not an id, or the prefix matches no or several memories.
    """
    value = text.strip().lower()
    if _UUID.match(value):
        return value
    if not _ID_PREFIX.match(value):
        raise ShimError(f"{text[:40]!r} is not a memory id: give the full id (a UUID) or its first 8 characters, "
                        "as search, list_recent and the core memories show them")
    found = {r[0] for r in cache.execute("SELECT id FROM memories WHERE id >= ? AND id < ? LIMIT 3",
                                         (value, value + "\uffff"))}
    found |= {i for i in also if i.startswith(value)}
    if len(found) == 1:
        return found.pop()
    if not found:
        raise ShimError(f"no memory id starts with {value!r} in this agent's cache; give the full id, or "
                        "find the memory with search or list_recent")
    raise ShimError(f"{value!r} is the start of several memory ids ({', '.join(sorted(found))}); "
                    "give more characters")
