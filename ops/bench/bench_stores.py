"""The two stores side by side in one run: SQLite (one server) and PostgreSQL (one and two servers over one database).

Each store gets a fresh `mnemosync serve` subprocess loaded with the same
synthetic memories, and the same figures are taken on each, in the same run:
batched append (500 operations per Append), single-operation appends from 1 and
8 concurrent agents (with an empty gRPC call on the same server as the
baseline, `bench_concurrency`), catch-up of a fresh agent cache over the whole
changelog (`bench_catchup`), and hybrid search p50/p95 at the loaded size. On
PostgreSQL it also measures what several servers cost: single appends from 8
agents split over two servers (the advisory lock serialises them), the delay
from an Append on one server to its delivery by Subscribe on the other, and the
same delay to a server that reads a real hot standby of the database
(`--read-store`, `ops.hot_standby`), with the standby's lag as Stats reports it.

The figures are written to `stores.json` and `stores.md` in --out;
`python -m ops.sim` reads the JSON as the per-operation costs it simulates with.

    .venv/bin/python -m ops.bench.bench_stores                    # 100k memories per store
    .venv/bin/python -m ops.bench.bench_stores --size 20000 --out /tmp/stores
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
import uuid
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mnemosync.v1 import memory_pb2 as pb
from ops.bench import bench_catchup, bench_concurrency, environment
from ops.bench.bench_append import add_operations
from ops.bench.bench_search import percentiles
from ops.bench.serverproc import REPO_ROOT, Client
from ops.bench.speed import SYNTHETIC_MODEL
from ops.bench.workload import Workload
from ops.serve_process import ServeProcess

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "stores"


@contextmanager
def postgresql(workdir: Path):
    """A throwaway PostgreSQL (pgserver) for the run; yields it and a factory of fresh database URLs."""
    if not os.environ.get("XDG_RUNTIME_DIR"):  # as the tests do: pgserver's lock files outlive the run
        runtime = Path(tempfile.gettempdir()) / f"mnemosync-runtime-{os.getuid()}"
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
    import pgserver
    import psycopg

    server = pgserver.get_server(workdir / "pg", cleanup_mode="stop")

    def new_database() -> str:
        name = f"bench_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return server.get_uri(name)

    try:
        yield server, new_database
    finally:
        server.cleanup()


@contextmanager
def serve(data_dir: Path, store: str, read_store: str = ""):
    """A `mnemosync serve` subprocess of this checkout on `store` ("" for SQLite), reading `read_store` if given,
    stopped after. A new server over a loaded PostgreSQL folds the whole changelog into its replica before it
    serves, hence the long start."""
    extra = (("--store", store) if store else ()) + (("--read-store", read_store) if read_store else ())
    server = ServeProcess(data_dir, *extra, synchronous="full", env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
    try:
        yield server.start(timeout=1800)
    finally:
        server.stop()


def batched_append(client: Client, workload: Workload, size: int, batch: int = 500) -> dict:
    """Loads `size` memories in Appends of `batch` operations; memories/s overall and per 10% of the load."""
    rates, started = [], time.perf_counter()
    step = max(batch, size // 10)
    for start in range(0, size, step):
        count = min(step, size - start)
        ops, _ = add_operations(workload, start, count)
        t = time.perf_counter()
        for i in range(0, count, batch):
            client.append(pb.AppendRequest(operations=ops[i:i + batch], embedding_model=SYNTHETIC_MODEL))
        rates.append(count / (time.perf_counter() - t))
    return {"memories_per_s": size / (time.perf_counter() - started), "per_tenth": [round(r) for r in rates]}


def search(client: Client, workload: Workload, queries: int) -> dict:
    """Hybrid search latency over `queries` (text, vector) pairs after a warm-up."""
    pairs = workload.queries(queries + 5, salt=7)
    samples = []
    for i, (text, vector) in enumerate(pairs):
        t = time.perf_counter()
        client.search(pb.SearchRequest(query=text, query_vector=vector.tolist(), embedding_model=SYNTHETIC_MODEL,
                                       limit=10, mode=pb.SEARCH_MODE_HYBRID))
        if i >= 5:
            samples.append(time.perf_counter() - t)
    p = percentiles(samples)
    return {"p50_ms": p[50], "p95_ms": p[95], "queries": len(samples)}


def delivery(one: str, two: str, count: int = 40, seed: int = 99) -> dict:
    """Delay (ms) from an acknowledged Append on server `one` to its delivery by Subscribe on server `two` (of new
    memories: another call over the same database needs another `seed`)."""
    import grpc

    from mnemosync.kernel.metadata import AGENT_METADATA_KEY
    from mnemosync.v1 import memory_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(two)
    stub = pb_grpc.MemoryServiceStub(channel)
    head = Client(two, "observer").stats().head_seq
    stream = stub.Subscribe(pb.SubscribeRequest(since_seq=head), metadata=((AGENT_METADATA_KEY, "watcher"),))
    arrived: dict[int, float] = {}
    done = threading.Event()

    def watch():
        try:
            for entry in stream:
                arrived[entry.seq] = time.perf_counter()
                if len(arrived) >= count:
                    break
        except grpc.RpcError:
            pass
        done.set()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    writer = Client(one, "writer")
    sent: dict[int, float] = {}
    workload = Workload(seed=seed)
    for i in range(count):
        ops, _ = add_operations(workload, i, 1)
        t = time.perf_counter()
        seq = writer.append(pb.AppendRequest(operations=ops, embedding_model=SYNTHETIC_MODEL)).results[0].seq
        sent[seq] = t
        time.sleep(0.05)
    done.wait(30)
    stream.cancel()
    channel.close()
    writer.close()
    delays = [arrived[s] - t for s, t in sent.items() if s in arrived]
    p = percentiles(delays) if delays else {50: float("nan"), 95: float("nan")}
    return {"p50_ms": p[50], "p95_ms": p[95], "delivered": len(delays), "sent": count}


def split_appends(addresses: list[str], agents: int, duration: float) -> dict:
    """Single-op appends/s from `agents` agents spread evenly over `addresses` (one process per agent)."""
    pools = [bench_concurrency.AgentPool(a, agents // len(addresses), SYNTHETIC_MODEL.SerializeToString())
             for a in addresses]
    try:
        results: list[dict] = []
        threads = [threading.Thread(target=lambda p=p: results.append(p.run("append", agents // len(addresses),
                                                                            duration))) for p in pools]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for p in pools:
            p.close()
    return {"rate": sum(r["rate"] for r in results),
            "median_latency_ms": statistics.median(r["median_latency_ms"] for r in results)}


def fold_read(store: str) -> dict:
    """Entries/s read from PostgreSQL in the pages a server folds other servers' entries in: what each server (or
    hot standby) costs the database it reads, per entry (psycopg's decoding included, so an upper bound)."""
    from mnemosync.server import changelog
    from mnemosync.server.postgres_record import CATCH_UP_PAGE, connect

    pg = connect(store, autocommit=True)
    try:
        started, after, entries = time.perf_counter(), 0, 0
        while page := changelog.read_with_request_hash(pg, after, CATCH_UP_PAGE):
            entries += len(page)
            after = page[-1][0].seq
        return {"entries_per_s": entries / (time.perf_counter() - started), "entries": entries}
    finally:
        pg.conn.close()


def standby_reader(primary, address: str, store: str, work: Path, log) -> dict:
    """Append-to-Subscribe delay from the server at `address` to a new server reading a hot standby of `store`, and
    the standby's lag in Stats after the burst."""
    from ops.hot_standby import HotStandby

    standby = HotStandby(primary)
    try:
        standby.start()
        with serve(work / "standby-reader", store, standby.url(store)) as reader:
            log("postgresql: a server reading a hot standby")
            figures = {"subscribe_delivery": delivery(address, reader.address, seed=100)}
            observer = Client(reader.address, "observer")
            lag = observer.stats().read_store
            observer.close()
            figures["lag_after"] = {"lag_entries": lag.lag_entries, "lag_ms": lag.lag_ms, "reachable": lag.reachable}
            return figures
    finally:
        standby.remove()


def measure_store(name: str, store: str, work: Path, size: int, queries: int, duration: float,
                  log, primary=None) -> dict:
    """Every figure of one store on a fresh server loaded with `size` memories (for PostgreSQL, `primary` is the
    pgserver the standby is made of)."""
    workload = Workload()
    out: dict = {"store": name}
    with serve(work / name / "server", store) as server:
        client = Client(server.address, "bench")
        log(f"{name}: loading {size:,} memories")
        out["append_batched"] = batched_append(client, workload, size)
        log(f"{name}: hybrid search")
        out["search"] = search(client, workload, queries)
        log(f"{name}: single-op appends")
        figures, _ = bench_concurrency.measure(server.address, SYNTHETIC_MODEL.SerializeToString(),
                                               agent_counts=(1, 8), duration=duration, rounds=1)
        out["append_single"] = {f.id.rsplit(".", 1)[1]: {"rate": f.value, "empty_call_rate": f.baseline,
                                                         "median_latency_ms": f.details["append_median_latency_ms"]}
                                for f in figures}
        log(f"{name}: catch-up")
        figure, details = bench_catchup.measure(server.address, work / name, label=f"{size:,}")
        out["catchup"] = {"entries_per_s": figure.value, "raw_baseline_per_s": figure.baseline,
                          "entries": details["entries"]}
        if store:
            log(f"{name}: reading the changelog from PostgreSQL as a server's fold does")
            out["fold_read"] = fold_read(store)
            log(f"{name}: a second server joins (it folds the whole changelog before it serves)")
            started = time.perf_counter()
            with serve(work / name / "second", store) as second:
                joined = time.perf_counter() - started
                out["new_server_fold"] = {"entries_per_s": out["fold_read"]["entries"] / joined}
                log(f"{name}: two servers over one database")
                out["two_servers"] = {"append_single_8_split": split_appends([server.address, second.address], 8,
                                                                             duration),
                                      "subscribe_delivery": delivery(server.address, second.address)}
            out["standby_reader"] = standby_reader(primary, server.address, store, work / name, log)
        client.close()
    return out


def markdown(results: list[dict], size: int) -> str:
    """The side-by-side table."""
    def row(title, key):
        return f"| {title} | " + " | ".join(key(r) for r in results) + " |"

    lines = [f"Stores side by side ({size:,} memories each, one run, `python -m ops.bench.bench_stores`)", "",
             "| figure | " + " | ".join(r["store"] for r in results) + " |",
             "|---|" + "---|" * len(results),
             row("batched append (500 ops/Append), memories/s",
                 lambda r: f"{r['append_batched']['memories_per_s']:,.0f}"),
             row("single-op appends/s, 1 agent", lambda r: f"{r['append_single']['1']['rate']:,.0f}"),
             row("single-op appends/s, 8 agents", lambda r: f"{r['append_single']['8']['rate']:,.0f}"),
             row("  baseline: empty gRPC calls/s, 8 agents",
                 lambda r: f"{r['append_single']['8']['empty_call_rate']:,.0f}"),
             row("catch-up of a fresh cache, entries/s", lambda r: f"{r['catchup']['entries_per_s']:,.0f}"),
             row("hybrid search p50 / p95, ms",
                 lambda r: f"{r['search']['p50_ms']:.1f} / {r['search']['p95_ms']:.1f}"),
             row("changelog read as a fold reads it, entries/s",
                 lambda r: f"{r['fold_read']['entries_per_s']:,.0f}" if "fold_read" in r else "-"),
             row("a new server folding the whole changelog, entries/s",
                 lambda r: f"{r['new_server_fold']['entries_per_s']:,.0f}" if "new_server_fold" in r else "-")]
    for r in results:
        if "two_servers" in r:
            two = r["two_servers"]
            lines += ["", f"{r['store']} with two servers over one database: single-op appends from 8 agents split "
                          f"4 + 4: {two['append_single_8_split']['rate']:,.0f}/s; Append on one to Subscribe "
                          f"delivery on the other p50 {two['subscribe_delivery']['p50_ms']:.1f} ms, p95 "
                          f"{two['subscribe_delivery']['p95_ms']:.1f} ms "
                          f"({two['subscribe_delivery']['delivered']}/{two['subscribe_delivery']['sent']} delivered)."]
        if "standby_reader" in r:
            standby = r["standby_reader"]["subscribe_delivery"]
            lines += ["", f"{r['store']} Append on the primary's server to Subscribe delivery on a server reading a "
                          f"hot standby (`--read-store`): p50 {standby['p50_ms']:.1f} ms, p95 {standby['p95_ms']:.1f} "
                          f"ms ({standby['delivered']}/{standby['sent']} delivered); Stats after the burst: lag "
                          f"{r['standby_reader']['lag_after']['lag_entries']} entries."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.bench.bench_stores", description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories loaded into each store [100000]")
    parser.add_argument("--queries", type=int, default=200, help="timed hybrid searches per store [200]")
    parser.add_argument("--seconds", type=float, default=4.0, help="duration of each concurrent-append run [4]")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where stores.json/.md go [{DEFAULT_OUT}]")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="mnemosync-stores-"))

    def log(message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    try:
        with ExitStack() as stack:
            primary, new_database = stack.enter_context(postgresql(work))
            results = [measure_store("sqlite", "", work, args.size, args.queries, args.seconds, log),
                       measure_store("postgresql", new_database(), work, args.size, args.queries, args.seconds,
                                     log, primary)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"size": args.size, "host_cpus": os.cpu_count(), "load_average": os.getloadavg(),
              "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "stores": results}
    environment.write_report(args.out, "stores", report, markdown(results, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
