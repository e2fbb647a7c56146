"""The labelled prompt set through recall: each store served fresh, each prompt searched as the warm process
searches it, and a decision (the old bar or the fitted model) measured on what it would inject.

`collect` stores each project store of `ops/bench/data/recall/` in its own
server with the real model, and searches every prompt through an
`AgentClient` (`SEARCH_LIMIT` hits, as `mnemosync.shim.recall` does). A row
keeps the hits with their score parts and memories, so a decision can be
applied, and rendered, without the server.

`evaluate` applies a decision to rows and gives, per store:

* `recall`: related prompts that got at least one memory they need;
* `memory_recall`: needed memories injected over those that could be (at most
  the decision's items per prompt);
* `precision`: injected memories that were needed, over all injected
  (unrelated prompts' injections count as wrong);
* `unrelated`: negative prompts (chit-chat, generic, unrelated tasks) that got
  anything;
* `tokens`: mean injected tokens per prompt (the rendered block, 4 characters
  a token, 0 when nothing), over all prompts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ops.bench import datasets

AIMS = {"recall": 0.85, "precision": 0.90, "unrelated": 0.05, "tokens": 150.0}
"""The issue's aims on the held-out stores (at least, at least, at most, at most)."""


def collect(model_path: Path, workdir: Path, log: Callable[[str], None],
            stores: Sequence[datasets.PromptStore] | None = None) -> list[dict[str, Any]]:
    """Every prompt's hits, as the warm process gets them (see the module docstring)."""
    from mnemosync.agent.embeddings import Embedder
    from mnemosync.shim.recall import MAX_QUERY_CHARS, SEARCH_LIMIT
    from mnemosync.v1 import memory_pb2 as pb
    from ops.bench import bench_quality

    rows = []
    with Embedder(model_path) as embedder:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        for store in stores if stores is not None else datasets.recall_stores():
            log(f"  recall prompts: {store.name} ({store.split}), {len(store.prompts)} prompts")
            with bench_quality.served_agent(workdir, f"prompts-{store.name}", store.memories, embedder, model,
                                            model_path) as (client, label):
                for p in store.prompts:
                    hits = client.search(p.text.strip()[:MAX_QUERY_CHARS], limit=SEARCH_LIMIT,
                                         scopes=[bench_quality.SCOPE]).hits
                    rows.append({"store": store.name, "split": store.split, "id": p.id, "kind": p.kind,
                                 "text": p.text, "wanted": list(p.memories), "hits": [
                                     {"label": label.get(h.memory.id), "vector_rank": h.vector_rank,
                                      "similarity": 1 - h.vector_distance, "keyword_rank": h.keyword_rank,
                                      "coverage": h.keyword_coverage, "id": h.memory.id,
                                      "version": h.memory.version, "type": h.memory.type,
                                      "content": h.memory.content} for h in hits]})
    return rows


def hits_of(row: dict[str, Any]) -> list:
    """The row's hits as `Hit`s with their memories (author and date fixed: they only change the rendering's
    label by a few characters)."""
    from mnemosync.kernel.memory import MemoryRow
    from mnemosync.kernel.search import Hit

    out = []
    for n, h in enumerate(row["hits"], 1):
        memory = MemoryRow(num=n, id=h["id"], scope="user", type=h["type"], layer=3, tags=[], content=h["content"],
                           importance=0.5, confidence=0.9, protected=False, author_agent="bench-recall-loader",
                           updated_by="bench-recall-loader", version=h["version"], created_at_ms=1_767_225_600_000,
                           updated_at_ms=1_767_225_600_000, archived=False, embedding_model="m", content_hash="h",
                           last_seq=n)
        out.append(Hit(memory=memory, vector_rank=h["vector_rank"], vector_distance=1 - h["similarity"],
                       keyword_rank=h["keyword_rank"], keyword_coverage=h["coverage"]))
    return out


Selector = Callable[[str, list], list]
"""(prompt, hits) -> the hits injected, best first."""


