"""Running `mnemosync serve` as a real subprocess, with bounded readiness polling."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

READY = re.compile(r"mnemosync serving on (\S+)")


class ServeProcess:
    """`mnemosync serve` in a subprocess; `address` is known once it is ready."""

    def __init__(self, data_dir: Path, *extra: str, listen: str = "127.0.0.1:0", env: dict | None = None,
                 embed_model: Path | None = None):
        self.data_dir = data_dir
        # Without a model file the data directory pins whichever model writes first,
        # so tests may use small synthetic vectors.
        model = embed_model or data_dir.parent / "no-model.gguf"
        self.args = [sys.executable, "-m", "agent_client.cli_entry", "serve", "--data-dir", str(data_dir),
                     "--listen", listen, "--insecure", "--synchronous", "normal", "--embed-model", str(model),
                     *extra]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.stderr_lines: list[str] = []

    def start(self, timeout: float = 60) -> ServeProcess:
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     text=True, env=self.env)
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
                raise RuntimeError("server did not start:\n" + "".join(self.stderr_lines))
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"server did not stop within {timeout}s:\n" + "".join(self.stderr_lines)) from None
        self._pump.join(timeout=10)
        self.proc.stderr.close()
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
