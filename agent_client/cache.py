"""The agent's local cache: a fold of the changelog up to the agent's offset.

It holds the same projections as the server (`mnemosync.kernel.projections`, applied by
the same code), so a search here is the server's search on the same state.
The offset and the hash of the last applied entry are stored in the same
transaction as the entries, so a crash at any point leaves a consistent cache
that the next sync simply continues.

Each entry is checked before it is applied: it must follow the previous one
(seq and prev_hash) and its own hash must verify. A server whose history no
longer contains what this cache has seen is refused with HistoryMismatch.
A withheld entry (a scope this agent is not granted) only moves the offset:
its hash cannot be recomputed, but the next entry must still link to it.
A blanked entry (text removed by an admin's redaction) must arrive with the
redaction that blanked it and that redaction's proof of inclusion, and must be
exactly what that redaction left (`mnemosync.kernel.blanking`); anything else is
refused as tamper before it is applied.

The transparency log (`mnemosync.agent.transparency`): the cache keeps the Merkle
frontier of every entry it applied, so it knows the root of its own prefix. An
entry that closes a page carries the server's signed checkpoint of that many
entries: the batch is committed only if the two roots are equal, and the
checkpoint then becomes the one this agent accepted. The server's checkpoint
key and log id are pinned here too.

The cache also holds the conflict projection (`mnemosync.kernel.conflict_projection`), folded by
the same code as the server's, so conflicts can be listed offline.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from sqlite_utils.utils import sqlite3

from mnemosync.agent import recall_log
from mnemosync.agent.errors import CacheError, HistoryMismatch, StorageError, TamperDetected, local_storage
from mnemosync.kernel import (
    blanking,
    conflict_projection,
    db,
    heap,
    merkle,
    migrations,
    private_files,
    projections,
    revisions,
    snapshot,
    vectors,
)
from mnemosync.kernel import search as search_module
from mnemosync.kernel.checkpoint import Checkpoint
from mnemosync.kernel.entry import GENESIS_HASH, Entry
from mnemosync.kernel.errors import MnemosyncError, StorageUnavailable
from mnemosync.kernel.memory import MemoryRow

log = logging.getLogger(__name__)

_T = TypeVar("_T")

PAGE_SIZE = 16_384
"""The page size of a new cache file. A vector (1,536 bytes at 384 dimensions) is written into sqlite-vec's chunk
blob of 1,024 vectors, which SQLite keeps as a chain of overflow pages; with 16 KiB pages that chain is a quarter
as long, and inserting the same rows (`ops.bench.rawcopy`) ran about twice as fast as with the default 4 KiB. A
cache created before keeps its pages (SQLite cannot change them in WAL mode); nothing else differs."""

PAGE_CACHE_KIB = 65_536
"""The most SQLite keeps of the cache file in memory (`PRAGMA cache_size`), filled only as pages are read. Its
default, 2 MiB, holds little of the indexes on random keys (memory ids, content hashes) at 100k memories, and the
same rows went in 15-70% faster with 64 MiB. A large catch-up gives back what it filled (`Cache.release_memory`)."""


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


def _cache_v3(conn) -> None:
    """A memory's own event time (`projections.SCHEMA_V3`); entries already applied had none."""
    migrations.execute_script(conn, projections.SCHEMA_V3)


def _cache_v4(conn) -> None:
    """The transparency log: the Merkle frontier of the applied entries, the last accepted checkpoint, the
    server's pinned checkpoint key and log id, and hashes the chain must reach (`expected_hashes`).

    A cache cannot compute the frontier of entries it no longer has, so it empties and fills again from
    offset 0; the entry it had applied last must come back with the same hash.
    """
    conn.execute("CREATE TABLE expected_hashes (seq INTEGER PRIMARY KEY, hash TEXT NOT NULL, why TEXT NOT NULL)")
    offset = int(conn.execute("SELECT value FROM cache_state WHERE key = 'offset'").fetchone()[0])
    if offset:
        last = conn.execute("SELECT value FROM cache_state WHERE key = 'last_hash'").fetchone()[0]
        conn.execute("INSERT INTO expected_hashes VALUES (?, ?, ?)",
                     (offset, last, "the last entry this cache had applied before it was refilled"))
    conn.executemany("INSERT INTO cache_state VALUES (?, '')", [(k,) for k in ("tree", "checkpoint", "log_key",
                                                                                "log_id")])
    projections.clear(conn)
    conn.execute("UPDATE cache_state SET value = 0 WHERE key = 'offset'")
    conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (GENESIS_HASH,))


