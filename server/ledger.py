"""The ledger: the server's application over its changelog, whatever keeps the changelog.

Every call the gRPC service (`mnemosync.server.service`), the operator's
commands and the tests make lands here: admission of writes (state,
governance, the intake gate, conflicts: `mnemosync.server.admission`), scopes
on every read, the lifecycle (uses, sweeps, consolidation), search, the graph,
the transparency log's proofs and the operator's views.

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

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar, cast

from mnemosync import __version__
from mnemosync.kernel import (
    conflict_projection,
    db,
    graph,
    graph_rank,
    lifecycle,
    merkle,
    migrations,
    private_files,
    projections,
    revisions,
    signing,
    vectors,
)
from mnemosync.kernel import search as search_module
from mnemosync.kernel import topics as topics_module
from mnemosync.kernel.consolidation_rules import ConsolidationReport, ConsolidationSettings
from mnemosync.kernel.entry import ChainReport, Entry, canonical_json, withheld
from mnemosync.kernel.errors import (
    AlreadyExists,
    ChainBroken,
    FailedPrecondition,
    InvalidArgument,
    MnemosyncError,
    NotFound,
    OutOfRange,
    ResourceExhausted,
    StoreClosed,
)
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import LAYERS, MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, ValidOp, validate
from mnemosync.kernel.outcomes import AppendOutcome, OpResult, Stats
from mnemosync.kernel.overview import Activity, ChangelogRow, MemoryHistory
from mnemosync.server import (
    admission,
    append_batch,
    chain_audit,
    changelog,
    costly_reads,
    governance,
    merkle_log,
    operator_view,
    redaction,
    schema,
    usage_stats,
)
from mnemosync.server import consolidation as consolidation_module
from mnemosync.server import sweep as sweep_module
from mnemosync.server.clock import SYSTEM_CLOCK, Clock
from mnemosync.server.governance import Rules
from mnemosync.server.group_commit import GroupCommit, Hooks, Job
from mnemosync.server.identity import Caller
from mnemosync.server.record import ChangelogRecord, SharedRecord
from mnemosync.server.sqlite_record import SqliteRecord

log = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_CONFLICT_LIST = 1000
FEED_CHUNK = 100
"""Operations an Append of at least twice as many is validated and handed to the writer at a time
(`append_batch.Feed`): small enough that the writer starts early, large enough for one statement per table."""
SERVER_FILES = ("*.db", "*.db-wal", "*.db-shm", "*.db-journal", "audit.jsonl*", "crl-number", "verified.json",
                "*.verified.json")
"""The server's own files in its data directory, made private (0600) when it opens
(`mnemosync.kernel.private_files`)."""

@dataclass
class _Adds:
    caller: Caller
    ops: list[ValidOp]
    rules: Rules
    near: list[bool] | None = None
    """Set by the group's pre-filter: for each op, whether it may be a semantic conflict of the committed rows."""
    near_earlier: list[bool] | None = None
    """Set by the group's pre-filter: for each op, whether it may be a semantic conflict of an add of an earlier
    Append of the group that the pre-filter saw (`near` is set for those too)."""
    after: list[Any] = field(default_factory=list)
    """Set by the writer: the `_Adds` of every earlier job of the group that wrote (None for one that is not an
    Append): what the pre-filter could not see as committed."""


