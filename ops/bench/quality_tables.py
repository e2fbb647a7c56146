"""The retrieval-quality section of the Markdown report: one table per labelled set, dev and test side by side.

Each cell is recall@5 / recall@10 / MRR@10 for one mode on one group of
questions; the last column says whether hybrid search reaches the better
single channel at recall@10 (the bar issue 14 sets for every category).
"""

from __future__ import annotations

from typing import Any

COLUMNS = (("vector", "vector"), ("keyword", "keyword"), ("hybrid", "hybrid"), ("rrf", "plain RRF (baseline)"))


def render(quality: dict[str, Any]) -> str:
    """Markdown tables for `report.quality` as `ops.bench.bench_quality.run_into` records it."""
    lines = [f"Each cell: recall@5 / recall@10 / MRR@10 (model {quality.get('model', '?')}). "
             f"Baseline: {quality['baseline']}, measured in the same run.", ""]
    for name, measured in quality["sets"].items():
        lines += [f"### {name}: {measured['memories']} memories, {measured['queries']} questions", ""]
        if name in quality.get("variants", {}):
            lines += [f"Variant: {quality['variants'][name]}.", ""]
        lines += ["| split | questions | " + " | ".join(title for _, title in COLUMNS) + " | hybrid ≥ best channel |",
                  "| --- | --- | " + " | ".join("---:" for _ in COLUMNS) + " | --- |"]
        for split, summary in measured["splits"].items():
            groups = [("all", summary["modes"], summary["queries"])] + [
                (c, summary["by_category"][c], summary["category_counts"][c])
                for c in measured["categories"] if c in summary["by_category"]]
            for group, by_mode, count in groups:
                cells = [_cell(by_mode[mode]) for mode, _ in COLUMNS]
                best = max(by_mode["vector"]["recall@10"], by_mode["keyword"]["recall@10"])
                verdict = "yes" if by_mode["hybrid"]["recall@10"] >= best else "**no**"
                lines.append(f"| {split} | {group} ({count}) | " + " | ".join(cells) + f" | {verdict} |")
        lines += ["", "| search latency (client side, all questions) | p50 ms | p95 ms |", "| --- | ---: | ---: |"]
        lines += [f"| {mode} | {t['p50']:.2f} | {t['p95']:.2f} |" for mode, t in measured["latency_ms"].items()]
        lines.append("")
    return "\n".join(lines)


def _cell(m: dict[str, float]) -> str:
    return f"{m['recall@5']:.3f} / {m['recall@10']:.3f} / {m['mrr']:.3f}"
