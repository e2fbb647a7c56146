"""The quick benchmark runs and reports every figure beside its baseline."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


FIGURES = {
    "append.batched", "append.single.1", "append.single.4", "append.single.8", "catchup", "memory.rss",
    *(f"search.hybrid.{size}.p{p}" for size in ("small", "large") for p in (50, 95, 99)),
}


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, "-m", "ops.bench", "--quick", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


@pytest.mark.timeout(700)
def test_the_quick_benchmark_reports_every_figure_next_to_its_baseline(quick_report):
    report, _ = quick_report
    figures = {f["id"]: f for f in report["figures"]}
    assert FIGURES <= set(figures)
    for f in figures.values():
        assert f["title"] and f["unit"] and f["baseline_title"] and f["better"] in ("higher", "lower")
        assert math.isfinite(f["value"]) and f["value"] > 0
        assert math.isfinite(f["baseline"]) and f["baseline"] > 0
        assert f["ratio"] == pytest.approx(f["value"] / f["baseline"])


def test_the_quick_benchmark_checks_every_target_and_says_by_how_much_a_miss_misses(quick_report):
    report, markdown = quick_report
    targets = {t["figure"]: t for t in report["targets"]}
    assert {"append.batched", "search.hybrid.large.p50", "catchup", "append.single.8"} <= set(targets)
    for t in targets.values():
        if t["met"] is False:
            assert "missed by" in t["verdict"] and t["why"]
        elif t["met"] is True:
            assert t["verdict"].startswith("met")
    assert "## Targets (issue 6)" in markdown and "| figure | value |" in markdown


def test_the_quick_benchmark_describes_the_run(quick_report):
    report, _ = quick_report
    meta = report["meta"]
    assert meta["mode"] == "quick" and meta["command"] == "python -m ops.bench --quick"
    assert meta["host"]["cpus"] >= 1 and "blas" in meta["host"]
    assert meta["sizes"]["large"] > meta["sizes"]["small"] > 0


def test_the_quick_benchmark_measures_retrieval_quality_per_channel_when_the_model_is_there(quick_report):
    report, markdown = quick_report
    if report["meta"]["model"] is None:
        pytest.skip("no embedding model on this machine")
    quality = report["quality"]
    assert quality["queries"] >= 100 and quality["memories"] >= 300
    for mode in ("vector", "keyword", "hybrid"):
        assert set(quality["modes"][mode]) == {"recall@5", "recall@10", "mrr"}
        assert all(0.0 <= v <= 1.0 for v in quality["modes"][mode].values())
    assert {"paraphrase", "identifier", "temporal"} <= set(quality["by_category"])
    assert "## Retrieval quality" in markdown
    assert {"search.e2e.p50", "search.e2e.p95"} <= {f["id"] for f in report["figures"]}


def test_the_quick_benchmark_times_the_prompt_hook_and_measures_its_bar_and_the_tool_lists(quick_report):
    report, markdown = quick_report
    assert set(report["sections"]["tools"]) == {"compact", "all"}
    assert report["sections"]["tools"]["compact"]["tokens"] < report["sections"]["tools"]["all"]["tokens"]
    if report["meta"]["model"] is None:
        pytest.skip("no embedding model on this machine")
    figures = {f["id"]: f for f in report["figures"]}
    assert {f"recall.hook.{size}.p{p}" for size in ("small", "large") for p in (50, 95)} <= set(figures)
    assert figures["recall.hook.large.p95"]["baseline_title"] == "bare `python -c pass` start, p95"
    measured = report["sections"]["recall_bar"]["measured"]["retrieval"]
    assert set(measured) == {"dev", "test"} and 0 < measured["test"]["precision"] <= 1
    assert "recall bar on retrieval test" in markdown


@pytest.mark.timeout(600)
def test_the_sessions_benchmark_measures_both_designs_side_by_side(tmp_path, model_path):
    """`ops/bench/bench_sessions.py` (issue 29's aims) at a tiny size: both designs, every figure, one table."""
    result = tmp_path / "sessions.json"
    done = subprocess.run([sys.executable, "-m", "ops.bench.bench_sessions", "--size", "300", "--sessions", "2",
                           "--model", str(model_path), "--json", str(result)], cwd=REPO, capture_output=True,
                          text=True, timeout=580)
    assert done.returncode == 0, done.stderr[-3000:]
    r = json.loads(result.read_text())
    for design, extra in (("agent", {"agent_rss_mb", "new_session_booting"}), ("in-process", set())):
        assert set(r[design]) == {"new_machine", "new_session", "one_session_rss_mb", "eight_sessions_rss_mb", *extra}
        assert all(v > 0 for v in r[design]["new_machine"].values())
    # eight whole agents against one agent and eight relays: the design's point, far beyond any noise
    assert r["agent"]["eight_sessions_rss_mb"] < r["in-process"]["eight_sessions_rss_mb"] / 2
    assert 0 < r["agent"]["agent_rss_mb"] < r["agent"]["one_session_rss_mb"]
    assert 0 <= r["agent"]["new_session_booting"]["sessions"] <= 2  # those that started before the agent booted
    assert "| new session, warm: `initialize` p95 (ms) |" in done.stdout
