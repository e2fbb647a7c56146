#!/usr/bin/env python3
"""Benchmark unary latency while many Subscribe streams are open: 0, 100 and 1,000 streams, same run.

Starts `mnemosync serve` as its own process (`ops.serve_process`, plain text on
loopback, synchronous=normal so fsync does not drown the figure), preloads it,
then for each stream count in turn starts a *holder* process (this script with
`--hold N`) that opens N Subscribe streams, one connection each, as N agent
sessions would (agent ids `holder-0`, `holder-1`, … with 16 streams each, the
per-agent cap), and drains whatever they deliver. Once the holder says every
stream is open, this process times single calls one after another:

* ``get``: Get of a known memory (a read through the store's thread pool);
* ``append``: a one-operation Append (a write through the writer thread; its
  entry is then delivered to every open stream);
* ``health``: the gRPC health Check (an empty call).

The table shows p50 and p95 per call for each stream count beside the 0-stream
baseline, and the server's threads and resident memory with the streams open
(an open stream must cost no thread). Rounds repeat the three counts in turn.

Examples:
    python ops/bench/bench_streams.py
    python ops/bench/bench_streams.py --streams 0 100 1000 2000 --calls 500 --rounds 2 --json streams.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
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
from grpc_health.v1 import health_pb2, health_pb2_grpc  # noqa: E402

from mnemosync.kernel.limits import Limits  # noqa: E402
from mnemosync.kernel.metadata import AGENT_METADATA_KEY  # noqa: E402
from mnemosync.v1 import memory_pb2 as pb  # noqa: E402
from mnemosync.v1 import memory_pb2_grpc as pb_grpc  # noqa: E402
from ops.serve_process import ServeProcess  # noqa: E402

DIMS = 16
MODEL = pb.EmbeddingModel(name="bench-vectors", dimensions=DIMS, sha256="cd" * 32)
KINDS = ("get", "health", "append", "get_while_delivering")
STREAMS_PER_AGENT = Limits().max_streams_per_agent
READY = "holder: open"


def _add(rng: np.random.Generator, i: int) -> pb.Operation:
    v = rng.normal(size=DIMS)
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
        scope="user", content=f"bench memory {i} {rng.integers(1 << 60)}",
        embedding=(v / np.linalg.norm(v)).astype(np.float32).tolist()))


# -- the holder process ----------------------------------------------------------------------------------------


async def _hold(address: str, count: int, drain_them: bool) -> None:
    """Opens `count` Subscribe streams from the head (one channel each), says so on stdout, and keeps them open
    (reading what arrives if `drain_them`) until stdin closes."""
    channels, calls = [], []
    async with grpc.aio.insecure_channel(address) as channel:  # start at the head, as an agent does after its boot sync
        head = (await pb_grpc.MemoryServiceStub(channel).Stats(
            pb.StatsRequest(), metadata=((AGENT_METADATA_KEY, "holder-0"),))).head_seq
    for i in range(count):
        channel = grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        stub = pb_grpc.MemoryServiceStub(channel)
        call = stub.Subscribe(pb.SubscribeRequest(since_seq=head),
                              metadata=((AGENT_METADATA_KEY, f"holder-{i // STREAMS_PER_AGENT}"),))
        channels.append(channel)
        calls.append(call)
    for call in calls:
        await call.initial_metadata()

    async def drain(call) -> None:
        try:
            async for _ in call:
                pass
        except (grpc.aio.AioRpcError, asyncio.CancelledError):
            pass

    drains = [asyncio.ensure_future(drain(c)) for c in calls] if drain_them else []
    print(f"{READY} {count}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    for call in calls:
        call.cancel()
    await asyncio.gather(*drains, return_exceptions=True)
    for channel in channels:
        await channel.close()


class Holder:
    """A holder process with `count` open streams (none for 0)."""

    def __init__(self, address: str, count: int, drain: bool):
        self.count = count
        self.proc = None
        if count:
            self.proc = subprocess.Popen([sys.executable, __file__, "--hold", str(count), "--server", address,
                                          *(["--drain"] if drain else [])],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = self.proc.stdout.readline()
            if not line.startswith(READY):
                self.close()
                raise RuntimeError(f"the holder did not open {count} streams (it said {line!r})")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
            self.proc.stdout.close()


# -- measuring -------------------------------------------------------------------------------------------------


def _server_threads_and_rss(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["Threads"]), int(fields["VmRSS"].split()[0]) // 1024


def _percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)), "calls": len(samples)}


def _measure(address: str, calls: int, known_id: str, rng: np.random.Generator) -> dict[str, list[float]]:
    """Times `calls` Get and health calls with the streams idle, then `calls // 4` Appends each followed by a
    Get (the Get runs while the Append's entry is being delivered to every stream)."""
    channel = grpc.insecure_channel(address)
    stub, health = pb_grpc.MemoryServiceStub(channel), health_pb2_grpc.HealthStub(channel)
    metadata = ((AGENT_METADATA_KEY, "bench"),)
    timings: dict[str, list[float]] = {kind: [] for kind in KINDS}

    def timed(kind: str, call, request) -> None:
        started = time.perf_counter()
        call(request, timeout=60) if kind == "health" else call(request, metadata=metadata, timeout=60)
        timings[kind].append(time.perf_counter() - started)

    for _ in range(20):  # warm the connection
        stub.Get(pb.GetRequest(id=known_id), metadata=metadata, timeout=60)
    for _ in range(calls):
        timed("get", stub.Get, pb.GetRequest(id=known_id))
        timed("health", health.Check, health_pb2.HealthCheckRequest())
    for i in range(calls // 4):
        timed("append", stub.Append, pb.AppendRequest(operations=[_add(rng, i)], embedding_model=MODEL))
        timed("get_while_delivering", stub.Get, pb.GetRequest(id=known_id))
    channel.close()
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, nargs="+", default=[0, 100, 1000],
                        help="open stream counts to measure beside each other (default 0 100 1000)")
    parser.add_argument("--calls", type=int, default=400, help="Get and health calls per count and round "
                        "(a quarter as many Appends; default 400)")
    parser.add_argument("--rounds", type=int, default=1, help="times the counts are measured in turn (default 1)")
    parser.add_argument("--preload", type=int, default=1000, help="memories loaded before measuring (default 1000)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--drain", action="store_true", help="the holder reads every delivered entry in Python "
                        "(on one machine it then competes with the server for CPU; default: it leaves them to "
                        "grpc's buffers, as subscribers on other machines cost the server nothing more)")
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hold is not None:
        asyncio.run(_hold(args.server, args.hold, args.drain))
        return 0

    rng = np.random.default_rng(7)
    samples: dict[int, dict[str, list[float]]] = {n: {kind: [] for kind in KINDS} for n in args.streams}
    server_state: dict[int, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="mnemosync-bench-streams-") as tmp, \
            ServeProcess(Path(tmp) / "server", synchronous="normal") as server:
        channel = grpc.insecure_channel(server.address)
        stub = pb_grpc.MemoryServiceStub(channel)
        metadata = ((AGENT_METADATA_KEY, "bench"),)
        for start in range(0, args.preload, 250):
            ops = [_add(rng, i) for i in range(start, min(args.preload, start + 250))]
            result = stub.Append(pb.AppendRequest(operations=ops, embedding_model=MODEL), metadata=metadata,
                                 timeout=120)
        known_id = result.results[0].memory_id
        channel.close()
        for _ in range(args.rounds):
            for count in args.streams:
                holder = Holder(server.address, count, args.drain)
                try:
                    threads, rss = _server_threads_and_rss(server.proc.pid)
                    server_state[count] = {"threads": threads, "rss_mib": rss}
                    for kind, values in _measure(server.address, args.calls, known_id, rng).items():
                        samples[count][kind].extend(values)
                finally:
                    holder.close()

    results = {str(n): {kind: _percentiles(values) for kind, values in by_kind.items()} | server_state[n]
               for n, by_kind in samples.items()}
    base = results[str(args.streams[0])]
    labels = {"get": "Get (idle)", "health": "health", "append": "Append", "get_while_delivering": "Get (delivering)"}
    print(f"{'open streams':>12} " + " ".join(f"{labels[k] + ' p50/p95 ms':>27}" for k in KINDS)
          + f" {'threads':>8} {'RSS MiB':>8}")
    for n in args.streams:
        r = results[str(n)]
        cells = " ".join(f"{r[k]['p50_ms']:>17.2f} / {r[k]['p95_ms']:>7.2f}" for k in KINDS)
        print(f"{n:>12} {cells} {r['threads']:>8} {r['rss_mib']:>8}")
    for n in args.streams[1:]:
        r = results[str(n)]
        ratios = ", ".join(f"{labels[k]} p50 {r[k]['p50_ms'] / base[k]['p50_ms']:.2f}x p95 "
                           f"{r[k]['p95_ms'] / base[k]['p95_ms']:.2f}x" for k in KINDS)
        print(f"{n} streams against {args.streams[0]}: {ratios}")
    print(f"({args.rounds} round(s) x {args.calls} Get and health calls and {args.calls // 4} Appends per count, "
          f"{args.preload} memories preloaded, one connection per stream, holders "
          f"{'reading' if args.drain else 'not reading'} deliveries, {os.cpu_count()} CPUs, "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()})")
    if args.json:
        args.json.write_text(json.dumps({"config": {k: str(v) for k, v in vars(args).items()}, "results": results},
                                        indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
