"""Fits the recall decision on the dev stores and writes it to `proto/mnemosync/kernel/recall_model.json`.

    python -m ops.bench.fit_recall                      # search the prompt sets with the real model, fit, write
    python -m ops.bench.fit_recall --rows rows.jsonl    # fit on rows saved by an earlier run (--save-rows)

Training examples are every search hit of every dev prompt: the public
projects' dev stores at every size (`ops.bench.recall_sizes`) and the dev
project stores of `recall/`, labelled 1 when the prompt needs that memory
(negatives' hits are all 0). The features are
`mnemosync.kernel.recall_decision.features`, standardised by their dev mean and
deviation; the model is an L2-regularised logistic regression fitted by
Newton's method (numpy), so its output is an estimated chance.

The threshold and the most items per prompt are then chosen on the same dev
rows, group by group (each public size, and the project stores): among the
choices where every group injects something into at most `MAX_UNRELATED` of
its unrelated prompts and at most the aim's tokens per prompt, the one with
the highest mean over the groups of F1 (the harmonic mean of recall and
precision), so neither is bought with the other. The relevance floor under which MCP
`search` drops a result is the probability below which `TAIL_SHARE` of the
needed memories' hits lie on dev. The test stores are not read here; their
figures come from `python -m ops.bench.bench_recall`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ops.bench import recall_prompts, recall_sizes

MAX_UNRELATED = 0.05
"""The aim; a dev group has about 66 unrelated prompts, so a tighter bound would turn on one or two prompts."""
TAIL_SHARE = 0.02
"""The share of needed memories' hits the relevance floor may drop (on dev)."""
L2 = 1.0
THRESHOLDS = tuple(round(0.05 + i / 100, 2) for i in range(91))
ITEMS = (1, 2, 3)


def examples(rows: Sequence[dict[str, Any]]):
    """(features matrix, labels) of every hit of `rows`."""
    import numpy as np

    from mnemosync.kernel.recall_decision import FEATURES, features

    x, y = [], []
    for row in rows:
        wanted = set(row["wanted"])
        for h, f in zip(row["hits"], features(row["text"], recall_prompts.hits_of(row)), strict=True):
            x.append([f[name] for name in FEATURES])
            y.append(1.0 if h["label"] in wanted else 0.0)
    return np.array(x), np.array(y)


def fit(x, y, *, l2: float = L2, iterations: int = 50):
    """Logistic regression weights (intercept first) on standardised `x`, by Newton's method with an L2 penalty
    on the weights (not the intercept); returns (weights, mean, scale)."""
    import numpy as np

    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = np.hstack([np.ones((len(x), 1)), (x - mean) / scale])
    w = np.zeros(z.shape[1])
    penalty = np.eye(z.shape[1]) * l2
    penalty[0, 0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-z @ w))
        gradient = z.T @ (p - y) + penalty @ w
        hessian = (z * (p * (1 - p))[:, None]).T @ z + penalty
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w, mean, scale


