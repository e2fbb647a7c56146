"""What the ledger's services share: the local SQLite file's connections, the writer, the clock and the limits.

The ledger (`mnemosync.server.ledger.Ledger`) makes one `LedgerContext` and hands it to each of its services
(`mnemosync.server.writes`, `memory_reads`, `graph_reads`, `memory_lifecycle`, `log_reads`, `operator_view`);
they import this module, never the ledger or each other, so the composition has no cycle. Reads use one
connection per thread beside the writer (WAL); writes go through the group-commit writer
(`mnemosync.server.group_commit`), which the ledger wires and sets as `group`.

The pinned embedding model's helpers live here too: admission pins it, reads check a query's model against it.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from mnemosync.kernel import db, vectors
from mnemosync.kernel.errors import StoreClosed
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.vector_mirror import Mirror
from mnemosync.server.clock import Clock
from mnemosync.server.group_commit import GroupCommit
from mnemosync.server.record import ChangelogRecord, SharedRecord

_T = TypeVar("_T")

WRITER_PAGE_CACHE_KIB = 32_768
"""The writer connection's SQLite page cache (SQLite's default is 2 MiB). An Append of 500 adds dirties several
MiB of pages (each vec0 insert writes into its chunk's 1.5 MiB vector blob, the changelog row holds the vector
again, FTS); in 2 MiB they spilled to the WAL mid-transaction and were read back, and the vec0 chunks' pages were
read again by every Append. With 32 MiB a batched add costs ~20% less CPU (`python -m ops.bench.append_profile`);
the benchmark's raw SQLite floor is given the same cache (`ops.bench.rawcopy.new_server_db`)."""


class LedgerContext:
    """The connections and the writer of one ledger, shared by its services. Thread-safe.

    Args:
        path: The local SQLite file.
        record: Where the changelog is kept.
        synchronous: "full" or "normal" (see `mnemosync.kernel.db.connect`).
        limits: Request limits.
        clock: Where entry times and acknowledgement times come from.
        mirror: The vector mirror, shared by the writer and every reader.
    """

    def __init__(self, path: Path, record: ChangelogRecord, *, synchronous: str, limits: Limits, clock: Clock,
                 mirror: Mirror):
        self.path = path
        self.record = record
        self.shared = record if isinstance(record, SharedRecord) else None
        self.limits = limits
        self.clock = clock
        self.mirror = mirror
        self.group: GroupCommit | None = None
        """The writer, set by the ledger once its hooks are wired."""
        self.closed = False
        self._synchronous = synchronous
        self._readers: list[db.Conn] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()

    def connect(self, *, page_cache_kib: int | None = None) -> db.Conn:
        """A new connection to the local file, with the vector mirror attached (`page_cache_kib`: its SQLite page
        cache, None: SQLite's default; the writer's is `WRITER_PAGE_CACHE_KIB`)."""
        conn = db.connect(self.path, synchronous=self._synchronous).conn
        if page_cache_kib is not None:
            conn.execute(f"PRAGMA cache_size = {-int(page_cache_kib)}")
        vectors.attach(conn, self.mirror)
        return conn

    def reader(self) -> db.Conn:
        """This thread's read connection (made on first use; closed with the ledger).

        Raises:
            StoreClosed: the ledger is closing.
        """
        conn: db.Conn | None = getattr(self._local, "conn", None)
        if conn is None:
            if self.closed:
                raise StoreClosed("the server is shutting down; retry shortly")
            conn = self.connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def submit(self, work: Callable[[db.Conn], _T], adds: Any = None) -> _T:
        """Runs `work(conn)` on the writer, in the next group's transaction (`adds`: an Append's part for the
        group's pre-filter, see `mnemosync.server.writes`).

        Raises:
            StoreClosed: the ledger is closing.
        """
        done: _T = self._writer().submit(work, adds)
        return done

    def submit_nowait(self, work: Callable[[db.Conn], Any]) -> Future[Any]:
        """`submit` without waiting: the future of `work`'s result (see `GroupCommit.submit_nowait`)."""
        return self._writer().submit_nowait(work)

    def submit_async(self, work: Callable[[db.Conn], Any], adds: Any = None) -> asyncio.Future[Any]:
        """`submit` from a running event loop: an asyncio future of `work`'s result (see
        `GroupCommit.submit_async`)."""
        return self._writer().submit_async(work, adds)

    def close_readers(self) -> None:
        """Closes every thread's read connection (the ledger's close, after the writer stopped)."""
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def _writer(self) -> GroupCommit:
        if self.closed or self.group is None:
            raise StoreClosed("the server is shutting down; retry shortly")
        return self.group


def pinned_model(conn: db.Conn) -> ModelInfo | None:
    """The embedding model the store is pinned to, if any."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    return ModelInfo(**json.loads(row[0])) if row else None


def pin_model(conn: db.Conn, model: ModelInfo) -> None:
    """Pins the store to `model` (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('embedding_model', ?)",
        (json.dumps({"name": model.name, "dimensions": model.dimensions, "sha256": model.sha256}),),
    )


def model_mismatch(pinned: ModelInfo, given: ModelInfo) -> str:
    """The refusal of a request made with another model than the pinned one, saying what to do."""
    return (
        f"this server's memories are embedded with {pinned.describe()}, but the request "
        f"used {given.describe()}; configure the agent with that model "
        "(MNEMOSYNC_EMBED_MODEL) or use a server created for yours"
    )
