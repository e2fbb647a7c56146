"""Read-only listings over the projections: recent memories, a filtered page of memories, topics, a timeline,
counts, id prefixes.

They read only the `memories` and `memory_tags` projections, so they answer
the same on any replica: an agent's cache (where the MCP shim's lists come
from, through `mnemosync.agent.local_reads`, with no server round trip) or the
server's store. Memories come back as `MemoryRow`s with links and open
conflicts left empty (the lists built from them do not show those) and texts
as stored: whoever shows them masks secrets on the way out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from mnemosync.kernel import origin, procedures, secrets_scan, source_projection
from mnemosync.kernel.memory import LAYERS, MEMORY_COLUMNS, MemoryRow, row_to_memory

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn


def _in(column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    return f"{column} IN ({', '.join('?' for _ in values)})", list(values)


def _filters(*, scopes: Sequence[str] = (), types: Sequence[str] = (), tags: Sequence[str] = (),
             include_archived: bool = False) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
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


def recent(conn: Conn, *, since_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
           tags: Sequence[str] = (), limit: int = 20, offset: int = 0) -> list[MemoryRow]:
    """Live memories created since `since_ms`, newest first (one page, `limit` after `offset`)."""
    where, params = _filters(scopes=scopes, types=types, tags=tags)
    where.append("created_at_ms >= ?")
    params.append(since_ms)
    rows = _rows(
        conn,
        f"SELECT {MEMORY_COLUMNS} FROM memories {_sql_where(where)} ORDER BY created_at_ms DESC, num DESC "
        "LIMIT ? OFFSET ?", (*params, limit, offset))
    return [row_to_memory(r) for r in rows]


def memories_page(conn: Conn, *, scopes: Sequence[str] = (), type: str = "", author_agent: str = "", layer: int = 0,
                  id_prefix: str = "", include_archived: bool = False, limit: int = 50,
                  offset: int = 0) -> tuple[list[MemoryRow], int]:
    """One page of the memories that match, newest first (by when they were added), and how many match in all.

    Args:
        scopes: Any of these (empty: every scope).
        type, author_agent: Only this type, only memories this agent added ("": any).
        layer: Only this layer (0: any).
        id_prefix: Only memories whose id starts with this (lower-case hex and dashes, as validated by the caller).
        include_archived: Forgotten memories too.
    """
    where, params = _filters(scopes=scopes, types=(type,) if type else (), include_archived=include_archived)
    for column, value in (("author_agent", author_agent), ("layer", layer)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if id_prefix:
        where.append("id >= ? AND id < ?")
        params += [id_prefix, id_prefix + "\uffff"]
    total = _rows(conn, f"SELECT count(*) FROM memories {_sql_where(where)}", params)[0][0]
    rows = _rows(conn, f"SELECT {MEMORY_COLUMNS} FROM memories {_sql_where(where)} "
                       "ORDER BY created_at_ms DESC, num DESC LIMIT ? OFFSET ?", (*params, limit, offset))
    return origin.attach(conn, [row_to_memory(r) for r in rows]), total


class TopicRow(NamedTuple):
    """A tag or type, its live-memory count and the newest change among them."""

    name: str
    count: int  # type: ignore[assignment]  # the field shadows tuple.count, as it does at runtime
    last_ms: int


def tag_topics(conn: Conn, *, scopes: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TopicRow]:
    """Tags of live memories, most used first, each masked like every text on the way out (`secrets_scan.mask`)."""
    where, params = _filters(scopes=scopes)
    rows = _rows(
        conn,
        "SELECT t.tag, count(*), max(memories.updated_at_ms) FROM memory_tags t "
        f"JOIN memories ON memories.num = t.num {_sql_where(where)} "
        "GROUP BY t.tag ORDER BY count(*) DESC, t.tag LIMIT ? OFFSET ?", (*params, limit, offset))
    return [TopicRow(secrets_scan.mask(tag), count, last_ms) for tag, count, last_ms in rows]


def type_topics(conn: Conn, *, scopes: Sequence[str] = ()) -> list[TopicRow]:
    """Types of live memories, most used first."""
    where, params = _filters(scopes=scopes)
    rows = _rows(
        conn,
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


def timeline(conn: Conn, *, start_ms: int, end_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
             tags: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TimelineRow]:
    """Creations and last changes of memories between two times, oldest first.

    The projections hold each memory's current state, not its whole history, so
    a memory changed several times shows its creation and its latest change.
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
    rows = _rows(conn, sql, (*params, *params, start_ms, end_ms, limit, offset))
    return [TimelineRow(*r[:8]) for r in rows]


def candidates(conn: Conn, *, scopes: Sequence[str], limit: int = 2000) -> list[MemoryRow]:
    """Live memories in the scopes that can rank for core memories (higher layers, importance and
    newer changes first, so the cut at `limit` drops only the least likely), with their sources and last
    verification (the session-start block marks a stale one)."""
    where, params = _filters(scopes=scopes)
    rows = _rows(
        conn,
        f"SELECT {MEMORY_COLUMNS} FROM memories {_sql_where(where)} "
        "ORDER BY layer, importance DESC, updated_at_ms DESC LIMIT ?", (*params, limit))
    return procedures.attach(conn, source_projection.attach(conn, [row_to_memory(r) for r in rows]))


def counts(conn: Conn, scopes: Sequence[str] | None = None) -> dict[str, Any]:
    """Live and forgotten memories, live ones by layer, scope and type (only in `scopes` when given)."""
    if scopes is not None and not scopes:
        return {"live": 0, "forgotten": 0, "by_layer": {}, "by_scope": {}, "by_type": {}}
    where, params = _filters(scopes=scopes or (), include_archived=True)
    live, archived = _rows(
        conn,
        f"SELECT coalesce(sum(archived = 0), 0), coalesce(sum(archived), 0) FROM memories {_sql_where(where)}",
        params)[0]
    where, params = _filters(scopes=scopes or ())
    grouped: dict[str, dict[str, int]] = {}
    for column in ("layer", "scope", "type"):
        grouped[column] = {str(k): n for k, n in _rows(
            conn,
            f"SELECT {column}, count(*) FROM memories {_sql_where(where)} GROUP BY {column} "
            "ORDER BY count(*) DESC LIMIT 50", params)}
    by_layer = {LAYERS.get(int(k), k): n for k, n in grouped["layer"].items()}
    return {"live": live, "forgotten": archived, "by_layer": by_layer, "by_scope": grouped["scope"],
            "by_type": grouped["type"]}


def ids_starting_with(conn: Conn, prefix: str, limit: int = 3) -> list[str]:
    """Up to `limit` memory ids that start with `prefix` (lower-case hex and dashes)."""
    return [r[0] for r in _rows(conn, "SELECT id FROM memories WHERE id >= ? AND id < ? LIMIT ?",
                                (prefix, prefix + "\uffff", limit))]


def _rows(conn: Conn, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = conn.execute(sql, params).fetchall()
    return rows
