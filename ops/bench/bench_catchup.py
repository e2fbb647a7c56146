"""Catch-up (agent_sync) of a fresh agent cache vs. raw inserts of the same rows.

The real path is `mnemosync.agent.sync.catch_up`: the server streams every entry
a page per message, the agent decodes and verifies each (hash, link to the
previous one, the page's signed checkpoint), folds the page into its
projections and acknowledges per batch. The baseline (the floor) inserts the
rows the cache ended up with into an empty cache with plain `executemany`, in
transactions of the same size.

The two alternate for `rounds` rounds, each into a fresh file, and the figure
is the median of each: on a shared machine the load moves within a run, and
alternating exposes both to the same moments.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import BATCH, SyncSummary, catch_up
from ops.bench import rawcopy
from ops.bench.report import Figure

ROUNDS = 3


def measure(address: str, workdir: Path, *, label: str, rounds: int = ROUNDS) -> tuple[Figure, dict]:
    """Catches a fresh cache up with the server and times the floor on its rows, `rounds` times alternately."""
    rates, floors, batch_rates, summary = [], [], [], None
    for n in range(rounds):
        where = workdir / f"round-{n}"
        where.mkdir(mode=0o700)  # as private as a cache's folder must be
        summary, rows, offset, marks = _catch_up(address, where)
        rates.append(summary.rate)
        batch_rates += [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:], strict=False) if b[1] > a[1]]
        floors.append(len(rows) / _floor(rows, offset, where / "raw-cache.db"))
        shutil.rmtree(where, ignore_errors=True)
    figure = Figure(
        id="catchup", title=f"catch-up of a fresh agent cache over {label} entries (agent_sync)",
        value=statistics.median(rates), unit="entries/s",
        baseline_title="raw SQLite executemany of the same rows into an empty cache",
        baseline=statistics.median(floors),
        details={"entries": summary.applied, "rounds": rounds, "rates": rates, "floor_rates": floors,
                 "ratios": [r / f for r, f in zip(rates, floors, strict=True)], "batch": BATCH,
                 "median_batch_rate": statistics.median(batch_rates) if batch_rates else None},
    )
    return figure, figure.details


def _catch_up(address: str, where: Path) -> tuple[SyncSummary, rawcopy.Rows, tuple[int, str], list]:
    """One timed catch-up into a fresh cache; its rows read back untimed."""
    cache = Cache(where / "agent-cache.db")
    remote = Remote(address, "bench-catchup", insecure=True, timeout=120)
    marks: list[tuple[float, int]] = [(time.perf_counter(), 0)]

    def progress(applied: int, offset: int, head: int) -> None:
        marks.append((time.perf_counter(), applied))

    try:
        summary = catch_up(cache, remote, progress=progress)
    finally:
        remote.close()
    offset = (cache.offset, cache.last_hash)
    rows = rawcopy.cache_rows(cache._conn)  # the benchmark reads the cache's own rows back, untimed
    cache.close()
    return summary, rows, offset, marks


def _floor(rows: rawcopy.Rows, offset: tuple[int, str], path: Path) -> float:
    """Seconds to insert `rows` into an empty cache at `path`, BATCH memories per transaction."""
    raw = rawcopy.new_cache_db(path, 384)
    batches = rows.batches(BATCH)
    started = time.perf_counter()
    for part in batches:
        rawcopy.insert_rows(raw, part, offset=offset)
    seconds = time.perf_counter() - started
    raw.close()
    return seconds