def _cache_v5(conn) -> None:
    """The lifecycle projection (`projections.SCHEMA_V4`); no entry applied before was a decay entry."""
    migrations.execute_script(conn, projections.SCHEMA_V4)


def _refill_from_zero(conn, why: str) -> None:
    """Empty the cache so it fills again from offset 0, for a schema step only a fold of every entry can fill.
    The entry it had applied last must come back with the same hash, so that hash is kept as expected."""
    offset = int(conn.execute("SELECT value FROM cache_state WHERE key = 'offset'").fetchone()[0])
    if offset:
        last = conn.execute("SELECT value FROM cache_state WHERE key = 'last_hash'").fetchone()[0]
        conn.execute("INSERT OR REPLACE INTO expected_hashes VALUES (?, ?, ?)",
                     (offset, last, f"the last entry this cache had applied before it was refilled for {why}"))
    projections.clear(conn)
    conn.execute("UPDATE cache_state SET value = '' WHERE key = 'tree'")
    conn.execute("UPDATE cache_state SET value = 0 WHERE key = 'offset'")
    conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (GENESIS_HASH,))


def _cache_v6(conn) -> None:
    """Typed links with weights and reasons (`projections.SCHEMA_V5`, issue 16). Links applied before keep
    their old relation names, so the cache empties and fills again from offset 0 (it keeps no changelog to
    fold again); the entry it had applied last must come back with the same hash."""
    migrations.execute_script(conn, projections.SCHEMA_V5)
    _refill_from_zero(conn, "typed links")


def _cache_v7(conn) -> None:
    """Who wrote the text a memory shows, apart from its last editor (`projections.SCHEMA_V6`, issue 33). Only a
    fold of every entry knows, so the cache empties and fills again from offset 0, as for version 6."""
    migrations.execute_script(conn, projections.SCHEMA_V6)
    _refill_from_zero(conn, "text authors")


def _cache_v8(conn) -> None:
    """Memories' sources and their verification (`projections.SCHEMA_V7`, issue 31); no entry applied before
    carried sources or was a verify entry."""
    migrations.execute_script(conn, projections.SCHEMA_V7)


def _cache_v9(conn) -> None:
    """Procedure memories' steps, preconditions and postconditions (`projections.SCHEMA_V8`, issue 31)."""
    migrations.execute_script(conn, projections.SCHEMA_V8)


def _cache_v10(conn) -> None:
    """Imported memories' origin (`projections.SCHEMA_V9`, issue 41)."""
    migrations.execute_script(conn, projections.SCHEMA_V9)


CACHE_STEPS = (_cache_v1, _cache_v2, _cache_v3, _cache_v4, _cache_v5, _cache_v6, _cache_v7, _cache_v8, _cache_v9,
               _cache_v10)