def groups(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Rows by the group a choice must hold on: each public store size, and the project stores together."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        key = f"public-{row['size']}" if row["store"] in _public_names() else "projects"
        out.setdefault(key, []).append(row)
    return out


def _public_names() -> set[str]:
    from ops.bench import datasets

    return {s.name for s in datasets.public_recall_stores()}


def _ranked(rows: Sequence[dict[str, Any]], base: dict[str, Any]) -> list[tuple[dict[str, Any], list[float],
                                                                                list[str], list[float]]]:
    """Per row: the row, its candidates' probabilities best first, their labels, and the tokens the hook would
    inject with the first 0, 1, 2 and 3 of them (so each choice of threshold and items costs no new rendering)."""
    from mnemosync.kernel.recall_decision import Decision, worth_searching
    from mnemosync.shim.recall import CHARS_PER_TOKEN, render

    decision = Decision(weights=base["weights"], intercept=base["intercept"], mean=base["mean"],
                        scale=base["scale"], threshold=0.0, max_items=max(ITEMS))
    out = []
    for row in rows:
        judged = decision.judge(row["text"].strip(), recall_prompts.hits_of(row)) if worth_searching(row["text"]) \
            else []
        kept = [c for c in judged if c.reason != "below threshold" and c.injected or c.reason == "over max items"]
        tokens = [0.0] + [len(render([c.hit for c in kept[:k]], budget_tokens=300)[0]) / CHARS_PER_TOKEN
                          for k in range(1, max(ITEMS) + 1)]
        out.append((row, [c.probability for c in kept], [c.hit.memory.id for c in kept], tokens))
    return out


def _measure(ranked, threshold: float, items: int) -> dict[str, Any]:
    """`recall_sizes.figures` of the decision with this threshold and items over precomputed `_ranked` rows."""
    injected = correct = 0
    tokens = 0.0
    related = got = negatives = noisy = 0
    for row, probabilities, labels, rendered in ranked:
        k = sum(1 for p in probabilities[:items] if p >= threshold)
        chosen = set(labels[:k])
        wanted = set(row["wanted"])
        injected, correct, tokens = injected + k, correct + len(chosen & wanted), tokens + rendered[min(k, 3)]
        if row["kind"] in recall_sizes.RELATED:
            related, got = related + 1, got + bool(chosen & wanted)
        elif row["kind"] in recall_sizes.NEGATIVE:
            negatives, noisy = negatives + 1, noisy + bool(chosen)
    return {"recall": got / related if related else None, "precision": correct / injected if injected else 1.0,
            "unrelated": noisy / negatives if negatives else None, "tokens": tokens / len(ranked) if ranked else 0.0,
            "injected": injected, "correct": correct}


def _f1(m: dict[str, Any]) -> float:
    recall, precision = m["recall"] or 0.0, m["precision"]
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


def choose(rows: Sequence[dict[str, Any]], base: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model with the threshold and items chosen on `rows` (see the module docstring), and its figures."""
    parts = {name: _ranked(part, base) for name, part in groups(rows).items()}
    best, best_key, best_m = None, None, None
    for items in ITEMS:
        for threshold in THRESHOLDS:
            measured = {name: _measure(part, threshold, items) for name, part in parts.items()}
            injected = sum(m["injected"] for m in measured.values())
            precision = sum(m["correct"] for m in measured.values()) / injected if injected else 1.0
            if (any((m["unrelated"] or 0) > MAX_UNRELATED for m in measured.values())
                    or any(m["tokens"] > recall_prompts.AIMS["tokens"] for m in measured.values())):
                continue
            mean_recall = sum(m["recall"] or 0 for m in measured.values()) / len(measured)
            mean_f1 = sum(_f1(m) for m in measured.values()) / len(measured)
            key = (round(mean_f1, 6), round(mean_recall, 6), threshold)
            if best_key is None or key > best_key:
                best = {**base, "threshold": threshold, "max_items": items}
                best_key = key
                best_m = {"precision": round(precision, 4), "mean_recall": round(mean_recall, 4),
                          "mean_f1": round(mean_f1, 4),
                          "groups": {k: {f: round(v, 4) for f, v in m.items() if isinstance(v, float)}
                                     for k, m in measured.items()}}
    if best is None:
        raise SystemExit("no threshold meets the dev constraints; the features do not separate the dev stores")
    return best, best_m


def relevance_floor(rows: Sequence[dict[str, Any]], base: dict[str, Any]) -> float:
    """The probability below which at most `TAIL_SHARE` of the needed memories' hits lie (see the docstring)."""
    from mnemosync.kernel.recall_decision import Decision

    decision = Decision(weights=base["weights"], intercept=base["intercept"], mean=base["mean"],
                        scale=base["scale"], threshold=1.0)
    needed = sorted(p for row in rows
                    for h, p in zip(row["hits"], decision.relevance(row["text"], recall_prompts.hits_of(row)),
                                    strict=True)
                    if h["label"] in set(row["wanted"]))
    return round(needed[int(len(needed) * TAIL_SHARE)], 3)


def model_from(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The fitted model file's content, fitted and chosen on the dev rows of `rows`."""
    from mnemosync.kernel.recall_decision import BACKGROUND_PRIOR, BACKGROUND_WEIGHT, FEATURE_DOCS, FEATURES

    dev = [r for r in rows if r["split"] == "dev"]
    x, y = examples(dev)
    w, mean, scale = fit(x, y)
    base = {"weights": {f: round(float(v), 6) for f, v in zip(FEATURES, w[1:], strict=True)},
            "intercept": round(float(w[0]), 6),
            "mean": {f: round(float(v), 6) for f, v in zip(FEATURES, mean, strict=True)},
            "scale": {f: round(float(v), 6) for f, v in zip(FEATURES, scale, strict=True)}}
    model, m = choose(dev, base)
    model["min_relevance"] = relevance_floor(dev, base)
    stores = sorted({r["store"] for r in dev})
    model["about"] = {
        "what": "The recall decision and the relevance of search hits (mnemosync.kernel.recall_decision): a logistic "
                "regression over each hit's features estimating the chance the memory is one the prompt needs; "
                "the prompt hook injects a hit when it reaches `threshold`, best first, at most `max_items`; MCP "
                "search drops hits under `min_relevance`. Weights apply to standardised features ((x - mean) / "
                "scale).",
        "features": FEATURE_DOCS,
        "background": {"prior": BACKGROUND_PRIOR, "weight": BACKGROUND_WEIGHT},
        "fitted_by": "python -m ops.bench.fit_recall (L2 logistic regression, Newton's method, numpy)",
        "fitted_on": f"dev stores at sizes 1, 5, 30, 300 and 3,000 (public projects) and as they are (projects): "
                     f"{', '.join(stores)} ({len(dev)} prompts, {len(y)} hits, {int(y.sum())} of them needed)",
        "chosen_for": f"unrelated prompts injected <= {MAX_UNRELATED} and mean tokens <= "
                      f"{recall_prompts.AIMS['tokens']:.0f} in every group; highest mean F1 of recall and precision "
                      f"over the groups; relevance floor: {TAIL_SHARE:.0%} of the needed hits below it",
        "dev_figures": m,
        "reported_by": "python -m ops.bench.bench_recall (test stores)",
        "fitted_at": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    return model


def main(argv: list[str] | None = None) -> int:
    from mnemosync.kernel.recall_decision import MODEL_PATH

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, help="fit on rows saved by --save-rows instead of searching")
    parser.add_argument("--save-rows", type=Path, help="save the searched rows here")
    parser.add_argument("--out", type=Path, default=MODEL_PATH, help="where to write the model")
    args = parser.parse_args(argv)
    rows = recall_prompts.load(args.rows) if args.rows else collect_rows()
    if args.save_rows:
        recall_prompts.save(rows, args.save_rows)
    model = model_from(rows)
    args.out.write_text(json.dumps(model, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(model["about"]["dev_figures"]), f"threshold {model['threshold']}, items {model['max_items']}, "
          f"floor {model['min_relevance']}", file=sys.stderr)
    return 0


def collect_rows() -> list[dict[str, Any]]:
    """Searches the dev stores' prompts at every size with the default model."""
    from mnemosync.agent.model import ensure_default_model
    from mnemosync.kernel.settings_loading import default_data_home

    return recall_sizes.collect_all(ensure_default_model(default_data_home()), lambda m: print(m, file=sys.stderr),
                                    splits=("dev",))


if __name__ == "__main__":
    raise SystemExit(main())
