"""The memory lifecycle as requests: uses agents report, the buffered uses written, sweeps and consolidation.

The rules are the kernel's (`mnemosync.kernel.lifecycle`, `mnemosync.kernel.consolidation_rules`); the runs are
`mnemosync.server.sweep` and `mnemosync.server.consolidation`, each on the ledger's writer.
"""

from __future__ import annotations

from collections.abc import Mapping

from mnemosync.kernel import db, lifecycle, projections
from mnemosync.kernel.consolidation_rules import ConsolidationReport, ConsolidationSettings
from mnemosync.kernel.errors import InvalidArgument, ResourceExhausted
from mnemosync.server import consolidation as consolidation_module
from mnemosync.server import governance, usage_stats
from mnemosync.server import sweep as sweep_module
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext


class MemoryLifecycle:
    """The ledger's lifecycle (`ledger.lifecycle`). Thread-safe.

    Args:
        context: The ledger's connections.
        uses: The buffer reads note their uses in, written by `flush_uses`.
        settings: The lifecycle's parameters (ranking, decay, sweeps).
        consolidation: Consolidation's parameters.
    """

    def __init__(self, context: LedgerContext, uses: usage_stats.UseBuffer, settings: lifecycle.LifecycleSettings,
                 consolidation: ConsolidationSettings):
        self._ctx = context
        self._uses = uses
        self.settings = settings
        self.consolidation = consolidation

    def flush_uses(self, layers: Mapping[int, lifecycle.LayerRule] | None = None) -> int:
        """Writes the buffered uses into the access statistics; returns how many counted."""
        uses = self._uses.take()
        if not uses:
            return 0
        layers = layers or governance.DEFAULT_LAYERS
        return self._ctx.submit(lambda conn: usage_stats.write(conn, uses, self.settings, layers))

    def use(self, caller: Caller | None, memory_ids: list[str], kind: str = "used",
            layers: Mapping[int, lifecycle.LayerRule] | None = None) -> int:
        """Records uses an agent reports (`RecordUse`), written at once in one batch; returns how many counted.

        Raises:
            InvalidArgument: no ids, too many, or a kind that is not one of `access.KINDS`.
            PermissionDenied: a memory is in a scope `caller` is not granted.
        """
        if not memory_ids:
            raise InvalidArgument("memory_ids must not be empty")
        if len(memory_ids) > self._ctx.limits.max_batch:
            raise ResourceExhausted(f"memory_ids has {len(memory_ids)} ids; the limit is {self._ctx.limits.max_batch}")
        if kind not in usage_stats.KINDS:
            raise InvalidArgument(f"kind must be one of {list(usage_stats.KINDS)}, got {kind!r}")
        conn = self._ctx.reader()
        for memory_id in memory_ids:
            memory = projections.get_memory(conn, memory_id)
            if memory is not None and caller is not None:
                governance.require_scope(caller, memory.scope, "record uses of memories")
        now = self._ctx.clock.now_ms()
        uses = [usage_stats.Use(memory_id, now, kind, caller.agent_id if caller else "") for memory_id in memory_ids]
        layers = layers or governance.DEFAULT_LAYERS
        return self._ctx.submit(lambda conn: usage_stats.write(conn, uses, self.settings, layers))

    def sweep(self, *, now_ms: int | None = None, dry_run: bool = False,
              layers: Mapping[int, lifecycle.LayerRule] | None = None) -> lifecycle.SweepReport:
        """Runs the lifecycle sweep for `now_ms` (default: the clock's now; see `mnemosync.server.sweep`), one
        transaction per page of memories."""
        layers = layers or governance.DEFAULT_LAYERS
        self.flush_uses(layers)
        report = lifecycle.SweepReport(as_of_ms=self._ctx.clock.now_ms() if now_ms is None else now_ms, dry_run=dry_run)
        if dry_run:
            return sweep_module.run(self._ctx.reader(), report, 0, usage_stats.usage_for, self.settings, layers)

        def one_page(conn: db.Conn) -> None:
            sweep_module.run(conn, report, self._ctx.clock.now_ms(), usage_stats.usage_for, self.settings, layers,
                             pages=1)

        while not report.done:  # a page a transaction: writers wait at most one page's work
            self._ctx.submit(one_page)
        return report

    def consolidate(self, *, now_ms: int | None = None, dry_run: bool = False, links_only: bool = False,
                    layers: Mapping[int, lifecycle.LayerRule] | None = None) -> ConsolidationReport:
        """Runs consolidation for `now_ms` (default: the clock's now; see `mnemosync.server.consolidation`) in one
        transaction, or reports what it would write."""
        layers = layers or governance.DEFAULT_LAYERS
        self.flush_uses(layers)
        report = ConsolidationReport(as_of_ms=self._ctx.clock.now_ms() if now_ms is None else now_ms, dry_run=dry_run,
                                     links_only=links_only)
        args = (usage_stats.usage_for, self.consolidation, self.settings, layers)
        if dry_run:
            return consolidation_module.run(self._ctx.reader(), report, 0, *args)
        return self._ctx.submit(lambda conn: consolidation_module.run(conn, report, self._ctx.clock.now_ms(), *args))
