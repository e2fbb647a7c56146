"""The machine a run measured: CPUs, load, libraries, BLAS threads; and the embedding model."""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

# OpenBLAS tuning variables some machines set for other workloads; they change
# the NumPy baseline's kernel choice, so the benchmark command clears them
# before NumPy loads (see `clear_blas_overrides`) and the report says so.
BLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
CLEARED: dict[str, str] = {}


def clear_blas_overrides() -> dict[str, str]:
    """Removes BLAS_OVERRIDES from this process's environment (before NumPy loads); returns what was set."""
    for name in BLAS_OVERRIDES:
        if name in os.environ:
            CLEARED[name] = os.environ.pop(name)
    return dict(CLEARED)


def describe() -> dict:
    """CPU count, load, platform and library versions, BLAS threading."""
    import numpy as np
    import sqlite_vec

    from mnemosync.kernel import db

    info = {
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": db.sqlite_library(),
        "sqlite_vec": getattr(sqlite_vec, "__version__", "?"),
        "numpy": np.__version__,
        "load_average_start": os.getloadavg(),
        "blas_overrides_cleared": dict(CLEARED),
    }
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [{k: p.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
                        for p in threadpool_info()]
    except ImportError:  # threadpoolctl is optional
        info["blas"] = "threadpoolctl not installed"
    info["summary"] = (f"{info['cpus']} CPUs, load {info['load_average_start'][0]:.2f}, "
                       f"{info['sqlite']}, sqlite-vec {info['sqlite_vec']}, numpy {info['numpy']}")
    return info


def find_model(given: Path | None, log: Callable[[str], None]) -> Path | None:
    """The GGUF model to use: the given one, or the default (built if missing); None if unavailable."""
    if given is not None:
        return given if given.is_file() else None
    try:
        from mnemosync.agent.model import ensure_default_model
        from mnemosync.kernel.settings_loading import default_data_home

        return ensure_default_model(default_data_home(), progress=log)
    except Exception as exc:  # noqa: BLE001 - the model is optional for most figures
        log(f"no embedding model ({exc}); end-to-end and quality sections will be skipped")
        return None


def script_parser(doc: str) -> argparse.ArgumentParser:
    """The parser of a stand-alone benchmark script that needs the model: `--model` and `--json`, help from `doc`.

    The script adds its own options; `script_model(args)` then gives the model to use.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(doc.splitlines()[1:]))
    parser.add_argument("--model", type=Path, default=os.environ.get("MNEMOSYNC_EMBED_MODEL"),
                        help="GGUF model (default: the built default model, built if missing)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    return parser


def script_model(args: argparse.Namespace) -> Path:
    """The model a `script_parser` script runs with; exits with what to do when there is none."""
    model = find_model(args.model, print)
    if model is None:
        raise SystemExit(f"no embedding model at {args.model}: pass --model PATH to a GGUF file, or leave it out to "
                         "use the default model (ops/bootstrap.sh builds it)")
    return model


def write_report(out: Path, name: str, report: dict, table: str) -> None:
    """Writes a stand-alone benchmark's report to `out` as `name`.json and its table as `name`.md, and prints the
    table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2))
    (out / f"{name}.md").write_text(table)
    print(table)


@dataclass(frozen=True)
class Process:
    """One process as /proc shows it."""

    pid: int
    parent: int
    cpu_seconds: float
    """User and system time so far."""
    command: bytes
    """Its command line, arguments joined by spaces."""


def children_and(pids: Collection[int] = ()) -> list[Process]:
    """This process's children and the processes `pids` (e.g. local agents, which are not our children), as
    /proc shows them now; a process gone meanwhile is left out."""
    ticks, me, found = os.sysconf("SC_CLK_TCK"), os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            pid, fields = int(stat.parent.name), stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != me and pid not in pids:
                continue
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue
        found.append(Process(pid, int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks, command))
    return found
