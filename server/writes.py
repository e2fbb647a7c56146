"""Writes and admission: the Append and Ack requests, as the ledger's writer runs them.

An Append is validated and sealed on the caller's thread, then admitted on the writer's
(`mnemosync.server.group_commit`): the replay check of its op_ids, the model pin, governance, the intake
gate and conflicts (`mnemosync.server.admission`), the entry chained and folded (`mnemosync.server.append_batch`).
The group's near-duplicate pre-filter (`prefilter`) runs once over every Append of a group before any writes,
and a group that redacted empties the WAL after its commit (`after_commit`); the ledger
(`mnemosync.server.ledger.Ledger`) wires both into the writer's hooks.

A group of small Appends of adds only (as agents' single adds arrive together) shares what a batched Append
shares within itself (`shares`, `_Shared`): the op_id replay lookup and the live-memory reads are made once for
every job, and the changelog rows and Merkle leaves of all of them are written together before the commit
(`flush_shared`), one statement per table instead of per job. Each job still runs in its own savepoint and folds
its own adds, so every check reads what it read one job at a time.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemosync.kernel import db, signing
from mnemosync.kernel.entry import Entry, canonical_json
from mnemosync.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    MnemosyncError,
    OutOfRange,
    ResourceExhausted,
    StoreClosed,
)
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, ValidOp, validate
from mnemosync.kernel.outcomes import AppendOutcome, OpResult
from mnemosync.server import admission, append_batch, changelog, governance, redaction
from mnemosync.server.governance import Rules
from mnemosync.server.group_commit import Job
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext, model_mismatch, pin_model, pinned_model

FEED_CHUNK = 100
"""Operations an Append of at least twice as many is validated and handed to the writer at a time
(`append_batch.Feed`): small enough that the writer starts early, large enough for one statement per table."""
FED_FROM = FEED_CHUNK * 2
"""An Append of this many operations or more is fed to the writer a chunk at a time (`Writes.append`)."""


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
    left: tuple[tuple[int, str, int], ModelInfo | None] | None = None
    """Set once this Append is written: the head it left (seq, hash, server_time_ms) and the pinned model. The next
    job of the group starts from them when it is an Append that comes right after (`_Adds.carried`)."""

    def carried(self) -> tuple[tuple[int, str, int], ModelInfo | None] | None:
        """The head and pinned model the job before left, when that job was an Append of this group that wrote
        (nothing else wrote since: a job that is not an Append is None in `after`, a refused one rolled back)."""
        last = self.after[-1] if self.after else None
        return last.left if last is not None else None


@dataclass
class _Shared:
    """What the jobs of a group that shares (`Writes.shares`) carry from one to the next, on the writer thread."""

    entries: append_batch.Entries
    """The head as the group moved it, and the rows of every job not written yet."""
    pinned: ModelInfo | None
    written: dict[tuple[str, str], tuple[Entry, str]]
    """(agent_id, op_id) -> (entry, request hash) for every op_id of the group already used: those committed before
    the group, looked up once, and those an earlier job of the group wrote."""
    live: admission.LiveMemories
    """Every job's adds' live memories, read once; each job's admitted adds are recorded in it."""


