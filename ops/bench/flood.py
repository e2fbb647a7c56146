"""Loader processes for the benches that time one caller while other agents flood the server with calls.

A loader is the bench's own script started again with `--load ...`: it runs `run_until_stdin_closes` with one
caller per thread, says `READY`, and when the bench closes its stdin prints how many calls were answered and
how many refused (RESOURCE_EXHAUSTED). `Loaders` starts them from the bench and adds their counts up.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import grpc

from mnemosync.v1 import memory_pb2_grpc as pb_grpc

READY = "loader: running"

Caller = Callable[[pb_grpc.MemoryServiceStub], object]
"""One call to the server, made again and again by a thread of its own (it names its agent in the metadata)."""


def run_until_stdin_closes(address: str, callers: list[Caller], *, backoff: float = 0.0,
                           join_timeout: float = 120.0) -> None:
    """Runs each caller in a thread over its own channel until stdin closes, then prints the counts as JSON.

    A refusal (RESOURCE_EXHAUSTED) is counted and tried again after `backoff` seconds (0: at once, as a flood
    that does not back off); any other error ends that thread with its traceback.
    """
    stop = threading.Event()
    counts = {"ok": 0, "refused": 0}
    lock = threading.Lock()

    def run(call: Caller) -> None:
        channel = grpc.insecure_channel(address)
        stub = pb_grpc.MemoryServiceStub(channel)
        while not stop.is_set():
            try:
                call(stub)
                key = "ok"
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    raise
                key = "refused"
                time.sleep(backoff)
            with lock:
                counts[key] += 1
        channel.close()

    workers = [threading.Thread(target=run, args=(call,), daemon=True) for call in callers]
    for w in workers:
        w.start()
    print(READY, flush=True)
    sys.stdin.read()
    stop.set()
    for w in workers:
        w.join(timeout=join_timeout)
    print(json.dumps(counts), flush=True)


class Loaders:
    """Loader processes, one per argument list (`python script --load ARGS`), running until `close`.

    Args:
        script: The bench's script, started again as each loader.
        loads: The arguments after `--load` of each loader process.
        address: The server they call.
        settle: Seconds to wait once all are running, so the flood fills the queues before anything is timed.
        wait: Seconds `close` gives each loader to finish.
    """

    def __init__(self, script: str, loads: list[list[str]], address: str, *, settle: float, wait: float = 120.0):
        self.wait = wait
        self.procs = [subprocess.Popen([sys.executable, script, "--load", *load, "--server", address],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for load in loads]
        for p in self.procs:
            line = p.stdout.readline() if p.stdout else ""
            if not line.startswith(READY):
                raise RuntimeError(f"a loader did not start (it said {line!r})")
        time.sleep(settle)

    def close(self) -> dict[str, int]:
        """Stops every loader and returns their counts added up: `{"ok": n, "refused": n}`."""
        total = {"ok": 0, "refused": 0}
        for p in self.procs:
            assert p.stdin is not None and p.stdout is not None
            p.stdin.close()
            for key, n in json.loads(p.stdout.readline() or "{}").items():
                total[key] += n
            p.wait(timeout=self.wait)
            p.stdout.close()
        return total