def bar_selector(bar) -> Selector:
    """The absolute bar (`mnemosync.shim.recall.Bar`) as a selector; like the hook, it searches no prompt that
    `worth_searching` turns away."""
    from mnemosync.kernel.recall_decision import worth_searching

    return lambda prompt, hits: bar.select(hits) if worth_searching(prompt) else []


def decision_selector(decision) -> Selector:
    """The fitted decision (`mnemosync.kernel.recall_decision.Decision`) as a selector (as `bar_selector`)."""
    from mnemosync.kernel.recall_decision import worth_searching

    return lambda prompt, hits: ([c.hit for c in decision.decide(prompt.strip(), hits) if c.injected]
                                 if worth_searching(prompt) else [])


def evaluate(rows: Iterable[dict[str, Any]], select: Selector, *, max_items: int = 3,
             budget_tokens: int = 300) -> dict[str, float]:
    """The selector's figures over `rows` (see the module docstring)."""
    from mnemosync.shim.recall import CHARS_PER_TOKEN, render

    related = got = wanted_total = wanted_found = injected = correct = negatives = noisy = 0
    tokens = 0.0
    prompts = 0
    for row in rows:
        prompts += 1
        by_id = {h["id"]: h["label"] for h in row["hits"]}
        chosen = select(row["text"], hits_of(row))
        text, shown = render(chosen, budget_tokens=budget_tokens) if chosen else ("", [])
        labels = [by_id[h.memory.id] for h in shown]
        tokens += len(text) / CHARS_PER_TOKEN
        wanted = set(row["wanted"])
        found = sum(label in wanted for label in labels)
        injected, correct = injected + len(labels), correct + found
        if wanted:
            related += 1
            got += found > 0
            wanted_total += min(len(wanted), max_items)
            wanted_found += found
        else:
            negatives += 1
            noisy += bool(labels)
    return {"prompts": prompts, "related": related, "negatives": negatives,
            "recall": got / related if related else 0.0,
            "memory_recall": wanted_found / wanted_total if wanted_total else 0.0,
            "precision": correct / injected if injected else 1.0,
            "unrelated": noisy / negatives if negatives else 0.0, "tokens": tokens / prompts if prompts else 0.0,
            "injected": injected}


def meets_aims(m: dict[str, float]) -> bool:
    """True when figures meet every aim of `AIMS`."""
    return (m["recall"] >= AIMS["recall"] and m["precision"] >= AIMS["precision"]
            and m["unrelated"] <= AIMS["unrelated"] and m["tokens"] <= AIMS["tokens"])


def table(rows: Sequence[dict[str, Any]], selectors: dict[str, Selector]) -> list[dict[str, Any]]:
    """One line per store, split and selector, then one per split (all its stores together)."""
    lines = []
    stores = sorted({(r["split"], r["store"]) for r in rows})
    for split, store in stores:
        for name, select in selectors.items():
            lines.append({"split": split, "store": store, "decision": name,
                          **evaluate([r for r in rows if r["store"] == store], select)})
    for split in datasets.RECALL_SPLITS:
        for name, select in selectors.items():
            part = [r for r in rows if r["split"] == split]
            if part:
                lines.append({"split": split, "store": "all", "decision": name, **evaluate(part, select)})
    return lines


def markdown(lines: Sequence[dict[str, Any]]) -> str:
    """The table as Markdown."""
    out = ["| split | store | decision | recall | memory recall | precision | unrelated injected | tokens/prompt |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for m in lines:
        out.append(f"| {m['split']} | {m['store']} | {m['decision']} | {m['recall']:.2f} | {m['memory_recall']:.2f} "
                   f"| {m['precision']:.2f} | {m['unrelated']:.2f} | {m['tokens']:.0f} |")
    return "\n".join(out)


def save(rows: Sequence[dict[str, Any]], path: Path) -> None:
    """Writes collected rows as JSON Lines (the fit reads them back instead of searching again)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def load(path: Path) -> list[dict[str, Any]]:
    """Rows written by `save`."""
    return datasets.read_jsonl(path)
