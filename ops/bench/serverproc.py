"""`mnemosync serve` in a subprocess for the benchmarks, plus helpers to talk to it.

The server runs in its own process, as it does in production, so its
resident memory can be read from /proc and its CPU time is not shared with
the benchmark's Python interpreter.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server.identity import AGENT_METADATA_KEY

_READY = re.compile(r"mnemosync serving on (\S+)")
REPO_ROOT = Path(__file__).resolve().parents[2]
MAX_MESSAGE = 64 * 1024 * 1024


class ServerProcess:
    """A `mnemosync serve` subprocess on a free loopback port.

    Args:
        data_dir: The server's data directory.
        synchronous: SQLite durability mode ("full" is the server's default).
        embed_model: A GGUF file whose fingerprint a new data directory pins, or
            None to let the first write pin its model.
    """

    def __init__(self, data_dir: Path, *, synchronous: str = "full", embed_model: Path | None = None):
        self.data_dir = Path(data_dir)
        model = embed_model or self.data_dir / "no-model.gguf"  # missing file: the first write pins
        self.args = [sys.executable, "-m", "agent_client.cli_entry", "serve", "--data-dir", str(self.data_dir),
                     "--listen", "127.0.0.1:0", "--insecure", "--synchronous", synchronous,
                     "--embed-model", str(model)]
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.log: list[str] = []

    def start(self, timeout: float = 120) -> ServerProcess:
        """Starts the server and waits (bounded) until it says it is serving."""
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=env, cwd=REPO_ROOT)
        ready = threading.Event()

        def pump() -> None:
            for line in self.proc.stderr:
                self.log.append(line)
                match = _READY.search(line)
                if match:
                    self.address = match.group(1)
                    ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the benchmark server did not start:\n" + "".join(self.log[-30:]))
        return self

    def stop(self, timeout: float = 60) -> None:
        """Stops the server (SIGTERM, then SIGKILL if it hangs)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=10)
        self.proc.stderr.close()
        self.proc = None

    def memory_kib(self) -> dict[str, int]:
        """The server's resident memory now (VmRSS) and at its peak (VmHWM), in KiB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    @property
    def db_path(self) -> Path:
        """The server's SQLite file."""
        return self.data_dir / "mnemosync.db"

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
