"""The operator's reads: the server's counts and offsets, and the dashboard's views of the changelog, a memory's
history, pages of memories and activity (the queries are `mnemosync.server.operator_view`'s).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mnemosync import __version__
from mnemosync.kernel import db
from mnemosync.kernel.memory import LAYERS, MemoryRow
from mnemosync.kernel.outcomes import Stats
from mnemosync.kernel.overview import Activity, ChangelogRow, MemoryHistory
from mnemosync.server import governance, operator_view
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext, pinned_model


class OperatorReads:
    """The ledger's operator views (`ledger.operator`). Thread-safe."""

    def __init__(self, context: LedgerContext):
        self._ctx = context

    def stats(self, caller: Caller | None = None) -> Stats:
        """Counts, per-agent offsets and the pinned model, as far as `caller` may see them.

        An admin (or no caller) sees the whole server. Any other agent sees counts of its own scopes
        only, its own offset only, and no data size: other scopes' activity is not its business.
        """
        conn = self._ctx.reader()
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
        head = self._ctx.record.head(conn)[0]
        agents = [replace(o, lag=max(0, head - o.acked_seq)) for o in self._ctx.record.offsets(conn)
                  if everything or (caller is not None and o.agent_id == caller.agent_id)]
        return Stats(
            head_seq=head,
            live_memories=live,
            archived_memories=archived,
            by_layer=by_layer,
            by_scope=by_scope,
            agents=agents,
            embedding_model=pinned_model(conn),
            data_bytes=db.data_bytes(self._ctx.path) if everything else 0,
            server_version=__version__,
            server_time_ms=self._ctx.clock.now_ms(),
            read_store=self._ctx.shared.read_store_status(everything) if self._ctx.shared is not None else None,
        )

    def changelog_page(self, caller: Caller | None = None, **filters: Any) -> list[ChangelogRow]:
        """Changelog rows newest first, filtered, in the caller's scopes (`operator_view.changelog_page`)."""
        return operator_view.changelog_page(self._ctx.reader(), caller, **filters)

    def history(self, memory_id: str, caller: Caller | None = None) -> MemoryHistory:
        """A memory and every entry that changed it (`operator_view.history`)."""
        return operator_view.history(self._ctx.reader(), memory_id, caller)

    def memories(self, caller: Caller | None = None, **filters: Any) -> tuple[list[MemoryRow], int]:
        """A page of memories newest first, filtered, in the caller's scopes, and how many match
        (`operator_view.memories`)."""
        return operator_view.memories(self._ctx.reader(), caller, **filters)

    def activity(self, caller: Caller | None = None, *, minutes: int = 0) -> Activity:
        """Writes per minute and memory counts in the caller's scopes (`operator_view.activity`)."""
        return operator_view.activity(self._ctx.reader(), caller, now_ms=self._ctx.clock.now_ms(), minutes=minutes)
