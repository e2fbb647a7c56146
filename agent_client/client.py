"""AgentClient: the one object an agent process uses to share memory.

It writes through the server when it can and into the durable outbox when it
cannot; reads and searches go to the server and fall back to the local cache,
saying so (`offline=True`). Embeddings are computed here, never on the server.

    with AgentClient(settings) as client:     # boot: flush outbox, agent_sync, live updates
        client.add("The auth service signs JWTs with RS256")
        outcome = client.search("how are login tokens signed?")
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from mnemosync.agent import bulk
from mnemosync.agent.cache import Cache
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.conflicts import ConflictList, ConflictView, get_conflict, list_conflicts
from mnemosync.agent.errors import (
    ClientError,
    InvalidInput,
    NotFound,
    Refused,
    ServerUnavailable,
    refused,
)
from mnemosync.agent.local_reads import LocalReads
from mnemosync.agent.outbox import Outbox
from mnemosync.agent.own_writes import OwnWrites
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import LiveUpdates, Progress, SyncSummary, catch_up
from mnemosync.kernel import event_time, graph, secrets_scan, signing, topics
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.errors import MnemosyncError
from mnemosync.kernel.lifecycle import SweepReport
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import LAYER_NUMBERS, MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, ValidOp, validate
from mnemosync.kernel.outcomes import Stats
from mnemosync.kernel.overview import OutboxReport
from mnemosync.kernel.search import MODES as SEARCH_MODES
from mnemosync.kernel.search import Filter, Hit, Ranking
from mnemosync.kernel.topics import Topics

log = logging.getLogger(__name__)
_T = TypeVar("_T")

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


@dataclass(frozen=True)
class SearchOutcome:
    """Search hits, and whether they came from the local cache."""

    hits: list[Hit]
    offline: bool = False
    note: str = ""


@dataclass(frozen=True)
class Status:
    """What `mnemosync status` shows.

    `refusal` is why the server would not take this agent's connection (a TLS
    or identity problem, a rewritten history), or None when it is online or
    merely unreachable (that is `online` False with no refusal).
    """

    agent_id: str
    server: str
    online: bool
    offset: int
    head: int | None
    pending: int
    failed: int
    oldest_pending_age_s: float | None
    cache_path: str
    model: str
    live: bool
    refusal: ClientError | None = None


@dataclass
class _News:
    """Entries by other agents applied since the last drain."""

    entries: list = field(default_factory=list)
    listeners: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class AgentClient:
    """An agent's connection to shared memory.

    Args:
        settings: Where the server, cache and model are.
        embedder: An `mnemosync.agent.embeddings.Embedder` to share (loaded lazily otherwise).
        progress: Called during large catch-ups.
        live: Keep the cache current with a background Subscribe stream.
    """

    def __init__(self, settings: ClientSettings, *, embedder=None, progress: Progress | None = None,
                 live: bool = True, sync_on_start: bool = True, limits: Limits | None = None):
        self.settings = settings
        self.agent_id = settings.resolved_agent_id()
        self.limits = limits or Limits()
        self._embedder = embedder
        self._owns_embedder = False
        self._embedder_lock = threading.Lock()
        self._progress = progress
        self._live_wanted = live
        self._sync_on_start = sync_on_start
        cache_dir = settings.resolved_cache_dir()
        self.cache, self._cache_rebuilt = Cache.open_or_rebuild(cache_dir / "cache.db")
        opened: list = [self.cache]
        try:  # whatever fails here closes what was opened before it
            self.outbox = Outbox(cache_dir / "outbox.db")
            opened.append(self.outbox)
            self.remote = Remote.from_settings(settings, self.agent_id)
            opened.append(self.remote)
            tls = settings.tls()
            self._signing_key = tls.signing_key() if tls is not None else None
        except BaseException:
            for thing in reversed(opened):
                thing.close()
            raise
        self.remote.outbox_report = self._outbox_report
        self.local = LocalReads(self.cache, self.outbox)
        self.live: LiveUpdates | None = None
        self.last_sync: SyncSummary | None = None
        self.online = False
        self._news = _News()
        self._own = OwnWrites()
        self._flush_lock = threading.Lock()
        self._acked_at = float("-inf")
        self._ack_lock = threading.Lock()
        self._ack_timer: threading.Timer | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------

    def __enter__(self) -> AgentClient:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> SyncSummary | None:
        """Boot: send queued writes, catch up (agent_sync), start live updates.

        An unreachable server is not an error: the client starts offline and
        retries in the background.
        """
        summary = None
        if self._sync_on_start:
            try:
                try:
                    self.flush()
                except Refused as exc:  # a server error on one queued write must not stop the boot
                    log.error("queued writes stay queued: %s", exc)
                summary = self.sync()
            except ServerUnavailable as exc:
                log.warning("starting offline: %s", exc)
                self.online = False
        if self._live_wanted:
            self.live = LiveUpdates(self.cache, self.remote, on_entries=self._record_news,
                                    on_connect=self._on_reconnect, own=self._own)
            self.live.start()
        return summary

    def close(self) -> None:
        """Stops live updates, acknowledges the final offset, closes files. Idempotent."""
        with self._ack_lock:
            if self._closed:
                return
            self._closed = True
            if self._ack_timer is not None:
                self._ack_timer.cancel()
        if self.live:
            self.live.stop()
        try:
            if self.cache.offset:
                self.remote.ack(self.cache.offset)
        except ClientError:
            pass
        self.remote.close()
        self.cache.close()
        self.outbox.close()
        if self._owns_embedder:
            self._embedder.close()

    # -- embeddings --------------------------------------------------------

    @property
    def embedder(self):
        """The Embedder, loaded on first use."""
        with self._embedder_lock:
            if self._embedder is None:
                from mnemosync.agent.embeddings import Embedder

                self._embedder = Embedder(self.settings.resolved_model_path(),
                                          n_threads=self.settings.embed_threads,
                                          n_threads_batch=self.settings.embed_batch_threads or None)
                self._owns_embedder = True
            return self._embedder

    @property
    def model(self) -> ModelInfo:
        """The embedding model's identity, as the server checks it."""
        return self.embedder.fingerprint

    # -- writes --------------------------------------------------------------

    def add(self, content: str, *, scope: str | None = None, type: str = "fact",
            tags: Sequence[str] = (), layer: int | str | None = None, importance: float | None = None,
            confidence: float | None = None, protected: bool = False,
            memory_id: str | None = None, trust: str = "", quote: str = "",
            event_time: int | str | None = None, op_id: str | None = None) -> WriteResult:
        """Stores a new memory; returns its id and version.

        `trust` is "", "principle" (then `quote` is required), "pattern" or "inference".
        `event_time` is when what it records happened, if not now: milliseconds since 1970-01-01 UTC, or
        ISO 8601 text (UTC unless it carries an offset). `op_id` makes a repeated call a replay (the server
        answers it with the first result and writes nothing); default new.
        """
        fields: dict[str, Any] = {
            "scope": scope or self.settings.scope, "type": type, "tags": list(tags),
            "layer": _layer(layer), "content": content, "protected": protected,
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
            fields["event_time_ms"] = _event_time(event_time)
        return self._write("add", memory_id or str(uuid.uuid4()), 0, fields,
                           self.embedder.embed(content) if isinstance(content, str) and content.strip() else None,
                           op_id=op_id)

    def update(self, memory_id: str, *, base_version: int | None = None, content: str | None = None,
               type: str | None = None, tags: Sequence[str] | None = None,
               importance: float | None = None, confidence: float | None = None,
               protected: bool | None = None, trust: str | None = None, quote: str | None = None,
               event_time: int | str | None = None) -> WriteResult:
        """Changes a memory. base_version defaults to the version this agent last saw.

        If another agent changed the memory since that version, the write is
        still recorded, as a conflicting revision: see `WriteResult.conflict_id`.
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
            fields["event_time_ms"] = _event_time(event_time)
        embedding = self.embedder.embed(content) if content and content.strip() else None
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
                           {"layer": _layer(layer)})

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

    def conflicts(self, *, include_resolved: bool = False, memory_id: str = "", limit: int = 100) -> ConflictList:
        """Conflicts in this agent's scopes: open ones oldest first (check_conflicts).

        From the local cache, saying so, when the server is unreachable.
        """
        return list_conflicts(self.remote, self.cache, include_resolved=include_resolved, memory_id=memory_id,
                              limit=limit)

    def conflict(self, conflict_id: int) -> ConflictView:
        """One conflict with its revisions.

        Raises:
            NotFound: no such conflict.
            PermissionDenied: it is in a scope this agent is not granted.
        """
        return get_conflict(self.remote, self.cache, conflict_id)

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
            InvalidInput: not exactly one choice, or a bad revision number.
            StaleVersion: the memory changed since base_version (look at the conflict again).
            PermissionDenied: the rule that refused it (for example resolve-needs-authority).
            FailedPrecondition: the conflict is already resolved.
        """
        conflict_id = _number(conflict_id, "conflict_id")
        if isinstance(keep, str) and keep.strip().lower() == "all":
            keep, keep_all = None, True
        view = self.conflict(conflict_id)
        fields: dict[str, Any] = {"conflict_id": conflict_id}
        if keep is not None:
            fields["keep_revision"] = _number(keep, "keep_revision")
        if merged_content is not None:
            fields["merged_content"] = merged_content
        if keep_all:
            fields["keep_all"] = True
        if note:
            fields["note"] = note
        embedding = self.embedder.embed(merged_content) if merged_content and merged_content.strip() else None
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
        base = self.get(memory_id).version if base_version is None else base_version
        return self._send(self._validated("redact", memory_id, base, {"reason": reason}), None)

    def add_many(self, items: Sequence[bulk.Item], *, batch: int = 250,
                 progress: bulk.Progress | None = None) -> bulk.Summary:
        """Stores many memories (an import): embedded `batch` at a time, sent as one Append per batch (each sent
        while the model embeds the next), then their links. Resumable: items the cache already holds are skipped
        before the model, and op_ids come from the items' sources, so any other item already stored is answered as a
        replay.

        An item refused (a secret in it, a size limit, a governance rule) is listed in the summary with why, and
        the rest still go. Needs the server (nothing is queued).

        Raises:
            ServerUnavailable: the server cannot be reached (run it again later: nothing is written twice).
        """
        summary = bulk.Summary()
        ids = {item.key: item.id() for item in items}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemosync-add-many") as sender:
            sent = None  # the previous batch's Append, in flight while the model embeds the next batch
            for start in range(0, len(items), batch):
                chunk = items[start:start + batch]
                part = bulk.still_to_send(chunk, self.cache.get)
                vectors = self.embedder.embed_many([item.content for item in part])
                ops, refused = [], []
                for item, vector in zip(part, vectors, strict=True):
                    fields: dict[str, Any] = {
                        "scope": item.scope or self.settings.scope, "type": item.type, "tags": list(item.tags),
                        "layer": _layer(item.layer), "content": item.content, "protected": item.protected}
                    for name in ("importance", "confidence", "event_time_ms"):
                        if getattr(item, name) is not None:
                            fields[name] = getattr(item, name)
                    try:
                        ops.append((item.key, self._validated("add", item.id(), 0, fields, vector,
                                                              op_id=item.op_id(self.agent_id))))
                    except ClientError as exc:
                        refused.append((item.key, str(exc)))
                if sent is not None:
                    sent.result()  # one Append at a time, in order
                # counted only while no Append is in flight: the sender counts into `summary` too
                summary.replayed += len(chunk) - len(part)
                summary.refused.extend(refused)
                if progress and start:
                    progress(start, len(items))
                sent = sender.submit(self._send_many, ops, self.model, summary)
            if sent is not None:
                sent.result()
                if progress:
                    progress(len(items), len(items))
        links = []
        for item in items:
            for target, relation, weight, reason in item.links:
                fields = {"target_id": ids.get(target, target), "relation": relation, "weight": weight,
                          "reason": reason}
                op_id = str(uuid.uuid5(bulk.NAMESPACE, f"link\n{self.agent_id}\n{item.key}\n{target}\n{relation}"))
                try:
                    links.append((item.key, self._validated("link", item.id(), 0, fields, op_id=op_id)))
                except ClientError as exc:
                    summary.refused.append((item.key, f"link to {target}: {exc}"))
        for start in range(0, len(links), batch):
            self._send_many(links[start:start + batch], None, summary, links=True)
        return summary

    def _send_many(self, ops: list[tuple[str, ValidOp]], model: ModelInfo | None, summary: bulk.Summary, *,
                   links: bool = False) -> None:
        """Sends (key, op) pairs as one Append, or one by one when the server refuses the batch, counting into
        `summary` (new links into `links`, links made before not at all)."""
        if not ops:
            return
        try:
            results, entries = self._append([op for _, op in ops], model)
        except Refused as exc:
            if exc.code not in FINAL_REFUSALS:
                raise
            if len(ops) == 1:
                summary.refused.append((ops[0][0], f"{exc.code}: {exc}"))
                return
            for pair in ops:
                self._send_many([pair], model, summary, links=links)
            return
        self.online = True
        for result in results:
            if links:
                summary.links += not result.replayed
            elif result.replayed:
                summary.replayed += 1
            elif result.deduplicated:
                summary.deduplicated += 1
            else:
                summary.written += 1
        self._apply_own(entries)

    def _validated(self, kind: str, memory_id: str, base_version: int, fields: dict[str, Any],
                   embedding: list[float] | None = None, op_id: str | None = None) -> ValidOp:
        """The operation checked as the server will check it, and signed when this agent signs."""
        request = OpRequest(op_id or str(uuid.uuid4()), memory_id, kind, base_version, fields, embedding)
        try:
            valid = validate(request, self.limits, self.model if embedding else None)
        except MnemosyncError as exc:
            raise refused(exc.code, str(exc)) from None
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
            memory = self.get(memory_id)
        return memory.version

    def _write(self, kind: str, memory_id: str, base_version: int, fields: dict[str, Any],
               embedding: list[float] | None = None, op_id: str | None = None) -> WriteResult:
        valid = self._validated(kind, memory_id, base_version, fields, embedding, op_id)
        model = self.model if embedding else None
        queued = self.outbox.counts()[0]
        if queued:
            self._try_flush()
            queued = self.outbox.counts()[0]
        if not queued:
            try:
                return self._send(valid, model)
            except ServerUnavailable as exc:
                log.warning("queued %s for later: %s", kind, exc)
                self.online = False
        base = self.cache.get(memory_id) if kind != "add" else None
        if kind not in ("add", "link", "unlink") and base is None and self.outbox.overlay_get(memory_id) is None:
            raise NotFound("NOT_FOUND", f"no memory with id {memory_id} in the local cache "
                           "(the server is unreachable, so it cannot be checked there)")
        self.outbox.enqueue(valid, model, self.agent_id, base,
                            self.cache.vector(memory_id) if base else None)
        version = 1 if kind == "add" else (base_version + 1 if kind not in ("link", "unlink") else base_version)
        return WriteResult(memory_id, valid.op_id, version, 0, pending=True)

    def _send(self, op: ValidOp, model: ModelInfo | None) -> WriteResult:
        [result], entries = self._append([op], model)
        self.online = True
        self._apply_own(entries)
        return WriteResult(result.memory_id, result.op_id, result.version, result.seq,
                           replayed=result.replayed, conflict_id=result.conflict_id,
                           deduplicated=result.deduplicated)

    def _append(self, ops: list[ValidOp], model: ModelInfo | None) -> tuple[list, list]:
        """One Append asking for the entries it wrote, which are also held for the live stream (it receives only
        markers of this agent's own entries: `mnemosync.agent.own_writes`)."""
        with self._own.sending() as keep:
            results, entries = self.remote.write(ops, model)
            keep(entries)
        return results, entries

    def _apply_own(self, entries: list) -> None:
        """Puts this agent's own entries, as its Append returned them, into the cache: one round trip per write.

        They apply when they follow the cache's offset (their hashes and closing checkpoint are checked as any
        page's). When other agents' entries came between, the live stream brings those and then markers of these,
        which it fills in from `self._own`; without a live stream the cache catches up instead.
        """
        if not entries:
            return
        try:
            if entries[0].seq <= self.cache.offset + 1:
                self.cache.apply(entries)
            elif not (self.live and self.live.connected.is_set()):
                self.sync()
        except ClientError as exc:
            log.warning("this agent's own write did not reach its cache (the next sync retries): %s", exc)
            return
        finally:
            self._own.forget_through(self.cache.offset)
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
            except ClientError as exc:
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
            for batch in _batches(self.outbox.pending(), self.limits):
                models = {item.model for item in batch if item.model is not None}
                try:
                    _, entries = self._append([item.op for item in batch], next(iter(models), None))
                except Refused as exc:
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
                self.outbox.mark_sent(*(item.position for item in batch))
                sent += len(batch)
                self._apply_own(entries)
            self.online = True
        if sent or refused_count:
            self.outbox.clear_overlay()
            self._ack_quietly()  # the new offset, and the outbox as it is now, for the operator's view
        return sent, refused_count

    def _ack_quietly(self) -> None:
        try:
            if self.cache.offset:
                self.remote.ack(self.cache.offset)
        except ClientError as exc:
            log.info("acknowledgement after a flush failed: %s", exc)

    def _flush_one(self, item) -> bool:
        """Sends one queued write; True if it went, False if parked (refused for good)."""
        try:
            _, entries = self._append([item.op], item.model)
        except Refused as exc:
            if exc.code not in FINAL_REFUSALS:
                raise
            self._park(item, exc)
            return False
        self.outbox.mark_sent(item.position)
        self._apply_own(entries)
        return True

    def _park(self, item, exc: Refused) -> None:
        log.error("the server refused a queued %s of %s: %s", item.op.op, item.op.memory_id, exc)
        self.outbox.mark_failed(item.position, f"{exc.code}: {exc}")

    def _outbox_report(self) -> OutboxReport:
        pending, failed, oldest = self.outbox.counts()
        return OutboxReport(pending, failed, int(oldest or 0))

    def _on_reconnect(self) -> None:
        self.online = True
        if self.outbox.counts()[0]:
            self._try_flush()

    def _try_flush(self) -> None:
        try:
            self.flush()
        except ServerUnavailable:
            self.online = False

    # -- reads -----------------------------------------------------------------

    def get(self, memory_id: str) -> MemoryRow:
        """A memory by id: pending state first, then the server, then the cache (secrets masked)."""
        pending = self.outbox.overlay_get(memory_id)
        if pending is not None:
            return secrets_scan.masked(pending)
        try:
            memory = self.remote.get(memory_id)
            self.online = True
            return memory
        except ServerUnavailable:
            self.online = False
            cached = self.cache.get(memory_id)
            if cached is None:
                raise NotFound("NOT_FOUND", f"no memory with id {memory_id} in the local cache "
                               "(the server is unreachable)") from None
            return secrets_scan.masked(cached)

    def search(self, query: str, *, limit: int = 10, mode: str = "hybrid",
               scopes: Sequence[str] = (), types: Sequence[str] = (), tags: Sequence[str] = (),
               layers: Sequence[int | str] = (), authors: Sequence[str] = (),
               created_after_ms: int = 0, created_before_ms: int = 0,
               include_archived: bool = False, neighbours: int = 0) -> SearchOutcome:
        """Hybrid search; falls back to the local cache (and pending writes) offline. `neighbours` (0 to
        `graph.MAX_NEIGHBOURS`) attaches that many graph neighbours to each hit."""
        if not 0 <= neighbours <= graph.MAX_NEIGHBOURS:
            raise InvalidInput("INVALID_ARGUMENT", f"neighbours must be 0 to {graph.MAX_NEIGHBOURS}, got {neighbours}")
        if mode not in SEARCH_MODES:
            raise InvalidInput("INVALID_ARGUMENT", f"mode must be one of {sorted(SEARCH_MODES)}")
        vector = self.embedder.embed(query) if mode != "keyword" and query.strip() else None
        f = Filter(scopes=tuple(scopes), types=tuple(types), tags=tuple(t.lower() for t in tags),
                   layers=tuple(_layer(x) for x in layers), authors=tuple(authors),
                   created_after_ms=created_after_ms, created_before_ms=created_before_ms,
                   include_archived=include_archived)
        if not self.outbox.counts()[0]:
            try:
                hits = self.remote.search(query, vector=vector, model=self.model if vector else None, limit=limit,
                                          filter=f, mode=mode, neighbours=neighbours)
                self.online = True
                return SearchOutcome(hits)
            except ServerUnavailable:
                self.online = False
        return self.local_search(query, vector=vector, limit=limit, filter=f, mode=mode, neighbours=neighbours)

    # -- the memory graph ----------------------------------------------------------

    def traverse(self, memory_id: str, *, edge_types: Sequence[str] = (), direction: str = "out", depth: int = 0,
                 limit: int = 0, include_archived: bool = False, local: bool = False) -> graph.Walk:
        """The memories within `depth` links of one memory along `edge_types` (`mnemosync.kernel.graph.traverse`): the
        server's answer, or the cache's offline or with `local` (the same for the same changelog)."""
        args = {"edge_types": tuple(edge_types), "direction": direction, "depth": depth, "limit": limit}
        _core(graph.check_walk, **args)
        return self._server_or_cache(
            local, lambda: self.remote.traverse(memory_id, include_archived=include_archived, **args),
            lambda: self._local_walk(graph.traverse, memory_id, include_archived=include_archived, **args))

    def causal_chain(self, memory_id: str, *, direction: str = "both", depth: int = 0, limit: int = 0,
                     local: bool = False) -> graph.Walk:
        """Causes ("in") and effects ("out") of one memory along causal links (`mnemosync.kernel.graph.causal_chain`);
        the server's answer, or the cache's offline or with `local`."""
        args = {"direction": direction, "depth": depth or graph.DEFAULT_CAUSAL_DEPTH, "limit": limit}
        _core(graph.check_walk, **args)
        return self._server_or_cache(local, lambda: self.remote.causal_chain(memory_id, **args),
                                     lambda: self._local_walk(graph.causal_chain, memory_id, **args))

    def timeline(self, *, memory_id: str = "", limit: int = 0, start_ms: int | None = None,
                 end_ms: int | None = None, scopes: Sequence[str] = (), tags: Sequence[str] = (),
                 include_archived: bool = False, local: bool = False) -> graph.Timeline:
        """Memories by their own event time, around `memory_id` or in a window (`mnemosync.kernel.graph.timeline`);
        the server's answer, or the cache's offline or with `local`."""
        args = {"limit": limit, "start_ms": start_ms, "end_ms": end_ms, "scopes": tuple(scopes),
                "tags": tuple(t.lower() for t in tags), "include_archived": include_archived}

        def cached() -> graph.Timeline:
            around = self._cached(memory_id) if memory_id else None
            found = self._local_graph(graph.timeline, around=around, **args)
            return graph.Timeline([secrets_scan.masked(m) for m in found.memories], found.anchor_index)

        return self._server_or_cache(local, lambda: self.remote.timeline(memory_id=memory_id, **args), cached)

    def _server_or_cache(self, local: bool, served: Callable[[], _T], cached: Callable[[], _T]) -> _T:
        """The server's answer, or the cache's when it is unreachable or `local` asks for it."""
        if not local:
            try:
                answer = served()
                self.online = True
                return answer
            except ServerUnavailable:
                self.online = False
        return cached()

    def _cached(self, memory_id: str) -> MemoryRow:
        memory = self.cache.get(memory_id)
        if memory is None:
            raise NotFound("NOT_FOUND", f"no memory with id {memory_id} in the local cache")
        return memory

    def _local_graph(self, query: Callable, **kwargs):
        """A `mnemosync.kernel.graph` query on the cache."""
        return _core(self.cache.read, query, **kwargs)

    def _local_walk(self, query: Callable, memory_id: str, **kwargs) -> graph.Walk:
        found = self._local_graph(query, start=self._cached(memory_id), **kwargs)
        return graph.Walk(secrets_scan.masked(found.start), [_masked_step(s) for s in found.steps], found.truncated)

    def local_search(self, query: str, *, vector: list[float] | None, limit: int, filter: Filter,
                     mode: str, neighbours: int = 0) -> SearchOutcome:
        """Search over the cache with pending writes laid over it (secrets masked, as the server does), re-ranked
        as the server re-ranks, with the use the server's last sweep recorded (the cache has no access statistics
        of its own) and the default lifecycle settings; `neighbours` as for `search`, from the cache."""
        vector_bytes = np.asarray(vector, dtype="<f4").tobytes() if vector else None
        overlay = self.outbox.overlay_rows()
        hits = self.cache.search(overlay, query=query, vector=vector_bytes, limit=limit, filter=filter, mode=mode,
                                 ranking=Ranking(int(time.time() * 1000)))
        pending_ids = {memory.id for memory, _ in overlay}
        for h in hits:
            h.memory = secrets_scan.masked(h.memory)
        if neighbours and hits:
            found = self._local_graph(graph.neighbours, memory_ids=[h.memory.id for h in hits], count=neighbours)
            for h in hits:
                h.neighbours = tuple(_masked_step(s) for s in found[h.memory.id])
        note = ("server unreachable: results come from this agent's local cache"
                f" (synced to seq {self.cache.offset})")
        if pending_ids:
            note += f" and {len(pending_ids)} memories with writes waiting in the outbox"
        return SearchOutcome(hits, offline=True, note=note)

    # -- the memory lifecycle (issue 15) -----------------------------------------

    def record_use(self, memory_ids: Sequence[str]) -> int:
        """Tells the server these memories were used (search hits the agent acted on); returns how many counted.

        Raises:
            ServerUnavailable: the server cannot be reached (uses are not queued offline: they only rank).
        """
        counted = self.remote.record_use(memory_ids, "used")
        self.online = True
        return counted

    def recall(self, memory_id: str) -> MemoryRow:
        """Brings a memory back: restores it if it was archived, and records a recall, whose stability growth
        is the larger the more the memory had faded (see `mnemosync.kernel.lifecycle`). Returns the memory as it is
        now.

        Raises:
            ServerUnavailable: the server cannot be reached.
        """
        memory = self.remote.get(memory_id)
        if memory.archived:
            self.restore(memory_id, base_version=memory.version)
        self.remote.record_use([memory_id], "recall")
        self.online = True
        return self.remote.get(memory_id)

    def decay_sweep(self, *, dry_run: bool = False, now_ms: int = 0) -> SweepReport:
        """Runs the server's lifecycle sweep (admin certificates only), or reports what it would write.

        Raises:
            PermissionDenied: this agent is not admin.
            ServerUnavailable: the server cannot be reached.
        """
        report = self.remote.decay_sweep(dry_run=dry_run, now_ms=now_ms)
        self.online = True
        return report

    def consolidate(self, *, dry_run: bool = False, now_ms: int = 0, links_only: bool = False) -> ConsolidationReport:
        """Runs the server's consolidation (admin certificates only), or reports what it would write.

        Raises:
            PermissionDenied: this agent is not admin.
            ServerUnavailable: the server cannot be reached.
        """
        report = self.remote.consolidate(dry_run=dry_run, now_ms=now_ms, links_only=links_only)
        self.online = True
        return report

    def list_topics(self, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0) -> Topics:
        """Topic clusters of the cache's live memories (offline; the server's ListTopics gives the same answer
        for the same state, `mnemosync.kernel.topics`).

        Raises:
            InvalidInput: limit out of range.
        """
        if not 1 <= limit <= topics.MAX_LIMIT:
            raise InvalidInput("INVALID_ARGUMENT", f"limit must be 1 to {topics.MAX_LIMIT}, got {limit}")
        return self.local.topics(scopes=scopes, limit=limit, novel_since_ms=novel_since_ms)

    # -- replication -----------------------------------------------------------

    def sync(self) -> SyncSummary:
        """agent_sync: applies every entry after the cache's offset and acknowledges it."""
        summary = catch_up(self.cache, self.remote, progress=self._progress, rebuilt=self._cache_rebuilt)
        summary = replace(summary, conflicts_waiting=self.cache.conflicts_waiting(self.agent_id))
        self._cache_rebuilt = False
        self.online = True
        self.last_sync = summary
        return summary

    def _record_news(self, entries) -> None:
        news = [e for e in entries if not e.withheld and e.agent_id != self.agent_id]
        with self._news.lock:
            self._news.entries.extend(news)
            listeners = list(self._news.listeners)
        if news:
            for listener in listeners:
                listener(news)

    def on_news(self, listener: Callable[[list], None]) -> None:
        """Also hands every batch of other agents' entries that arrives live to `listener` (on the live-update
        thread; keep it short). `drain_news` is unaffected."""
        with self._news.lock:
            self._news.listeners.append(listener)

    def drain_news(self) -> list:
        """Entries other agents wrote that arrived live since the last call."""
        with self._news.lock:
            news, self._news.entries = self._news.entries, []
        return news

    @property
    def online(self) -> bool:
        """Whether the last call to the server reached it."""
        return self._online

    @online.setter
    def online(self, reached: bool) -> None:
        self._online = reached
        if reached and self.live is not None:
            self.live.retry_now()  # the server is back: the live stream need not wait out its backoff

    def status(self) -> Status:
        """Connection, offset, head and outbox state."""
        head, refusal = None, None
        try:
            head = self.remote.stats().head_seq
            self.online = True
        except ServerUnavailable:
            self.online = False
        except ClientError as exc:
            self.online, refusal = False, exc
        pending, failed, oldest = self.outbox.counts()
        return Status(
            agent_id=self.agent_id, server=self.settings.server, online=self.online,
            offset=self.cache.offset, head=head, pending=pending, failed=failed,
            oldest_pending_age_s=(time.time() * 1000 - oldest) / 1000 if oldest else None,
            cache_path=str(self.cache.path), model=str(self.settings.resolved_model_path()),
            live=bool(self.live and self.live.connected.is_set()), refusal=refusal,
        )

    def server_stats(self) -> Stats:
        """The server's counts and every agent's offset.

        Raises:
            ServerUnavailable: the server cannot be reached.
        """
        stats = self.remote.stats()
        self.online = True
        return stats


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


def _number(value: int | str, name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise InvalidInput("INVALID_ARGUMENT", f"{name} must be a number, got {value!r}")


def _event_time(value: int | str) -> int:
    if not isinstance(value, str):
        return value  # validated with the rest of the operation
    try:
        return event_time.parse(value)
    except MnemosyncError as exc:
        raise refused(exc.code, str(exc)) from None


def _core(call: Callable, *args, **kwargs):
    """A call into the shared core, its refusals raised as the client's (the same the server would send)."""
    try:
        return call(*args, **kwargs)
    except MnemosyncError as exc:
        raise refused(exc.code, str(exc)) from None


def _masked_step(s: graph.Step) -> graph.Step:
    """A step as the server sends it: secrets in its memory and its link's reason masked."""
    return replace(s, memory=secrets_scan.masked(s.memory), reason=secrets_scan.mask(s.reason))


def _layer(value: int | str | None) -> int:
    if value is None or value == "":
        return 0
    if isinstance(value, str):
        if value.isdigit():
            return int(value)
        try:
            return LAYER_NUMBERS[value.lower()]
        except KeyError:
            raise InvalidInput("INVALID_ARGUMENT", f"layer must be 1-4 or one of {sorted(LAYER_NUMBERS)}, "
                               f"got {value!r}") from None
    return value

