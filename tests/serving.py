"""Running `mnemosync serve` as a real subprocess, with bounded readiness polling.

The launcher is `ops.serve_process.ServeProcess` (the benchmarks use it too);
tests run it with `synchronous=normal`, since they never test power loss.
"""

from __future__ import annotations

from pathlib import Path

from ops import serve_process
from ops.serve_process import READY

__all__ = ["READY", "ServeProcess"]


class ServeProcess(serve_process.ServeProcess):
    """`mnemosync serve` in a subprocess; `address` is known once it is ready."""

    def __init__(self, data_dir: Path, *extra: str, listen: str = "127.0.0.1:0", env: dict | None = None,
                 embed_model: Path | None = None):
        super().__init__(data_dir, *extra, listen=listen, env=env, embed_model=embed_model, synchronous="normal")
