"""The ledger: the server's application over its changelog, whatever keeps the changelog.

Every call the gRPC service (`mnemosync.server.service`), the operator's commands and the tests make lands in one
of the ledger's services, each its own module and attribute, named by what a reader looks for:

- `writes` (`mnemosync.server.writes.Writes`): Append and Ack, admission (`mnemosync.server.admission`);
- `reads` (`mnemosync.server.memory_reads.MemoryReads`): a memory, search, conflicts, topics, the model;
- `graph` (`mnemosync.server.graph_reads.GraphReads`): walks, causal chains, timelines, graph search;
- `lifecycle` (`mnemosync.server.memory_lifecycle.MemoryLifecycle`): uses, sweeps, consolidation;
- `log` (`mnemosync.server.log_reads.LogReads`): the changelog in order, the transparency log's proofs, verify;
- `operator` (`mnemosync.server.operator_reads.OperatorReads`): stats and the dashboard's views.

They share one `mnemosync.server.ledger_context.LedgerContext` (connections, writer, clock, limits) and import
neither the ledger nor each other. What serves no request is elsewhere: the offline rebuild and projection check
in `mnemosync.server.maintenance`.

The ledger itself opens and closes, and is what a shared record sees of it (`mnemosync.server.record.LedgerPort`).
It composes two parts and inherits from nothing. The group-commit writer
(`mnemosync.server.group_commit`) runs every write on one thread, each request
in its own savepoint of one transaction, and answers only after the commit, so
nothing acknowledged is lost and a refused request leaves nothing half-written.
The changelog record (`mnemosync.server.record`) keeps the rows: the server's
SQLite file (`Ledger.sqlite`) or PostgreSQL shared by several servers
(`Ledger.postgresql`). The projections live in the local SQLite file in both
cases; reads use one connection per thread beside the writer (WAL).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mnemosync.kernel import db, lifecycle, migrations, private_files, vectors
from mnemosync.kernel.consolidation_rules import ConsolidationSettings
from mnemosync.kernel.entry import ChainReport
from mnemosync.kernel.errors import MnemosyncError
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.server import ledger_context, schema, usage_stats
from mnemosync.server.clock import SYSTEM_CLOCK, Clock
from mnemosync.server.graph_reads import GraphReads
from mnemosync.server.group_commit import GroupCommit, Hooks
from mnemosync.server.ledger_context import LedgerContext
from mnemosync.server.log_reads import LogReads
from mnemosync.server.memory_lifecycle import MemoryLifecycle
from mnemosync.server.memory_reads import MemoryReads
from mnemosync.server.operator_reads import OperatorReads
from mnemosync.server.record import ChangelogRecord
from mnemosync.server.sqlite_record import SqliteRecord
from mnemosync.server.writes import Writes

log = logging.getLogger(__name__)

SERVER_FILES = ("*.db", "*.db-wal", "*.db-shm", "*.db-journal", "audit.jsonl*", "crl-number", "verified.json",
                "*.verified.json")
"""The server's own files in its data directory, made private (0600) when it opens
(`mnemosync.kernel.private_files`)."""


class Ledger:
    """The server's application over one changelog record: its services, composed. Thread-safe; one instance per
    data directory.

    Open one with `Ledger.sqlite` (the embedded default) or `Ledger.postgresql`.

    Args:
        path: The local SQLite file: the store itself, or a PostgreSQL record's replica (created if missing).
        record: Where the changelog is kept (`mnemosync.server.record`).
        synchronous: "full" or "normal" (see `mnemosync.kernel.db.connect`).
        limits: Request limits.
        rrf_k: The constant of the plain RRF score search hits report.
        pin_model: Embedding model to pin if the store has none yet.
        clock: Where entry times and acknowledgement times come from.
        lifecycle: The memory lifecycle's parameters (ranking, decay, sweeps), kept as `lifecycle.settings`.
        consolidation: Consolidation's parameters (`mnemosync.kernel.consolidation_rules`).
    """

    def __init__(
        self,
        path: Path,
        record: ChangelogRecord,
        *,
        synchronous: str = "full",
        limits: Limits | None = None,
        rrf_k: int = 60,
        pin_model: ModelInfo | None = None,
        clock: Clock = SYSTEM_CLOCK,
        lifecycle: lifecycle.LifecycleSettings = lifecycle.DEFAULT,
        consolidation: ConsolidationSettings = ConsolidationSettings(),  # noqa: B008 - immutable
    ):
        self.path = Path(path)
        private_files.secure_folder(self.path.parent, self.path.name, patterns=SERVER_FILES)
        self.limits = limits or Limits()
        self._clock = clock
        self._record = record
        self.mirror = vectors.open_mirror(self.path)  # shared by the writer and every reader
        self.context = LedgerContext(self.path, record, synchronous=synchronous, limits=self.limits, clock=clock,
                                     mirror=self.mirror)
        self._shared = self.context.shared
        self._writer = self.context.connect(page_cache_kib=ledger_context.WRITER_PAGE_CACHE_KIB)
        migrations.migrate(self._writer, schema.SERVER_STEPS)
        if pin_model is not None and ledger_context.pinned_model(self._writer) is None:
            self._writer.execute("BEGIN IMMEDIATE")
            ledger_context.pin_model(self._writer, pin_model)
            self._writer.execute("COMMIT")
        self._head = record.head(self._writer)[0]
        self._head_listeners: list[Callable[[int], None]] = []
        uses = usage_stats.UseBuffer()
        self.writes = Writes(self.context)
        self.reads = MemoryReads(self.context, uses, lifecycle, rrf_k)
        self.graph = GraphReads(self.context)
        self.lifecycle = MemoryLifecycle(self.context, uses, lifecycle, consolidation)
        self.log = LogReads(self.context)
        self.operator = OperatorReads(self.context)
        self._writes = GroupCommit(self._writer, record,
                                   Hooks(self.writes.prefilter, self._committed, self.writes.given_up,
                                         self.writes.shares, self.writes.flush_shared))
        self.context.group = self._writes
        if self._shared is not None:
            try:
                self._shared.start(self)
            except BaseException:
                self.close()
                raise

    @classmethod
    def sqlite(cls, path: Path, **options: Any) -> Ledger:
        """The embedded default: the changelog and its projections in one SQLite file (`options` as for `Ledger`)."""
        return cls(path, SqliteRecord(), **options)

    @classmethod
    def postgresql(cls, url: str, replica: Path, *, read_url: str = "", snapshot_trust: Any = None,
                   checkpoint_key: Any = None, **options: Any) -> Ledger:
        """The changelog in the PostgreSQL database `url`, shared by any number of servers, each serving from its
        local `replica` (`mnemosync.server.postgres_record`); `read_url`: a hot standby to fold others' entries
        from; `snapshot_trust`: gives the keys an empty replica may start from a published snapshot signed with
        (`mnemosync.server.published_snapshots`; None: it folds the whole changelog); `checkpoint_key`: gives the
        server's checkpoint key, which signs the start-up check's mark such a start leaves
        (`mnemosync.server.boot_check`; None: no mark).

        Raises:
            StorageUnavailable: PostgreSQL cannot be reached, or psycopg is not installed.
            FailedPrecondition: the replica belongs to another database; delete it and start again.
        """
        from mnemosync.server.postgres_record import PostgresRecord

        record = PostgresRecord(url, read_url=read_url, snapshot_trust=snapshot_trust, checkpoint_key=checkpoint_key)
        try:
            record.seed(replica)
            return cls(replica, record, **options)
        except BaseException:
            record.close()
            raise

    @property
    def record(self) -> ChangelogRecord:
        """Where this ledger's changelog is kept."""
        return self._record

    def close(self) -> None:
        """Finishes queued writes, then closes every connection. Idempotent."""
        if self.context.closed:
            return
        try:
            self.lifecycle.flush_uses()
        except MnemosyncError:
            log.exception("uses recorded before shutdown could not be written")
        self.context.closed = True
        if self._shared is not None:
            self._shared.stop()
        self._writes.close()
        self.context.close_readers()
        self._writer.close()
        self.mirror.close()
        if self._shared is not None:
            self._shared.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once close() has begun."""
        return self.context.closed

    def submit(self, work: Callable[[Any], Any]) -> Any:
        """Runs `work(conn)` on the writer, in the next group's transaction (see `GroupCommit.submit`)."""
        return self.context.submit(work)

    def _committed(self, conn: db.Conn) -> None:
        """After each commit: the WAL emptied if the group redacted (`Writes.after_commit`), then the new head to
        every listener."""
        self.writes.after_commit(conn)
        self._head = head = self._record.head(conn)[0]
        for listener in list(self._head_listeners):
            try:
                listener(head)
            except Exception:  # noqa: BLE001 - a listener's failure must not stop the writer
                log.exception("a head listener failed")

    def head_seq(self) -> int:
        """The seq of the newest committed entry."""
        return self._head

    def now_ms(self) -> int:
        """The ledger's clock (entry times, acknowledgements, lags)."""
        return self._clock.now_ms()

    def watch_head(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Calls `listener(head)` on the writer thread after every commit; returns the call that stops it.

        The listener must return at once (hand the news to another thread or loop).
        """
        self._head_listeners.append(listener)
        return lambda: self._head_listeners.remove(listener) if listener in self._head_listeners else None

    def log_id(self) -> str:
        """The id of this store's log (every checkpoint names it)."""
        log_id: str = self.context.reader().execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()[0]
        return log_id


def broken(report: ChainReport) -> str:
    """The first problem of a failed check, with how many more there are."""
    more = f" (and {report.problem_count - 1} more)" if report.problem_count > 1 else ""
    return f"seq {report.first_bad_seq}: {report.problem}{more}"

