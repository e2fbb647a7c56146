"""Reads of memories: a memory by id, hybrid search, conflicts, topics, the pinned model.

Every read runs on the calling thread's own connection (`LedgerContext.reader`), within the caller's scopes
(`mnemosync.server.governance`). A read by id counts as a use of the memory, buffered for the lifecycle
(`mnemosync.server.usage_stats.UseBuffer`, written by `mnemosync.server.memory_lifecycle.MemoryLifecycle`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from mnemosync.kernel import conflict_projection, lifecycle, projections, revisions
from mnemosync.kernel import search as search_module
from mnemosync.kernel import topics as topics_module
from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument, NotFound
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.server import changelog, costly_reads, governance, usage_stats
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext, model_mismatch, pinned_model

MAX_CONFLICT_LIST = 1000


class MemoryReads:
    """The ledger's reads of memories (`ledger.reads`). Thread-safe.

    Args:
        context: The ledger's connections.
        uses: The buffer reads by id note their uses in.
        settings: The lifecycle's parameters search ranks with.
        rrf_k: The constant of the plain RRF score search hits report.
    """

    def __init__(self, context: LedgerContext, uses: usage_stats.UseBuffer, settings: lifecycle.LifecycleSettings,
                 rrf_k: int):
        self._ctx = context
        self._uses = uses
        self._settings = settings
        self.rrf_k = rrf_k
        self._topics = costly_reads.TopicCache()

    def get(self, memory_id: str, caller: Caller | None = None) -> MemoryRow:
        """A memory by id, archived or not.

        Raises:
            NotFound: it never existed.
            PermissionDenied: it is in a scope `caller` is not granted.
        """
        memory = projections.get_memory(self._ctx.reader(), memory_id)
        if memory is None:
            raise NotFound(f"no memory with id {memory_id}")
        if caller is not None:
            governance.require_scope(caller, memory.scope, "read memories")
            self._uses.add(usage_stats.Use(memory.id, self._ctx.clock.now_ms(), "get", caller.agent_id))
        return memory

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
        if not 1 <= limit <= self._ctx.limits.max_search_limit:
            raise InvalidArgument(f"limit must be 1 to {self._ctx.limits.max_search_limit}, got {limit}")
        if len(query) > self._ctx.limits.max_query_chars:
            raise InvalidArgument(
                f"query is {len(query)} characters; the limit is {self._ctx.limits.max_query_chars}"
            )
        if "\x00" in query:
            raise InvalidArgument("query must not contain NUL characters")
        conn = self._ctx.reader()
        vector_bytes = None
        if vector:
            pinned = pinned_model(conn)
            if model is not None and pinned is not None and not pinned.same_model(model):
                raise FailedPrecondition(model_mismatch(pinned, model))
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
            ranking=search_module.Ranking(self._ctx.clock.now_ms(), usage_stats.usage_for, self._settings,
                                          layers or governance.DEFAULT_LAYERS) if rerank else None,
        )
        for hit in hits:
            hit.memory = replace(hit.memory, open_conflicts=conflict_projection.open_ids(conn, hit.memory.id))
        return hits

    def conflicts(self, caller: Caller | None = None, *, include_resolved: bool = False, memory_id: str = "",
                  limit: int = 100) -> list[conflict_projection.Conflict]:
        """Conflicts in the caller's scopes (see `mnemosync.kernel.conflict_projection.listing`).

        Raises:
            InvalidArgument: limit out of range.
        """
        limit = limit or 100
        if not 1 <= limit <= MAX_CONFLICT_LIST:
            raise InvalidArgument(f"limit must be 1 to {MAX_CONFLICT_LIST}, got {limit}")
        conn = self._ctx.reader()
        return [revisions.with_base(conn, c) for c in conflict_projection.listing(
            conn, scopes=caller.scopes if caller else None, include_resolved=include_resolved, memory_id=memory_id,
            limit=limit)]

    def conflict(self, conflict_id: int, caller: Caller | None = None) -> conflict_projection.Conflict:
        """One conflict with its revisions and (write conflicts) their common base.

        Raises:
            NotFound: no such conflict.
            PermissionDenied: it is in a scope the caller is not granted.
        """
        conn = self._ctx.reader()
        found = conflict_projection.get(conn, conflict_id)
        if found is None:
            raise NotFound(f"no conflict with id {conflict_id}; list them with ListConflicts "
                           "(mnemosync conflicts list)")
        if caller is not None:
            governance.require_scope(caller, found.scope, "read conflicts")
        return revisions.with_base(conn, found)

    def memory_version(self, memory_id: str) -> int:
        """The memory's current version (0 if it does not exist)."""
        row = self._ctx.reader().execute("SELECT version FROM memories WHERE id = ?", (memory_id,)).fetchone()
        return row[0] if row else 0

    def model(self) -> ModelInfo | None:
        """The pinned embedding model, if any."""
        return pinned_model(self._ctx.reader())

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
        conn = self._ctx.reader()
        if caller is not None:
            granted = governance.search_scopes(caller, scopes, lambda: [
                s for (s,) in conn.execute("SELECT DISTINCT scope FROM memories ORDER BY scope")])
            if granted is not None and not granted:
                return topics_module.Topics([], [])
            scopes = granted or ()
        return self._topics.get(changelog.head(conn)[0], scopes, limit, novel_since_ms, lambda most:
                                topics_module.compute(conn, scopes=scopes, limit=most, novel_since_ms=novel_since_ms))