def connect(path: Path):
    """A connection to a cache file as every cache opens it: `db.connect` with the cache's durability, page size
    (`PAGE_SIZE`, for a new file) and page cache (`PAGE_CACHE_KIB`)."""
    conn = db.connect(path, synchronous="normal", page_size=PAGE_SIZE).conn
    conn.execute(f"PRAGMA cache_size = {-PAGE_CACHE_KIB}")
    return conn


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
        except private_files.NotPrivate as exc:  # not the file's content: moving it aside would not help
            raise StorageError(str(exc)) from None
        with db.opening(self.path):
            self._open()

    def _open(self) -> None:
        try:
            self._conn = connect(self.path)
        except StorageUnavailable as exc:
            raise StorageError(str(exc)) from None
        except sqlite3.Error as exc:
            raise CacheError(f"cache {self.path} cannot be opened: {exc}") from exc
        self._mirror = vectors.open_mirror(self.path, compact=True)
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

    def release_memory(self) -> None:
        """Gives back what a large catch-up left behind: SQLite's cached pages of the file beyond those in use, and
        the heap's free pages (`mnemosync.kernel.heap`); the page cache fills again as pages are read."""
        with self._lock:
            self._conn.execute("PRAGMA shrink_memory")
        heap.trim()

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

    @property
    @local_storage
    def checkpoint(self) -> Checkpoint | None:
        """The last checkpoint this agent accepted, or None."""
        text = self._state("checkpoint")
        return Checkpoint.from_json(json.loads(text)) if text else None

    @property
    @local_storage
    def log_key(self) -> str:
        """The server's checkpoint key this cache trusts (hex; "" before the first sync)."""
        return self._state("log_key")

    @property
    @local_storage
    def log_id(self) -> str:
        """The id of the server's log this cache follows ("" before the first sync)."""
        return self._state("log_id")

    @local_storage
    def root(self) -> str:
        """The Merkle root over every entry applied (lower-case hex)."""
        return merkle.Frontier.from_text(self._state("tree")).root().hex()

    @local_storage
    def position(self) -> tuple[int, str, Checkpoint | None]:
        """(offset, `root`, accepted `checkpoint`) read together: another thread's apply (the live stream, a write's
        own entries, a catch-up) cannot come between them."""
        return self.offset, self.root(), self.checkpoint

    @local_storage
    def accept(self, checkpoint: Checkpoint | None, key: str, log_id: str) -> None:
        """Pins the server's checkpoint key and log id and records `checkpoint` (verified by
        `mnemosync.agent.transparency` against a prefix of this cache's entries) as the accepted one, unless the
        cache accepted a larger one meanwhile."""
        with self._conn:
            values = [("log_key", key), ("log_id", log_id)]
            accepted = self.checkpoint
            if checkpoint is not None and (accepted is None or accepted.size <= checkpoint.size):
                values.append(("checkpoint", json.dumps(checkpoint.to_json())))
            for name, value in values:
                self._conn.execute("UPDATE cache_state SET value = ? WHERE key = ?", (value, name))

    @local_storage
    def apply(self, entries: list[Entry]) -> int:
        """Applies entries in one transaction, skipping those already applied.

        Each entry must follow the one before and verify; a blanked one must prove
        its blanking; an entry carrying a checkpoint must close a prefix whose root
        is that checkpoint's (signed by the pinned key, once one is pinned), which
        then becomes the accepted checkpoint.

        Returns:
            How many entries were new.

        Raises:
            HistoryMismatch: an entry does not follow this cache's history or
                does not verify (TamperDetected: a forged blanking, a checkpoint
                that does not match); nothing from this batch is applied.
        """
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            offset, last_hash = int(self._state("offset")), self._state("last_hash")
            tree = merkle.Frontier.from_text(self._state("tree"))
            key, log_id = self._state("log_key"), self._state("log_id")
            accepted, applied = None, 0
            folds: list[Entry] = []  # checked, folded together (projections.apply_many) before anything reads them
            expecting = bool(conn.execute("SELECT 1 FROM expected_hashes LIMIT 1").fetchone())
            for entry in entries:
                if entry.seq <= offset:
                    continue
                _check_follows(entry, offset, last_hash)
                if expecting:
                    _check_expected(conn, entry)
                if entry.redacted_by and not entry.withheld:
                    projections.apply_many(conn, folds)
                    folds = []
                    _check_blanking(conn, entry, key or None)
                    expecting = True
                if not entry.withheld:
                    folds.append(entry)
                tree.append(merkle.leaf_hash(entry.hash))
                offset, last_hash, applied = entry.seq, entry.hash, applied + 1
                if entry.checkpoint is not None:
                    accepted = _check_checkpoint(entry.checkpoint, tree, key, log_id) or accepted
            projections.apply_many(conn, folds)
            conn.execute("UPDATE cache_state SET value = ? WHERE key = 'offset'", (offset,))
            conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (last_hash,))
            conn.execute("UPDATE cache_state SET value = ? WHERE key = 'tree'", (tree.to_text(),))
            if accepted is not None:
                conn.execute("UPDATE cache_state SET value = ? WHERE key = 'checkpoint'",
                             (json.dumps(accepted.to_json()),))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        redacted = {e.memory_id for e in entries if e.op == "redact"}
        if redacted:
            db.empty_wal(conn)
            recall_log.scrub(self.path.parent, redacted)  # the agent's other copy of memories' text
        return applied

    @local_storage
    def adopt_replica(self, replica: Path, manifest, checkpoint: Checkpoint, key: str) -> int:
        """Makes the replica file of a checked snapshot (`mnemosync.agent.bootstrap` checked its signature and
        digest) this cache, at the snapshot's position; returns the memories in it.

        The file must hold the projections' schema exactly as this cache has it and nothing else
        (`mnemosync.kernel.snapshot.replica_schema_problem`). This cache's own state (offset, last hash, Merkle
        frontier, accepted checkpoint, pinned key and log id) is written into the file, which then replaces the
        cache file; the next entry must follow the snapshot's last entry, as after a replay.

        Raises:
            SnapshotRefused: the file's schema is not this cache's (nothing changed).
        """
        with self._lock:
            incoming = db.connect(replica, synchronous="normal").conn
            try:
                problem = snapshot.replica_schema_problem(incoming, self._conn)
                if problem:
                    raise snapshot.SnapshotRefused(problem)
                own = self._conn.execute("SELECT name, sql FROM sqlite_master WHERE name IN ('cache_state', "
                                         "'expected_hashes')").fetchall()
                state = dict(self._conn.execute("SELECT key, value FROM cache_state").fetchall())
                state.update(offset=manifest.size, last_hash=manifest.last_hash,
                             tree=merkle.Frontier(manifest.size, manifest.frontier).to_text(),
                             checkpoint=json.dumps(checkpoint.to_json()), log_key=key, log_id=manifest.log_id)
                expected = self._conn.execute("SELECT seq, hash, why FROM expected_hashes WHERE seq > ?",
                                              (manifest.size,)).fetchall()
                version = self._conn.execute("PRAGMA user_version").fetchone()[0]
                incoming.execute("BEGIN IMMEDIATE")
                for _, sql in own:
                    incoming.execute(sql)
                incoming.executemany("INSERT INTO cache_state VALUES (?, ?)", list(state.items()))
                incoming.executemany("INSERT INTO expected_hashes VALUES (?, ?, ?)", expected)
                incoming.execute(f"PRAGMA user_version = {int(version)}")
                installed = incoming.execute("SELECT count(*) FROM memories").fetchone()[0]
                incoming.execute("COMMIT")
                incoming.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                incoming.close()
            self._conn.close()
            self._mirror.close()
            for suffix in ("-wal", "-shm"):
                Path(f"{self.path}{suffix}").unlink(missing_ok=True)
            os.replace(replica, self.path)
            private_files.secure_folder(self.path.parent, self.path.name, patterns=(f"{self.path.name}*",))
            self._conn = connect(self.path)
            self._mirror = vectors.open_mirror(self.path, compact=True)
            vectors.attach(self._conn, self._mirror)
        return installed

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
    def search(self, overlay: Sequence[tuple[MemoryRow, bytes | None]] = (), **kwargs) -> list[search_module.Hit]:
        """`mnemosync.kernel.search.search` over the cache, with `overlay` (pending writes) laid over it as
        `search_overlaid` does; hits carry their open conflicts, as the server's do."""
        hits = search_module.search_overlaid(self._conn, overlay, **kwargs)
        for hit in hits:
            hit.memory = replace(hit.memory, open_conflicts=conflict_projection.open_ids(self._conn, hit.memory.id))
        return hits

    @local_storage
    def snapshot(self) -> dict[str, Any]:
        """The visible state as plain data (see `mnemosync.kernel.projections.snapshot`)."""
        return projections.snapshot(self._conn)

    @local_storage
    def conflicts(self, *, include_resolved: bool = False, memory_id: str = "",
                  limit: int = 100) -> list[conflict_projection.Conflict]:
        """Conflicts as of this cache's offset (see `mnemosync.kernel.conflict_projection.listing`), with their
        common base (`mnemosync.kernel.revisions.with_base`)."""
        return [revisions.with_base(self._conn, c) for c in conflict_projection.listing(
            self._conn, include_resolved=include_resolved, memory_id=memory_id, limit=limit)]

    @local_storage
    def conflict(self, conflict_id: int) -> conflict_projection.Conflict | None:
        """One conflict as of this cache's offset, with its common base, or None."""
        found = conflict_projection.get(self._conn, conflict_id)
        return revisions.with_base(self._conn, found) if found is not None else None

    @local_storage
    def conflicts_waiting(self, agent_id: str) -> int:
        """Open conflicts with a revision by `agent_id`."""
        return conflict_projection.waiting_for(self._conn, agent_id)

    @local_storage
    def read(self, query: Callable[..., _T], /, **kwargs) -> _T:
        """Runs a read-only query of the projections (a `mnemosync.kernel.listings` function) on the cache."""
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


