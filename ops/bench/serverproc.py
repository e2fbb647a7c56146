"""`mnemosync serve` in a subprocess for the benchmarks, plus a raw client to drive it.

The server runs in its own process, as it does in production, so its
resident memory can be read from /proc and its CPU time is not shared with
the benchmark's Python interpreter. The launcher is the shared
`ops.serve_process.ServeProcess`; this module only pins it to this checkout.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from mnemosync.kernel.metadata import AGENT_METADATA_KEY
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from ops.serve_process import ServeProcess

REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_MESSAGE = 64 * 1024 * 1024


class ServerProcess(ServeProcess):
    """A `mnemosync serve` subprocess of this checkout's code on a free loopback port.

    Args:
        data_dir: The server's data directory.
        synchronous: SQLite durability mode ("full" is the server's default).
        embed_model: A GGUF file whose fingerprint a new data directory pins, or
            None to let the first write pin its model.
    """

    def __init__(self, data_dir: Path, *, synchronous: str = "full", embed_model: Path | None = None):
        super().__init__(data_dir, synchronous=synchronous, embed_model=embed_model,
                         env={"PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)

    def start(self, timeout: float = 120) -> ServerProcess:
        """Starts the server and waits until it is serving (at most `timeout` seconds)."""
        return super().start(timeout)


class Client:
    """A raw gRPC client with one agent identity (what the benchmarks drive)."""

    def __init__(self, address: str, agent_id: str = "bench"):
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)])
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self.metadata = ((AGENT_METADATA_KEY, agent_id),)

    def append(self, request: pb.AppendRequest) -> pb.AppendResponse:
        """One Append call."""
        return self.stub.Append(request, metadata=self.metadata, timeout=120)

    def search(self, request: pb.SearchRequest) -> pb.SearchResponse:
        """One Search call."""
        return self.stub.Search(request, metadata=self.metadata, timeout=60)

    def stats(self) -> pb.StatsResponse:
        """One Stats call."""
        return self.stub.Stats(pb.StatsRequest(), metadata=self.metadata, timeout=60)

    def close(self) -> None:
        """Closes the channel."""
        self.channel.close()
