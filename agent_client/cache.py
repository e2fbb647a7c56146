"""The agent's local cache: a fold of the changelog up to the agent's offset.

It holds the same projections as the server (`server.core.projections`, applied by
the same code), so a search here is the server's search on the same state.
The offset and the hash of the last applied entry are stored in the same
transaction as the entries, so a crash at any point leaves a consistent cache
that the next sync simply continues.

Each entry is checked before it is applied: it must follow the previous one
(seq and prev_hash) and its own hash must verify. A server whose history no
longer contains what this cache has seen is refused with HistoryMismatch.
A withheld entry (a scope this agent is not granted) only moves the offset:
its hash cannot be recomputed, but the next entry must still link to it.
A redacted entry (text blanked by an admin's redaction) verifies through its
payload commitment like any other and folds like any other.

The cache also holds the conflict projection (`server.core.conflicts`), folded by
the same code as the server's, so conflicts can be listed offline.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils.utils import sqlite3

from agent_client.errors import CacheError, HistoryMismatch, StorageError, local_storage
from server.core import conflicts, db, migrations, private_files, projections, vectors
from server.core import search as search_module
from server.core.entry import GENESIS_HASH, Entry
from server.core.errors import MnemosyncError, StorageUnavailable
from server.core.memory import MemoryRow

log = logging.getLogger(__name__)

_T = TypeVar("_T")


def _cache_v1(conn) -> None:
    migrations.execute_script(conn, projections.SCHEMA)
    conn.execute("CREATE TABLE cache_state (key TEXT PRIMARY KEY, value NOT NULL)")
    conn.execute("INSERT INTO cache_state VALUES ('offset', 0), ('last_hash', ?)", (GENESIS_HASH,))


def _cache_v2(conn) -> None:
    """Schema version 2 of the projections (trust, authorities, history, conflicts).

    A cache cannot refold itself (it keeps no changelog), so it empties and
    starts again from offset 0: the next sync refills it from the server.
    """
    migrations.execute_script(conn, projections.SCHEMA_V2)
    projections.clear(conn)
    conn.execute("UPDATE cache_state SET value = 0 WHERE key = 'offset'")
    conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (GENESIS_HASH,))


CACHE_STEPS = (_cache_v1, _cache_v2)


class Cache:
    """One agent's cache file. Thread-safe (one lock around the connection).

    Args:
        path: The SQLite file; created if missing.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        try:
            private_files.secure_folder(self.path.parent, self.path.name, patterns=(f"{self.path.name}*",))
            self._conn = db.connect(self.path, synchronous="normal").conn
        except (StorageUnavailable, private_files.NotPrivate) as exc:  # not the file's content: moving it aside
            raise StorageError(str(exc)) from None                     # would not help
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path} cannot be opened: {exc}") from exc
        self._mirror = vectors.open_mirror(self.path)
        vectors.attach(self._conn, self._mirror)
        try:
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise CacheError(f"cache {self.path} failed its integrity check: {check}")
            migrations.migrate(self._conn, CACHE_STEPS)  # a newer schema too: the cache refills from the server
        except (CacheError, sqlite3.Error, MnemosyncError) as exc:
            self.close()
            if isinstance(exc, CacheError):
                raise
            raise CacheError(f"cache {self.path} cannot be opened: {exc}") from exc

    @classmethod
    def open_or_rebuild(cls, path: Path) -> tuple[Cache, bool]:
        """Opens the cache, or moves a corrupt one aside and starts empty.

        Returns:
            (cache, rebuilt): rebuilt is True when a corrupt cache was replaced
            (it fills again from offset 0 at the next sync).
        """
        try:
            return cls(path), False
        except CacheError as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            log.warning("%s; moving it to %s and rebuilding from the server", exc, aside)
            for suffix in ("", "-wal", "-shm"):
                p = path.with_name(path.name + suffix)
                if p.exists():
                    shutil.move(p, aside.with_name(aside.name + suffix))
            return cls(path), True

    def close(self) -> None:
        """Closes the file."""
        with self._lock:
            self._conn.close()
            self._mirror.close()

    def _state(self, key: str) -> Any:
        return self._conn.execute("SELECT value FROM cache_state WHERE key = ?", (key,)).fetchone()[0]

    @property
    @local_storage
    def offset(self) -> int:
        """The seq of the last applied entry (0 when empty)."""
        return int(self._state("offset"))

    @property
    @local_storage
    def last_hash(self) -> str:
        """The hash of the last applied entry."""
        return self._state("last_hash")

    @local_storage
    def apply(self, entries: list[Entry]) -> int:
        """Applies entries in one transaction, skipping those already applied.

        Returns:
            How many entries were new.

        Raises:
            HistoryMismatch: an entry does not follow this cache's history or
                does not verify; nothing from this batch is applied.
        """
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            offset, last_hash = int(self._state("offset")), self._state("last_hash")
            applied = 0
            for entry in entries:
                if entry.seq <= offset:
                    continue
                _check_follows(entry, offset, last_hash)
                if not entry.withheld:
                    projections.apply(conn, entry)
                offset, last_hash, applied = entry.seq, entry.hash, applied + 1
            conn.execute("UPDATE cache_state SET value = ? WHERE key = 'offset'", (offset,))
            conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (last_hash,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if any(e.op == "redact" for e in entries):
            db.empty_wal(conn)
        return applied

    @local_storage
    def get(self, memory_id: str) -> MemoryRow | None:
        """The cached memory, or None."""
        return projections.get_memory(self._conn, memory_id)

    @local_storage
    def vector(self, memory_id: str) -> bytes | None:
        """The cached memory's embedding bytes, or None."""
        row = self._conn.execute("SELECT num FROM memories WHERE id = ?", (memory_id,)).fetchone()
        stored = vectors.get(self._conn, row[0]) if row else None
        return stored[0] if stored else None

    @local_storage
    def search(self, **kwargs) -> list[search_module.Hit]:
        """`server.core.search.search` over the cache (hits carry their open conflicts, as the server's do)."""
        hits = search_module.search(self._conn, **kwargs)
        for hit in hits:
            hit.memory = replace(hit.memory, open_conflicts=conflicts.open_ids(self._conn, hit.memory.id))
        return hits

    @local_storage
    def snapshot(self) -> dict[str, Any]:
        """The visible state as plain data (see `server.core.projections.snapshot`)."""
        return projections.snapshot(self._conn)

    @local_storage
    def conflicts(self, *, include_resolved: bool = False, memory_id: str = "",
                  limit: int = 100) -> list[conflicts.Conflict]:
        """Conflicts as of this cache's offset (see `server.core.conflicts.listing`)."""
        return conflicts.listing(self._conn, include_resolved=include_resolved, memory_id=memory_id, limit=limit)

    @local_storage
    def conflict(self, conflict_id: int) -> conflicts.Conflict | None:
        """One conflict as of this cache's offset, or None."""
        return conflicts.get(self._conn, conflict_id)

    @local_storage
    def conflicts_waiting(self, agent_id: str) -> int:
        """Open conflicts with a revision by `agent_id`."""
        return conflicts.waiting_for(self._conn, agent_id)

    @local_storage
    def read(self, query: Callable[..., _T], /, **kwargs) -> _T:
        """Runs a read-only query of the projections (a `server.core.listings` function) on the cache."""
        return query(self._conn, **kwargs)


def _check_follows(entry: Entry, offset: int, last_hash: str) -> None:
    if entry.seq != offset + 1:
        raise HistoryMismatch(
            f"changelog entry {entry.seq} arrived but the cache is at {offset}: entries are missing"
        )
    if entry.prev_hash != last_hash:
        raise HistoryMismatch(
            f"the server's entry {entry.seq} does not follow the entry {offset} this agent "
            "already has: the server's history was rolled back or rewritten. Ask the operator "
            "to check the server (mnemosync verify); delete this agent's cache only if the "
            "server's history is known good"
        )
    problem = "" if entry.withheld else entry.problem()
    if problem:
        raise HistoryMismatch(f"the server's {problem}: it does not verify")