_ASK_THE_OPERATOR = ("Nothing from this batch was applied; ask the operator to run `mnemosync verify` on the "
                     "server's data directory.")


def _check_expected(conn, entry: Entry) -> None:
    """An entry this cache was told to expect (the redaction of a blanked entry, its old last entry) must be it."""
    row = conn.execute("SELECT hash, why FROM expected_hashes WHERE seq = ?", (entry.seq,)).fetchone()
    if row is None:
        return
    if row[0] != entry.hash:
        raise TamperDetected(f"the server's entry {entry.seq} (hash {entry.hash[:16]}) is not {row[1]} (hash "
                             f"{row[0][:16]}): the server's history was rewritten. {_ASK_THE_OPERATOR}")
    conn.execute("DELETE FROM expected_hashes WHERE seq = ?", (entry.seq,))


def _check_blanking(conn, entry: Entry, key: str | None) -> None:
    """A blanked entry must prove that the redaction it names blanked it, to exactly this (before it is applied)."""
    attested = entry.redaction
    if attested is None:
        problem = (f"entry {entry.seq} arrived blanked by redaction {entry.redacted_by} without that redaction, "
                   "so the blanking cannot be checked")
    else:
        problem = attested.problem(key) or blanking.problem(
            entry, attested.entry, lambda conflict_id: _conflict_of(conn, conflict_id))
    if problem:
        raise TamperDetected(f"the server's {problem}. {_ASK_THE_OPERATOR}")
    redaction = attested.entry
    known = conn.execute("SELECT hash FROM expected_hashes WHERE seq = ?", (redaction.seq,)).fetchone()
    if known is not None and known[0] != redaction.hash:
        raise TamperDetected(f"the server sent two different redaction entries {redaction.seq}. {_ASK_THE_OPERATOR}")
    conn.execute("INSERT OR IGNORE INTO expected_hashes VALUES (?, ?, ?)",
                 (redaction.seq, redaction.hash, f"the redaction entry {entry.seq} was sent with"))


def _conflict_of(conn, conflict_id: int) -> tuple[str, str] | None:
    found = conflict_projection.get(conn, conflict_id)
    return (found.kind, found.other_memory_id) if found is not None else None


def _check_checkpoint(checkpoint: Checkpoint, tree: merkle.Frontier, key: str, log_id: str) -> Checkpoint | None:
    """A page's checkpoint must have the root of the entries this cache holds; signed by `key` once one is pinned.

    Returns:
        The checkpoint to accept, or None when there is no pinned key to check its signature against.
    """
    root = tree.root().hex()
    if checkpoint.size != tree.size or checkpoint.root != root:
        raise TamperDetected(
            f"the server's checkpoint of {checkpoint.size} entries has root {checkpoint.root[:16]}, but the "
            f"{tree.size} entries this agent holds give {root[:16]}: what the server sent is not its signed log. "
            f"{_ASK_THE_OPERATOR}")
    if not key:
        return None
    if not checkpoint.signed_by(key) or (log_id and checkpoint.log_id != log_id):
        raise TamperDetected(
            f"the server's checkpoint of {checkpoint.size} entries is not signed by its checkpoint key "
            f"{key[:16]}… for log {log_id or '?'}. {_ASK_THE_OPERATOR}")
    return checkpoint
