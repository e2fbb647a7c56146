"""Access statistics: how often and how lately each memory was used, as server state (never changelog entries).

A use is a Get, a search hit an agent reports as used (`RecordUse`), or a
recall. Uses are buffered in memory (`UseBuffer`, a list append: nothing is
written on the path of a read or a search) and folded into `memory_access`
in batches by the store's writer: every `flush` (the server's maintenance
task calls it every second, before each sweep, and at shutdown) turns each
use into the memory's next `lifecycle.Usage` (uses, last use, FSRS stability
grown by exp(1 - R) at the time of that use, distinct days, level).

The table survives restarts with the database. It is not a projection:
`rebuild` empties it, which costs nothing but the uses since the last sweep,
because each sweep writes every memory's usage into the changelog as a decay
entry (`mnemosync.server.sweep`) and `usage_for` falls back to what the last one said.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mnemosync.kernel import lifecycle, lifecycle_state, projections
from mnemosync.kernel.lifecycle import LayerRule, LifecycleSettings, Usage

SCHEMA = """
CREATE TABLE memory_access (
    memory_id TEXT PRIMARY KEY,
    uses INTEGER NOT NULL,
    last_used_ms INTEGER NOT NULL,
    stability_days REAL NOT NULL,
    use_days INTEGER NOT NULL,
    level INTEGER NOT NULL
) WITHOUT ROWID;
"""

KINDS = ("get", "used", "recall")
"""What a use can be: a Get, a search hit the agent reports as used, a recall of a memory (archived or fading)."""

MAX_BUFFERED = 100_000
"""Uses held in memory at most; past it the oldest are dropped (counted in `UseBuffer.dropped`)."""


@dataclass(frozen=True)
class Use:
    """One use of a memory at a time."""

    memory_id: str
    at_ms: int
    kind: str = "get"


class UseBuffer:
    """Uses waiting to be written (thread-safe; `take` empties it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._uses: list[Use] = []
        self.dropped = 0

    def add(self, use: Use) -> None:
        with self._lock:
            if len(self._uses) >= MAX_BUFFERED:
                self._uses.pop(0)
                self.dropped += 1
            self._uses.append(use)

    def take(self) -> list[Use]:
        with self._lock:
            uses, self._uses = self._uses, []
        return uses


def usage_for(conn, memory_ids: Iterable[str]) -> dict[str, Usage]:
    """Each memory's usage: the access statistics where they have it, else what the last sweep recorded."""
    ids = list(memory_ids)
    found = lifecycle_state.usage_for(conn, ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for memory_id, uses, last, stability, days, level in conn.execute(
                "SELECT memory_id, uses, last_used_ms, stability_days, use_days, level FROM memory_access "
                f"WHERE memory_id IN ({', '.join('?' for _ in chunk)})", chunk):
            found[memory_id] = Usage(uses, last, stability, days, level)
    return found


def write(conn, uses: list[Use], settings: LifecycleSettings, layers: Mapping[int, LayerRule]) -> int:
    """Folds `uses` into `memory_access` (caller holds the write transaction); returns how many counted.

    Uses of memories that do not exist are ignored (an id the agent got wrong
    is not worth failing a batch for). Uses are applied in time order.
    """
    counted = 0
    current: dict[str, Usage] = usage_for(conn, {u.memory_id for u in uses})
    memories = {}
    for use in sorted(uses, key=lambda u: u.at_ms):
        m = memories.get(use.memory_id) or projections.get_memory(conn, use.memory_id)
        if m is None:
            continue
        memories[use.memory_id] = m
        current[use.memory_id] = lifecycle.used(m, current.get(use.memory_id, lifecycle.NO_USE), use.at_ms,
                                                settings, layers)
        counted += 1
    conn.executemany(
        "INSERT INTO memory_access (memory_id, uses, last_used_ms, stability_days, use_days, level) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (memory_id) DO UPDATE SET uses = excluded.uses, "
        "last_used_ms = excluded.last_used_ms, stability_days = excluded.stability_days, "
        "use_days = excluded.use_days, level = excluded.level",
        [(k, u.uses, u.last_used_ms, _finite(u.stability_days), u.use_days, u.level)
         for k, u in current.items() if k in memories],
    )
    return counted


def _finite(stability: float) -> float:
    return lifecycle_state.INFINITE_STABILITY if stability == float("inf") else stability


def clear(conn) -> None:
    """Empties the statistics (`rebuild`)."""
    conn.execute("DELETE FROM memory_access")
