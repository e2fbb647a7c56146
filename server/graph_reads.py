"""Reads of the memory graph: walks, causal chains, timelines, neighbours of hits, graph search.

The kernel runs the queries (`mnemosync.kernel.graph`, `mnemosync.kernel.graph_rank`); this module checks the
memory a walk starts from and limits every step to the scopes the caller may read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from mnemosync.kernel import graph, graph_rank, projections
from mnemosync.kernel.errors import InvalidArgument, NotFound
from mnemosync.kernel.memory import MemoryRow
from mnemosync.server import governance
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext


class GraphReads:
    """The ledger's graph queries (`ledger.graph`). Thread-safe."""

    def __init__(self, context: LedgerContext):
        self._ctx = context

    def _readable(self, memory_id: str, caller: Caller | None) -> tuple[MemoryRow | None, graph.Readable | None]:
        """The memory a graph query starts from, and the test of the scopes the caller may read.

        Raises:
            NotFound: no such memory.
            PermissionDenied: the caller may not read it.
        """
        memory = projections.get_memory(self._ctx.reader(), memory_id) if memory_id else None
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
        return graph.traverse(self._ctx.reader(), cast(MemoryRow, start), readable=readable, edge_types=edge_types,
                              direction=direction, depth=depth, limit=limit, include_archived=include_archived)

    def causal_chain(self, memory_id: str, *, caller: Caller | None = None, direction: str = "both",
                     depth: int = 0, limit: int = 0) -> graph.Walk:
        """Causes and effects of one memory (`mnemosync.kernel.graph.causal_chain`), in the caller's scopes."""
        start, readable = self._readable(_required(memory_id), caller)
        return graph.causal_chain(self._ctx.reader(), cast(MemoryRow, start), readable=readable, direction=direction,
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
        return graph.timeline(self._ctx.reader(), readable=readable, around=around, **window)

    def neighbours(self, memory_ids: list[str], count: int,
                   caller: Caller | None = None) -> dict[str, list[graph.Step]]:
        """The graph neighbours of search hits (`mnemosync.kernel.graph.neighbours`), in the caller's scopes."""
        return graph.neighbours(self._ctx.reader(), memory_ids, readable=_readable_scopes(caller), count=count)

    def graph_search(self, seed_ids: list[str], *, caller: Caller | None = None,
                     **options: Any) -> graph_rank.GraphRank:
        """Personalized PageRank from `seed_ids` (`mnemosync.kernel.graph_rank.graph_search`), in the caller's
        scopes."""
        return graph_rank.graph_search(self._ctx.reader(), seed_ids, readable=_readable_scopes(caller), **options)


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
