"""The benchmarks other parts of the project keep beside this one, run as they are.

`bench_embeddings.py` (embedding throughput) and `bench_mcp.py` (the MCP
`search` tool round trip against the agent client's own call) are run as
subprocesses with `--json FILE` when present; their JSON goes into the report
unchanged. The MCP report's p50 of the tool call minus that of the direct
client call becomes a figure, so its target (< 5 ms) is checked with the rest.
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
            figure = mcp_figure(result)
            if figure is not None:
                report.add(figure)


def mcp_figure(result: dict[str, Any]) -> Figure | None:
    """The MCP overhead figure, from the MCP report's p50 of the tool call and of the direct client call."""
    summary = result.get("summary", {})
    tool = (summary.get("mcp") or {}).get("p50_ms")
    client = (summary.get("direct") or {}).get("p50_ms")
    if not isinstance(tool, (int, float)) or not isinstance(client, (int, float)):
        return None
    return Figure(id="mcp.overhead.p50", title="MCP search tool round trip minus the client call, p50",
                  value=max(float(tool) - float(client), 1e-6), unit="ms",
                  baseline_title="the agent client's search call p50 (bench_mcp.py)", baseline=float(client),
                  better="lower", details={"mcp_p50_ms": tool, "client_p50_ms": client,
                                           "calls": result.get("calls"), "memories": result.get("memories")})
