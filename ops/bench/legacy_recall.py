"""The prompt hook's recall decision as issue 28 shipped it, kept as the benchmark's same-run baseline.

Its features compare each hit with the other hits of the same search (the
background of the hits beyond the best three, how far below the best, the
margin to the next), use the keyword channel's IDF-weighted coverage (which a
store of a few memories leaves empty) and the prompt's kind; its coefficients
are `data/legacy/recall_model_issue28.json`. `LegacyDecision` is today's
`mnemosync.kernel.recall_decision.Decision` with those features, so the
benchmark judges the same hits with both. Nothing outside the benchmark uses it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mnemosync.kernel.recall_decision import Decision, is_generic, is_question, similarity, topic_words
from mnemosync.kernel.search import Hit

MODEL = Path(__file__).resolve().parent / "data" / "legacy" / "recall_model_issue28.json"
FEATURES = ("similarity", "above_background", "below_top", "margin", "both_channels", "coverage", "content_words",
            "chat", "question", "generic", "ours")
BACKGROUND_FROM = 3
"""Hits beyond this many (by similarity) made the background."""
FULL_WORDS = 3
_OURS = re.compile(r"\b(we|our|ours|us|team|project)\b")


def features(prompt: str, hits: Sequence[Hit]) -> list[dict[str, float]]:
    """Each hit's features as issue 28 computed them, in the order of `hits`."""
    sims = [similarity(h) for h in hits]
    ordered = sorted(sims, reverse=True)
    rest = ordered[BACKGROUND_FROM:]
    background = sum(rest) / len(rest) if rest else (ordered[-1] if ordered else 0.0)
    top = ordered[0] if ordered else 0.0
    words = topic_words(prompt)
    kind = {"content_words": math.log1p(len(words)), "chat": float(not words), "question": float(is_question(prompt)),
            "generic": float(is_generic(prompt)), "ours": float(bool(_OURS.search(prompt.lower())))}
    shrink = min(1.0, len(words) / FULL_WORDS)
    rows = []
    for hit, sim in zip(hits, sims, strict=True):
        below = [s for s in ordered if s < sim]
        rows.append({"similarity": sim, "above_background": sim - background, "below_top": top - sim,
                     "margin": sim - below[0] if below else 0.0,
                     "both_channels": float(bool(hit.vector_rank and hit.keyword_rank)),
                     "coverage": (hit.keyword_coverage if hit.keyword_rank else 0.0) * shrink, **kind})
    return rows


@dataclass(frozen=True)
class LegacyDecision(Decision):
    """Issue 28's decision: its features, its coefficients, its threshold and its one memory per prompt."""

    def features(self, prompt: str, hits: Sequence[Hit]) -> list[dict[str, float]]:
        return features(prompt, hits)


def legacy_decision() -> LegacyDecision:
    """Issue 28's fitted decision, as shipped (`MODEL`)."""
    data = json.loads(MODEL.read_text(encoding="utf-8"))
    return LegacyDecision(weights=data["weights"], intercept=float(data["intercept"]), mean=data["mean"],
                          scale=data["scale"], threshold=float(data["threshold"]), max_items=int(data["max_items"]),
                          sure_similarity=float(data["sure_similarity"]))
