"""Single-operation appends from 1, 4 and 8 concurrent agents vs an empty gRPC call.

Each agent is its own process with its own channel and identity, as real
agents are. A run starts every agent at the same instant and counts calls
completed in `duration` seconds. The baseline is the same agents calling the
gRPC health Check (an empty unary call) on the same server; the two kinds of
run alternate, and each figure is the median over rounds.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
import uuid

from ops.bench.report import Figure


def _worker(address: str, agent_id: str, model: bytes, commands, results) -> None:
    import grpc
    import numpy as np
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from mnemosync.kernel.metadata import AGENT_METADATA_KEY
    from mnemosync.v1 import memory_pb2 as pb
    from mnemosync.v1 import memory_pb2_grpc as pb_grpc

    channel = grpc.insecure_channel(address)
    stub, health = pb_grpc.MemoryServiceStub(channel), health_pb2_grpc.HealthStub(channel)
    metadata = ((AGENT_METADATA_KEY, agent_id),)
    embedding_model = pb.EmbeddingModel.FromString(model)
    rng = np.random.default_rng(abs(hash(agent_id)) % 2**32)

    def request() -> pb.AppendRequest:
        v = rng.standard_normal(384).astype(np.float32)
        op = pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
            scope="user", type="fact", tags=["bench"], embedding=(v / np.linalg.norm(v)).tolist(),
            content=f"{agent_id} noted at {time.time():.6f} that single appends are being measured"))
        return pb.AppendRequest(operations=[op], embedding_model=embedding_model)

    health.Check(health_pb2.HealthCheckRequest(), timeout=30)
    results.put(("ready", agent_id))
    while True:
        command = commands.get()
        if command is None:
            break
        kind, start_at, duration = command
        prepared = [request() for _ in range(200)] if kind == "append" else []
        empty = health_pb2.HealthCheckRequest()
        while time.time() < start_at:
            time.sleep(0.001)
        done, latencies, end = 0, [], start_at + duration
        while True:
            t = time.perf_counter()
            if kind == "append":
                stub.Append(prepared.pop() if prepared else request(), metadata=metadata, timeout=60)
            else:
                health.Check(empty, timeout=60)
            latencies.append(time.perf_counter() - t)
            done += 1
            if time.time() >= end:
                break
        latencies.sort()
        results.put((agent_id, done, time.time() - start_at, statistics.median(latencies),
                     latencies[min(len(latencies) - 1, round(0.95 * (len(latencies) - 1)))]))
    channel.close()


class AgentPool:
    """Agent processes kept alive across runs (spawned, so no gRPC state is forked).

    Args:
        address: The server.
        agents: How many processes to start (the largest concurrency measured).
        model: The embedding model the appends name (serialized EmbeddingModel).
    """

    def __init__(self, address: str, agents: int, model: bytes):
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(agents)]
        self.procs = [ctx.Process(target=_worker, args=(address, f"bench-agent-{i}", model, q, self.results),
                                  daemon=True) for i, q in enumerate(self.commands)]
        for p in self.procs:
            p.start()
        for _ in self.procs:
            self.results.get(timeout=120)

    def run(self, kind: str, agents: int, duration: float) -> dict:
        """`agents` agents make `kind` calls ("append" or "empty") for `duration` s; returns the rate."""
        start_at = time.time() + 0.5 + 0.02 * agents
        for q in self.commands[:agents]:
            q.put((kind, start_at, duration))
        got = [self.results.get(timeout=duration + 120) for _ in range(agents)]
        calls = sum(g[1] for g in got)
        elapsed = max(g[2] for g in got)
        return {"calls": calls, "seconds": elapsed, "rate": calls / elapsed,
                "median_latency_ms": statistics.median(g[3] for g in got) * 1000,
                "p95_latency_ms": max(g[4] for g in got) * 1000}

    def close(self) -> None:
        """Stops the agent processes."""
        for q in self.commands:
            q.put(None)
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()


def measure(address: str, model: bytes, *, agent_counts=(1, 4, 8), duration: float = 4.0,
            rounds: int = 3) -> tuple[list[Figure], dict]:
    """Appends/s and empty calls/s for each agent count, alternating, medians over rounds."""
    pool = AgentPool(address, max(agent_counts), model)
    raw: dict[int, dict[str, list[dict]]] = {n: {"append": [], "empty": []} for n in agent_counts}
    try:
        for _ in range(rounds):
            for n in agent_counts:
                for kind in ("empty", "append"):
                    raw[n][kind].append(pool.run(kind, n, duration))
    finally:
        pool.close()
    figures = []
    for n in agent_counts:
        appends = statistics.median(r["rate"] for r in raw[n]["append"])
        empties = statistics.median(r["rate"] for r in raw[n]["empty"])
        figures.append(Figure(
            id=f"append.single.{n}", title=f"single-op appends/s, {n} concurrent agent{'s' * (n > 1)}",
            value=appends, unit="calls/s", baseline_title=f"empty unary gRPC call (health Check), {n} agents",
            baseline=empties,
            details={"rounds": rounds, "duration_s": duration,
                     "append_median_latency_ms": statistics.median(r["median_latency_ms"] for r in raw[n]["append"]),
                     "append_p95_latency_ms": statistics.median(r["p95_latency_ms"] for r in raw[n]["append"]),
                     "empty_median_latency_ms": statistics.median(r["median_latency_ms"] for r in raw[n]["empty"])},
        ))
    return figures, {str(n): raw[n] for n in agent_counts}
