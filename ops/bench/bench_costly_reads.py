#!/usr/bin/env python3
"""Benchmark single Append and Get latency while other agents search hard: bounds on costly reads off and on.

Issue 33 (item 9): with 32 clients searching at once (limit 100 and
neighbours), a single Append waited 2.8 s at p50. This starts `mnemosync serve`
twice in one run over the same preloaded data (`ops.serve_process`, plain text
on loopback, synchronous=normal): once with the bounds of
`mnemosync.server.costly_reads` switched off (`costly_reads_per_agent = 0`,
`costly_reads_total` = the loaders), as the server was before, and once with the
defaults. For each it times, one after another, single-operation Appends and
Gets of a known memory (a) with nothing else running, the unloaded baseline,
and (b) while *loader* processes (this script with `--load`) run `--searchers`
agents in all, each searching in a loop with limit 100 and 3 neighbours.
Refusals the loaders get (RESOURCE_EXHAUSTED) are counted, not retried at once.

Examples:
    python ops/bench/bench_costly_reads.py
    python ops/bench/bench_costly_reads.py --memories 12000 --searchers 32 --calls 200 --json costly.json
"""

from __future__ import annotations

import argparse
import json
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
from ops.bench import flood  # noqa: E402
from ops.serve_process import ServeProcess  # noqa: E402

DIMS = 64
MODEL = pb.EmbeddingModel(name="bench-vectors", dimensions=DIMS, sha256="ce" * 32)
WORDS = ("deploy", "cache", "token", "schema", "review", "release", "queue", "vault", "index", "backup", "metrics",
         "owner", "service", "latency", "budget", "incident")
THREADS_PER_LOADER = 8


def _vector(rng: np.random.Generator) -> list[float]:
    v = rng.normal(size=DIMS)
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def _add(rng: np.random.Generator, i: int) -> pb.Operation:
    words = " ".join(rng.choice(WORDS, size=6))
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
        scope="user", content=f"note {i}: {words} {rng.integers(1 << 40)}", embedding=_vector(rng)))


# -- the loader process ------------------------------------------------------------------------------------------


def _load(address: str, agents: list[str]) -> None:
    """Searches as each of `agents` (one thread each) until stdin closes; prints the counts at the end."""

    def searcher(agent: str):
        rng = np.random.default_rng(abs(hash(agent)) % 2**32)
        return lambda stub: stub.Search(pb.SearchRequest(
            query=" ".join(rng.choice(WORDS, size=3)), query_vector=_vector(rng), embedding_model=MODEL, limit=100,
            neighbours=3), metadata=((AGENT_METADATA_KEY, agent),), timeout=60)

    flood.run_until_stdin_closes(address, [searcher(a) for a in agents], backoff=0.1)


def _loaders(address: str, searchers: int) -> flood.Loaders:
    """Loader processes running `searchers` searching agents in all (THREADS_PER_LOADER each)."""
    names = [f"searcher-{i}" for i in range(searchers)]
    groups = [names[i:i + THREADS_PER_LOADER] for i in range(0, searchers, THREADS_PER_LOADER)]
    return flood.Loaders(__file__, groups, address, settle=1.0)  # settle: let the searches get going


# -- measuring ---------------------------------------------------------------------------------------------------


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def _measure(address: str, calls: int, known_id: str, rng: np.random.Generator) -> dict[str, dict]:
    channel = grpc.insecure_channel(address)
    stub = pb_grpc.MemoryServiceStub(channel)
    metadata = ((AGENT_METADATA_KEY, "measurer"),)
    times: dict[str, list[float]] = {"append": [], "get": []}
    for i in range(calls):
        t = time.perf_counter()
        stub.Append(pb.AppendRequest(operations=[_add(rng, -i)], embedding_model=MODEL), metadata=metadata, timeout=60)
        times["append"].append(time.perf_counter() - t)
        t = time.perf_counter()
        stub.Get(pb.GetRequest(id=known_id), metadata=metadata, timeout=60)
        times["get"].append(time.perf_counter() - t)
    channel.close()
    return {k: _percentiles(v) for k, v in times.items()}


def _serve(data: Path, bounded: bool, searchers: int) -> ServeProcess:
    config = data.parent / f"bounds-{bounded}.toml"
    limits = "" if bounded else f"costly_reads_per_agent = 0\ncostly_reads_total = {searchers}\n"
    config.write_text(f"[server.limits]\nrate_per_agent = 0\n{limits}")
    return ServeProcess(data, "--config", str(config), synchronous="normal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=4000)
    parser.add_argument("--searchers", type=int, default=32)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--load", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load is not None:
        _load(args.server, args.load)
        return
    rng = np.random.default_rng(7)
    results = {"memories": args.memories, "searchers": args.searchers, "calls": args.calls}
    with tempfile.TemporaryDirectory(prefix="mnemosync-bench-costly-") as tmp:
        data = Path(tmp) / "server"
        with _serve(data, True, args.searchers) as server:
            channel = grpc.insecure_channel(server.address)
            stub = pb_grpc.MemoryServiceStub(channel)
            metadata = ((AGENT_METADATA_KEY, "loader"),)
            for start in range(0, args.memories, 500):
                ops = [_add(rng, i) for i in range(start, min(start + 500, args.memories))]
                known = stub.Append(pb.AppendRequest(operations=ops, embedding_model=MODEL), metadata=metadata,
                                    timeout=120).results[0].memory_id
            channel.close()
        for bounded in (False, True):
            with _serve(data, bounded, args.searchers) as server:
                unloaded = _measure(server.address, args.calls, known, rng)
                loaders = _loaders(server.address, args.searchers)
                try:
                    loaded = _measure(server.address, args.calls, known, rng)
                finally:
                    searches = loaders.close()
            results["bounded" if bounded else "unbounded"] = {"unloaded": unloaded, "loaded": loaded,
                                                              "searches": searches}
    print(f"{args.memories} memories, {args.searchers} agents searching (limit 100, 3 neighbours), "
          f"{args.calls} timed calls each")
    print(f"{'bounds':<10} {'call':<7} {'unloaded p50/p95 ms':>22} {'loaded p50/p95 ms':>22} {'p95 ratio':>10} "
          f"{'searches ok/refused':>20}")
    for name in ("unbounded", "bounded"):
        run = results[name]
        for call in ("append", "get"):
            u, lo = run["unloaded"][call], run["loaded"][call]
            print(f"{name:<10} {call:<7} {u['p50_ms']:>10.1f} / {u['p95_ms']:<9.1f} {lo['p50_ms']:>10.1f} / "
                  f"{lo['p95_ms']:<9.1f} {lo['p95_ms'] / max(u['p95_ms'], 1e-9):>9.1f}x "
                  f"{run['searches']['ok']:>10}/{run['searches']['refused']}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
