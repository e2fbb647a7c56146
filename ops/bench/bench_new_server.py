"""A new server over PostgreSQL: start to first search answered, by today's fold of the whole changelog vs. from
the snapshot published in the database (issue 30's aim: at least 10x faster), both in one run.

A throwaway PostgreSQL (pgserver) and one `mnemosync serve --store` subprocess (server A) loaded with `--size`
synthetic memories (384-dim vectors, Appends of 500: one entry per memory). Then, A still serving:

* **fold**: a `mnemosync serve` with a new data directory over the same database, nothing published: from its
  process start to the answer of its first hybrid search (Python's imports, the fold of every entry, the vector
  mirror);
* A makes and publishes a snapshot (`mnemosync snapshot`'s code), its time and size reported;
* **snapshot**: another new server, which starts from the published snapshot (entries copied and checked, image
  installed), timed the same way.

    .venv/bin/python -m ops.bench.bench_new_server --size 20000
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from mnemosync.server import snapshots
from mnemosync.v1 import memory_pb2 as pb
from ops.bench.bench_stores import batched_append, postgresql, serve
from ops.bench.serverproc import REPO_ROOT, Client
from ops.bench.speed import SYNTHETIC_MODEL
from ops.bench.workload import Workload
from ops.serve_process import ServeProcess

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "new_server"


def first_search(data_dir: Path, store: str, workload: Workload) -> dict:
    """A new server over `store` from process start to its first search's answer; seconds, and what it logged
    about a snapshot."""
    text, vector = workload.queries(1, salt=5)[0]
    server = ServeProcess(data_dir, "--store", store, synchronous="full", env={"PYTHONPATH": str(REPO_ROOT)},
                          cwd=REPO_ROOT)
    server.args.insert(server.args.index("serve"), "--verbose")  # the bootstrap's and the check's log lines
    started = time.perf_counter()
    server.start(timeout=1800)
    try:
        serving = time.perf_counter() - started
        client = Client(server.address, "bench-new-server")
        hits = client.search(pb.SearchRequest(query=text, query_vector=vector.tolist(), limit=10,
                                              embedding_model=SYNTHETIC_MODEL, mode=pb.SEARCH_MODE_HYBRID)).results
        seconds = time.perf_counter() - started
        client.close()
        stats = Client(server.address, "bench-new-server")
        head = stats.stats().head_seq
        stats.close()
    finally:
        server.stop()
    log_text = "".join(server.stderr_lines)
    started_from = re.search(r"started the replica from the snapshot at entry (\d+)", log_text)
    return {"seconds": seconds, "serving_s": serving, "first_search_s": seconds - serving, "hits": len(hits),
            "head": head, "from_snapshot_at": int(started_from.group(1)) if started_from else None,
            "log": [line for line in log_text.splitlines() if "snapshot" in line or "checking" in line
                    or "checked" in line]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.bench_new_server", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="memories loaded [20000]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where new_server.json/.md go [{DEFAULT_OUT}]")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-new-server-"))
    workload = Workload()

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    report: dict = {"size": args.size, "host_cpus": os.cpu_count(), "load_average": os.getloadavg()}
    try:
        with ExitStack() as stack:
            _, new_database = stack.enter_context(postgresql(work))
            store = new_database()
            server = stack.enter_context(serve(work / "a", store))
            log(f"loading {args.size:,} memories")
            report["load"] = batched_append(Client(server.address), workload, args.size)
            log("a new server by today's fold")
            report["fold"] = first_search(work / "fold", store, workload)
            log(f"  {report['fold']['seconds']:.1f} s; making and publishing a snapshot")
            t = time.perf_counter()
            made = snapshots.make_in(work / "a", store=store)
            report["snapshot"] = {"make_and_publish_s": time.perf_counter() - t, "size": made.size,
                                  "bytes": sum(s.length for s in made.sections)}
            log("a new server from the published snapshot")
            report["from_snapshot"] = first_search(work / "snap", store, workload)
            log(f"  {report['from_snapshot']['seconds']:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["speedup"] = report["fold"]["seconds"] / report["from_snapshot"]["seconds"]
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "new_server.json").write_text(json.dumps(report, indent=2))
    table = markdown(report)
    (args.out / "new_server.md").write_text(table)
    print(table)
    return 0


def markdown(r: dict) -> str:
    """The report as a Markdown table."""
    f, s = r["fold"], r["from_snapshot"]
    rows = [
        ("new server over PostgreSQL, start to first search answered, from the published snapshot",
         f"{s['seconds']:.2f} s", f"today's fold: {f['seconds']:.2f} s ({r['speedup']:.1f}x)"),
        ("of which until it accepts calls", f"{s['serving_s']:.2f} s", f"today's fold: {f['serving_s']:.2f} s"),
        ("snapshot made and published", f"{r['snapshot']['make_and_publish_s']:.2f} s",
         f"{r['snapshot']['bytes']:,} bytes of image, entry {r['snapshot']['size']:,}"),
    ]
    lines = [f"A new server over PostgreSQL at {r['size']:,} memories, {r['host_cpus']} CPUs, load "
             f"{r['load_average'][0]:.1f}", "", "| figure | value | beside it, same run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
