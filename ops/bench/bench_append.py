"""Batched append through the server vs. raw SQLite inserts of the same rows.

The server is loaded in rounds. Each round sends `chunk` memories as Append
calls of `batch` operations and times them from the client; then the rows the
server stored for that round are read back (untimed) and inserted into a second
database with the same schema, one transaction per `batch`, and timed. Both
databases grow at the same pace, so every round compares like with like; the
figure is the median over rounds.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import numpy as np

from mnemosync.kernel import db
from mnemosync.v1 import memory_pb2 as pb
from ops.bench import rawcopy
from ops.bench.report import Figure
from ops.bench.serverproc import Client
from ops.bench.workload import Workload


def add_operations(workload: Workload, start: int, count: int) -> tuple[list[pb.Operation], np.ndarray]:
    """Add operations for memories start..start+count-1, and their vectors."""
    vectors = workload.vectors(start, count)
    ops = [
        pb.Operation(op_id=m.op_id, memory_id=m.memory_id,
                     add=pb.AddOp(scope=m.scope, type=m.type, tags=m.tags, content=m.content,
                                  embedding_f32=np.asarray(v, dtype="<f4").tobytes()))
        for m, v in zip(workload.memories(start, count), vectors, strict=True)
    ]
    return ops, vectors


@dataclass
class Loader:
    """Loads the benchmark server round by round, measuring each round against the raw baseline.

    Args:
        client: gRPC client of the server.
        server_db: The server's SQLite file (read back after each round).
        raw_db: Where the baseline inserts go (created here).
        model: The embedding model the appends name.
        synchronous: The server's durability mode; the baseline uses the same.
    """

    client: Client
    server_db: object
    raw_db: object
    model: pb.EmbeddingModel
    workload: Workload
    batch: int = 500
    chunk: int = 5000
    synchronous: str = "full"
    loaded: int = 0
    head: int = 0
    vectors: list[np.ndarray] = field(default_factory=list)
    rounds: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self._raw = rawcopy.new_server_db(self.raw_db, self.synchronous, 384)
        self._reader = db.connect(self.server_db, synchronous=self.synchronous).conn

    def load_to(self, total: int) -> None:
        """Appends memories until `total` are loaded, measuring each round."""
        while self.loaded < total:
            count = min(self.chunk, total - self.loaded)
            ops, vectors = add_operations(self.workload, self.loaded, count)
            requests = [pb.AppendRequest(operations=ops[i:i + self.batch], embedding_model=self.model)
                        for i in range(0, count, self.batch)]
            started = time.perf_counter()
            for request in requests:
                response = self.client.append(request)
            server_s = time.perf_counter() - started
            first, self.head = self.head + 1, response.head_seq
            rows = rawcopy.server_rows(self._reader, first, self.head)
            batches = rows.batches(self.batch)
            started = time.perf_counter()
            for part in batches:
                rawcopy.insert_rows(self._raw, part)
            raw_s = time.perf_counter() - started
            self.rounds.append({"memories": count, "server_s": server_s, "raw_s": raw_s,
                                "loaded_after": self.loaded + count})
            self.vectors.append(vectors)
            self.loaded += count

    def matrix(self) -> np.ndarray:
        """Every loaded vector (unit length), in load order."""
        return np.concatenate(self.vectors) if self.vectors else np.zeros((0, 384), np.float32)

    def figure(self) -> Figure:
        """The batched-append figure, median over rounds."""
        server_rates = [r["memories"] / r["server_s"] for r in self.rounds]
        raw_rates = [r["memories"] / r["raw_s"] for r in self.rounds]
        ratios = [s / r for s, r in zip(server_rates, raw_rates, strict=True)]
        return Figure(
            id="append.batched",
            title=f"batched append via gRPC ({self.batch} ops/Append; changelog + vec + FTS)",
            value=statistics.median(server_rates), unit="memories/s",
            baseline_title="raw SQLite executemany of the same rows into the same tables",
            baseline=statistics.median(raw_rates),
            details={"rounds": len(self.rounds), "memories": self.loaded, "batch": self.batch,
                     "chunk": self.chunk, "synchronous": self.synchronous,
                     "median_round_ratio": statistics.median(ratios),
                     "server_rates": [round(x) for x in server_rates], "raw_rates": [round(x) for x in raw_rates]},
        )

    def close(self) -> None:
        """Closes the databases this loader opened."""
        self._raw.close()
        self._reader.close()
