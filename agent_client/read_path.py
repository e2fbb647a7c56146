"""The read path of an `AgentClient`: memories, searches, graph walks and conflicts from the server, and from the
local cache (with the outbox's pending writes laid over it, secrets masked as the server masks them) when the
server cannot be reached, saying so; and the calls that only the server can answer (status, statistics, the
lifecycle's sweeps).

Every answer from the server marks the client online, every unreachable server offline (`AgentClient.online`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np

from mnemosync.agent.conflicts import ConflictList, ConflictView, get_conflict, list_conflicts
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.write_path import layer_number
from mnemosync.kernel import graph, graph_rank, secrets_scan, topics
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.errors import CodedError, InvalidArgument, NotFound
from mnemosync.kernel.lifecycle import SweepReport
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.outcomes import Stats
from mnemosync.kernel.search import MODES as SEARCH_MODES
from mnemosync.kernel.search import Filter, Hit, Ranking
from mnemosync.kernel.topics import Topics
from mnemosync.kernel.wording import counted

if TYPE_CHECKING:
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.client_settings import ClientSettings
    from mnemosync.agent.embeddings import Embedder
    from mnemosync.agent.local_reads import LocalReads
    from mnemosync.agent.outbox import Outbox
    from mnemosync.agent.remote import Remote
    from mnemosync.agent.sync import LiveUpdates
    from mnemosync.agent.write_path import WriteResult
    from mnemosync.kernel.model_identity import ModelInfo

_T = TypeVar("_T")


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
    refusal: CodedError | None = None


class ReadingClient(Protocol):
    """What the read path takes from its `AgentClient`: its files, connection and model, the online flag it sets,
    the live stream whose state `status` shows, and the write a recall may need."""

    settings: ClientSettings
    agent_id: str
    cache: Cache
    outbox: Outbox
    remote: Remote
    local: LocalReads
    online: bool
    live: LiveUpdates | None

    @property
    def embedder(self) -> Embedder: ...

    @property
    def model(self) -> ModelInfo: ...

    def restore(self, memory_id: str, *, base_version: int | None = None) -> WriteResult: ...


class ReadPath:
    """The reads of one `AgentClient` (which delegates every read method here).

    Args:
        client: The client whose cache, outbox, connection, embedder and online flag the reads use.
    """

    def __init__(self, client: ReadingClient):
        self._client = client
        self.settings = client.settings
        self.agent_id = client.agent_id
        self.cache = client.cache
        self.outbox = client.outbox
        self.remote = client.remote
        self.local = client.local

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


    def get(self, memory_id: str) -> MemoryRow:
        """A memory by id: pending state first, then the server, then the cache (secrets masked)."""
        pending = self.outbox.overlay_get(memory_id)
        if pending is not None:
            return secrets_scan.masked(pending)
        try:
            memory = self.remote.get(memory_id)
            self._client.online = True
            return memory
        except NotFound:
            redirect = self.outbox.redirect_of(memory_id)
            if redirect is None:
                raise
            raise NotFound(f"memory {memory_id} was never stored: when its queued add was sent, memory "
                           f"{redirect.became} already said the same, so it became that memory (mnemosync get "
                           f"{redirect.became[:8]})") from None
        except ServerUnavailable:
            self._client.online = False
            cached = self.cache.get(memory_id)
            if cached is None:
                raise NotFound(f"no memory with id {memory_id} in the local cache "
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
            raise InvalidArgument(f"neighbours must be 0 to {graph.MAX_NEIGHBOURS}, got {neighbours}")
        if mode not in SEARCH_MODES:
            raise InvalidArgument(f"mode must be one of {sorted(SEARCH_MODES)}")
        vector = self._client.embedder.embed(query) if mode != "keyword" and query.strip() else None
        f = Filter(scopes=tuple(scopes), types=tuple(types), tags=tuple(t.lower() for t in tags),
                   layers=tuple(layer_number(x) for x in layers), authors=tuple(authors),
                   created_after_ms=created_after_ms, created_before_ms=created_before_ms,
                   include_archived=include_archived)
        if not self.outbox.counts()[0]:
            try:
                hits = self.remote.search(query, vector=vector, model=self._client.model if vector else None,
                                          limit=limit, filter=f, mode=mode, neighbours=neighbours)
                self._client.online = True
                return SearchOutcome(hits)
            except ServerUnavailable:
                self._client.online = False
        return self.local_search(query, vector=vector, limit=limit, filter=f, mode=mode, neighbours=neighbours)

    # -- the memory graph ----------------------------------------------------------

    def traverse(self, memory_id: str, *, edge_types: Sequence[str] = (), direction: str = "out", depth: int = 0,
                 limit: int = 0, include_archived: bool = False, local: bool = False) -> graph.Walk:
        """The memories within `depth` links of one memory along `edge_types` (`mnemosync.kernel.graph.traverse`): the
        server's answer, or the cache's offline or with `local` (the same for the same changelog)."""
        args = {"edge_types": tuple(edge_types), "direction": direction, "depth": depth, "limit": limit}
        graph.check_walk(**args)
        return self._server_or_cache(
            local, lambda: self.remote.traverse(memory_id, include_archived=include_archived, **args),
            lambda: self._local_walk(graph.traverse, memory_id, include_archived=include_archived, **args))

    def causal_chain(self, memory_id: str, *, direction: str = "both", depth: int = 0, limit: int = 0,
                     local: bool = False) -> graph.Walk:
        """Causes ("in") and effects ("out") of one memory along causal links (`mnemosync.kernel.graph.causal_chain`);
        the server's answer, or the cache's offline or with `local`."""
        args = {"direction": direction, "depth": depth or graph.DEFAULT_CAUSAL_DEPTH, "limit": limit}
        graph.check_walk(**args)
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

    def graph_search(self, query: str, *, seeds: int = 0, alpha: float = 0.0, limit: int = 0,
                     scopes: Sequence[str] = (), edge_types: Sequence[str] = (),
                     local: bool = False) -> graph_rank.GraphRank:
        """Personalized PageRank over the link graph seeded by the `seeds` best hybrid hits of `query`
        (`mnemosync.kernel.graph_rank`): the server's answer, or the cache's offline or with `local`. The cache
        seeds the walk with its own search (`local_search`) and runs the same walk over its own projections, so
        for the same changelog and the same seeds both rank alike."""
        seeds, alpha, limit, types = graph_rank.check(seeds=seeds, alpha=alpha, limit=limit, edge_types=edge_types)
        vector = self._client.embedder.embed(query) if query.strip() else None

        def cached() -> graph_rank.GraphRank:
            hits = self.local_search(query, vector=vector, limit=seeds, filter=Filter(scopes=tuple(scopes)),
                                     mode="hybrid").hits
            found = self.cache.read(graph_rank.graph_search, seed_ids=[h.memory.id for h in hits],
                                    scopes=tuple(scopes), edge_types=types, alpha=alpha, limit=limit)
            return graph_rank.GraphRank([replace(r, memory=secrets_scan.masked(r.memory)) for r in found.results],
                                        found.iterations)

        return self._server_or_cache(
            local, lambda: self.remote.graph_search(query, vector=vector, model=self._client.model if vector else None,
                                                    seeds=seeds, alpha=alpha, limit=limit, scopes=scopes,
                                                    edge_types=types), cached)

    def _server_or_cache(self, local: bool, served: Callable[[], _T], cached: Callable[[], _T]) -> _T:
        """The server's answer, or the cache's when it is unreachable or `local` asks for it."""
        if not local:
            try:
                answer = served()
                self._client.online = True
                return answer
            except ServerUnavailable:
                self._client.online = False
        return cached()

    def _cached(self, memory_id: str) -> MemoryRow:
        memory = self.cache.get(memory_id)
        if memory is None:
            raise NotFound(f"no memory with id {memory_id} in the local cache")
        return memory

    def _local_graph(self, query: Callable, **kwargs):
        """A `mnemosync.kernel.graph` query on the cache."""
        return self.cache.read(query, **kwargs)

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
            note += f" and {counted(len(pending_ids), 'memory')} with writes waiting in the outbox"
        return SearchOutcome(hits, offline=True, note=note)

    # -- the memory lifecycle (issue 15) -----------------------------------------

    def record_use(self, memory_ids: Sequence[str]) -> int:
        """Tells the server these memories were used (search hits the agent acted on); returns how many counted.

        Raises:
            ServerUnavailable: the server cannot be reached (uses are not queued offline: they only rank).
        """
        counted = self.remote.record_use(memory_ids, "used")
        self._client.online = True
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
            self._client.restore(memory_id, base_version=memory.version)
        self.remote.record_use([memory_id], "recall")
        self._client.online = True
        return self.remote.get(memory_id)

    def decay_sweep(self, *, dry_run: bool = False, now_ms: int = 0) -> SweepReport:
        """Runs the server's lifecycle sweep (admin certificates only), or reports what it would write.

        Raises:
            PermissionDenied: this agent is not admin.
            ServerUnavailable: the server cannot be reached.
        """
        report = self.remote.decay_sweep(dry_run=dry_run, now_ms=now_ms)
        self._client.online = True
        return report

    def consolidate(self, *, dry_run: bool = False, now_ms: int = 0, links_only: bool = False) -> ConsolidationReport:
        """Runs the server's consolidation (admin certificates only), or reports what it would write.

        Raises:
            PermissionDenied: this agent is not admin.
            ServerUnavailable: the server cannot be reached.
        """
        report = self.remote.consolidate(dry_run=dry_run, now_ms=now_ms, links_only=links_only)
        self._client.online = True
        return report

    def list_topics(self, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0) -> Topics:
        """Topic clusters of the cache's live memories (offline; the server's ListTopics gives the same answer
        for the same state, `mnemosync.kernel.topics`).

        Raises:
            InvalidArgument: limit out of range.
        """
        if not 1 <= limit <= topics.MAX_LIMIT:
            raise InvalidArgument(f"limit must be 1 to {topics.MAX_LIMIT}, got {limit}")
        return self.local.topics(scopes=scopes, limit=limit, novel_since_ms=novel_since_ms)

    # -- the server's state ------------------------------------------------------

    def status(self) -> Status:
        """Connection, offset, head and outbox state."""
        head, refusal = None, None
        try:
            head = self.remote.stats().head_seq
            self._client.online = True
        except ServerUnavailable:
            self._client.online = False
        except CodedError as exc:
            self._client.online, refusal = False, exc
        pending, failed, oldest = self.outbox.counts()
        return Status(
            agent_id=self.agent_id, server=self.settings.server, online=self._client.online,
            offset=self.cache.offset, head=head, pending=pending, failed=failed,
            oldest_pending_age_s=(time.time() * 1000 - oldest) / 1000 if oldest else None,
            cache_path=str(self.cache.path), model=str(self.settings.resolved_model_path()),
            live=bool(self._client.live and self._client.live.connected.is_set()), refusal=refusal,
        )

    def server_stats(self) -> Stats:
        """The server's counts and every agent's offset.

        Raises:
            ServerUnavailable: the server cannot be reached.
        """
        stats = self.remote.stats()
        self._client.online = True
        return stats


def _masked_step(s: graph.Step) -> graph.Step:
    """A step as the server sends it: secrets in its memory and its link's reason masked."""
    return replace(s, memory=secrets_scan.masked(s.memory), reason=secrets_scan.mask(s.reason))


