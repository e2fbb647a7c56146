"""`mnemosync serve` as a child process, started and stopped with bounded waits.

The test suite and the benchmarks both run the server the way production
does: its own process, its own interpreter, stopped by a signal. This is the
one launcher they share; it is a development tool, not part of the product.
The server prints `mnemosync serving on HOST:PORT` to stderr once its port is
bound; `start` waits for that line (so a port of 0 resolves to the real one)
and gives up, with the server's own output, when the process exits or the
timeout passes first.
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

from mnemosync.server.settings import ServerSettings

READY = re.compile(r"mnemosync serving on (\S+)")
"""The line `mnemosync serve` logs once it accepts calls; group 1 is the bound address."""


class ServeProcessError(RuntimeError):
    """The server process did not start, or did not stop in time; the message ends with its stderr."""


class ServeProcess:
    """`mnemosync serve --insecure` (unless `extra` says otherwise) in a subprocess.

    Args:
        data_dir: The server's data directory.
        *extra: More `mnemosync serve` arguments (they come last, so they win).
        listen: HOST:PORT; port 0 picks a free one (read `address` after `start`).
        env: Variables to set on top of this process's environment.
        embed_model: A GGUF file whose fingerprint a new data directory pins; by
            default a file that does not exist, so the first write pins its model
            (and tests may use small synthetic vectors).
        synchronous: SQLite durability mode (`full` is the server's default).
        cwd: Working directory of the server process (default: this one's).

    Attributes:
        address: HOST:PORT the server is bound to, once `start` returned.
        stderr_lines: Everything the server wrote to stderr so far.
        proc: The `subprocess.Popen`, once started.
    """

    def __init__(self, data_dir: Path, *extra: str, listen: str = "127.0.0.1:0", env: dict | None = None,
                 embed_model: Path | None = None, synchronous: str = "full", cwd: Path | None = None):
        self.data_dir = Path(data_dir)
        model = embed_model or self.data_dir.parent / "no-model.gguf"
        self.args = [sys.executable, "-m", "mnemosync.cli", "serve", "--data-dir", str(self.data_dir),
                     "--listen", listen, "--insecure", "--synchronous", synchronous, "--embed-model", str(model),
                     *extra]
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.stderr_lines: list[str] = []

    def start(self, timeout: float = 60) -> ServeProcess:
        """Starts the server and waits until it says it is serving.

        Raises:
            ServeProcessError: it exited, or did not say so within `timeout` seconds (it is stopped then).
        """
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=self.env, cwd=self.cwd)
        ready = threading.Event()

        def pump():
            for line in self.proc.stderr:
                self.stderr_lines.append(line)
                match = READY.search(line)
                if match:
                    self.address = match.group(1)
                    ready.set()

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ServeProcessError("server did not start:\n" + "".join(self.stderr_lines))
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Sends `sig` (unless it already exited) and returns its exit code; safe to call again.

        Raises:
            ServeProcessError: it did not exit within `timeout` seconds (it is killed first).
        """
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise ServeProcessError(f"server did not stop within {timeout}s:\n" + "".join(self.stderr_lines)) \
                from None
        self._pump.join(timeout=10)
        self.proc.stderr.close()
        return code

    def kill(self) -> None:
        """SIGKILL: a crash, as far as the data directory can tell."""
        self.stop(signal.SIGKILL)

    @property
    def db_path(self) -> Path:
        """The server's SQLite file."""
        return ServerSettings(data_dir=self.data_dir).db_path

    def memory_kib(self) -> dict[str, int]:
        """The running server's resident memory now (VmRSS) and at its peak (VmHWM), in KiB (Linux /proc)."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
