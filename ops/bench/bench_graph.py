"""Graph walks (issue 16): `Traverse` at depth 3 over a server holding N memories and 5 N typed links.

Its own server process: N memories appended in batches, then 5 N links
between random pairs (seeded; each of the six edge types alike), appended as
ordinary link operations (their rate is reported too). Then the same random
start memories are walked (Traverse, direction out, every type, depth 3,
limit 1000) and fetched (Get, which reads the memory and its links: one hop),
alternating query by query so load from other processes hits both alike.
Baseline: that Get. The full run uses 100k memories and 500k links.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from mnemosync.kernel.links import EDGE_TYPES
from mnemosync.v1 import memory_pb2 as pb
from ops.bench.bench_append import add_operations
from ops.bench.bench_search import percentiles
from ops.bench.plan import label
from ops.bench.report import Figure
from ops.bench.serverproc import Client, ServerProcess
from ops.bench.workload import Workload

LINKS_PER_MEMORY = 5
DEPTH = 3
BATCH = 500
SEED = 16


def measure(work: Path, model: pb.EmbeddingModel, *, memories: int, queries: int, synchronous: str,
            log: Callable[[str], None]) -> tuple[list[Figure], dict]:
    """Loads a server with `memories` memories and LINKS_PER_MEMORY times as many links, then times
    Traverse (depth 3) against Get on the same start memories."""
    workload = Workload(seed=SEED)
    with ServerProcess(work / "graph-server", synchronous=synchronous) as server:
        client = Client(server.address)
        try:
            log(f"graph: loading {memories:,} memories ...")
            ids: list[str] = []
            for start in range(0, memories, BATCH):
                ops, _ = add_operations(workload, start, min(BATCH, memories - start))
                client.append(pb.AppendRequest(operations=ops, embedding_model=model))
                ids += [op.memory_id for op in ops]
            rng = random.Random(SEED)
            links = memories * LINKS_PER_MEMORY
            log(f"graph: appending {links:,} links ...")
            started = time.perf_counter()
            for start in range(0, links, BATCH):
                ops = []
                for _ in range(min(BATCH, links - start)):
                    source, target = rng.sample(ids, 2)
                    ops.append(pb.Operation(op_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                                            memory_id=source, link=pb.LinkOp(target_id=target,
                                                                             relation=rng.choice(EDGE_TYPES))))
                client.append(pb.AppendRequest(operations=ops, embedding_model=model))
            link_s = time.perf_counter() - started
            log(f"graph: {queries} walks at depth {DEPTH} ...")
            starts = [rng.choice(ids) for _ in range(queries + 5)]
            metadata, stub = client.metadata, client.stub

            def walk(memory_id: str) -> tuple[float, pb.TraverseResponse]:
                t = time.perf_counter()
                answer = stub.Traverse(pb.TraverseRequest(memory_id=memory_id, depth=DEPTH, limit=1000,
                                                          direction=pb.DIRECTION_OUT), metadata=metadata, timeout=60)
                return time.perf_counter() - t, answer

            def get(memory_id: str) -> float:
                t = time.perf_counter()
                stub.Get(pb.GetRequest(id=memory_id), metadata=metadata, timeout=60)
                return time.perf_counter() - t

            for memory_id in starts[:5]:
                walk(memory_id)
                get(memory_id)
            walks, gets, reached, truncated = [], [], [], 0
            for i, memory_id in enumerate(starts[5:]):
                if i % 2:
                    gets.append(get(memory_id))
                seconds, answer = walk(memory_id)
                walks.append(seconds)
                reached.append(len(answer.steps))
                truncated += answer.truncated
                if not i % 2:
                    gets.append(get(memory_id))
        finally:
            client.close()
    wp, gp = percentiles(walks), percentiles(gets)
    details = {"memories": memories, "links": links, "depth": DEPTH, "queries": len(walks),
               "mean_memories_reached": sum(reached) / len(reached), "max_memories_reached": max(reached),
               "walks_cut_at_limit": truncated, "link_append_per_s": links / link_s, "traverse_ms": wp,
               "get_ms": gp}
    figures = [
        Figure(id=f"graph.traverse.depth{DEPTH}.p{p}",
               title=f"Traverse depth {DEPTH} (out, every type) p{p} @ {label(memories)} memories, "
                     f"{label(links)} links", value=wp[p], unit="ms",
               baseline_title=f"Get of the same memory (its row and links: one hop) p{p}", baseline=gp[p],
               better="lower", details=details if p == 50 else {})
        for p in (50, 95)
    ]
    return figures, details
