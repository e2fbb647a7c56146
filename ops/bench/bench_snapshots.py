"""Snapshots (issue 30) beside what they replace, in one run: a new cache from a snapshot vs. by replay, append
latency while a snapshot is made vs. without, and server start-up with the start-up check's mark vs. the whole
walk.

One `mnemosync serve` subprocess (SQLite, synchronous=full) is loaded with `--size` synthetic memories (384-dim
vectors, Appends of 500). Then:

* **new cache ready for offline search**: a fresh cache caught up by replay (`catch_up(snapshot_gap=None)`) and
  one started from the server's snapshot (`catch_up`: install, then the entries after it), each followed by its
  first local hybrid search, alternating for `--rounds` rounds; medians. The snapshot is made first (`mnemosync
  snapshot`'s code), its time and size reported.
* **append p95 while a snapshot is made**: one agent's single-operation Appends for `--seconds`, alone, then
  while snapshots of the whole store are made back to back, as the server's periodic maker makes them (a
  spawned process at a lower priority) and at normal priority.
* **start-up**: the server process started again with the mark of the last check (`mnemosync.server.boot_check`)
  and with the mark removed (the whole walk), each until it accepts calls (Python's imports included); and the
  check alone, in process.

    .venv/bin/python -m ops.bench.bench_snapshots --size 20000
    .venv/bin/python -m ops.bench.bench_snapshots --size 100000 --out /tmp/snapshots
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.server import boot_check, snapshots
from mnemosync.server.ledger import Ledger
from mnemosync.server.notary import load_key
from mnemosync.v1 import memory_pb2 as pb
from ops.bench import environment
from ops.bench.bench_append import add_operations
from ops.bench.bench_search import percentiles
from ops.bench.bench_stores import batched_append
from ops.bench.serverproc import REPO_ROOT, Client
from ops.bench.speed import SYNTHETIC_MODEL
from ops.bench.workload import Workload
from ops.serve_process import ServeProcess

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "snapshots"


def _serve(data_dir: Path) -> ServeProcess:
    return ServeProcess(data_dir, synchronous="full", env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)


def _ready_cache(address: str, path: Path, query: tuple[str, np.ndarray], *, snapshot: bool) -> dict:
    """A fresh cache caught up (from the snapshot or by replay) and its first local search; seconds."""
    started = time.perf_counter()
    cache, remote = Cache(path), Remote(address, "bench-snapshot", timeout=300)
    summary = catch_up(cache, remote, snapshot_gap=0 if snapshot else None)
    caught_up = time.perf_counter() - started
    text, vector = query
    hits = cache.search(query=text, vector=np.asarray(vector, dtype="<f4").tobytes(), limit=10)
    seconds = time.perf_counter() - started
    result = {"seconds": seconds, "catch_up_s": caught_up, "first_search_s": seconds - caught_up,
              "replayed": summary.applied, "offset": cache.offset, "hits": len(hits)}
    cache.close()
    remote.close()
    return result


def new_cache(address: str, work: Path, workload: Workload, rounds: int) -> dict:
    """Snapshot vs. replay, alternating (see the module docstring)."""
    query = workload.queries(1, salt=3)[0]
    runs: dict[str, list[dict]] = {"replay": [], "snapshot": []}
    for n in range(rounds):
        for kind in ("replay", "snapshot"):
            where = work / f"cache-{kind}-{n}"
            where.mkdir(mode=0o700)
            runs[kind].append(_ready_cache(address, where / "cache.db", query, snapshot=kind == "snapshot"))
            shutil.rmtree(where, ignore_errors=True)
    replay = statistics.median(r["seconds"] for r in runs["replay"])
    snap = statistics.median(r["seconds"] for r in runs["snapshot"])
    replay_sync = statistics.median(r["catch_up_s"] for r in runs["replay"])
    snap_sync = statistics.median(r["catch_up_s"] for r in runs["snapshot"])
    return {"replay_s": replay, "snapshot_s": snap, "speedup": replay / snap, "replay_catch_up_s": replay_sync,
            "snapshot_catch_up_s": snap_sync, "catch_up_speedup": replay_sync / snap_sync, "runs": runs}


def _niced_snapshot(data_dir: Path) -> None:
    """One snapshot as the server's periodic maker makes it: a spawned process at a lower priority."""
    import multiprocessing

    process = multiprocessing.get_context("spawn").Process(target=snapshots._make_nicely, args=(data_dir, None, 2))
    process.start()
    process.join()


def serve_only(address: str) -> dict:
    """The whole replica file streamed to a client that only counts the bytes: the server's cost of serving one
    snapshot (an upper bound: the client's reads share the machine)."""
    remote = Remote(address, "bench-snapshot-serve", timeout=300)
    started, received = time.perf_counter(), 0
    for chunk in remote.snapshot():
        received += len(chunk.data)
    seconds = time.perf_counter() - started
    remote.close()
    return {"seconds": seconds, "bytes": received}


def appends_during(address: str, workload: Workload, seconds: float, start: int, during=None) -> tuple[dict, int]:
    """Single-operation Appends for `seconds` (while `during()` runs in a thread when given): latency p50/p95."""
    client, samples, stop = Client(address, "bench-snapshot-writer"), [], threading.Event()
    made: list[float] = []

    def background() -> None:
        while not stop.is_set():
            t = time.perf_counter()
            during()
            made.append(time.perf_counter() - t)

    thread = threading.Thread(target=background, daemon=True) if during else None
    if thread:
        thread.start()
    ops, _ = add_operations(workload, start, 100_000)
    ends, i = time.perf_counter() + seconds, 0
    while time.perf_counter() < ends:
        t = time.perf_counter()
        client.append(pb.AppendRequest(operations=[ops[i]], embedding_model=SYNTHETIC_MODEL))
        samples.append(time.perf_counter() - t)
        i += 1
    stop.set()
    if thread:
        thread.join()
    client.close()
    p = percentiles(samples)
    return {"appends": len(samples), "p50_ms": p[50], "p95_ms": p[95], "snapshots_made": len(made),
            "snapshot_s": statistics.median(made) if made else None}, i