class Ledger:
    """The server's application over one changelog record. Thread-safe; one instance per data directory.

    Open one with `Ledger.sqlite` (the embedded default) or `Ledger.postgresql`.

    Args:
        path: The local SQLite file: the store itself, or a PostgreSQL record's replica (created if missing).
        record: Where the changelog is kept (`mnemosync.server.record`).
        synchronous: "full" or "normal" (see `mnemosync.kernel.db.connect`).
        limits: Request limits.
        rrf_k: The constant of the plain RRF score search hits report.
        pin_model: Embedding model to pin if the store has none yet.
        clock: Where entry times and acknowledgement times come from.
        lifecycle: The memory lifecycle's parameters (ranking, decay, sweeps).
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
        self.lifecycle = lifecycle
        self.consolidation = consolidation
        self._topics = costly_reads.TopicCache()
        self._uses = usage_stats.UseBuffer()
        private_files.secure_folder(self.path.parent, self.path.name, patterns=SERVER_FILES)
        self.limits = limits or Limits()
        self.rrf_k = rrf_k
        self._synchronous = synchronous
        self._clock = clock
        self._record = record
        self._shared = record if isinstance(record, SharedRecord) else None
        self.mirror = vectors.open_mirror(self.path)  # shared by the writer and every reader
        self._writer = self._connect()
        migrations.migrate(self._writer, schema.SERVER_STEPS)
        if pin_model is not None and _pinned_model(self._writer) is None:
            self._writer.execute("BEGIN IMMEDIATE")
            _pin_model(self._writer, pin_model)
            self._writer.execute("COMMIT")
        self._head = record.head(self._writer)[0]
        self._redacted_in_group = False  # the writer thread's note to empty the WAL after this commit
        self._head_listeners: list[Callable[[int], None]] = []
        self._closed = False
        self._readers: list[Any] = []
        self._readers_lock = threading.Lock()
        self._local = threading.local()
        self._writes = GroupCommit(self._writer, record, Hooks(self._prefilter, self._committed, self._given_up))
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
            return cls(replica, record, **options)
        except BaseException:
            record.close()
            raise

    @property
    def record(self) -> ChangelogRecord:
        """Where this ledger's changelog is kept."""
        return self._record

    # -- lifecycle -------------------------------------------------------

    def close(self) -> None:
        """Finishes queued writes, then closes every connection. Idempotent."""
        if self._closed:
            return
        try:
            self.flush_uses()
        except MnemosyncError:
            log.exception("uses recorded before shutdown could not be written")
        self._closed = True
        if self._shared is not None:
            self._shared.stop()
        self._writes.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
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
        return self._closed

    # -- writes ------------------------------------------------------------

    def append(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None, *,
               rules: Rules | None = None) -> AppendOutcome:
        """Validates and applies a batch of operations atomically, as `caller`.

        Args:
            caller: Who writes (its authority and scopes are checked and recorded).
            ops: The operations, applied in order.
            model: The model of their embeddings.
            rules: The governance rules (default: `Rules()`).

        Raises:
            MnemosyncError: a subclass naming what was refused; nothing is written.
        """
        if not ops:
            raise InvalidArgument("operations must not be empty")
        if len(ops) > self.limits.max_batch:
            raise ResourceExhausted(
                f"operations has {len(ops)} entries; the limit is {self.limits.max_batch} per Append"
            )
        if model is not None and not 0 < model.dimensions <= self.limits.max_dimensions:
            raise InvalidArgument(
                f"embedding_model.dimensions must be 1 to {self.limits.max_dimensions}, got {model.dimensions}"
            )
        rules = rules or Rules()
        if len(ops) >= FEED_CHUNK * 2:
            return self._append_fed(caller, ops, model, rules)
        sealed = [self._sealed(caller, op) for op in self._validated(ops, 0, model)]
        _no_op_id_twice(sealed, set())
        adds = _Adds(caller, [op for op, _, _ in sealed], rules)
        return self._submit(lambda conn: self._append(conn, caller, [sealed], model, rules, adds, len(ops)), adds)

    def _validated(self, ops: Sequence[OpRequest], first: int, model: ModelInfo | None) -> list[ValidOp]:
        """`ops` (the Append's operations from index `first`) validated, or the refusal naming the first bad one."""
        valid: list[ValidOp] = []
        for i, op in enumerate(ops, start=first):
            try:
                valid.append(validate(op, self.limits, model))
            except MnemosyncError as exc:
                raise type(exc)(f"operations[{i}]: {exc}") from None
        return valid

    @staticmethod
    def _sealed(caller: Caller, op: ValidOp) -> tuple[ValidOp, signing.Seal, str]:
        seal = signing.seal(caller.agent_id, caller.signing_key, op)
        return op, seal, _request_hash(op, seal.embedding_sha256)

    def _append_fed(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None,
                    rules: Rules) -> AppendOutcome:
        """A large Append validated a chunk at a time while the writer admits the chunks before (see
        `append_batch.Feed`). Refusals come as `append` gives them: a validation error of any operation, the first
        one, before a repeated op_id, before anything the writer refused."""
        if self._closed:
            raise StoreClosed("the server is shutting down; retry shortly")
        feed = append_batch.Feed()
        written = self._writes.submit_nowait(
            lambda conn: self._append(conn, caller, feed, model, rules, None, len(ops)))
        refused: MnemosyncError | None = None
        seen: set[str] = set()
        try:
            for start in range(0, len(ops), FEED_CHUNK):
                chunk = [self._sealed(caller, op) for op in self._validated(ops[start:start + FEED_CHUNK], start,
                                                                            model)]
                if refused is None:
                    try:
                        _no_op_id_twice(chunk, seen)
                    except MnemosyncError as exc:  # reported unless a later operation fails validation
                        refused = exc
                        feed.stop()
                        continue
                    feed.put(chunk)
        except BaseException:
            feed.stop()
            raise
        if refused is not None:
            raise refused
        feed.end()
        outcome: AppendOutcome = written.result()
        return outcome

    def ack(self, agent_id: str, seq: int) -> tuple[int, int]:
        """Records an agent's offset; returns (acked_seq, head_seq).

        An offset older than the one recorded is ignored (late, duplicate
        acknowledgements are normal with at-least-once delivery).

        Raises:
            OutOfRange: `seq` is past the head.
        """
        if seq < 0:
            raise InvalidArgument(f"seq must be >= 0, got {seq}")
        return self._submit(lambda conn: self._ack(conn, agent_id, seq))

    def rebuild(self) -> int:
        """Recomputes every projection, and the transparency log's tree, from the changelog; returns entries folded.

        Raises:
            ChainBroken: the changelog does not verify (nothing is changed; the message names the entries).
        """
        return self._submit(self._rebuild)

    # -- the memory lifecycle (issue 15) -----------------------------------------

    def record_uses(self, memory_ids: list[str], kind: str = "used", *, at_ms: int | None = None,
                    agent: str = "") -> None:
        """Notes uses of memories (buffered: written by the next `flush_uses`, see `mnemosync.server.usage_stats`)."""
        now = self._clock.now_ms() if at_ms is None else at_ms
        for memory_id in memory_ids:
            self._uses.add(usage_stats.Use(memory_id, now, kind, agent))

    def flush_uses(self, layers: Mapping[int, lifecycle.LayerRule] | None = None) -> int:
        """Writes the buffered uses into the access statistics; returns how many counted."""
        uses = self._uses.take()
        if not uses:
            return 0
        layers = layers or governance.DEFAULT_LAYERS
        return self._submit(lambda conn: usage_stats.write(conn, uses, self.lifecycle, layers))

    def use(self, caller: Caller | None, memory_ids: list[str], kind: str = "used",
            layers: Mapping[int, lifecycle.LayerRule] | None = None) -> int:
        """Records uses an agent reports (`RecordUse`), written at once in one batch; returns how many counted.

        Raises:
            InvalidArgument: no ids, too many, or a kind that is not one of `access.KINDS`.
            PermissionDenied: a memory is in a scope `caller` is not granted.
        """
        if not memory_ids:
            raise InvalidArgument("memory_ids must not be empty")
        if len(memory_ids) > self.limits.max_batch:
            raise ResourceExhausted(f"memory_ids has {len(memory_ids)} ids; the limit is {self.limits.max_batch}")
        if kind not in usage_stats.KINDS:
            raise InvalidArgument(f"kind must be one of {list(usage_stats.KINDS)}, got {kind!r}")
        conn = self._reader()
        for memory_id in memory_ids:
            memory = projections.get_memory(conn, memory_id)
            if memory is not None and caller is not None:
                governance.require_scope(caller, memory.scope, "record uses of memories")
        now = self._clock.now_ms()
        uses = [usage_stats.Use(memory_id, now, kind, caller.agent_id if caller else "") for memory_id in memory_ids]
        layers = layers or governance.DEFAULT_LAYERS
        return self._submit(lambda conn: usage_stats.write(conn, uses, self.lifecycle, layers))

    def usage(self, memory_id: str) -> lifecycle.Usage:
        """A memory's usage as ranking and the sweep see it now (after the buffered uses are written)."""
        self.flush_uses()
        return usage_stats.usage_for(self._reader(), [memory_id]).get(memory_id, lifecycle.NO_USE)

    def sweep(self, *, now_ms: int | None = None, dry_run: bool = False,
              layers: Mapping[int, lifecycle.LayerRule] | None = None) -> lifecycle.SweepReport:
        """Runs the lifecycle sweep for `now_ms` (default: the clock's now; see `mnemosync.server.sweep`), one
        transaction per page of memories."""
        layers = layers or governance.DEFAULT_LAYERS
        self.flush_uses(layers)
        report = lifecycle.SweepReport(as_of_ms=self._clock.now_ms() if now_ms is None else now_ms, dry_run=dry_run)
        if dry_run:
            return sweep_module.run(self._reader(), report, 0, usage_stats.usage_for, self.lifecycle, layers)

        def one_page(conn: db.Conn) -> None:
            sweep_module.run(conn, report, self._clock.now_ms(), usage_stats.usage_for, self.lifecycle, layers, pages=1)

        while not report.done:  # a page a transaction: writers wait at most one page's work
            self._submit(one_page)
        return report

    def consolidate(self, *, now_ms: int | None = None, dry_run: bool = False, links_only: bool = False,
                    layers: Mapping[int, lifecycle.LayerRule] | None = None) -> ConsolidationReport:
        """Runs consolidation for `now_ms` (default: the clock's now; see `mnemosync.server.consolidation`) in one
        transaction, or reports what it would write."""
        layers = layers or governance.DEFAULT_LAYERS
        self.flush_uses(layers)
        report = ConsolidationReport(as_of_ms=self._clock.now_ms() if now_ms is None else now_ms, dry_run=dry_run,
                                     links_only=links_only)
        args = (usage_stats.usage_for, self.consolidation, self.lifecycle, layers)
        if dry_run:
            return consolidation_module.run(self._reader(), report, 0, *args)
        return self._submit(lambda conn: consolidation_module.run(conn, report, self._clock.now_ms(), *args))

    def list_topics(self, caller: Caller | None, *, scopes: tuple[str, ...] = (), limit: int = 20,
                    novel_since_ms: int = 0) -> topics_module.Topics:
        """Topic clusters of the live memories `caller` may read (`mnemosync.kernel.topics`); the last few answers
        are kept, for any limit, until the changelog moves (`costly_reads.TopicCache`).

        Raises:
            InvalidArgument: limit out of range.
            PermissionDenied: a named scope is not granted.
        """
        if not 1 <= limit <= topics_module.MAX_LIMIT:
            raise InvalidArgument(f"limit must be 1 to {topics_module.MAX_LIMIT}, got {limit}")
        conn = self._reader()
        if caller is not None:
            granted = governance.search_scopes(caller, scopes, lambda: [
                s for (s,) in conn.execute("SELECT DISTINCT scope FROM memories ORDER BY scope")])
            if granted is not None and not granted:
                return topics_module.Topics([], [])
            scopes = granted or ()
        return self._topics.get(changelog.head(conn)[0], scopes, limit, novel_since_ms, lambda most:
                                topics_module.compute(conn, scopes=scopes, limit=most, novel_since_ms=novel_since_ms))

    def submit(self, work: Callable[[Any], Any]) -> Any:
        """Runs `work(conn)` on the writer, in the next group's transaction (see `GroupCommit.submit`)."""
        return self._submit(work)

    def _submit(self, work: Callable[[db.Conn], _T], adds: _Adds | None = None) -> _T:
        if self._closed:
            raise StoreClosed("the server is shutting down; retry shortly")
        done: _T = self._writes.submit(work, adds)
        return done

    def _committed(self, conn: db.Conn) -> None:
        """After each commit: the WAL emptied if the group redacted, then the new head to every listener."""
        if self._redacted_in_group:  # older page images of the removed text must not stay in the WAL
            self._redacted_in_group = False
            db.empty_wal(conn)
        self._head = head = self._record.head(conn)[0]
        for listener in list(self._head_listeners):
            try:
                listener(head)
            except Exception:  # noqa: BLE001 - a listener's failure must not stop the writer
                log.exception("a head listener failed")

    def _given_up(self) -> None:
        self._redacted_in_group = False

    def _prefilter(self, conn: db.Conn, jobs: list[Job]) -> None:
        """The near-duplicate pre-filter of every Append of the group at once, before any of them writes: one
        product over the committed vectors for all their adds (`admission.near_candidates`), however few, so that
        no add scans every vector on its own. Each Append then checks only what the group wrote before it
        (`_append`), so every decision is the one-by-one check's."""
        appends = [job.adds for job in jobs if job.adds is not None]
        if not appends:
            return
        rules = appends[0].rules
        same = [a for a in appends if a.rules == rules]
        for adds, near in zip(same, admission.near_candidates(conn, [(a.caller, a.ops) for a in same], rules),
                              strict=True):
            adds.near = near
        seen = [a for a in same if a.near is not None]
        for adds, near in zip(seen, admission.near_earlier([(a.caller, a.ops) for a in seen], rules), strict=True):
            adds.near_earlier = near

    def _append(self, conn: db.Conn, caller: Caller, chunks: Iterable[Sequence[tuple[ValidOp, signing.Seal, str]]],
                model: ModelInfo | None, rules: Rules, adds: _Adds | None, total: int) -> AppendOutcome:
        """The writer's part of an Append: its operations, a chunk at a time (one chunk unless it is fed, see
        `_append_fed`), admitted and written in order. `adds`: what the group's pre-filter decided (None: a fed
        Append, whose chunks each decide for themselves)."""
        pinned = _pinned_model(conn)
        folds = append_batch.Folds(conn)
        entries = append_batch.Entries(self._record, conn)
        results: list[OpResult] = []
        redacted = False
        for ops in chunks:
            if model is not None and any(op.embedding for op, _, _ in ops):
                if pinned is None:
                    governance.check_model_pin(caller)
                    _pin_model(conn, model)
                    pinned = model
                elif not pinned.same_model(model):
                    raise FailedPrecondition(_model_mismatch(pinned, model))
            written = changelog.find_ops(conn, caller.agent_id, [op.op_id for op, _, _ in ops])  # one replay lookup
            maybe_near = self._near(conn, caller, [op for op, _, _ in ops], rules, adds)
            offset = len(results)
            for i, (op, seal, request_hash) in enumerate(ops, start=offset):
                if op.op != "add":  # from here on, each entry is written and folded as it is made
                    entries.now()
                    folds.now()
                try:
                    folds.before(op)
                    results.append(self._append_one(conn, caller, op, seal, request_hash, pinned, rules,
                                                    written.get(op.op_id),
                                                    maybe_near[i - offset] if maybe_near else True,
                                                    folds.fold, entries))
                except MnemosyncError as exc:
                    if total > 1:  # which one of the batch, as validation says it (the whole batch is refused)
                        exc.args = (f"operations[{i}]: {exc}",)
                    raise
            redacted |= any(op.op == "redact" for op, _, _ in ops)
        entries.flush()
        folds.flush()
        self._redacted_in_group |= redacted  # only once all of them went in
        return AppendOutcome(results, entries.seq)

    @staticmethod
    def _near(conn: db.Conn, caller: Caller, ops: list[ValidOp], rules: Rules,
              adds: _Adds | None) -> list[bool] | None:
        """For each of `ops`: whether it may be a semantic conflict (None: every add checks for itself)."""
        batch = [(caller, ops)]
        prefiltered = adds.near if adds is not None else None
        if adds is None or prefiltered is None:
            return admission.near_candidates(conn, batch, rules)[0]
        if not adds.after:  # the group's pre-filter saw all there is
            return prefiltered
        if adds.near_earlier is not None and all(a is not None and a.near_earlier is not None for a in adds.after):
            # the group wrote since only adds the pre-filter compared with these (Appends of adds it saw)
            return [a or b for a, b in zip(prefiltered, adds.near_earlier, strict=True)]
        since = admission.near_candidates(conn, batch, rules, changed_only=True)[0]  # what the group wrote since
        return None if since is None else [a or b for a, b in zip(prefiltered, since, strict=True)]

    def _append_one(self, conn: db.Conn, caller: Caller, op: ValidOp, seal: signing.Seal, request_hash: str,
                    model: ModelInfo | None, rules: Rules, previous: tuple[Entry, str] | None, maybe_near: bool,
                    fold: Callable[[Entry], None], entries: append_batch.Entries) -> OpResult:
        agent_id = caller.agent_id
        if previous is not None:
            entry, stored_hash = previous
            if stored_hash != request_hash and not entry.redacted_by:  # a redaction drops the request hash
                raise AlreadyExists(
                    f"op_id {op.op_id} was already used by this agent for a different "
                    f"operation (seq {entry.seq}); make a new op_id for a new operation"
                )
            return OpResult(op.op_id, entry.memory_id, entry.seq, entry.version, True,
                            (entry.conflict or {}).get("id", 0))
        seq, prev_hash = entries.seq, entries.hash
        decision = admission.admit(conn, caller, op, rules, seq + 1, maybe_near=maybe_near)
        if decision.duplicate is not None:
            return OpResult(op.op_id, decision.duplicate.id, 0, decision.version, False, deduplicated=True)
        version = decision.version
        now = max(self._clock.now_ms(), entries.last_time_ms)
        entry = Entry(
            seq=seq + 1,
            op_id=op.op_id,
            agent_id=agent_id,
            memory_id=op.memory_id,
            op=op.op,
            base_version=op.base_version,
            version=version,
            payload=op.payload,
            embedding=op.embedding,
            embedding_model=model.name if (op.embedding and model) else "",
            server_time_ms=now,
            prev_hash=prev_hash,
            authority=caller.authority,
            conflict=decision.conflict,
            payload_commit=seal.payload_commit,
            payload_salt=seal.payload_salt,
            embedding_sha256=seal.embedding_sha256,
            signature=seal.signature,
            signer_key=seal.signer_key,
            blanked=redaction.listing(list(decision.blanking)),
        )
        entry = replace(entry, hash=entry.computed_hash())
        entries.add(entry, request_hash)
        redaction.blank(conn, decision.blanking, entry.seq)
        fold(entry)
        return OpResult(op.op_id, op.memory_id, entry.seq, version, False, (decision.conflict or {}).get("id", 0))

    def _ack(self, conn: db.Conn, agent_id: str, seq: int) -> tuple[int, int]:
        head = self._record.head(conn)[0]
        if seq > head:
            raise OutOfRange(f"seq {seq} is past the changelog head {head}")
        return self._record.acknowledge(conn, agent_id, seq, self._clock.now_ms()), head

    def _rebuild(self, conn: db.Conn) -> int:
        report = changelog.verify_chain(conn)
        if not report.ok:
            raise ChainBroken(f"refusing to fold a changelog that does not verify: {broken(report)}; run "
                              "`mnemosync verify` for every finding, and restore the data directory from a backup")
        merkle_log.rebuild(conn)
        projections.clear(conn)
        usage_stats.clear(conn)
        count = 0
        for entry in changelog.iterate(conn):
            projections.apply(conn, entry)
            count += 1
        return count

    # -- reads -------------------------------------------------------------

    def _connect(self) -> db.Conn:
        conn = db.connect(self.path, synchronous=self._synchronous).conn
        vectors.attach(conn, self.mirror)
        return conn

    def _reader(self) -> db.Conn:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self._closed:
                raise StoreClosed("the server is shutting down; retry shortly")
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def get(self, memory_id: str, caller: Caller | None = None) -> MemoryRow:
        """A memory by id, archived or not.

        Raises:
            NotFound: it never existed.
            PermissionDenied: it is in a scope `caller` is not granted.
        """
        memory = projections.get_memory(self._reader(), memory_id)
        if memory is None:
            raise NotFound(f"no memory with id {memory_id}")
        if caller is not None:
            governance.require_scope(caller, memory.scope, "read memories")
            self.record_uses([memory.id], "get", agent=caller.agent_id)
        return memory


    def _readable(self, memory_id: str, caller: Caller | None) -> tuple[MemoryRow | None, graph.Readable | None]:
        """The memory a graph query starts from, and the test of the scopes the caller may read.

        Raises:
            NotFound: no such memory.
            PermissionDenied: the caller may not read it.
        """
        memory = projections.get_memory(self._reader(), memory_id) if memory_id else None
        if memory_id and memory is None:
            raise NotFound(f"no memory with id {memory_id}")
        if caller is None:
            return memory, None
        if memory is not None:
            governance.require_scope(caller, memory.scope, "read memories")
        return memory, _readable_scopes(caller)

    def traverse(self, memory_id: str, *, caller: Caller | None = None, edge_types: Sequence[str] = (),
                 direction: str = "out", depth: int = 0, limit: int = 0, include_archived: bool = False) -> graph.Walk:
        """The memories within `depth` links of one memory (`mnemosync.kernel.graph.traverse`), in the caller's scopes.

        Raises:
            NotFound: no such memory.
            PermissionDenied: the caller may not read it.
            InvalidArgument: a bad edge type, direction, depth or limit.
        """
        start, readable = self._readable(_required(memory_id), caller)
        return graph.traverse(self._reader(), cast(MemoryRow, start), readable=readable, edge_types=edge_types,
                              direction=direction, depth=depth, limit=limit, include_archived=include_archived)

    def causal_chain(self, memory_id: str, *, caller: Caller | None = None, direction: str = "both",
                     depth: int = 0, limit: int = 0) -> graph.Walk:
        """Causes and effects of one memory (`mnemosync.kernel.graph.causal_chain`), in the caller's scopes."""
        start, readable = self._readable(_required(memory_id), caller)
        return graph.causal_chain(self._reader(), cast(MemoryRow, start), readable=readable, direction=direction,
                                  depth=depth or graph.DEFAULT_CAUSAL_DEPTH, limit=limit)

    def timeline(self, *, caller: Caller | None = None, memory_id: str = "", **window: Any) -> graph.Timeline:
        """Memories by event time around one memory or in a window (`mnemosync.kernel.graph.timeline`), in the
        caller's scopes.

        Raises:
            PermissionDenied: `window["scopes"]` names a scope the caller is not granted.
        """
        around, readable = self._readable(memory_id, caller)
        for scope in window.get("scopes", ()):
            if caller is not None:
                governance.require_scope(caller, scope, "read memories")
        return graph.timeline(self._reader(), readable=readable, around=around, **window)

    def neighbours(self, memory_ids: list[str], count: int,
                   caller: Caller | None = None) -> dict[str, list[graph.Step]]:
        """The graph neighbours of search hits (`mnemosync.kernel.graph.neighbours`), in the caller's scopes."""
        return graph.neighbours(self._reader(), memory_ids, readable=_readable_scopes(caller), count=count)

    def graph_search(self, seed_ids: list[str], *, caller: Caller | None = None,
                     **options: Any) -> graph_rank.GraphRank:
        """Personalized PageRank from `seed_ids` (`mnemosync.kernel.graph_rank.graph_search`), in the caller's
        scopes."""
        return graph_rank.graph_search(self._reader(), seed_ids, readable=_readable_scopes(caller), **options)

    def search(
        self,
        *,
        query: str,
        vector: list[float] | None,
        model: ModelInfo | None,
        limit: int,
        filter: search_module.Filter,
        mode: str,
        caller: Caller | None = None,
        rerank: bool = True,
        layers: Mapping[int, lifecycle.LayerRule] | None = None,
    ) -> list[search_module.Hit]:
        """Hybrid search over the projections (see `mnemosync.kernel.search.search`).

        With a `caller`, only its scopes are searched. `rerank` re-ranks the fused candidates with the
        lifecycle's signals (the access statistics as they were at the last flush; `layers`' floors).

        Raises:
            InvalidArgument: a bad limit, query or vector.
            FailedPrecondition: the vector comes from another model.
            PermissionDenied: the filter names a scope the caller is not granted.
        """
        from mnemosync.kernel.operations import embedding_bytes

        limit = limit or 10
        if not 1 <= limit <= self.limits.max_search_limit:
            raise InvalidArgument(f"limit must be 1 to {self.limits.max_search_limit}, got {limit}")
        if len(query) > self.limits.max_query_chars:
            raise InvalidArgument(
                f"query is {len(query)} characters; the limit is {self.limits.max_query_chars}"
            )
        if "\x00" in query:
            raise InvalidArgument("query must not contain NUL characters")
        conn = self._reader()
        vector_bytes = None
        if vector:
            pinned = _pinned_model(conn)
            if model is not None and pinned is not None and not pinned.same_model(model):
                raise FailedPrecondition(_model_mismatch(pinned, model))
            vector_bytes = embedding_bytes(vector, model, "query_vector")
        if mode == "vector" and vector_bytes is None:
            raise InvalidArgument("query_vector is required for vector search")
        if mode == "keyword" and not query.strip():
            raise InvalidArgument("query is required for keyword search")
        if vector_bytes is None and not query.strip():
            raise InvalidArgument("give a query, a query_vector, or both")
        if caller is not None:
            scopes = governance.search_scopes(caller, tuple(filter.scopes), lambda: [
                s for (s,) in conn.execute("SELECT DISTINCT scope FROM memories ORDER BY scope")])
            if scopes is not None and not scopes:
                return []
            if scopes is not None:
                filter = replace(filter, scopes=scopes)
        hits = search_module.search(
            conn, query=query, vector=vector_bytes, limit=limit, filter=filter, mode=mode,
            rrf_k=self.rrf_k,
            ranking=search_module.Ranking(self._clock.now_ms(), usage_stats.usage_for, self.lifecycle,
                                          layers or governance.DEFAULT_LAYERS) if rerank else None,
        )
        for hit in hits:
            hit.memory = replace(hit.memory, open_conflicts=conflict_projection.open_ids(conn, hit.memory.id))
        return hits

    def read(self, since_seq: int, limit: int = 1000, caller: Caller | None = None) -> list[Entry]:
        """Up to `limit` changelog entries after `since_seq`, in seq order.

        With a `caller`, entries of memories in scopes it is not granted come
        back withheld (see `Entry.withheld`), so its hash chain stays whole.
        """
        if since_seq < 0:
            raise InvalidArgument(f"since_seq must be >= 0, got {since_seq}")
        conn = self._reader()
        entries = self._record.read(conn, since_seq, limit)
        if caller is None or caller.scopes is None or not entries:
            return entries
        ids = sorted({e.memory_id for e in entries})
        scope_of = dict(conn.execute(
            f"SELECT id, scope FROM memories WHERE id IN ({', '.join('?' for _ in ids)})", ids))
        return [e if governance.scope_granted(caller, scope_of.get(e.memory_id, "")) else withheld(e)
                for e in entries]

    def conflicts(self, caller: Caller | None = None, *, include_resolved: bool = False, memory_id: str = "",
                  limit: int = 100) -> list[conflict_projection.Conflict]:
        """Conflicts in the caller's scopes (see `mnemosync.kernel.conflict_projection.listing`).

        Raises:
            InvalidArgument: limit out of range.
        """
        limit = limit or 100
        if not 1 <= limit <= MAX_CONFLICT_LIST:
            raise InvalidArgument(f"limit must be 1 to {MAX_CONFLICT_LIST}, got {limit}")
        conn = self._reader()
        return [revisions.with_base(conn, c) for c in conflict_projection.listing(
            conn, scopes=caller.scopes if caller else None, include_resolved=include_resolved, memory_id=memory_id,
            limit=limit)]

    def conflict(self, conflict_id: int, caller: Caller | None = None) -> conflict_projection.Conflict:
        """One conflict with its revisions and (write conflicts) their common base.

        Raises:
            NotFound: no such conflict.
            PermissionDenied: it is in a scope the caller is not granted.
        """
        conn = self._reader()
        found = conflict_projection.get(conn, conflict_id)
        if found is None:
            raise NotFound(f"no conflict with id {conflict_id}; list them with ListConflicts "
                           "(mnemosync conflicts list)")
        if caller is not None:
            governance.require_scope(caller, found.scope, "read conflicts")
        return revisions.with_base(conn, found)

    def memory_version(self, memory_id: str) -> int:
        """The memory's current version (0 if it does not exist)."""
        row = self._reader().execute("SELECT version FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return row[0] if row else 0

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

    def model(self) -> ModelInfo | None:
        """The pinned embedding model, if any."""
        return _pinned_model(self._reader())

    def stats(self, caller: Caller | None = None) -> Stats:
        """Counts, per-agent offsets and the pinned model, as far as `caller` may see them.

        An admin (or no caller) sees the whole server. Any other agent sees counts of its own scopes
        only, its own offset only, and no data size: other scopes' activity is not its business.
        """
        conn = self._reader()
        everything = caller is None or caller.admin
        live, archived = 0, 0
        by_layer: dict[str, int] = {}
        by_scope: dict[str, int] = {}
        for scope, layer, is_archived, n in conn.execute(
                "SELECT scope, layer, archived, count(*) FROM memories GROUP BY scope, layer, archived"):
            if not everything and caller is not None and not governance.scope_granted(caller, scope):
                continue
            if is_archived:
                archived += n
                continue
            live += n
            by_layer[LAYERS[layer]] = by_layer.get(LAYERS[layer], 0) + n
            by_scope[scope] = by_scope.get(scope, 0) + n
        head = self._record.head(conn)[0]
        agents = [replace(o, lag=max(0, head - o.acked_seq)) for o in self._record.offsets(conn)
                  if everything or (caller is not None and o.agent_id == caller.agent_id)]
        return Stats(
            head_seq=head,
            live_memories=live,
            archived_memories=archived,
            by_layer=by_layer,
            by_scope=by_scope,
            agents=agents,
            embedding_model=_pinned_model(conn),
            data_bytes=db.data_bytes(self.path) if everything else 0,
            server_version=__version__,
            server_time_ms=self._clock.now_ms(),
            read_store=self._shared.read_store_status(everything) if self._shared is not None else None,
        )

    def verify(self, issued: list[signing.IssuedKey] | None = None,
               progress: Callable[[int], None] | None = None, *, local_only: bool = False) -> ChainReport:
        """Walks the hash chain (blanked entries and signatures included, see `mnemosync.server.changelog.verify_chain`
        and `mnemosync.kernel.signing.entry_check`), then recomputes the transparency log's tree
        (`mnemosync.server.merkle_log.check`); a tree that differs is reported at seq 0. A PostgreSQL record's own
        changelog and tree are walked too, unless `local_only` (the start-up check: the replica only, see
        `mnemosync.server.boot_check`)."""
        report = chain_audit.walk(self._reader(), issued, progress)
        if self._shared is not None and not local_only:
            found, count = self._shared.verify(issued)
            if found:
                report = replace(report, problems=(*report.problems, *found),
                                 problem_count=report.problem_count + count)
        return report

    def compare_projections(self, scratch: Path) -> list[str]:
        """Folds the whole changelog afresh into a scratch database at `scratch` and names every difference from
        the live projections (see `mnemosync.kernel.projections.differences`); the scratch file is removed after."""
        fresh = db.connect(scratch, synchronous="normal").conn
        try:
            vectors.attach(fresh, None)
            migrations.migrate(fresh, schema.SERVER_STEPS)
            fresh.execute("BEGIN")
            for entry in changelog.iterate(self._reader()):
                projections.apply(fresh, entry)
            fresh.execute("COMMIT")
            return projections.differences(self._reader(), fresh)
        finally:
            fresh.close()
            for suffix in ("", "-wal", "-shm"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)

    # -- the transparency log ----------------------------------------------

    def log_id(self) -> str:
        """The id of this store's log (every checkpoint names it)."""
        log_id: str = self._reader().execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()[0]
        return log_id

    def entry(self, seq: int) -> Entry | None:
        """The entry at `seq`, or None."""
        return changelog.get(self._reader(), seq)

    def tree_root(self, size: int) -> bytes:
        """The Merkle root over entries 1 to `size` (`size` at most the head)."""
        return merkle.root(merkle_log.nodes(self._reader()), size)

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """The proof that the tree of `old` entries is a prefix of the tree of `new` (new at most the head)."""
        return merkle.consistency_proof(merkle_log.nodes(self._reader()), old, new)

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        """The audit path of entry `seq` in the tree of `size` entries."""
        return merkle.inclusion_proof(merkle_log.nodes(self._reader()), seq - 1, size)

    def snapshot(self) -> dict[str, Any]:
        """The projections as plain data (see `mnemosync.kernel.projections.snapshot`)."""
        return projections.snapshot(self._reader())

    # -- the operator's view (see `mnemosync.server.operator_view`) ------------------

    def changelog_page(self, caller: Caller | None = None, **filters: Any) -> list[ChangelogRow]:
        """Changelog rows newest first, filtered, in the caller's scopes (`operator_view.changelog_page`)."""
        return operator_view.changelog_page(self._reader(), caller, **filters)

    def history(self, memory_id: str, caller: Caller | None = None) -> MemoryHistory:
        """A memory and every entry that changed it (`operator_view.history`)."""
        return operator_view.history(self._reader(), memory_id, caller)

    def memories(self, caller: Caller | None = None, **filters: Any) -> tuple[list[MemoryRow], int]:
        """A page of memories newest first, filtered, in the caller's scopes, and how many match
        (`operator_view.memories`)."""
        return operator_view.memories(self._reader(), caller, **filters)

    def activity(self, caller: Caller | None = None, *, minutes: int = 0) -> Activity:
        """Writes per minute and memory counts in the caller's scopes (`operator_view.activity`)."""
        return operator_view.activity(self._reader(), caller, now_ms=self._clock.now_ms(), minutes=minutes)


def broken(report: ChainReport) -> str:
    """The first problem of a failed check, with how many more there are."""
    more = f" (and {report.problem_count - 1} more)" if report.problem_count > 1 else ""
    return f"seq {report.first_bad_seq}: {report.problem}{more}"


def _pinned_model(conn: db.Conn) -> ModelInfo | None:
    row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
    return ModelInfo(**json.loads(row[0])) if row else None


def _pin_model(conn: db.Conn, model: ModelInfo) -> None:
    conn.execute(
        "INSERT INTO meta (key, value) VALUES ('embedding_model', ?)",
        (json.dumps({"name": model.name, "dimensions": model.dimensions, "sha256": model.sha256}),),
    )


def _model_mismatch(pinned: ModelInfo, given: ModelInfo) -> str:
    return (
        f"this server's memories are embedded with {pinned.describe()}, but the request "
        f"used {given.describe()}; configure the agent with that model "
        "(MNEMOSYNC_EMBED_MODEL) or use a server created for yours"
    )


def _no_op_id_twice(ops: Sequence[tuple[ValidOp, signing.Seal, str]], seen: set[str]) -> None:
    """Refuses an op_id that appears twice in one Append (`seen`: those of its earlier chunks, grown here)."""
    for op, _, _ in ops:
        if op.op_id in seen:
            raise InvalidArgument(f"op_id {op.op_id} appears twice in one batch")
        seen.add(op.op_id)


def _request_hash(op: ValidOp, embedding_sha256: str) -> str:
    """What a replay of the same op_id must match: the operation as sent (`embedding_sha256` is its vector's
    digest, as the seal computed it, "" for none)."""
    doc = {
        "memory_id": op.memory_id,
        "op": op.op,
        "base_version": op.base_version,
        "payload": op.payload,
        "embedding": embedding_sha256,
    }
    return hashlib.sha256(canonical_json(doc).encode()).hexdigest()


def _readable_scopes(caller: Caller | None) -> graph.Readable | None:
    """The test of the scopes `caller` may read, for the graph queries (None: every scope)."""
    if caller is None or caller.scopes is None or "*" in caller.scopes:
        return None
    return lambda scope: governance.scope_granted(caller, scope)


def _required(memory_id: str) -> str:
    """The memory a walk starts from.

    Raises:
        InvalidArgument: none given.
    """
    if not memory_id:
        raise InvalidArgument("memory_id is required: the memory to walk from")
    return memory_id
