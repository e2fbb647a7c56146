"""Access statistics: how often and how lately each memory was used, as server state (never changelog entries).

A use is a Get, a search hit an agent reports as used (`RecordUse`), or a
recall. Uses are buffered in memory (`UseBuffer`, a list append: nothing is
written on the path of a read or a search) and folded into `memory_access`
in batches by the store's writer: every `flush` (the server's maintenance
task calls it every second, before each sweep, and at shutdown) turns each
use into the memory's next `lifecycle.Usage` (uses, last use, FSRS stability
grown by exp(1 - R) at the time of that use, distinct days, level).

Uses cannot be bought: an id listed many times in one RecordUse counts once
(`mnemosync.server.service`), and
an agent's uses of one memory count at most MAX_USES_PER_AGENT_DAY times a
(UTC) day, Gets included (`use_quota`, pruned to today and yesterday), so no
agent can lift a memory's activation to where it is never archived by
calling RecordUse in a loop.

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
from mnemosync.kernel.memory import MemoryRow

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

QUOTA_SCHEMA = """
CREATE TABLE use_quota (
    agent_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    day INTEGER NOT NULL,
    uses INTEGER NOT NULL,
    PRIMARY KEY (agent_id, memory_id, day)
) WITHOUT ROWID;
"""
"""How many uses of each memory each agent had counted on each day (today's and yesterday's rows only)."""

MAX_USES_PER_AGENT_DAY = 5
"""Uses of one memory by one agent that count in one UTC day; more are ignored."""

DAY_MS = 86_400_000

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
    agent: str = ""
    """Who used it (counted against its daily quota); "" for uses no agent made."""


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
    is not worth failing a batch for), and so are uses past the agent's daily
    quota. Uses are applied in time order.
    """
    counted = 0
    current: dict[str, Usage] = usage_for(conn, {u.memory_id for u in uses})
    memories: dict[str, MemoryRow] = {}
    quota = _Quota(conn)
    for use in sorted(uses, key=lambda u: u.at_ms):
        m = memories.get(use.memory_id) or projections.get_memory(conn, use.memory_id)
        if m is None or not quota.admit(use):
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
    quota.save()
    return counted


class _Quota:
    """The agents' daily use quotas, read as needed and written back in one go (`use_quota`)."""

    def __init__(self, conn) -> None:
        self._conn = conn
        self._counts: dict[tuple[str, str, int], int] = {}

    def admit(self, use: Use) -> bool:
        """Counts `use` against its agent's quota; False when the quota for that memory and day is spent."""
        if not use.agent:
            return True
        key = (use.agent, use.memory_id, use.at_ms // DAY_MS)
        if key not in self._counts:
            row = self._conn.execute("SELECT uses FROM use_quota WHERE agent_id = ? AND memory_id = ? AND day = ?",
                                     key).fetchone()
            self._counts[key] = row[0] if row else 0
        if self._counts[key] >= MAX_USES_PER_AGENT_DAY:
            return False
        self._counts[key] += 1
        return True

    def save(self) -> None:
        if not self._counts:
            return
        self._conn.executemany("INSERT INTO use_quota (agent_id, memory_id, day, uses) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (agent_id, memory_id, day) DO UPDATE SET uses = excluded.uses",
                               [(*key, n) for key, n in self._counts.items()])
        today = max(day for _, _, day in self._counts)
        self._conn.execute("DELETE FROM use_quota WHERE day < ?", (today - 1,))


def _finite(stability: float) -> float:
    return lifecycle_state.INFINITE_STABILITY if stability == float("inf") else stability


def clear(conn) -> None:
    """Empties the statistics (`rebuild`)."""
    conn.execute("DELETE FROM memory_access")
    conn.execute("DELETE FROM use_quota")
