"""Running one benchmark plan, in order, into a report.

One server process is loaded to the small size (search measured), then to the
large size (search, resident memory, catch-up, end-to-end search measured),
then concurrent single appends run against it. Retrieval quality runs on its
own store with the real embedding model.
"""

from __future__ import annotations

import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ops.bench.plan import Plan
from ops.bench.report import Report
from ops.bench.targets import TARGETS


def run(plan: Plan, *, model_path: Path | None, workdir: Path | None, log: Callable[[str], None]) -> Report:
    """Runs the plan and returns the report (nothing is written here)."""
    from ops.bench import environment

    report = Report(targets=list(TARGETS))
    started = time.time()
    clock = {"at": time.time(), "name": "setup"}

    def timed_log(message: str) -> None:  # each log line starts a section; its duration goes in meta
        now = time.time()
        report.meta["section_seconds"][clock["name"]] = round(now - clock["at"], 2)
        clock.update(at=now, name=message.rstrip(" ."))
        log(message)

    report.meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)), "mode": plan.mode,
                   "sizes": {"small": plan.small, "large": plan.large}, "synchronous": plan.synchronous,
                   "sections": list(plan.sections), "host": environment.describe(),
                   "command": "python -m ops.bench" + (" --quick" if plan.mode == "quick" else "")}
    report.meta["section_seconds"] = {}
    model_path = environment.find_model(model_path, log)
    report.meta["model"] = str(model_path) if model_path else None
    work = Path(tempfile.mkdtemp(prefix="mnemosync-bench-", dir=workdir))
    try:
        if set(plan.sections) & {"append", "search", "memory", "catchup", "e2e", "concurrency", "recall"}:
            from ops.bench.speed import run_speed

            run_speed(plan, report, work, model_path, timed_log)
        if "quality" in plan.sections:
            from ops.bench import bench_quality

            timed_log("retrieval quality ...")
            bench_quality.run_into(report, work / "quality", model_path, variants=plan.mode != "quick")
        if "recall" in plan.sections:
            from ops.bench import bench_recall

            timed_log("recall bar on the labelled sets ...")
            bench_recall.run_bar_into(report, work / "recall", model_path, log, quick=plan.mode == "quick")
        if "tools" in plan.sections:
            from ops.bench import bench_tools

            timed_log("tool list costs ...")
            report.sections["tools"] = costs = bench_tools.measure(log)
            for name, cost in costs.items():
                report.notes.append(f"tool set {name} ({len(cost['tools'])} tools): about {cost['tokens']:,} tokens "
                                    f"per request ({cost['model_chars']:,} characters of names, descriptions and "
                                    f"input schemas; {cost['wire_chars']:,} in the whole tools/list answer)")
        if "consolidation" in plan.sections:
            from ops.bench import bench_consolidation

            bench_consolidation.run_into(report, work / "consolidation", model_path, timed_log,
                                         quick=plan.mode == "quick")
        if "graph" in plan.sections:
            from ops.bench import bench_graph
            from ops.bench.speed import model_proto

            timed_log("graph walks ...")
            figures, details = bench_graph.measure(work, model_proto(model_path), memories=plan.large,
                                                   queries=plan.search_queries, synchronous=plan.synchronous,
                                                   log=log)
            for f in figures:
                report.add(f)
            report.sections["graph"] = details
        if plan.external and "external" in plan.sections:
            from ops.bench import external

            external.run_into(report, work, model_path, timed_log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    timed_log("done")
    report.meta["duration_s"] = time.time() - started
    report.meta["load_average_end"] = os.getloadavg()
    report.meta["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    report.meta["python"] = platform.python_version()
    return report
