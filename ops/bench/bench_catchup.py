"""Catch-up (agent_sync) of a fresh agent cache vs. raw inserts of the same rows.

The real path is `agent_client.sync.catch_up`: the server streams every entry,
the agent decodes each message, verifies its hash and its link to the
previous one, folds it into its projections and acknowledges per batch. The
baseline inserts the rows the cache ended up with into an empty cache with
plain `executemany`, in transactions of the same size.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from agent_client.cache import Cache
from agent_client.remote import Remote
from agent_client.sync import BATCH, catch_up
from ops.bench import rawcopy
from ops.bench.report import Figure


def measure(address: str, workdir: Path, *, label: str) -> tuple[Figure, dict]:
    """Catches a fresh cache up with the server, then times the raw baseline."""
    cache = Cache(workdir / "agent-cache.db")
    remote = Remote(address, "bench-catchup", insecure=True, timeout=120)
    marks: list[tuple[float, int]] = [(time.perf_counter(), 0)]

    def progress(applied: int, offset: int, head: int) -> None:
        marks.append((time.perf_counter(), applied))

    try:
        summary = catch_up(cache, remote, progress=progress)
    finally:
        remote.close()
    batch_rates = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:], strict=False) if b[1] > a[1]]
    offset = (cache.offset, cache.last_hash)
    conn = cache._conn  # the benchmark reads the cache's own rows back, untimed
    rows = rawcopy.cache_rows(conn)
    cache.close()

    raw = rawcopy.new_cache_db(workdir / "raw-cache.db", 384)
    batches = rows.batches(BATCH)
    started = time.perf_counter()
    for part in batches:
        rawcopy.insert_rows(raw, part, offset=offset)
    raw_s = time.perf_counter() - started
    raw.close()
    figure = Figure(
        id="catchup", title=f"catch-up of a fresh agent cache over {label} entries (agent_sync)",
        value=summary.rate, unit="entries/s",
        baseline_title="raw SQLite executemany of the same rows into an empty cache",
        baseline=len(rows) / raw_s,
        details={"entries": summary.applied, "seconds": summary.seconds, "batch": BATCH,
                 "median_batch_rate": statistics.median(batch_rates) if batch_rates else None,
                 "raw_seconds": raw_s},
    )
    return figure, figure.details
