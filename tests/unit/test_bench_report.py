"""`ops.bench.report`: targets are checked only against figures measured at the size they are stated at."""

from __future__ import annotations

from ops.bench.report import Figure, Report, Target
from ops.bench.targets import TARGETS


def _hook_figure(size_key: str, p95: float) -> Figure:
    return Figure(id=f"recall.hook.{size_key}.p95", title="prompt hook p95", value=p95, unit="ms",
                  baseline_title="python -c pass", baseline=50.0, better="lower")


def test_a_target_stated_at_100k_is_not_checked_against_a_run_at_10k():
    target = next(t for t in TARGETS if t.figure == "recall.hook.large.p95")
    assert target.memories == 100_000
    report = Report(meta={"sizes": {"small": 10_000, "large": 10_000}}, targets=[target])
    report.add(_hook_figure("large", 90.0))
    [checked] = report.checked_targets()
    assert checked["met"] is None
    assert checked["verdict"] == "not measured at 100,000 memories (this run's size was 10,000)"


def test_a_target_is_checked_when_the_runs_size_is_the_one_it_is_stated_at():
    target = Target(figure="recall.hook.large.p95", text="p95 < 150 ms at 100k", kind="value_max", threshold=150.0,
                    memories=100_000)
    report = Report(meta={"sizes": {"small": 10_000, "large": 100_000}}, targets=[target])
    report.add(_hook_figure("large", 200.0))
    [checked] = report.checked_targets()
    assert checked["met"] is False and checked["verdict"].startswith("missed by 50.0 ms")
