#!/usr/bin/env python3
"""Benchmark one agent's Search while other agents flood the server with GraphSearch: fair shares of costly reads.

Issue 37 (item 6): one agent running 16 threads of GraphSearch took another agent's Search p95 from 17 ms to
3.1 s, and 8 agent ids with 3 threads each to 14.8 s, because a freed server-wide slot went to whichever costly
call had queued first (`mnemosync.server.costly_reads`). This starts `mnemosync serve` (`ops.serve_process`,
plain text on loopback, synchronous=normal) over preloaded memories with links, and times the *honest* agent's
single Searches (limit 10) one after another: alone, then under each load, all in one run (and, alone, one of the
flood's GraphSearches: what a Search waits for at most once the queue ahead of it is fair):

* `one agent x 16`: one agent id, 16 threads of GraphSearch (limit 100), each retrying at once when refused;
* `8 agents x 3`: 8 agent ids, 3 threads each.

The loads run in processes of their own (`--load`). With `--baseline REV` the same runs are made, alternating,
against the tree at REV as well (exported with `git archive`), the code before fair shares.

Examples:
    .venv/bin/python -m ops.bench.bench_fair_shares
    .venv/bin/python -m ops.bench.bench_fair_shares --baseline 613b761 --calls 200 --out /tmp/fair
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import grpc  # noqa: E402
import numpy as np  # noqa: E402

from mnemosync.kernel.metadata import AGENT_METADATA_KEY  # noqa: E402
from mnemosync.v1 import memory_pb2 as pb  # noqa: E402
from mnemosync.v1 import memory_pb2_grpc as pb_grpc  # noqa: E402
from ops.bench import environment, flood  # noqa: E402
from ops.bench.bench_checkpoints import _export  # noqa: E402
from ops.bench.bench_costly_reads import MODEL, WORDS, _percentiles, _vector  # noqa: E402
from ops.serve_process import ServeProcess  # noqa: E402

LOADS = {"one agent x 16": (1, 16), "8 agents x 3": (8, 3)}
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "fair_shares"


def _words(rng: np.random.Generator, n: int) -> str:
    return " ".join(rng.choice(WORDS, size=n))


# -- the loader process ------------------------------------------------------------------------------------------


def _load(address: str, agents: int, threads: int) -> None:
    """GraphSearch as `agents` agent ids with `threads` threads each until stdin closes; prints the counts."""

    def walker(agent: str, seed: int):
        rng = np.random.default_rng(seed)
        return lambda stub: stub.GraphSearch(pb.GraphSearchRequest(
            query=_words(rng, 3), query_vector=_vector(rng), embedding_model=MODEL, limit=100),
            metadata=((AGENT_METADATA_KEY, agent),), timeout=120)

    # a refusal is tried again at once: the flood does not back off
    flood.run_until_stdin_closes(address, [walker(f"flood-{a}", a * 100 + t) for a in range(agents)
                                           for t in range(threads)], join_timeout=180)


# -- measuring ---------------------------------------------------------------------------------------------------


def _searches(address: str, calls: int, rng: np.random.Generator, graph: bool = False) -> dict[str, float]:
    """The honest agent's Search latencies (with `graph`, the flood's GraphSearch), one call after another."""
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.MemoryServiceStub(channel)
    times = []
    for _ in range(calls):
        if graph:
            call, request = stub.GraphSearch, pb.GraphSearchRequest(
                query=_words(rng, 3), query_vector=_vector(rng), embedding_model=MODEL, limit=100)
        else:
            call, request = stub.Search, pb.SearchRequest(
                query=_words(rng, 3), query_vector=_vector(rng), embedding_model=MODEL, limit=10)
        started = time.perf_counter()
        call(request, metadata=((AGENT_METADATA_KEY, "honest"),), timeout=120)
        times.append(time.perf_counter() - started)
    channel.close()
    return {**_percentiles(times), "max_ms": round(max(times) * 1000, 1)}


def _preload(data: Path, memories: int, links: int, rng: np.random.Generator) -> None:
    with ServeProcess(data, synchronous="normal") as server:
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.MemoryServiceStub(channel)
        metadata = ((AGENT_METADATA_KEY, "loader"),)
        ids = []
        for start in range(0, memories, 500):
            ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
                scope="user", content=f"note {i}: {_words(rng, 6)} {rng.integers(1 << 40)}", embedding=_vector(rng)))
                for i in range(start, min(start + 500, memories))]
            stub.Append(pb.AppendRequest(operations=ops, embedding_model=MODEL), metadata=metadata, timeout=300)
            ids += [op.memory_id for op in ops]
        pairs = {(a, b) for a, b in zip(rng.choice(ids, links), rng.choice(ids, links), strict=True) if a != b}
        ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=a, link=pb.LinkOp(target_id=b, relation="semantic"))
               for a, b in pairs]
        for start in range(0, len(ops), 500):
            stub.Append(pb.AppendRequest(operations=ops[start:start + 500]), metadata=metadata, timeout=300)
        channel.close()


def _run(data: Path, tree: Path | None, calls: int, seed: int) -> dict:
    """Alone, then under each load, on one server of the code in `tree` (None: this one)."""
    env = {"PYTHONPATH": f"{tree}{os.pathsep}{tree / 'proto'}"} if tree else None
    config = data.parent / "fair.toml"
    config.write_text("[server.limits]\nrate_per_agent = 0\n")
    rng = np.random.default_rng(seed)
    out: dict = {}
    with ServeProcess(data, "--config", str(config), synchronous="normal", env=env, cwd=tree) as server:
        _searches(server.address, 20, rng)  # warm up
        out["alone"] = _searches(server.address, calls, rng)
        out["one GraphSearch"] = _searches(server.address, max(10, calls // 4), rng, graph=True)
        print(f"{tree or 'this tree'}: alone {out['alone']}, GraphSearch {out['one GraphSearch']}", file=sys.stderr,
              flush=True)
        for name, (agents, threads) in LOADS.items():
            # settle: the flood fills the queues before the honest agent is timed
            load = flood.Loaders(__file__, [[str(agents), str(threads)]], server.address, settle=2.0, wait=240)
            try:
                out[name] = _searches(server.address, calls, rng)
            finally:
                out[name]["flood"] = load.close()
            print(f"{tree or 'this tree'}: {name} {out[name]}", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=4000)
    parser.add_argument("--links", type=int, default=12000)
    parser.add_argument("--calls", type=int, default=100, help="Searches timed per condition")
    parser.add_argument("--baseline", help="git revision of the code before fair shares, run alternately with it")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"where fair_shares.json/.md go [{DEFAULT_OUT}]")
    parser.add_argument("--load", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load is not None:
        _load(args.server, *args.load)
        return
    with tempfile.TemporaryDirectory(prefix="mnemosync-bench-fair-") as tmp:
        data = Path(tmp) / "server"
        _preload(data, args.memories, args.links, np.random.default_rng(7))
        trees: dict[str, Path | None] = {"fair shares": None}
        commit = ""
        if args.baseline:
            base = Path(tmp) / "previous"
            base.mkdir()
            commit = _export(args.baseline, base)
            trees = {"fair shares": None, f"previous ({commit[:12]})": base}
        results = {name: _run(data, tree, args.calls, seed=i) for i, (name, tree) in enumerate(trees.items())}
    with open("/proc/loadavg") if Path("/proc/loadavg").exists() else open(os.devnull) as f:
        load = f.read().split()[:3]
    lines = [f"{args.memories} memories, {args.links} links; the honest agent's Search (limit 10), {args.calls} "
             f"calls per condition, one after another; {platform.machine()}, {os.cpu_count()} cores, load average "
             f"after the run {' '.join(load) or '?'}", "",
             f"{'code':<28} {'condition':<16} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'flood ok/refused':>18}"]
    for name, run in results.items():
        for condition, figures in run.items():
            flood = figures.get("flood")
            counted = f"{flood['ok']}/{flood['refused']}" if flood else "-"
            lines.append(f"{name:<28} {condition:<16} {figures['p50_ms']:>8.1f} {figures['p95_ms']:>8.1f} "
                         f"{figures['max_ms']:>8.1f} {counted:>18}")
    environment.write_report(args.out, "fair_shares", {"memories": args.memories, "links": args.links,
                                                        "calls": args.calls, "baseline": commit, "results": results},
                             "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