class Writes:
    """The ledger's writes: Append and Ack (`ledger.writes`). Thread-safe."""

    def __init__(self, context: LedgerContext):
        self._ctx = context
        self._redacted_in_group = False  # the writer thread's note to empty the WAL after this commit
        self._shared: _Shared | None = None  # the writer thread's: what a group that shares has in common

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
        if len(ops) >= FED_FROM:
            self._check_sizes(ops, model)
            return self._append_fed(caller, ops, model, rules or Rules())
        outcome: AppendOutcome = self._ctx.submit(*self._prepared(caller, ops, model, rules))
        return outcome

    def append_async(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None, *,
                     rules: Rules | None = None) -> asyncio.Future[AppendOutcome]:
        """`append` of fewer than `FED_FROM` operations from a running event loop (call it there): the operations
        are validated and sealed on the loop, and the asyncio future is the outcome, set on the loop once the group
        that wrote them is committed (or the refusal of the writer's checks). This is how the gRPC service answers
        a small Append with no thread waiting for the writer.

        Raises:
            MnemosyncError: a refusal of validation (nothing is handed to the writer).
            ValueError: `FED_FROM` operations or more (`append` validates those beside the writer).
        """
        if len(ops) >= FED_FROM:
            raise ValueError(f"an Append of {len(ops)} operations is fed to the writer: use append")
        return self._ctx.submit_async(*self._prepared(caller, ops, model, rules))

    def _prepared(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None,
                  rules: Rules | None) -> tuple[Callable[[db.Conn], AppendOutcome], _Adds]:
        """A small Append validated and sealed: the writer's work and what the group's pre-filter needs."""
        self._check_sizes(ops, model)
        valid = rules or Rules()
        sealed = [self._sealed(caller, op) for op in self._validated(ops, 0, model)]
        _no_op_id_twice(sealed, set())
        adds = _Adds(caller, [op for op, _, _ in sealed], valid)
        return lambda conn: self._append(conn, caller, [sealed], model, valid, adds, len(ops)), adds

    def _check_sizes(self, ops: list[OpRequest], model: ModelInfo | None) -> None:
        if not ops:
            raise InvalidArgument("operations must not be empty")
        if len(ops) > self._ctx.limits.max_batch:
            raise ResourceExhausted(
                f"operations has {len(ops)} entries; the limit is {self._ctx.limits.max_batch} per Append"
            )
        if model is not None and not 0 < model.dimensions <= self._ctx.limits.max_dimensions:
            raise InvalidArgument(
                f"embedding_model.dimensions must be 1 to {self._ctx.limits.max_dimensions}, got {model.dimensions}"
            )

    def _validated(self, ops: Sequence[OpRequest], first: int, model: ModelInfo | None) -> list[ValidOp]:
        """`ops` (the Append's operations from index `first`) validated, or the refusal naming the first bad one."""
        valid: list[ValidOp] = []
        for i, op in enumerate(ops, start=first):
            try:
                valid.append(validate(op, self._ctx.limits, model))
            except MnemosyncError as exc:
                raise type(exc)(f"operations[{i}]: {exc}") from None
        return valid

    @staticmethod
    def _sealed(caller: Caller, op: ValidOp) -> tuple[ValidOp, signing.Seal, str]:
        payload_json = canonical_json(op.payload)  # once for the commitment and the request hash
        seal = signing.seal(caller.agent_id, caller.signing_key, op, payload_json)
        return op, seal, _request_hash(op, seal.embedding_sha256, payload_json)

    def _append_fed(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None,
                    rules: Rules) -> AppendOutcome:
        """A large Append validated a chunk at a time while the writer admits the chunks before (see
        `append_batch.Feed`). Refusals come as `append` gives them: a validation error of any operation, the first
        one, before a repeated op_id, before anything the writer refused."""
        if self._ctx.closed:
            raise StoreClosed("the server is shutting down; retry shortly")
        feed = append_batch.Feed()
        written = self._ctx.submit_nowait(
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
        return self._ctx.submit(lambda conn: self._ack(conn, agent_id, seq))

    def after_commit(self, conn: db.Conn) -> None:
        """On the writer, after each commit: the WAL emptied if the group redacted (older page images of the removed
        text must not stay in it)."""
        if self._redacted_in_group:
            self._redacted_in_group = False
            db.empty_wal(conn)

    def given_up(self) -> None:
        """On the writer, when a group is rolled back: nothing of it was redacted, nothing of it is shared."""
        self._redacted_in_group = False
        self._shared = None

    @staticmethod
    def shares(jobs: list[Job]) -> bool:
        """Whether a group's jobs share their reads and changelog rows (see the module docstring): when each is a
        small Append of adds only. Exact: an add's checks read the changelog only for its op_ids, and those see the
        group's rows not written yet (`_Shared.written`)."""
        return len(jobs) > 1 and all(isinstance(job.adds, _Adds) and all(op.op == "add" for op in job.adds.ops)
                                     for job in jobs)

    def flush_shared(self, conn: db.Conn) -> None:
        """On the writer, after the last job of a group that shares: every row it left, in one statement per
        table."""
        shared, self._shared = self._shared, None
        if shared is not None:
            shared.entries.flush()

    def prefilter(self, conn: db.Conn, jobs: list[Job], shared: bool = False) -> None:
        """The near-duplicate pre-filter of every Append of the group at once, before any of them writes: one
        product over the committed vectors for all their adds (`admission.near_candidates`), however few, so that
        no add scans every vector on its own. Each Append then checks only what the group wrote before it
        (`_append`), so every decision is the one-by-one check's. When the group `shared` (`shares`), its op_ids
        and live memories are read here, once."""
        appends = [job.adds for job in jobs if job.adds is not None]
        self._shared = self._open_shared(conn, appends) if shared else None
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

    def _open_shared(self, conn: db.Conn, appends: list[_Adds]) -> _Shared:
        written = changelog.find_agents_ops(conn, {(a.caller.agent_id, op.op_id) for a in appends for op in a.ops})
        live = admission.LiveMemories()
        live.look_up(conn, [op for a in appends for op in a.ops if (a.caller.agent_id, op.op_id) not in written])
        return _Shared(append_batch.Entries(self._ctx.record, conn), pinned_model(conn), written, live)

    def _append(self, conn: db.Conn, caller: Caller, chunks: Iterable[Sequence[tuple[ValidOp, signing.Seal, str]]],
                model: ModelInfo | None, rules: Rules, adds: _Adds | None, total: int) -> AppendOutcome:
        """The writer's part of an Append: its operations, a chunk at a time (one chunk unless it is fed, see
        `_append_fed`), admitted and written in order. `adds`: what the group's pre-filter decided (None: a fed
        Append, whose chunks each decide for themselves). In a group that shares, the Append goes on from what the
        jobs before it left (`_Shared`) and leaves its rows there; refused, it takes back all it left."""
        shared = self._shared if adds is not None else None
        if shared is None:
            return self._append_alone(conn, caller, chunks, model, rules, adds, total)
        mark, live = shared.entries.mark(), shared.live
        shared.live = live.copy()
        try:
            outcome = self._append_alone(conn, caller, chunks, model, rules, adds, total, shared)
        except BaseException:
            shared.entries.undo(mark)
            shared.live = live
            raise
        for entry, request_hash in shared.entries.since(mark):
            shared.written[entry.agent_id, entry.op_id] = (entry, request_hash)
        return outcome

    def _append_alone(self, conn: db.Conn, caller: Caller,
                      chunks: Iterable[Sequence[tuple[ValidOp, signing.Seal, str]]], model: ModelInfo | None,
                      rules: Rules, adds: _Adds | None, total: int, shared: _Shared | None = None) -> AppendOutcome:
        carried = adds.carried() if adds is not None and shared is None else None
        pinned = shared.pinned if shared is not None else carried[1] if carried is not None else pinned_model(conn)
        folds = append_batch.Folds(conn)
        entries = shared.entries if shared is not None else append_batch.Entries(
            self._ctx.record, conn, head=carried[0] if carried is not None else None)
        results: list[OpResult] = []
        redacted = False
        live: admission.LiveMemories | None = admission.LiveMemories()
        for ops in chunks:
            if model is not None and any(op.embedding for op, _, _ in ops):
                if pinned is None:
                    governance.check_model_pin(caller)
                    pin_model(conn, model)
                    pinned = model
                elif not pinned.same_model(model):
                    raise FailedPrecondition(model_mismatch(pinned, model))
            if shared is not None:
                written = {op.op_id: shared.written[key] for op, _, _ in ops
                           if (key := (caller.agent_id, op.op_id)) in shared.written}
                live = shared.live
            else:
                written = changelog.find_ops(conn, caller.agent_id, [op.op_id for op, _, _ in ops])  # one lookup
            if live is not None and all(op.op == "add" for op, _, _ in ops):
                live.look_up(conn, [op for op, _, _ in ops if op.op_id not in written])
            else:
                live = None
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
                                                    folds.fold, entries, live))
                except MnemosyncError as exc:
                    if total > 1:  # which one of the batch, as validation says it (the whole batch is refused)
                        exc.args = (f"operations[{i}]: {exc}",)
                    raise
            redacted |= any(op.op == "redact" for op, _, _ in ops)
        if shared is None:
            entries.flush()
        folds.flush()
        self._redacted_in_group |= redacted  # only once all of them went in
        if shared is not None:
            shared.pinned = pinned
        elif adds is not None:
            adds.left = (entries.seq, entries.hash, entries.last_time_ms), pinned
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
                    fold: Callable[[Entry], None], entries: append_batch.Entries,
                    live: admission.LiveMemories | None) -> OpResult:
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
        decision = admission.admit(conn, caller, op, rules, seq + 1, maybe_near=maybe_near, live=live)
        if decision.duplicate is not None:
            return OpResult(op.op_id, decision.duplicate.id, 0, decision.version, False, deduplicated=True)
        version = decision.version
        now = max(self._ctx.clock.now_ms(), entries.last_time_ms)
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
        # as `replace(entry, hash=entry.computed_hash())` without copying its fields (~10 µs): no one holds it yet
        object.__setattr__(entry, "hash", entry.computed_hash())
        entries.add(entry, request_hash)
        redaction.blank(conn, decision.blanking, entry.seq)
        fold(entry)
        return OpResult(op.op_id, op.memory_id, entry.seq, version, False, (decision.conflict or {}).get("id", 0))

    def _ack(self, conn: db.Conn, agent_id: str, seq: int) -> tuple[int, int]:
        head = self._ctx.record.head(conn)[0]
        if seq > head:
            raise OutOfRange(f"seq {seq} is past the changelog head {head}")
        return self._ctx.record.acknowledge(conn, agent_id, seq, self._ctx.clock.now_ms()), head


def _no_op_id_twice(ops: Sequence[tuple[ValidOp, signing.Seal, str]], seen: set[str]) -> None:
    """Refuses an op_id that appears twice in one Append (`seen`: those of its earlier chunks, grown here)."""
    for op, _, _ in ops:
        if op.op_id in seen:
            raise InvalidArgument(f"op_id {op.op_id} appears twice in one batch")
        seen.add(op.op_id)

def _request_hash(op: ValidOp, embedding_sha256: str, payload_json: str | None = None) -> str:
    """What a replay of the same op_id must match: the operation as sent (`embedding_sha256` is its vector's
    digest, as the seal computed it, "" for none), as SHA-256 of the canonical JSON of {memory_id, op, base_version,
    payload, embedding}. `payload_json`: `canonical_json(op.payload)` when the caller has it; "payload" sorts last
    of the keys, so it closes the document made of the others."""
    doc = {
        "memory_id": op.memory_id,
        "op": op.op,
        "base_version": op.base_version,
        "embedding": embedding_sha256,
    }
    json_text = canonical_json(op.payload) if payload_json is None else payload_json
    return hashlib.sha256(f'{canonical_json(doc)[:-1]},"payload":{json_text}}}'.encode()).hexdigest()
