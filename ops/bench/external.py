"""The benchmarks other parts of the project keep beside this one, run as they are.

`bench_embeddings.py` (embedding throughput) and `bench_mcp.py` (the MCP
`search` and `add_memory` tool round trips against the agent client's own
calls) are run as subprocesses with `--json FILE` when present; their JSON goes
into the report unchanged. The MCP report's p50 of each tool call minus that of
the direct client call becomes a figure, so their target (< 5 ms) is checked
with the rest.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ops.bench.report import Figure, Report

HERE = Path(__file__).resolve().parent
SCRIPTS = {"embeddings": "bench_embeddings.py", "mcp": "bench_mcp.py"}
TIMEOUT_S = 900


def run_into(report: Report, work: Path, model_path: Path | None, log: Callable[[str], None]) -> None:
    """Runs each external benchmark that exists and records its JSON (or why it has none)."""
    for name, script in SCRIPTS.items():
        path = HERE / script
        if not path.exists():
            report.external[name] = {"skipped": f"{script} is not there yet"}
            continue
        log(f"external benchmark {script} ...")
        out = work / f"{name}.json"
        args = [sys.executable, str(path), "--json", str(out)]
        if model_path is not None:
            args += ["--model", str(model_path)]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=HERE.parents[1])
        except subprocess.TimeoutExpired:
            report.external[name] = {"error": f"{script} took longer than {TIMEOUT_S} s"}
            continue
        if done.returncode != 0 or not out.exists():
            report.external[name] = {"error": f"{script} exited {done.returncode}", "stderr": done.stderr[-2000:]}
            continue
        result = json.loads(out.read_text(encoding="utf-8"))
        report.external[name] = result
        if name == "mcp":
            for figure in mcp_figure(result):
                report.add(figure)


def mcp_figure(result: dict[str, Any]) -> list[Figure]:
    """The MCP overhead figures (search, and add when measured), from the MCP report's p50 of the tool call and of
    the direct client call."""
    summary = result.get("summary", {})
    figures = []
    for tool, table, figure_id in (("search", summary, "mcp.overhead.p50"),
                                   ("add_memory", summary.get("add") or {}, "mcp.add.overhead.p50")):
        call = (table.get("mcp") or {}).get("p50_ms")
        client = (table.get("direct") or {}).get("p50_ms")
        if not isinstance(call, (int, float)) or not isinstance(client, (int, float)):
            continue
        figures.append(Figure(
            id=figure_id, title=f"MCP {tool} tool round trip minus the client call, p50",
            value=max(float(call) - float(client), 1e-6), unit="ms",
            baseline_title=f"the agent client's {tool.removesuffix('_memory')} call p50 (bench_mcp.py)",
            baseline=float(client), better="lower",
            details={"mcp_p50_ms": call, "client_p50_ms": client, "calls": result.get("calls"),
                     "memories": result.get("memories")}))
    return figures
