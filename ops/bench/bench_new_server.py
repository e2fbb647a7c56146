"""A new server over PostgreSQL: start to first search answered, by a fold of the whole changelog vs. from
the sealed replica file published with the snapshot in the database (issue 39's aim: at least 5x faster at one
entry per memory) and vs. the snapshot's entries and image (issue 30's path), in one run; and a restart of a
server over PostgreSQL, its start-up check from the mark vs. the whole walk (the restart with the mark is the
floor: process start, imports, the vector mirror, the first search).

A throwaway PostgreSQL (pgserver) and one `mnemosync serve --store` subprocess (server A) loaded with `--size`
synthetic memories (384-dim vectors, Appends of 500: one entry per memory), then `--updates` rounds in which
every memory is revised once (new content and vector, Appends of 500): a history longer than the memory, as
issue 30 describes it (a decay sweep, consolidation, every update and link is an entry). Then, A still serving:

Every server runs without periodic snapshots (`MNEMOSYNC_SNAPSHOT_EVERY_ENTRIES=0`), so nothing but the snapshot
made below is published and no snapshot is made while a start is timed.

* **fold**: a `mnemosync serve` with a new data directory over the same database, nothing published: from its
  process start to the answer of its first hybrid search (Python's imports, the fold of every entry, the vector
  mirror, the start-up check: the whole walk of its replica, which has no mark yet);
* A makes and publishes a snapshot (`mnemosync snapshot`'s code), its time and size reported;
* **file**: another new server, which starts from the replica file published with the snapshot (fetched, its
  digest and seal checked, moved into place, the start-up check's mark left at the snapshot), timed the same way;
* **rows**: the replica files deleted from the database, another new server, which starts from the snapshot's
  entries (copied and checked) and image (installed), timed the same way;
* **restart**: that server started again, its replica up to date, timed the same way: with its mark (the check
  walks nothing), then with the mark deleted (the whole walk of the replica); and the start-up check alone in
  this process: from the mark, the whole walk of the replica, and the walk of the replica and PostgreSQL that the
  start-up check made before (`ledger.log.verify()`, what `mnemosync verify` still does).

    .venv/bin/python -m ops.bench.bench_new_server --size 20000
    .venv/bin/python -m ops.bench.bench_new_server --size 20000 --updates 2
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import psycopg

from mnemosync.server import boot_check, snapshots
from mnemosync.server.ledger import Ledger
from mnemosync.server.notary import load_key
from mnemosync.server.postgres_record import replica_path
from mnemosync.v1 import memory_pb2 as pb
from ops.bench import environment
from ops.bench.bench_stores import batched_append, postgresql, serve
from ops.bench.serverproc import REPO_ROOT, Client
from ops.bench.speed import SYNTHETIC_MODEL
from ops.bench.workload import Workload
from ops.serve_process import ServeProcess

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "new_server"


def revisions(address: str, workload: Workload, size: int, rounds: int, batch: int = 500) -> dict:
    """`rounds` rounds of one update per memory (content and vector changed); seconds and entries/s."""
    client, started = Client(address), time.perf_counter()
    for round_ in range(1, rounds + 1):
        for start in range(0, size, batch):
            count = min(batch, size - start)
            vectors = workload.vectors(start + round_ * size, count)
            ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=m.memory_id, base_version=round_,
                                update=pb.UpdateOp(content=f"{m.content} (revision {round_})",
                                                   embedding_f32=np.asarray(v, dtype="<f4").tobytes()))
                   for m, v in zip(workload.memories(start, count), vectors, strict=True)]
            client.append(pb.AppendRequest(operations=ops, embedding_model=SYNTHETIC_MODEL))
    seconds = time.perf_counter() - started
    client.close()
    return {"rounds": rounds, "entries": rounds * size, "seconds": seconds, "entries_per_s": rounds * size / seconds}


def check_alone(data_dir: Path, store: str) -> dict:
    """The start-up check of the stopped server in `data_dir` timed in this process: from its mark (at the head),
    the whole walk of its replica (a start without a mark), and the walk of replica and PostgreSQL (the
    start-up check before; `mnemosync verify`'s walk)."""
    replica = replica_path(data_dir, store)
    mark, key = boot_check.mark_path(data_dir, replica), load_key(data_dir, None)
    ledger = Ledger.postgresql(store, replica, synchronous="normal")
    out: dict = {"entries": ledger.head_seq()}
    try:
        t = time.perf_counter()
        assert ledger.log.verify().ok
        out["replica_and_postgresql_walk_s"] = time.perf_counter() - t
        t = time.perf_counter()
        assert ledger.log.verify(local_only=True).ok
        out["replica_walk_s"] = time.perf_counter() - t
        boot_check.check(ledger, mark, key)
        t = time.perf_counter()
        assert boot_check.check(ledger, mark, key).ok
        out["from_mark_s"] = time.perf_counter() - t
    finally:
        ledger.close()
    return out


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
    started_from = re.search(r"started the replica from the (replica file of the )?snapshot at entry (\d+)",
                             log_text)
    checked = re.search(r"start-up check: entries (\d+) to (\d+) verified", log_text)
    return {"seconds": seconds, "serving_s": serving, "first_search_s": seconds - serving, "hits": len(hits),
            "head": head, "from_snapshot_at": int(started_from.group(2)) if started_from else None,
            "started_from": ("file" if started_from.group(1) else "rows") if started_from else "fold",
            "check_from_mark": [int(checked.group(1)), int(checked.group(2))] if checked else None,
            "log": [line for line in log_text.splitlines() if "snapshot" in line or "checking" in line
                    or "checked" in line or "start-up check" in line]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.bench_new_server", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20_000, help="memories loaded [20000]")
    parser.add_argument("--updates", type=int, default=0, help="rounds of one update per memory after loading [0]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where new_server.json/.md go [{DEFAULT_OUT}]")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-new-server-"))
    workload = Workload()

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    os.environ["MNEMOSYNC_SNAPSHOT_EVERY_ENTRIES"] = "0"  # every server here: only the snapshot the bench makes
    report: dict = {"size": args.size, "updates": args.updates, "host_cpus": os.cpu_count(),
                    "load_average": os.getloadavg()}
    try:
        with ExitStack() as stack:
            _, new_database = stack.enter_context(postgresql(work))
            store = new_database()
            server = stack.enter_context(serve(work / "a", store))
            log(f"loading {args.size:,} memories")
            report["load"] = batched_append(Client(server.address), workload, args.size)
            if args.updates:
                log(f"{args.updates} rounds of updates")
                report["load"]["updates"] = revisions(server.address, workload, args.size, args.updates)
            log("a new server by a fold of the whole changelog")
            report["fold"] = first_search(work / "fold", store, workload)
            assert report["fold"]["started_from"] == "fold", report["fold"]["log"]
            report["entries"] = report["fold"]["head"]
            log(f"  {report['fold']['seconds']:.1f} s; making and publishing a snapshot")
            t = time.perf_counter()
            made = snapshots.make_in(work / "a", store=store)
            with psycopg.connect(store, autocommit=True) as conn:
                file_bytes = conn.execute("SELECT length FROM replica_files WHERE size = %s", (made.size,)
                                          ).fetchone()[0]
            report["snapshot"] = {"make_and_publish_s": time.perf_counter() - t, "size": made.size,
                                  "bytes": sum(s.length for s in made.sections), "replica_file_bytes": file_bytes}
            log("a new server from the published replica file")
            report["from_snapshot"] = first_search(work / "snap", store, workload)
            assert report["from_snapshot"]["started_from"] == "file", report["from_snapshot"]["log"]
            log(f"  {report['from_snapshot']['seconds']:.1f} s; a new server from the snapshot's entries and image")
            with psycopg.connect(store, autocommit=True) as conn:
                conn.execute("DELETE FROM replica_files")
            report["from_rows"] = first_search(work / "rows", store, workload)
            assert report["from_rows"]["started_from"] == "rows", report["from_rows"]["log"]
            log(f"  {report['from_rows']['seconds']:.1f} s; restarting the first, with its mark and without")
            report["restart_mark"] = first_search(work / "snap", store, workload)
            boot_check.mark_path(work / "snap", replica_path(work / "snap", store)).unlink()
            report["restart_walk"] = first_search(work / "snap", store, workload)
            report["check_alone"] = check_alone(work / "snap", store)
            log(f"  {report['restart_mark']['serving_s']:.1f} s and {report['restart_walk']['serving_s']:.1f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report["speedup"] = report["fold"]["seconds"] / report["from_snapshot"]["seconds"]
    report["speedup_rows"] = report["fold"]["seconds"] / report["from_rows"]["seconds"]
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    environment.write_report(args.out, "new_server", report, markdown(report))
    return 0


def markdown(r: dict) -> str:
    """The report as a Markdown table."""
    f, s, c = r["fold"], r["from_snapshot"], r["check_alone"]
    w, floor = r["from_rows"], r["restart_mark"]
    rows = [
        ("new server over PostgreSQL, start to first search answered, from the published replica file",
         f"{s['seconds']:.2f} s", f"whole fold: {f['seconds']:.2f} s ({r['speedup']:.1f}x); floor (restart with "
         f"its replica up to date): {floor['seconds']:.2f} s"),
        ("of which until it accepts calls", f"{s['serving_s']:.2f} s", f"whole fold: {f['serving_s']:.2f} s"),
        ("new server from the snapshot's entries and image (replica file deleted)", f"{w['seconds']:.2f} s",
         f"whole fold: {f['seconds']:.2f} s ({r['speedup_rows']:.1f}x)"),
        ("snapshot made and published", f"{r['snapshot']['make_and_publish_s']:.2f} s",
         f"{r['snapshot']['bytes']:,} bytes of image and {r['snapshot']['replica_file_bytes']:,} of replica file, "
         f"entry {r['snapshot']['size']:,}"),
        ("restart until it accepts calls, check from the mark (first search answered: "
         f"{floor['seconds']:.2f} s)", f"{floor['serving_s']:.2f} s",
         f"mark deleted (whole walk of the replica): {r['restart_walk']['serving_s']:.2f} s"),
        ("start-up check alone, mark at the head", f"{c['from_mark_s']:.3f} s",
         f"whole walk of the replica {c['replica_walk_s']:.2f} s; of replica and PostgreSQL (the check before) "
         f"{c['replica_and_postgresql_walk_s']:.2f} s"),
    ]
    updates = r["load"].get("updates")
    shape = f" each updated {updates['rounds']} times" if updates else ""
    lines = [f"A new server over PostgreSQL at {r['size']:,} memories{shape}, {r['entries']:,} entries, "
             f"{r['host_cpus']} CPUs, load {r['load_average'][0]:.1f}", "",
             "| figure | value | beside it, same run |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
