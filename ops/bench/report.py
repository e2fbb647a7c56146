"""The benchmark report: figures side by side with same-run baselines, targets, rendering.

Every figure is measured next to a baseline taken in the same run on the same
data, so the ratio between them holds on a noisy machine even when the
absolute numbers move. Targets from issue 6 are checked here and a missed one
says by how much.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    """One measured figure and its baseline.

    Attributes:
        id: Stable key, e.g. `search.hybrid.100k.p50`.
        title: What was measured, for people.
        value: The measurement.
        unit: Its unit (`memories/s`, `ms`, `MiB`).
        baseline_title: What the baseline measured.
        baseline: The baseline's value, in the same unit.
        better: "higher" or "lower" (which direction is good for `value`).
        details: Anything else worth keeping (sample counts, spreads, sizes).
    """

    id: str
    title: str
    value: float
    unit: str
    baseline_title: str
    baseline: float
    better: str = "higher"
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """value / baseline (NaN when the baseline is zero)."""
        return self.value / self.baseline if self.baseline else math.nan

    def to_json(self) -> dict[str, Any]:
        """Plain data for the JSON report."""
        return {**asdict(self), "ratio": _finite(self.ratio)}


@dataclass(frozen=True)
class Target:
    """A target from the issue, checked against one figure.

    Attributes:
        figure: The figure id it applies to.
        text: The target as the issue states it.
        kind: "ratio_min" (ratio >= threshold), "ratio_max" (ratio <= threshold),
            "value_min" or "value_max" (the same on the absolute value).
        threshold: The limit.
        why_missed: The closing note for when it is missed: why, and what would close it.
        memories: The store size the target is stated at (0: any). A figure of the run's "small" or "large" size
            (its id says which) measured at another size is reported as not measured, not checked.
    """

    figure: str
    text: str
    kind: str
    threshold: float
    why_missed: str = ""
    memories: int = 0

    def check(self, figure: Figure) -> dict[str, Any]:
        """Whether the figure meets the target, and by how much it misses if not."""
        got = figure.ratio if self.kind.startswith("ratio") else figure.value
        at_least = self.kind.endswith("_min")
        met = got >= self.threshold if at_least else got <= self.threshold
        what = "ratio" if self.kind.startswith("ratio") else figure.unit
        if met:
            verdict = f"met ({_num(got)} {what}; target {'≥' if at_least else '≤'} {_num(self.threshold)})"
        elif at_least:
            verdict = (f"missed by {_num(self.threshold - got)} {what}: reached {_pct(got / self.threshold)} "
                       f"of the target ({_num(self.threshold / got) if got else '∞'}× short)")
        else:
            verdict = (f"missed by {_num(got - self.threshold)} {what}: "
                       f"{_num(got / self.threshold)}× the allowed {_num(self.threshold)}")
        return {
            "figure": self.figure, "target": self.text, "kind": self.kind, "threshold": self.threshold,
            "achieved": _finite(got), "met": met, "verdict": verdict,
            "why": "" if met else self.why_missed,
        }


@dataclass
class Report:
    """Everything one run measured."""

    meta: dict[str, Any] = field(default_factory=dict)
    figures: list[Figure] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    quality: dict[str, Any] = field(default_factory=dict)
    external: dict[str, Any] = field(default_factory=dict)
    sections: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, figure: Figure) -> Figure:
        """Records a figure (replacing one with the same id)."""
        self.figures = [f for f in self.figures if f.id != figure.id] + [figure]
        return figure

    def figure(self, figure_id: str) -> Figure | None:
        """The figure with this id, if it was measured."""
        return next((f for f in self.figures if f.id == figure_id), None)

    def checked_targets(self) -> list[dict[str, Any]]:
        """Each target's verdict; a target whose figure was not measured says so."""
        out = []
        for target in self.targets:
            figure = self.figure(target.figure)
            size = next((self.meta.get("sizes", {}).get(key) for key in ("small", "large")
                         if f".{key}." in target.figure), None)
            if figure is None:
                verdict = "not measured in this run"
            elif target.memories and size is not None and size != target.memories:
                verdict = f"not measured at {target.memories:,} memories (this run's size was {size:,})"
            else:
                out.append(target.check(figure))
                continue
            out.append({"figure": target.figure, "target": target.text, "met": None, "verdict": verdict, "why": ""})
        return out

    def to_json(self) -> dict[str, Any]:
        """The whole report as plain data."""
        return {
            "meta": self.meta,
            "figures": [f.to_json() for f in self.figures],
            "targets": self.checked_targets(),
            "quality": self.quality,
            "sections": self.sections,
            "external": self.external,
            "notes": self.notes,
        }

    def write(self, directory: Path) -> tuple[Path, Path]:
        """Writes `report.json` and `report.md` into `directory`; returns both paths."""
        directory.mkdir(parents=True, exist_ok=True)
        json_path, md_path = directory / "report.json", directory / "report.md"
        json_path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        md_path.write_text(render_markdown(self), encoding="utf-8")
        return json_path, md_path


