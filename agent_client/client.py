"""AgentClient: the one object an agent process uses to share memory.

It writes through the server when it can and into the durable outbox when it
cannot; reads and searches go to the server and fall back to the local cache,
saying so (`offline=True`). Embeddings are computed here, never on the server.

    with AgentClient(settings) as client:     # boot: flush outbox, agent_sync, live updates
        client.add("The auth service signs JWTs with RS256")
        outcome = client.search("how are login tokens signed?")

This module is the facade: it opens the cache, outbox and connection, boots and
stops, owns the embedder, the online flag and catching up, and hands each call
to the part that does it: writes and the outbox to `mnemosync.agent.write_path`,
reads with their offline fallback to `mnemosync.agent.read_path`, imports to
`mnemosync.agent.bulk_send`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from mnemosync.agent import bulk
from mnemosync.agent.bulk_send import BulkSender
from mnemosync.agent.cache import Cache
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.conflicts import ConflictList, ConflictView
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.local_reads import LocalReads
from mnemosync.agent.outbox import Outbox
from mnemosync.agent.read_path import ReadPath, SearchOutcome, Status
from mnemosync.agent.remote import Remote
from mnemosync.agent.shown import Reader, Shown
from mnemosync.agent.sync import LiveUpdates, Progress, SyncSummary, catch_up
from mnemosync.agent.write_path import WritePath, WriteResult
from mnemosync.kernel import graph
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.errors import CodedError, MnemosyncError
from mnemosync.kernel.lifecycle import SweepReport
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.outcomes import Stats
from mnemosync.kernel.search import Filter
from mnemosync.kernel.topics import Topics

__all__ = ["AgentClient", "SearchOutcome", "Status", "WriteResult"]

log = logging.getLogger(__name__)

NEWS_KEPT = 10_000
"""Entries `drain_news` keeps when nobody drains them (a long-running agent whose sessions listen instead)."""


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
            signing_key = tls.signing_key() if tls is not None else None
        except BaseException:
            for thing in reversed(opened):
                thing.close()
            raise
        self.local = LocalReads(self.cache, self.outbox)
        self.live: LiveUpdates | None = None
        self.last_sync: SyncSummary | None = None
        self.online = False
        self._news = _News()
        self._shown: Shown | None = None
        self._shown_lock = threading.Lock()
        self._writes = WritePath(self, signing_key)
        self._reads = ReadPath(self)
        self._bulk = BulkSender(self, self._writes)
        self.remote.outbox_report = self._writes.outbox_report

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
                except MnemosyncError as exc:  # a server error on one queued write must not stop the boot
                    log.error("queued writes stay queued: %s", exc)
                summary = self.sync()
            except ServerUnavailable as exc:
                log.warning("%s; working offline: reads come from the local cache, writes wait in the outbox", exc)
                self.online = False
        if self._live_wanted:
            self.live = LiveUpdates(self.cache, self.remote, on_entries=self._record_news,
                                    on_connect=self._writes.on_reconnect, own=self._writes.own)
            self.live.start()
        return summary

    def close(self) -> None:
        """Stops live updates, acknowledges the final offset, closes files. Idempotent."""
        if not self._writes.close():
            return
        if self.live:
            self.live.stop()
        try:
            if self.cache.offset:
                self.remote.ack(self.cache.offset)
        except CodedError:
            pass
        self.remote.close()
        self.cache.close()
        self.outbox.close()
        if self._shown is not None:
            self._shown.close()
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

    # -- what each reader was shown (`mnemosync.agent.shown`) ---------------------

    @property
    def shown(self) -> Shown:
        """The record of the versions each reader (a session, the command line) was shown, opened on first use."""
        with self._shown_lock:
            if self._shown is None:
                from mnemosync.agent.shown import FILE_NAME

                self._shown = Shown(self.settings.resolved_cache_dir() / FILE_NAME)
            return self._shown

    def reader(self, key: str) -> Reader:
        """One reader's view of `shown`: what it saw and the base its writes default to."""
        return Reader(self.shown, key)

    # -- writes (`mnemosync.agent.write_path`) -----------------------------------

    def add(self, content: str, *, scope: str | None = None, type: str = "fact",
            tags: Sequence[str] = (), layer: int | str | None = None, importance: float | None = None,
            confidence: float | None = None, protected: bool = False,
            memory_id: str | None = None, trust: str = "", quote: str = "",
            event_time: int | str | None = None, op_id: str | None = None,
            sources: Sequence[dict | str] = (), root: Path | str | None = None, steps: Sequence[str] = (),
            preconditions: Sequence[str] = (), postconditions: Sequence[str] = ()) -> WriteResult:
        """Stores a new memory; returns its id and version (see `WritePath.add`)."""
        return self._writes.add(content, scope=scope, type=type, tags=tags, layer=layer, importance=importance,
                                confidence=confidence, protected=protected, memory_id=memory_id, trust=trust,
                                quote=quote, event_time=event_time, op_id=op_id, sources=sources, root=root,
                                steps=steps, preconditions=preconditions, postconditions=postconditions)

    def update(self, memory_id: str, *, base_version: int | None = None, content: str | None = None,
               type: str | None = None, tags: Sequence[str] | None = None,
               importance: float | None = None, confidence: float | None = None,
               protected: bool | None = None, trust: str | None = None, quote: str | None = None,
               event_time: int | str | None = None, sources: Sequence[dict | str] | None = None,
               root: Path | str | None = None, steps: Sequence[str] | None = None,
               preconditions: Sequence[str] | None = None,
               postconditions: Sequence[str] | None = None) -> WriteResult:
        """Changes a memory; a change from a stale version becomes a conflict (see `WritePath.update`)."""
        return self._writes.update(memory_id, base_version=base_version, content=content, type=type, tags=tags,
                                   importance=importance, confidence=confidence, protected=protected, trust=trust,
                                   quote=quote, event_time=event_time, sources=sources, root=root, steps=steps,
                                   preconditions=preconditions, postconditions=postconditions)

    def verify_memories(self, *, scopes: Sequence[str] = (), root: Path | str | None = None) -> list:
        """Checks every sourced memory of `scopes` against the tree at `root` and records each status that changed
        (see `mnemosync.agent.verification.verify_memories`)."""
        from mnemosync.agent import verification
        return verification.verify_memories(self, scopes=scopes, root=root)

    def verify(self, memory_id: str, status: str, paths: Sequence[str] = (), *, base_version: int) -> WriteResult:
        """Records one verification of a memory's sources (see `WritePath.verify`)."""
        return self._writes.verify(memory_id, status, paths, base_version=base_version)

    def forget(self, memory_id: str, *, base_version: int | None = None, reason: str = "") -> WriteResult:
        """Archives a memory (it can be restored)."""
        return self._writes.forget(memory_id, base_version=base_version, reason=reason)

    def restore(self, memory_id: str, *, base_version: int | None = None) -> WriteResult:
        """Brings back a forgotten memory."""
        return self._writes.restore(memory_id, base_version=base_version)

    def set_layer(self, memory_id: str, layer: int | str, *, base_version: int | None = None) -> WriteResult:
        """Moves a memory to another governance layer."""
        return self._writes.set_layer(memory_id, layer, base_version=base_version)

    def link(self, memory_id: str, target_id: str, relation: str = "semantic", *, weight: float | None = None,
             reason: str = "", op_id: str | None = None) -> WriteResult:
        """Links one memory to another (see `WritePath.link`)."""
        return self._writes.link(memory_id, target_id, relation, weight=weight, reason=reason, op_id=op_id)

    def unlink(self, memory_id: str, target_id: str, relation: str = "semantic") -> WriteResult:
        """Removes a link."""
        return self._writes.unlink(memory_id, target_id, relation)

    def resolve_conflict(self, conflict_id: int | str, *, keep: int | str | None = None,
                         merged_content: str | None = None, keep_all: bool = False, note: str = "",
                         base_version: int | None = None) -> WriteResult:
        """Resolves a conflict: exactly one of keep, merged_content, keep_all (see `WritePath.resolve_conflict`)."""
        return self._writes.resolve_conflict(conflict_id, keep=keep, merged_content=merged_content,
                                             keep_all=keep_all, note=note, base_version=base_version)

    def redact(self, memory_id: str, reason: str, *, base_version: int | None = None) -> WriteResult:
        """Removes the memory's text everywhere (admin; never queued, see `WritePath.redact`)."""
        return self._writes.redact(memory_id, reason, base_version=base_version)

    def flush(self) -> tuple[int, int]:
        """Sends queued writes in order; returns (sent, refused) (see `WritePath.flush`). Queued adds that became
        other memories are in `redirected` afterwards."""
        return self._writes.flush()

    @property
    def redirected(self) -> list:
        """The queued adds the last flush saw become other memories (`mnemosync.agent.outbox.Redirect`)."""
        return self._writes.redirected

    def add_many(self, items: Sequence[bulk.Item], *, batch: int = 250,
                 progress: bulk.Progress | None = None) -> bulk.Summary:
        """Stores many memories (an import; see `BulkSender.add_many`)."""
        return self._bulk.add_many(items, batch=batch, progress=progress)

    # -- reads (`mnemosync.agent.read_path`) ----------------------------------------

    def get(self, memory_id: str) -> MemoryRow:
        """A memory by id: pending state first, then the server, then the cache (secrets masked)."""
        return self._reads.get(memory_id)

    def search(self, query: str, *, limit: int = 10, mode: str = "hybrid",
               scopes: Sequence[str] = (), types: Sequence[str] = (), tags: Sequence[str] = (),
               layers: Sequence[int | str] = (), authors: Sequence[str] = (),
               created_after_ms: int = 0, created_before_ms: int = 0,
               include_archived: bool = False, neighbours: int = 0) -> SearchOutcome:
        """Hybrid search; falls back to the local cache (and pending writes) offline (see `ReadPath.search`)."""
        return self._reads.search(query, limit=limit, mode=mode, scopes=scopes, types=types, tags=tags,
                                  layers=layers, authors=authors, created_after_ms=created_after_ms,
                                  created_before_ms=created_before_ms, include_archived=include_archived,
                                  neighbours=neighbours)

    def local_search(self, query: str, *, vector: list[float] | None, limit: int, filter: Filter,
                     mode: str, neighbours: int = 0) -> SearchOutcome:
        """Search over the cache with pending writes laid over it (see `ReadPath.local_search`)."""
        return self._reads.local_search(query, vector=vector, limit=limit, filter=filter, mode=mode,
                                        neighbours=neighbours)

    def traverse(self, memory_id: str, *, edge_types: Sequence[str] = (), direction: str = "out", depth: int = 0,
                 limit: int = 0, include_archived: bool = False, local: bool = False) -> graph.Walk:
        """The memories within `depth` links of one memory (see `ReadPath.traverse`)."""
        return self._reads.traverse(memory_id, edge_types=edge_types, direction=direction, depth=depth, limit=limit,
                                    include_archived=include_archived, local=local)

    def graph_search(self, query: str, *, seeds: int = 0, alpha: float = 0.0, limit: int = 0,
                     scopes: Sequence[str] = (), edge_types: Sequence[str] = (), local: bool = False):
        """Personalized PageRank over the link graph seeded by the hits of `query` (see `ReadPath.graph_search`)."""
        return self._reads.graph_search(query, seeds=seeds, alpha=alpha, limit=limit, scopes=scopes,
                                        edge_types=edge_types, local=local)

    def causal_chain(self, memory_id: str, *, direction: str = "both", depth: int = 0, limit: int = 0,
                     local: bool = False) -> graph.Walk:
        """Causes and effects of one memory along causal links (see `ReadPath.causal_chain`)."""
        return self._reads.causal_chain(memory_id, direction=direction, depth=depth, limit=limit, local=local)

    def timeline(self, *, memory_id: str = "", limit: int = 0, start_ms: int | None = None,
                 end_ms: int | None = None, scopes: Sequence[str] = (), tags: Sequence[str] = (),
                 include_archived: bool = False, local: bool = False) -> graph.Timeline:
        """Memories by their own event time (see `ReadPath.timeline`)."""
        return self._reads.timeline(memory_id=memory_id, limit=limit, start_ms=start_ms, end_ms=end_ms,
                                    scopes=scopes, tags=tags, include_archived=include_archived, local=local)

    def conflicts(self, *, include_resolved: bool = False, memory_id: str = "", limit: int = 100) -> ConflictList:
        """Conflicts in this agent's scopes, open ones oldest first (from the cache offline)."""
        return self._reads.conflicts(include_resolved=include_resolved, memory_id=memory_id, limit=limit)

    def conflict(self, conflict_id: int) -> ConflictView:
        """One conflict with its revisions (see `ReadPath.conflict`)."""
        return self._reads.conflict(conflict_id)

    def list_topics(self, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0) -> Topics:
        """Topic clusters of the cache's live memories (see `ReadPath.list_topics`)."""
        return self._reads.list_topics(scopes=scopes, limit=limit, novel_since_ms=novel_since_ms)

    def record_use(self, memory_ids: Sequence[str]) -> int:
        """Tells the server these memories were used; returns how many counted (see `ReadPath.record_use`)."""
        return self._reads.record_use(memory_ids)

    def recall(self, memory_id: str) -> MemoryRow:
        """Brings a memory back, restoring it if archived, and records a recall (see `ReadPath.recall`)."""
        return self._reads.recall(memory_id)

    def decay_sweep(self, *, dry_run: bool = False, now_ms: int = 0) -> SweepReport:
        """Runs the server's lifecycle sweep (admin), or reports what it would write."""
        return self._reads.decay_sweep(dry_run=dry_run, now_ms=now_ms)

    def consolidate(self, *, dry_run: bool = False, now_ms: int = 0, links_only: bool = False) -> ConsolidationReport:
        """Runs the server's consolidation (admin), or reports what it would write."""
        return self._reads.consolidate(dry_run=dry_run, now_ms=now_ms, links_only=links_only)

    def status(self) -> Status:
        """Connection, offset, head and outbox state."""
        return self._reads.status()

    def server_stats(self) -> Stats:
        """The server's counts and every agent's offset (see `ReadPath.server_stats`)."""
        return self._reads.server_stats()

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
            del self._news.entries[:-NEWS_KEPT]
            listeners = list(self._news.listeners)
        if news:
            for listener in listeners:
                listener(news)

    def on_news(self, listener: Callable[[list], None]) -> None:
        """Also hands every batch of other agents' entries that arrives live to `listener` (on the live-update
        thread; keep it short). `drain_news` is unaffected."""
        with self._news.lock:
            self._news.listeners.append(listener)

    def off_news(self, listener: Callable[[list], None]) -> None:
        """Stops handing news to `listener` (see `on_news`); nothing if it was not listening."""
        with self._news.lock:
            if listener in self._news.listeners:
                self._news.listeners.remove(listener)

    def drain_news(self) -> list:
        """Entries other agents wrote that arrived live since the last call (the latest `NEWS_KEPT`)."""
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