def startup(data_dir: Path, key) -> dict:
    """Server start-up to its first answer with the mark and without; the check alone, in process."""
    mark = data_dir / boot_check.MARK_FILE
    out: dict = {}
    _serve(data_dir).start(timeout=1800).stop()  # the last start-up check's mark is now at the head
    for kind in ("mark", "whole walk", "mark", "whole walk"):
        if kind == "whole walk":
            mark.unlink(missing_ok=True)
        server = _serve(data_dir)
        t = time.perf_counter()
        server.start(timeout=1800)  # returns once the server logs that it accepts calls
        out.setdefault(f"boot_{kind}_s", []).append(time.perf_counter() - t)
        server.stop()
    store = Ledger.sqlite(data_dir / "mnemosync.db", synchronous="normal")
    try:
        t = time.perf_counter()
        store.log.verify()
        out["check_whole_walk_s"] = time.perf_counter() - t
        boot_check.check(store, mark, key)
        t = time.perf_counter()
        boot_check.check(store, mark, key)
        out["check_from_mark_s"] = time.perf_counter() - t
        out["entries"] = store.head_seq()
    finally:
        store.close()
    return {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.bench_snapshots", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="memories loaded [20000]")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of snapshot vs. replay [2]")
    parser.add_argument("--seconds", type=float, default=6.0, help="duration of each append-latency run [6]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where snapshots.json/.md go [{DEFAULT_OUT}]")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-snapshots-"))
    data_dir = work / "server"
    workload = Workload()

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    report: dict = {"size": args.size, "host_cpus": os.cpu_count(), "load_average": os.getloadavg()}
    try:
        server = _serve(data_dir)
        server.start(timeout=600)
        try:
            log(f"loading {args.size} memories")
            report["load"] = batched_append(Client(server.address), workload, args.size)
            key = load_key(data_dir, None)
            t = time.perf_counter()
            made = snapshots.make_in(data_dir)
            report["snapshot"] = {"make_s": time.perf_counter() - t, "size": made.size,
                                  "bytes": sum(s.length for s in made.sections)}
            log(f"snapshot made in {report['snapshot']['make_s']:.1f}s; new caches")
            report["new_cache"] = new_cache(server.address, work, workload, args.rounds)
            report["snapshot_serve"] = serve_only(server.address)
            log("append latency alone and while snapshots are made")
            scratch = work / "scratch-snapshots"
            report["appends_alone"], used = appends_during(server.address, workload, args.seconds, args.size)
            report["appends_while_snapshotting"], more = appends_during(
                server.address, workload, args.seconds, args.size + used, during=lambda: _niced_snapshot(data_dir))
            report["appends_while_snapshotting_unniced"], _ = appends_during(
                server.address, workload, args.seconds, args.size + used + more,
                during=lambda: snapshots.make_image(data_dir / "mnemosync.db", scratch, key.key, now_ms=0))
        finally:
            server.stop()
        log("start-up with and without the mark")
        report["startup"] = startup(data_dir, key)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    environment.write_report(args.out, "snapshots", report, markdown(report))
    return 0


def markdown(r: dict) -> str:
    """The report as a Markdown table."""
    c, a, w, s = r["new_cache"], r["appends_alone"], r["appends_while_snapshotting"], r["startup"]
    u = r["appends_while_snapshotting_unniced"]
    rows = [
        ("new cache ready for offline search (caught up and first search), from the snapshot",
         f"{c['snapshot_s']:.2f} s",
         f"by replay: {c['replay_s']:.2f} s ({c['speedup']:.1f}x)"),
        ("new cache caught up (before its first search), from the snapshot", f"{c['snapshot_catch_up_s']:.2f} s",
         f"by replay: {c['replay_catch_up_s']:.2f} s ({c['catch_up_speedup']:.1f}x)"),
        ("snapshot made (whole store)", f"{r['snapshot']['make_s']:.2f} s", f"{r['snapshot']['bytes']:,} bytes"),
        ("single append p95 while snapshots are made (niced process, as the server's periodic maker)",
         f"{w['p95_ms']:.1f} ms", f"alone: {a['p95_ms']:.1f} ms ({(w['p95_ms'] / a['p95_ms'] - 1) * 100:+.0f}%)"),
        ("single append p95 while snapshots are made at normal priority", f"{u['p95_ms']:.1f} ms",
         f"alone: {a['p95_ms']:.1f} ms ({(u['p95_ms'] / a['p95_ms'] - 1) * 100:+.0f}%)"),
        ("server start-up until it accepts calls, from the mark", f"{s['boot_mark_s']:.2f} s",
         f"whole walk: {s['boot_whole walk_s']:.2f} s"),
        ("start-up check alone, from a mark at the head", f"{s['check_from_mark_s']:.3f} s",
         f"whole walk: {s['check_whole_walk_s']:.2f} s"),
    ]
    lines = [f"Snapshots at {r['size']:,} memories ({s['entries']:,} entries), {r['host_cpus']} CPUs, load "
             f"{r['load_average'][0]:.1f}", "", "| figure | value | beside it, same run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