def render_markdown(report: Report) -> str:
    """The report as Markdown tables, for people."""
    lines = ["# mnemosync benchmark report", ""]
    meta = report.meta
    if meta:
        lines.append(f"Run {meta.get('started', '?')} · {meta.get('mode', '?')} mode · "
                     f"{meta.get('duration_s', 0):.0f} s · {meta.get('host', {}).get('summary', '')}")
        lines.append("")
    lines += ["| figure | value | baseline (same run, same data) | baseline value | ratio |",
              "| --- | ---: | --- | ---: | ---: |"]
    for f in report.figures:
        lines.append(f"| {f.title} | {_num(f.value)} {f.unit} | {f.baseline_title} | "
                     f"{_num(f.baseline)} {f.unit} | {_num(f.ratio)}× |")
    checked = report.checked_targets()
    if checked:
        lines += ["", "## Targets (issue 6)", "", "| target | verdict |", "| --- | --- |"]
        lines += [f"| {t['target']} | {t['verdict']} |" for t in checked]
        missed = [t for t in checked if t.get("met") is False and t.get("why")]
        if missed:
            lines += ["", "### Why the missed targets are missed", ""]
            lines += [f"* **{t['target']}**: {t['why']}" for t in missed]
    if report.quality.get("modes"):
        lines += ["", "## Retrieval quality", "", render_quality(report.quality)]
    for name, section in report.external.items():
        lines += ["", f"## {name} (external benchmark)", "", "```", json.dumps(section, indent=2)[:4000], "```"]
    if report.notes:
        lines += ["", "## Notes", ""] + [f"* {n}" for n in report.notes]
    return "\n".join(lines) + "\n"


def render_quality(quality: dict[str, Any]) -> str:
    """The retrieval-quality table: recall@5, recall@10 and MRR per channel, overall and per category."""
    if "sets" in quality:  # both labelled sets, dev and test, with the RRF baseline
        from ops.bench.quality_tables import render

        return render(quality)
    modes = quality["modes"]
    lines = ["| queries | mode | recall@5 | recall@10 | MRR |", "| --- | --- | ---: | ---: | ---: |"]
    groups = [("all", modes)] + sorted(quality.get("by_category", {}).items())
    for group, by_mode in groups:
        count = quality.get("category_counts", {}).get(group, quality.get("queries", ""))
        for mode in ("vector", "keyword", "hybrid"):
            m = by_mode.get(mode)
            if m:
                lines.append(f"| {group} ({count}) | {mode} | {m['recall@5']:.3f} | {m['recall@10']:.3f} | "
                             f"{m['mrr']:.3f} |")
    return "\n".join(lines)


def _finite(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def _num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _pct(x: float) -> str:
    return f"{x * 100:.0f}%"
