"""The sources projection: each memory's cited sources and its last verification, folded from the changelog.

An add or update whose payload carries `sources` sets them (and clears the
verification: it was of other sources); a "verify" entry, written by the agent
that checked the sources against its working tree
(`mnemosync.kernel.source_refs.check`), records the status, the paths that
made it, who and when. A verification changes no version: it says something
about the memory's sources, not about what the memory says. Folded the same on
the server and in every cache, so every replica shows and ranks the same
status. A table of its own, so the memory row and its history stay as they
were; `clear` empties it and a rebuild folds it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.source_refs import Verification

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

SCHEMA = """
CREATE TABLE memory_sources (
    memory_id TEXT PRIMARY KEY,
    sources TEXT NOT NULL,
    sources_at_ms INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT '',
    paths TEXT NOT NULL DEFAULT '[]',
    checked_at_ms INTEGER NOT NULL DEFAULT 0,
    checked_by TEXT NOT NULL DEFAULT '',
    seq INTEGER NOT NULL
) WITHOUT ROWID;
"""


def apply_write(conn: Conn, e: Entry) -> None:
    """An add or update: the sources it carries replace the memory's (an entry without `sources` leaves them)."""
    if "sources" not in e.payload:
        return
    conn.execute(
        "INSERT INTO memory_sources (memory_id, sources, sources_at_ms, seq) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (memory_id) DO UPDATE SET sources = excluded.sources, sources_at_ms = excluded.sources_at_ms, "
        "status = '', paths = '[]', checked_at_ms = 0, checked_by = '', seq = excluded.seq",
        (e.memory_id, json.dumps(e.payload["sources"], sort_keys=True), e.server_time_ms, e.seq))


def apply_verify(conn: Conn, e: Entry) -> None:
    """A verify entry: the memory's verification becomes the entry's (a memory without sources gets a row too)."""
    p = e.payload
    conn.execute(
        "INSERT INTO memory_sources (memory_id, sources, sources_at_ms, status, paths, checked_at_ms, checked_by, seq) "
        "VALUES (?, '[]', 0, ?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET status = excluded.status, "
        "paths = excluded.paths, checked_at_ms = excluded.checked_at_ms, checked_by = excluded.checked_by, "
        "seq = excluded.seq",
        (e.memory_id, p["status"], json.dumps(p.get("paths", [])), e.server_time_ms, e.agent_id, e.seq))
    conn.execute("UPDATE memories SET last_seq = ? WHERE id = ?", (e.seq, e.memory_id))


def scrub(conn: Conn, memory_id: str) -> None:
    """A redaction removes the memory's text, its sources and their verification (paths are text) too."""
    conn.execute("DELETE FROM memory_sources WHERE memory_id = ?", (memory_id,))


def lookup(conn: Conn, memory_ids: Iterable[str]) -> dict[str, tuple[tuple[dict[str, Any], ...], Verification]]:
    """(sources, verification) of each of `memory_ids` that has a row."""
    ids = list(memory_ids)
    found: dict[str, tuple[tuple[dict[str, Any], ...], Verification]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for memory_id, sources, at, status, paths, checked, by in conn.execute(
                "SELECT memory_id, sources, sources_at_ms, status, paths, checked_at_ms, checked_by "
                f"FROM memory_sources WHERE memory_id IN ({', '.join('?' for _ in chunk)})", chunk):
            found[memory_id] = (tuple(json.loads(sources)),
                                Verification(status, tuple(json.loads(paths)), checked, by, at))
    return found


def attach(conn: Conn, memories: list[Any]) -> list[Any]:
    """The MemoryRows with their sources and verification filled in (those without a row unchanged)."""
    found = lookup(conn, [m.id for m in memories])
    return [replace(m, sources=found[m.id][0], verification=found[m.id][1]) if m.id in found else m
            for m in memories]


def sourced(conn: Conn, scopes: tuple[str, ...] = ()) -> list[str]:
    """Ids of live memories that cite at least one source, in the given scopes (all when empty), oldest first."""
    where = f" AND m.scope IN ({', '.join('?' for _ in scopes)})" if scopes else ""
    return [r[0] for r in conn.execute(
        "SELECT m.id FROM memory_sources s JOIN memories m ON m.id = s.memory_id "
        f"WHERE s.sources != '[]' AND m.archived = 0{where} ORDER BY m.num", scopes)]


def snapshot(conn: Conn, memory_id: str) -> tuple[Any, ...] | None:
    """The memory's row without its seq, for comparing replicas."""
    row: tuple[Any, ...] | None = conn.execute(
        "SELECT sources, sources_at_ms, status, paths, checked_at_ms, checked_by FROM memory_sources "
        "WHERE memory_id = ?", (memory_id,)).fetchone()
    return row


def clear(conn: Conn) -> None:
    """Empties the projection (a rebuild folds it again); nothing to do before the schema step that makes it."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_sources'").fetchone():
        conn.execute("DELETE FROM memory_sources")
