"""The write path of an `AgentClient`: a write checked as the server will check it, embedded, signed, sent in an
Append, or queued in the outbox while the server cannot be reached, and the outbox sent in order when it can.

A write the server answers comes back with the entries it wrote, which go straight into the cache
(`apply_own`): one round trip per write. The path keeps the state only writes need (the entries in flight for
the live stream, `mnemosync.agent.own_writes`; the flush lock; the acknowledgement timer); what reads share
with it (the online flag, the embedder, the live stream, catching up) it takes from its client.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.outbox import Redirect
from mnemosync.agent.own_writes import OwnWrites
from mnemosync.agent.source_tree import WorkingTree
from mnemosync.kernel import event_time, signing, source_refs
from mnemosync.kernel.errors import CodedError, InvalidArgument, MnemosyncError, NotFound
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import LAYER_NUMBERS
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, ValidOp, validate
from mnemosync.kernel.overview import OutboxReport

if TYPE_CHECKING:
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.conflicts import ConflictView
    from mnemosync.agent.embeddings import Embedder
    from mnemosync.agent.outbox import Outbox
    from mnemosync.agent.remote import Remote
    from mnemosync.agent.sync import LiveUpdates, SyncSummary
    from mnemosync.kernel.memory import MemoryRow

log = logging.getLogger(__name__)

# Refusals that will not change on a resend: the queued write is parked (kept, shown in
# status) instead of blocking the queue. Anything else (INTERNAL, RESOURCE_EXHAUSTED, …)
# leaves it queued for the next flush.
FINAL_REFUSALS = frozenset({
    "INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "ABORTED",
    "PERMISSION_DENIED", "OUT_OF_RANGE",
})


@dataclass(frozen=True)
class WriteResult:
    """The outcome of a write.

    `pending` is True when the server was unreachable and the write waits in
    the outbox (then `seq` is 0 and `version` is the expected one).
    `conflict_id` is set when the write opened or joined a conflict (an update
    or forget from a stale version, or a near-duplicate of another agent's
    memory). `deduplicated` is True when an add was not written because a
    memory in the same scope already says exactly this: `memory_id` is that
    memory's.
    """

    memory_id: str
    op_id: str
    version: int
    seq: int
    pending: bool = False
    replayed: bool = False
    conflict_id: int = 0
    deduplicated: bool = False


class WritingClient(Protocol):
    """What the write path takes from its `AgentClient`: its files, connection and model, the online flag it
    sets, the live stream it hands its own entries to, and the catch-up and reads a write may need."""

    settings: ClientSettings
    agent_id: str
    limits: Limits
    cache: Cache
    outbox: Outbox
    remote: Remote
    online: bool
    live: LiveUpdates | None

    @property
    def embedder(self) -> Embedder: ...

    @property
    def model(self) -> ModelInfo: ...

    def sync(self) -> SyncSummary: ...

    def get(self, memory_id: str) -> MemoryRow: ...

    def conflict(self, conflict_id: int) -> ConflictView: ...


class WritePath:
    """The writes of one `AgentClient` (which delegates every write method here).

    Args:
        client: The client whose cache, outbox, connection, embedder and online flag the writes use.
        signing_key: This agent's operation-signing key, or None when it does not sign.
    """

    def __init__(self, client: WritingClient, signing_key: Any = None):
        self._client = client
        self.settings = client.settings
        self.agent_id = client.agent_id
        self.limits: Limits = client.limits
        self.cache = client.cache
        self.outbox = client.outbox
        self.remote = client.remote
        self.own = OwnWrites()
        self._signing_key = signing_key
        self._flush_lock = threading.Lock()
        self.redirected: list[Redirect] = []
        """Queued adds the last flush saw become other memories (also kept in the outbox: `Outbox.redirect_of`)."""
        self._acked_at = float("-inf")
        self._ack_lock = threading.Lock()
        self._ack_timer: threading.Timer | None = None
        self._closed = False

    def close(self) -> bool:
        """Stops acknowledging (a pending acknowledgement is cancelled); True the first time, False after."""
        with self._ack_lock:
            if self._closed:
                return False
            self._closed = True
            if self._ack_timer is not None:
                self._ack_timer.cancel()
        return True

    def add(self, content: str, *, scope: str | None = None, type: str = "fact",
            tags: Sequence[str] = (), layer: int | str | None = None, importance: float | None = None,
            confidence: float | None = None, protected: bool = False,
            memory_id: str | None = None, trust: str = "", quote: str = "",
            event_time: int | str | None = None, op_id: str | None = None,
            sources: Sequence[dict[str, Any] | str] = (), root: Path | str | None = None,
            steps: Sequence[str] = (), preconditions: Sequence[str] = (),
            postconditions: Sequence[str] = ()) -> WriteResult:
        """Stores a new memory; returns its id and version.

        `steps`, `preconditions` and `postconditions` make it a procedure (`mnemosync.kernel.procedures`).
        `trust` is "", "principle" (then `quote` is required), "pattern" or "inference".
        `sources` are what it is about (dicts, or `mnemosync.kernel.source_refs.parse` forms such as
        "src/lib/api.ts#retry"); each file that exists under `root` (default: the working directory) gets the
        SHA-256 of the cited part and the tree's git commit recorded (`recorded_sources`).
        `event_time` is when what it records happened, if not now: milliseconds since 1970-01-01 UTC, or
        ISO 8601 text (UTC unless it carries an offset). `op_id` makes a repeated call a replay (the server
        answers it with the first result and writes nothing); default new.
        """
        fields: dict[str, Any] = {
            "scope": scope or self.settings.scope, "type": type, "tags": list(tags),
            "layer": layer_number(layer), "content": content, "protected": protected,
        }
        if trust:
            fields["trust"] = trust
        if quote:
            fields["quote"] = quote
        if importance is not None:
            fields["importance"] = importance
        if confidence is not None:
            fields["confidence"] = confidence
        if event_time is not None:
            fields["event_time_ms"] = event_time_ms(event_time)
        if sources:
            fields["sources"] = recorded_sources(sources, root)
        for name, values in (("steps", steps), ("preconditions", preconditions), ("postconditions", postconditions)):
            if values:
                fields[name] = list(values)
        embedding = self._client.embedder.embed(content) if isinstance(content, str) and content.strip() else None
        return self._write("add", memory_id or str(uuid.uuid4()), 0, fields, embedding, op_id=op_id)

    def update(self, memory_id: str, *, base_version: int | None = None, content: str | None = None,
               type: str | None = None, tags: Sequence[str] | None = None,
               importance: float | None = None, confidence: float | None = None,
               protected: bool | None = None, trust: str | None = None, quote: str | None = None,
               event_time: int | str | None = None, sources: Sequence[dict[str, Any] | str] | None = None,
               root: Path | str | None = None, steps: Sequence[str] | None = None,
               preconditions: Sequence[str] | None = None,
               postconditions: Sequence[str] | None = None) -> WriteResult:
        """Changes a memory from `base_version`: the version its writer saw (a session's or a person's, kept by
        `mnemosync.agent.shown`). None is a blind write, made from the version this agent has now (its queued
        state, else its cache, else the server's).

        If another agent changed the memory since that version, the write is
        still recorded, as a conflicting revision: see `WriteResult.conflict_id`.
        `sources` replace the memory's (an empty list clears them), hashed as for `add`. New content without
        new sources records the memory's sources again from `root`: the writer states the new content against
        the code as it is now. A source whose file is not under `root` keeps the hash it had: a writer away from
        the project's tree cannot restate it, and dropping it would leave the memory never checked again.
        `steps`, `preconditions` and `postconditions` are replaced together: the ones left None keep the values
        this agent's cache has (an empty list clears one).
        """
        fields: dict[str, Any] = {}
        for key, value in (("content", content), ("type", type), ("importance", importance),
                           ("confidence", confidence), ("protected", protected), ("trust", trust),
                           ("quote", quote)):
            if value is not None:
                fields[key] = value
        if tags is not None:
            fields["tags"] = list(tags)
        if event_time is not None:
            fields["event_time_ms"] = event_time_ms(event_time)
        if sources is not None:
            fields["sources"] = recorded_sources(sources, root)
        elif content is not None:
            known = self.cache.get(memory_id)
            if known is not None and known.sources:
                fields["sources"] = restated_sources(known.sources, root)
        given = {"steps": steps, "preconditions": preconditions, "postconditions": postconditions}
        if any(v is not None for v in given.values()):
            known = self.cache.get(memory_id)
            kept = known.procedure.as_dict() if known is not None and known.procedure else {}
            fields.update({name: list(v) if v is not None else kept.get(name, []) for name, v in given.items()})
        embedding = self._client.embedder.embed(content) if content and content.strip() else None
        return self._write("update", memory_id, self._base(memory_id, base_version), fields, embedding)

    def forget(self, memory_id: str, *, base_version: int | None = None, reason: str = "") -> WriteResult:
        """Archives a memory (it can be restored)."""
        return self._write("forget", memory_id, self._base(memory_id, base_version), {"reason": reason})

    def restore(self, memory_id: str, *, base_version: int | None = None) -> WriteResult:
        """Brings back a forgotten memory."""
        return self._write("restore", memory_id, self._base(memory_id, base_version), {})

    def set_layer(self, memory_id: str, layer: int | str, *, base_version: int | None = None) -> WriteResult:
        """Moves a memory to another governance layer."""
        return self._write("set_layer", memory_id, self._base(memory_id, base_version),
                           {"layer": layer_number(layer)})

    def link(self, memory_id: str, target_id: str, relation: str = "semantic", *, weight: float | None = None,
             reason: str = "", op_id: str | None = None) -> WriteResult:
        """Links one memory to another with an edge type (`mnemosync.kernel.links`), an optional weight in (0, 1] and
        reason; linking again sets the weight and reason (`op_id` as for `add`)."""
        fields = {"target_id": target_id, "relation": relation, "weight": weight or 0.0, "reason": reason}
        return self._write("link", memory_id, 0, fields, op_id=op_id)

    def unlink(self, memory_id: str, target_id: str, relation: str = "semantic") -> WriteResult:
        """Removes a link."""
        return self._write("unlink", memory_id, 0, {"target_id": target_id, "relation": relation})

    # -- conflicts -------------------------------------------------------------

    def resolve_conflict(self, conflict_id: int | str, *, keep: int | str | None = None,
                         merged_content: str | None = None, keep_all: bool = False, note: str = "",
                         base_version: int | None = None) -> WriteResult:
        """Resolves a conflict: keep one revision, or write merged content (embedded here), or
        (semantic conflicts) keep both memories. Give exactly one of keep, merged_content, keep_all.

        Args:
            conflict_id: The conflict (a number, or its decimal text).
            keep: The revision number to keep ("all" means keep_all).
            merged_content: Content merged from the revisions.
            keep_all: Semantic conflicts: the memories are not duplicates.
            note: Why (kept in the changelog).
            base_version: The memory version the decision was made on (default: its current one).

        Raises:
            InvalidArgument: not exactly one choice, or a bad revision number.
            StaleVersion: the memory changed since base_version (look at the conflict again).
            PermissionDenied: the rule that refused it (for example resolve-needs-authority).
            FailedPrecondition: the conflict is already resolved.
        """
        conflict_id = _number(conflict_id, "conflict_id")
        if isinstance(keep, str) and keep.strip().lower() == "all":
            keep, keep_all = None, True
        view = self._client.conflict(conflict_id)
        fields: dict[str, Any] = {"conflict_id": conflict_id}
        if keep is not None:
            fields["keep_revision"] = _number(keep, "keep_revision")
        if merged_content is not None:
            fields["merged_content"] = merged_content
        if keep_all:
            fields["keep_all"] = True
        if note:
            fields["note"] = note
        embedding = self._client.embedder.embed(merged_content) if merged_content and merged_content.strip() else None
        base = view.memory_version if base_version is None else base_version
        return self._write("resolve_conflict", view.conflict.memory_id, base, fields, embedding)

    def redact(self, memory_id: str, reason: str, *, base_version: int | None = None) -> WriteResult:
        """Removes the memory's text everywhere (an admin operation; see RedactOp in memory.proto).

        Unlike other writes it is never queued: it needs the server now.

        Raises:
            PermissionDenied: this agent's certificate is not an admin certificate.
            FailedPrecondition: some of the memory's text predates redaction support.
            ServerUnavailable: the server cannot be reached.
        """
        base = self._client.get(memory_id).version if base_version is None else base_version
        return self._send(self.validated("redact", memory_id, base, {"reason": reason}), None)

    def verify(self, memory_id: str, status: str, paths: Sequence[str] = (), *, base_version: int) -> WriteResult:
        """Records a verification of the memory's sources at `base_version` (see VerifyOp in memory.proto).

        Never queued: a verification is of the version the server has now.

        Raises:
            StaleVersion: the memory changed since base_version (verify it again).
            ServerUnavailable: the server cannot be reached.
        """
        fields: dict[str, Any] = {"status": status}
        if paths:
            fields["paths"] = list(paths)
        return self._send(self.validated("verify", memory_id, base_version, fields), None)

    def validated(self, kind: str, memory_id: str, base_version: int, fields: dict[str, Any],
                   embedding: list[float] | None = None, op_id: str | None = None) -> ValidOp:
        """The operation checked as the server will check it, and signed when this agent signs."""
        request = OpRequest(op_id or str(uuid.uuid4()), memory_id, kind, base_version, fields, embedding)
        valid = validate(request, self.limits, self._client.model if embedding else None)
        if self._signing_key is None:
            return valid
        salt, signature = signing.sign_operation(self._signing_key, self.agent_id, valid)
        return replace(valid, salt=salt, signature=signature)

    def _base(self, memory_id: str, base_version: int | None) -> int:
        if base_version is not None:
            return base_version
        pending = self.outbox.overlay_get(memory_id)
        if pending is not None:
            return pending.version
        memory = self.cache.get(memory_id)
        if memory is None:
            memory = self._client.get(memory_id)
        return memory.version

    def _write(self, kind: str, memory_id: str, base_version: int, fields: dict[str, Any],
               embedding: list[float] | None = None, op_id: str | None = None) -> WriteResult:
        valid = self.validated(kind, memory_id, base_version, fields, embedding, op_id)
        model = self._client.model if embedding else None
        queued = self.outbox.counts()[0]
        if queued:
            self._try_flush()
            queued = self.outbox.counts()[0]
        if not queued:
            try:
                return self._send(valid, model)
            except ServerUnavailable as exc:
                # said once: a client already known to be offline has said why when it went offline
                log.log(logging.INFO if not self._client.online else logging.WARNING, "queued %s for later: %s",
                        kind, exc)
                self._client.online = False
        base = self.cache.get(memory_id) if kind != "add" else None
        if kind not in ("add", "link", "unlink") and base is None and self.outbox.overlay_get(memory_id) is None:
            raise NotFound(f"no memory with id {memory_id} in the local cache "
                           "(the server is unreachable, so it cannot be checked there)")
        self.outbox.enqueue(valid, model, self.agent_id, base,
                            self.cache.vector(memory_id) if base else None)
        version = 1 if kind == "add" else (base_version + 1 if kind not in ("link", "unlink") else base_version)
        return WriteResult(memory_id, valid.op_id, version, 0, pending=True)

    def _send(self, op: ValidOp, model: ModelInfo | None) -> WriteResult:
        [result], entries = self.append([op], model)
        self._client.online = True
        self.apply_own(entries)
        return WriteResult(result.memory_id, result.op_id, result.version, result.seq,
                           replayed=result.replayed, conflict_id=result.conflict_id,
                           deduplicated=result.deduplicated)

    def append(self, ops: list[ValidOp], model: ModelInfo | None) -> tuple[list, list]:
        """One Append asking for the entries it wrote, which are also held for the live stream (it receives only
        markers of this agent's own entries: `mnemosync.agent.own_writes`)."""
        with self.own.sending() as keep:
            results, entries = self.remote.write(ops, model)
            keep(entries)
        return results, entries

    def apply_own(self, entries: list) -> None:
        """Puts this agent's own entries, as its Append returned them, into the cache: one round trip per write.

        They apply when they follow the cache's offset (their hashes and closing checkpoint are checked as any
        page's). When other agents' entries came between, the live stream brings those and then markers of these,
        which it fills in from `self.own`; without a live stream the cache catches up instead.
        """
        if not entries:
            return
        try:
            if entries[0].seq <= self.cache.offset + 1:
                self.cache.apply(entries)
            elif not (self._client.live and self._client.live.connected.is_set()):
                self._client.sync()
        except CodedError as exc:
            log.warning("this agent's own write did not reach its cache (the next sync retries): %s", exc)
            return
        finally:
            self.own.forget_through(self.cache.offset)
        self._ack_soon()

    def _ack_soon(self) -> None:
        """Acknowledges the cache's offset without waiting for the answer (the operator's view shows it): at
        once when the last acknowledgement is `ACK_INTERVAL` old, else once when it is, with the offset then."""
        with self._ack_lock:
            if self._ack_timer is not None or self._closed:
                return
            wait = ACK_INTERVAL - (time.monotonic() - self._acked_at)
            if wait > 0:
                self._ack_timer = threading.Timer(wait, self._ack_now)
                self._ack_timer.daemon = True
                self._ack_timer.start()
                return
        self._ack_now()

    def _ack_now(self) -> None:
        with self._ack_lock:  # held while sending (it does not wait for the answer), so close cannot come between
            self._ack_timer = None
            if self._closed:
                return
            self._acked_at = time.monotonic()
            try:
                self.remote.ack_in_background(self.cache.offset)
            except CodedError as exc:
                log.debug("background acknowledgement not sent: %s", exc)

    def flush(self) -> tuple[int, int]:
        """Sends queued writes in order, in batches of consecutive writes (one Append each, op_id-idempotent,
        so a batch resent after a lost answer writes nothing twice); returns (sent, refused).

        A batch the server refuses for good is resent one write at a time, so only the writes it refuses are
        parked and the rest still go, in order.

        Raises:
            ServerUnavailable: the server went away again (the rest stay queued).
        """
        sent = refused_count = 0
        with self._flush_lock:
            self.redirected = []
            for batch in _batches(self.outbox.pending(), self.limits):
                models = {item.model for item in batch if item.model is not None}
                try:
                    results, entries = self.append([item.op for item in batch], next(iter(models), None))
                except MnemosyncError as exc:
                    if exc.code not in FINAL_REFUSALS:
                        raise  # the server failed, not the write: keep it queued and retry later
                    if len(batch) > 1:
                        one_by_one = [self._flush_one(item) for item in batch]
                        sent += one_by_one.count(True)
                        refused_count += one_by_one.count(False)
                        continue
                    self._park(batch[0], exc)
                    refused_count += 1
                    continue
                self._note_redirects(batch, results)
                self.outbox.mark_sent(*(item.position for item in batch))
                sent += len(batch)
                self.apply_own(entries)
            self._client.online = True
        if sent or refused_count:
            self.outbox.clear_overlay()
            self._ack_quietly()  # the new offset, and the outbox as it is now, for the operator's view
        return sent, refused_count

    def _ack_quietly(self) -> None:
        try:
            if self.cache.offset:
                self.remote.ack(self.cache.offset)
        except CodedError as exc:
            log.info("acknowledgement after a flush failed: %s", exc)

    def _flush_one(self, item) -> bool:
        """Sends one queued write; True if it went, False if parked (refused for good)."""
        try:
            results, entries = self.append([item.op], item.model)
        except MnemosyncError as exc:
            if exc.code not in FINAL_REFUSALS:
                raise
            self._park(item, exc)
            return False
        self._note_redirects([item], results)
        self.outbox.mark_sent(item.position)
        self.apply_own(entries)
        return True

    def _note_redirects(self, items: list, results: list) -> None:
        """Records queued adds the server answered with another memory: the id handed out for each was never
        stored, so `get` must be able to say where it went."""
        now = int(time.time() * 1000)
        found = [Redirect(item.op.memory_id, r.memory_id, item.op.op_id, now) for item, r in zip(items, results,
                                                                                                   strict=True)
                 if r.deduplicated and r.memory_id != item.op.memory_id]
        for redirect in found:
            log.warning("queued add %s was not stored: memory %s already says the same, so it became that memory",
                        redirect.memory_id, redirect.became)
        self.outbox.record_redirects(found)
        self.redirected.extend(found)

    def _park(self, item, exc: MnemosyncError) -> None:
        log.error("the server refused a queued %s of %s: %s", item.op.op, item.op.memory_id, exc)
        self.outbox.mark_failed(item.position, f"{exc.code}: {exc}")

    def outbox_report(self) -> OutboxReport:
        pending, failed, oldest = self.outbox.counts()
        return OutboxReport(pending, failed, int(oldest or 0))

    def on_reconnect(self) -> None:
        self._client.online = True
        if self.outbox.counts()[0]:
            self._try_flush()

    def _try_flush(self) -> None:
        try:
            self.flush()
        except ServerUnavailable:
            self._client.online = False


ACK_INTERVAL = 1.0
"""Least seconds between the acknowledgements sent after this agent's own writes."""
FLUSH_BATCH_BYTES = 4 * 1024 * 1024
"""Most bytes of operations in one Append of an outbox flush (well under the server's message limit)."""


def _batches(items: list, limits: Limits) -> Iterator[list]:
    """Consecutive queued writes grouped into Appends: at most max_batch each, about FLUSH_BATCH_BYTES, and one
    embedding model per batch (writes without an embedding join any)."""
    batch: list = []
    size, model = 0, None
    for item in items:
        item_size = len(json.dumps(item.op.payload)) + len(item.op.embedding or b"") + 200
        if batch and (len(batch) >= limits.max_batch or size + item_size > FLUSH_BATCH_BYTES
                      or (item.model is not None and model is not None and item.model != model)):
            yield batch
            batch, size, model = [], 0, None
        batch.append(item)
        size += item_size
        model = model or item.model
    if batch:
        yield batch


def recorded_sources(sources: Sequence[dict[str, Any] | str], root: Path | str | None) -> list[dict[str, Any]]:
    """The sources as a write carries them: parsed, checked, and for each file found under `root` (default: the
    working directory; `mnemosync.agent.source_tree` says which files may be read) the SHA-256 of the cited part
    and the tree's commit.

    Raises:
        InvalidArgument: a source is malformed (naming it).
    """
    parsed = [source_refs.parse(s) if isinstance(s, str) else dict(s) for s in sources]
    parsed = source_refs.validate_sources(parsed)
    base = Path(root) if root is not None else Path.cwd()
    if not any("path" in s for s in parsed) or not base.is_dir():
        return parsed
    tree = WorkingTree(base)
    return source_refs.record(base, parsed, tree.commit, readable=tree.readable)


def restated_sources(sources: Sequence[dict[str, Any]], root: Path | str | None) -> list[dict[str, Any]]:
    """A memory's sources hashed again from `root` for new content; a file that is not there keeps its old hash
    and commit (see `WritePath.update`)."""
    fresh = recorded_sources([{k: v for k, v in s.items() if k not in ("sha256", "commit")} for s in sources], root)
    return [new if "sha256" in new or "sha256" not in old else dict(old)
            for old, new in zip(sources, fresh, strict=True)]


def _number(value: int | str, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise InvalidArgument(f"{name} must be a number, got {value!r}")


def event_time_ms(value: int | str) -> int:
    """An event time as given (milliseconds, checked with the rest of the operation) or parsed from ISO 8601 text.

    Raises:
        InvalidArgument: the text is not a time `mnemosync.kernel.event_time.parse` reads.
    """
    if not isinstance(value, str):
        return value  # validated with the rest of the operation
    return event_time.parse(value)


def layer_number(value: int | str | None) -> int:
    """A governance layer given as a number, its decimal text or its name (`LAYER_NUMBERS`); 0 for none given.

    Raises:
        InvalidArgument: a name that is no layer's.
    """
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        try:
            return LAYER_NUMBERS[value.lower()]
        except KeyError:
            raise InvalidArgument(f"layer must be 1-4 or one of {sorted(LAYER_NUMBERS)}, "
                               f"got {value!r}") from None
    return value

