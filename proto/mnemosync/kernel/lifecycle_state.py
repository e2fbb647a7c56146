"""The lifecycle projection: each memory's strength inputs as the server's last sweep recorded them.

Folded from "decay" entries (written by the server's system agent, see
`mnemosync.server.sweep`), on the server and in every cache alike, so offline ranking
and core memories use the same numbers the server did at its last sweep. A
memory without a row has never been used (`lifecycle.NO_USE`). The table is
a projection: `clear` empties it and a rebuild folds it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.lifecycle import NO_USE, Usage

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

SCHEMA = """
CREATE TABLE memory_lifecycle (
    memory_id TEXT PRIMARY KEY,
    uses INTEGER NOT NULL,
    last_used_ms INTEGER NOT NULL,
    stability_days REAL NOT NULL,
    use_days INTEGER NOT NULL,
    level INTEGER NOT NULL,
    stale INTEGER NOT NULL,
    as_of_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL
) WITHOUT ROWID;
"""

DECAY_FIELDS = ("as_of_ms", "strength", "stability_days", "level", "uses", "use_days", "last_used_ms", "stale")
"""The payload of a decay entry, every field always present (see DecayOp in the proto)."""

INFINITE_STABILITY = 0.0
"""How a decay entry records a stability that never fades (constitutional): 0, which means "the initial value"."""


def apply_decay(conn: Conn, e: Entry) -> None:
    """Folds one decay entry: the memory's lifecycle row becomes the entry's values."""
    p = e.payload
    conn.execute(
        "INSERT INTO memory_lifecycle (memory_id, uses, last_used_ms, stability_days, use_days, level, stale, "
        "as_of_ms, seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET "
        "uses = excluded.uses, last_used_ms = excluded.last_used_ms, stability_days = excluded.stability_days, "
        "use_days = excluded.use_days, level = excluded.level, stale = excluded.stale, "
        "as_of_ms = excluded.as_of_ms, seq = excluded.seq",
        (e.memory_id, p["uses"], p["last_used_ms"], p["stability_days"], p["use_days"], p["level"],
         int(p["stale"]), p["as_of_ms"], e.seq),
    )


def recorded(conn: Conn, memory_ids: Iterable[str]) -> dict[str, tuple[Usage, bool]]:
    """(usage, stale) the last decay entry recorded for each of `memory_ids` that has one."""
    ids = list(memory_ids)
    found: dict[str, tuple[Usage, bool]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        rows = conn.execute(
            "SELECT memory_id, uses, last_used_ms, stability_days, use_days, level, stale FROM memory_lifecycle "
            f"WHERE memory_id IN ({', '.join('?' for _ in chunk)})", chunk)
        for memory_id, uses, last, stability, days, level, stale in rows:
            found[memory_id] = (Usage(uses, last, stability, days, level), bool(stale))
    return found


def usage_for(conn: Conn, memory_ids: Iterable[str]) -> dict[str, Usage]:
    """Each memory's usage as the projection has it (memories never swept are left out: `NO_USE`)."""
    return {k: u for k, (u, _) in recorded(conn, memory_ids).items() if u != NO_USE}


def snapshot(conn: Conn, memory_id: str) -> tuple[Any, ...] | None:
    """The memory's lifecycle row without its seq, for comparing replicas."""
    row: tuple[Any, ...] | None = conn.execute(
        "SELECT uses, last_used_ms, stability_days, use_days, level, stale, as_of_ms FROM memory_lifecycle "
        "WHERE memory_id = ?", (memory_id,)).fetchone()
    return row


def clear(conn: Conn) -> None:
    """Empties the projection (a rebuild folds it again); nothing to do before the schema step that makes it."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_lifecycle'").fetchone():
        conn.execute("DELETE FROM memory_lifecycle")
