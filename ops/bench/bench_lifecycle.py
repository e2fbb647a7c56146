"""The memory lifecycle's costs (issue 15): search with the cognitive re-ranking against without it, and a sweep.

Re-ranking: the same hybrid query through gRPC with and without
`SearchRequest.fusion_only`, alternating query by query so load from other
processes hits both alike. Target: at most 1.2x the fused search's latency.

Sweep: the server's database after the run, opened in this process with a
clock 45 days on, 1 % of the memories used (recorded as uses first, as
agents' RecordUse calls would), then one sweep for that time and a second one
for the same time (which must write nothing). Baseline: reading every
memory's row once (the scan any sweep needs).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mnemosync.v1 import memory_pb2 as pb
from ops.bench.bench_search import percentiles
from ops.bench.report import Figure
from ops.bench.serverproc import Client
from ops.bench.workload import Workload

RERANK_TARGET = 1.2
SWEEP_DAYS_ON = 45
USED_SHARE = 0.01


def rerank_cost(client: Client, workload: Workload, model: pb.EmbeddingModel, *, queries: int, label: str,
                size_key: str) -> tuple[list[Figure], dict]:
    """Hybrid search p50/p95 with the re-ranking against the fused order alone (gRPC, same queries)."""
    pairs = workload.queries(queries + 5, salt=len(label) + 7)

    def run(text: str, vector: np.ndarray, fusion_only: bool) -> float:
        t = time.perf_counter()
        client.search(pb.SearchRequest(query=text, query_vector=vector.tolist(), embedding_model=model, limit=10,
                                       fusion_only=fusion_only))
        return time.perf_counter() - t

    for text, vector in pairs[:5]:
        run(text, vector, True)
        run(text, vector, False)
    reranked, fused = [], []
    for i, (text, vector) in enumerate(pairs[5:]):
        order = (False, True) if i % 2 else (True, False)
        for fusion_only in order:
            (fused if fusion_only else reranked).append(run(text, vector, fusion_only))
    rp, fp = percentiles(reranked), percentiles(fused)
    figures = [
        Figure(id=f"search.rerank.{size_key}.p{p}", title=f"hybrid search p{p} @ {label} with cognitive re-ranking",
               value=rp[p], unit="ms", baseline_title=f"the same search, fused order only (fusion_only) p{p}",
               baseline=fp[p], better="lower", details={"queries": len(reranked), "target_ratio": RERANK_TARGET})
        for p in (50, 95)
    ]
    return figures, {"queries": len(reranked), "reranked_ms": rp, "fusion_only_ms": fp,
                     "ratio_p50": rp[50] / fp[50], "target_ratio": RERANK_TARGET}


def sweep_cost(db_path: Path) -> tuple[Figure, dict]:
    """One sweep over every memory of the (stopped) server's database, 45 days on; then the same sweep again."""
    from mnemosync.server.clock import Clock
    from mnemosync.server.ledger import Ledger

    now = {"ms": int(time.time() * 1000) + SWEEP_DAYS_ON * 86_400_000}
    with Ledger.sqlite(db_path, synchronous="normal", clock=Clock(now_ms=lambda: now["ms"])) as store:
        conn = store.context.reader()
        t = time.perf_counter()
        ids = [i for (i,) in conn.execute("SELECT id FROM memories WHERE archived = 0")]
        scan = time.perf_counter() - t
        used = ids[:: int(1 / USED_SHARE)]
        for start in range(0, len(used), store.limits.max_batch):
            store.lifecycle.use(None, used[start:start + store.limits.max_batch])
        t = time.perf_counter()
        first = store.lifecycle.sweep()
        elapsed = time.perf_counter() - t
        t = time.perf_counter()
        second = store.lifecycle.sweep(now_ms=first.as_of_ms)
        again = time.perf_counter() - t
    details = {"memories": first.examined, "used": len(used), "days_on": SWEEP_DAYS_ON,
               "decay_entries": first.decayed, "archive_entries": first.archived,
               "entries_written": first.entries_written, "sweep_s": elapsed, "row_scan_s": scan,
               "second_sweep_entries": second.entries_written, "second_sweep_s": again}
    figure = Figure(id="lifecycle.sweep", title=f"lifecycle sweep over {first.examined:,} memories "
                    f"({first.entries_written:,} entries written)", value=elapsed, unit="s",
                    baseline_title="reading every live memory's id once", baseline=scan, better="lower",
                    details=details)
    return figure, details
