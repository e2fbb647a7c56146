"""The public-project recall set at every store size: 1, 5, 30, 300 and 3,000 memories.

Each store of `ops/bench/data/recall_public/` is searched at five sizes, the
variants fixed here before any result was looked at:

* 1: each of the store's memories alone; asked the prompts that need it, the
  store's negatives, and three of its other related prompts (`absent`: their
  memory is not in the store, so the right answer is nothing);
* 5: the store's memories in groups of five (in the order of the SHA-256 of
  their ids; the last group padded from other stores); asked every prompt of
  the store, a related prompt whose memories are all elsewhere counting as
  `absent`;
* 30, 300 and 3,000: the whole store, padded in the same scope with other
  memories: first the other public stores', then the project stores of
  `recall/`, then the code-assistant set and the conversational set's turns,
  each pool in the order of the SHA-256 of its ids; asked every prompt.

Every variant is its own database (the agent cache's schema, each memory
written as the cache writes it), searched by the kernel's hybrid search with
the lifecycle re-ranking, as a session's cache answers; a store is the whole
database, so at size 1 the keyword statistics are those of one memory, as on a
new project's server. Rows are those of `ops.bench.recall_prompts.collect`,
with `size`, `variant` and the prompt's `kind` (`absent` as above), so the same
selectors and figures apply.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ops.bench import datasets

SIZES = (1, 5, 30, 300, 3000)
ABSENT_PER_MEMORY = 3
"""Related prompts of the store asked of each one-memory variant whose memory they do not need."""
RELATED = ("question", "instruction", "follow-up")
NEGATIVE = ("chit-chat", "generic", "unrelated-task")
ABSENT = "absent"
SCOPE = "project:bench"
_DAY_MS = 86_400_000
_NOW_MS = 1_767_225_600_000


@dataclass(frozen=True)
class Item:
    """One memory of a variant: its label (`pool:id`), content and type."""

    label: str
    content: str
    type: str


@dataclass(frozen=True)
class Asked:
    """One prompt asked of a variant: the memories it needs there (empty: it should get nothing) and its kind."""

    id: str
    text: str
    kind: str
    wanted: tuple[str, ...]


@dataclass(frozen=True)
class Variant:
    """A store at one size: what it holds and what it is asked."""

    store: str
    split: str
    size: int
    name: str
    memories: tuple[Item, ...]
    prompts: tuple[Asked, ...]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _items(pool: str, memories: Sequence[datasets.Memory]) -> list[Item]:
    return sorted((Item(f"{pool}:{m.id}", m.content, m.type) for m in memories), key=lambda i: _sha(i.label))


def padding_pools() -> list[list[Item]]:
    """The memories that pad a store, pool by pool (see the module docstring), the public stores' first."""
    public = [i for s in datasets.public_recall_stores() for i in _items(s.name, s.memories)]
    public.sort(key=lambda i: _sha(i.label))
    projects = sorted((i for s in datasets.recall_stores() for i in _items(f"project-{s.name}", s.memories)),
                      key=lambda i: _sha(i.label))
    code, talk = datasets.retrieval_set(), datasets.conversations_set()
    return [public, projects, _items("code", code.memories), _items("talk", talk.memories)]


def _padded(own: list[Item], pools: list[list[Item]], size: int) -> tuple[Item, ...]:
    out, seen = list(own), {i.label for i in own}
    for pool in pools:
        for item in pool:
            if len(out) >= size:
                return tuple(out)
            if item.label not in seen:
                out.append(item)
                seen.add(item.label)
    if len(out) < size:
        raise ValueError(f"only {len(out)} memories to pad a store to {size}")
    return tuple(out)


def _asked(store: datasets.PromptStore, held: set[str], prompts: Sequence[datasets.Prompt]) -> tuple[Asked, ...]:
    out = []
    for p in prompts:
        wanted = tuple(f"{store.name}:{m}" for m in p.memories if f"{store.name}:{m}" in held)
        kind = p.kind if wanted or p.kind in NEGATIVE else ABSENT
        out.append(Asked(p.id, p.text, kind, wanted))
    return tuple(out)


def variants(stores: Sequence[datasets.PromptStore], sizes: Sequence[int] = SIZES,
             pools: list[list[Item]] | None = None) -> list[Variant]:
    """Every store at every size in `sizes` (see the module docstring)."""
    pools = pools if pools is not None else padding_pools()
    out = []
    for store in stores:
        own = _items(store.name, store.memories)
        negatives = [p for p in store.prompts if p.kind in NEGATIVE]
        for size in sizes:
            if size == 1:
                for item in own:
                    mid = item.label.split(":", 1)[1]
                    needing = [p for p in store.prompts if mid in p.memories]
                    others = sorted((p for p in store.prompts if p.kind in RELATED and mid not in p.memories),
                                    key=lambda p: _sha(p.id + item.label))[:ABSENT_PER_MEMORY]
                    out.append(Variant(store.name, store.split, 1, f"{store.name}/1/{mid}", (item,),
                                       _asked(store, {item.label}, [*needing, *negatives, *others])))
            elif size == 5:
                for n, start in enumerate(range(0, len(own), 5)):
                    group = _padded(own[start:start + 5], pools, 5)
                    out.append(Variant(store.name, store.split, 5, f"{store.name}/5/{n}", group,
                                       _asked(store, {i.label for i in group}, store.prompts)))
            else:
                held = _padded(own, pools, size)
                out.append(Variant(store.name, store.split, size, f"{store.name}/{size}", held,
                                   _asked(store, {i.label for i in held}, store.prompts)))
    return out


def project_variants(stores: Sequence[datasets.PromptStore] | None = None) -> list[Variant]:
    """The project stores of `recall/` (issue 28's set), each as it is (30-32 memories), asked all its prompts;
    `size` is its number of memories, `split` its own ("dev" or "heldout")."""
    out = []
    for store in stores if stores is not None else datasets.recall_stores():
        own = _items(store.name, store.memories)
        out.append(Variant(store.name, store.split, len(own), f"{store.name}/{len(own)}", tuple(own),
                           _asked(store, {i.label for i in own}, store.prompts)))
    return out


@contextmanager
def _database(items: Sequence[Item], vectors: dict[str, np.ndarray], workdir: Path) -> Iterator[Any]:
    """A fresh cache database holding `items` (a memory each, written as the cache writes one)."""
    from mnemosync.kernel import projections
    from mnemosync.kernel.memory import MemoryRow, content_hash
    from ops.bench import rawcopy

    folder = Path(tempfile.mkdtemp(dir=workdir))
    dims = len(next(iter(vectors.values())))
    conn = rawcopy.new_cache_db(folder / "cache.db", dims)
    try:
        conn.execute("BEGIN")
        for n, item in enumerate(items, 1):
            created = _NOW_MS - _DAY_MS
            row = MemoryRow(num=0, id=item.label, scope=SCOPE, type=item.type, layer=3, tags=[], content=item.content,
                            importance=0.5, confidence=0.9, protected=False, author_agent="bench-loader",
                            updated_by="bench-loader", version=1, created_at_ms=created, updated_at_ms=created,
                            archived=False, embedding_model="bench", content_hash=content_hash(item.content),
                            last_seq=n, authority=2, content_agent="bench-loader", content_authority=2)
            projections.put_memory(conn, row, vectors[item.content].astype(np.float32).tobytes())
        conn.execute("COMMIT")
        yield conn
    finally:
        conn.close()
        shutil.rmtree(folder, ignore_errors=True)


def _hit_row(hit) -> dict[str, Any]:
    m = hit.memory
    return {"label": m.id, "id": m.id, "version": m.version, "type": m.type, "content": m.content,
            "vector_rank": hit.vector_rank, "similarity": 1 - hit.vector_distance, "keyword_rank": hit.keyword_rank,
            "coverage": hit.keyword_coverage, "bm25": hit.bm25, "vector_score": hit.vector_score,
            "keyword_score": hit.keyword_score, "fused": hit.fused, "final": hit.final}


def collect(chosen: Sequence[Variant], embed: Callable[[list[str]], list[list[float]]], workdir: Path,
            log: Callable[[str], None] = lambda _: None) -> list[dict[str, Any]]:
    """Every prompt of every variant searched as a session's cache searches it (`SEARCH_LIMIT` hits)."""
    from mnemosync.kernel.recall_decision import SEARCH_LIMIT
    from mnemosync.kernel.search import Filter, Ranking, search
    from mnemosync.shim.recall import MAX_QUERY_CHARS

    texts = sorted({i.content for v in chosen for i in v.memories}
                   | {p.text.strip()[:MAX_QUERY_CHARS] for v in chosen for p in v.prompts})
    vectors = {t: np.asarray(v, dtype=np.float32) for t, v in zip(texts, embed(texts), strict=True)}
    rows = []
    started = time.monotonic()
    for n, variant in enumerate(chosen, 1):
        if n % 50 == 0 or variant.size >= 300:
            log(f"  recall sizes: {n}/{len(chosen)} variants ({variant.name}), {time.monotonic() - started:.0f}s")
        with _database(variant.memories, vectors, workdir) as conn:
            for p in variant.prompts:
                query = p.text.strip()[:MAX_QUERY_CHARS]
                hits = search(conn, query=query, vector=vectors[query].tobytes(), limit=SEARCH_LIMIT,
                              filter=Filter(scopes=(SCOPE,)), ranking=Ranking(now_ms=_NOW_MS))
                rows.append({"store": variant.store, "split": variant.split, "size": variant.size,
                             "variant": variant.name, "id": p.id, "kind": p.kind, "text": p.text,
                             "wanted": list(p.wanted), "hits": [_hit_row(h) for h in hits]})
    return rows


def collect_all(model_path: Path, log: Callable[[str], None], *, sizes: Sequence[int] = SIZES,
                splits: Sequence[str] = datasets.PUBLIC_SPLITS, projects: bool = True) -> list[dict[str, Any]]:
    """`collect` over every public store of `splits` at `sizes` and (`projects`) every project store of `recall/`,
    embedding with the model at `model_path` (through the on-disk cache of the labelled sets' embeddings)."""
    from mnemosync.agent.embeddings import Embedder
    from ops.bench.embedding_cache import DEFAULT_DIR, CachedEmbeddings

    stores = [s for s in datasets.public_recall_stores() if s.split in splits]
    chosen = variants(stores, sizes) + (project_variants() if projects else [])
    work = Path(tempfile.mkdtemp(prefix="mnemosync-recall-sizes-"))
    try:
        with Embedder(model_path) as embedder:
            cached = CachedEmbeddings(embedder, DEFAULT_DIR, log)
            return collect(chosen, cached.embed_many, work, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def figures(rows: Sequence[dict[str, Any]], select, *, budget_tokens: int = 300) -> dict[str, Any]:
    """A selector's figures over `rows` (one split and size, say): `recall` (related prompts that got a memory
    they need), `precision` (injected memories that were needed, whatever the prompt), `unrelated` (negative
    prompts that got anything), `absent` (related prompts whose memory is not in the store that got anything),
    `tokens` (mean injected tokens per prompt), and `by_kind` (per related kind its recall, per negative kind and
    `absent` the share that got anything), with the counts."""
    from mnemosync.shim.recall import CHARS_PER_TOKEN, render
    from ops.bench.recall_prompts import hits_of

    injected = correct = 0
    tokens = 0.0
    got: dict[str, list[bool]] = {}
    for row in rows:
        chosen = select(row["text"], hits_of(row))
        text, shown = render(chosen, budget_tokens=budget_tokens) if chosen else ("", [])
        labels = [h.memory.id for h in shown]
        wanted = set(row["wanted"])
        tokens += len(text) / CHARS_PER_TOKEN
        injected += len(labels)
        correct += sum(label in wanted for label in labels)
        got.setdefault(row["kind"], []).append(bool(wanted & set(labels)) if wanted else bool(labels))
    related = [g for k in RELATED for g in got.get(k, [])]
    negative = [g for k in NEGATIVE for g in got.get(k, [])]
    absent = got.get(ABSENT, [])

    def share(values: list[bool]) -> float | None:
        return sum(values) / len(values) if values else None

    return {"prompts": len(rows), "related": len(related), "negatives": len(negative), "absent_prompts": len(absent),
            "recall": share(related), "precision": correct / injected if injected else 1.0,
            "unrelated": share(negative), "absent": share(absent), "tokens": tokens / len(rows) if rows else 0.0,
            "injected": injected, "by_kind": {k: {"prompts": len(v), "share": share(v)} for k, v in got.items()}}


def table(rows: Sequence[dict[str, Any]], selectors: dict[str, Any]) -> list[dict[str, Any]]:
    """`figures` per split, size and selector (then per store at each size, `store` set)."""
    lines = []
    for split in sorted({r["split"] for r in rows}):
        for size in sorted({r["size"] for r in rows}):
            part = [r for r in rows if r["split"] == split and r["size"] == size]
            for name, select in selectors.items():
                lines.append({"split": split, "size": size, "store": "all", "decision": name,
                              **figures(part, select)})
    return lines


def markdown(lines: Sequence[dict[str, Any]]) -> str:
    """`table`'s lines as Markdown: the headline figures, then recall per related kind and what negatives got."""
    def pct(v: float | None) -> str:
        return "–" if v is None else f"{v:.2f}"

    out = ["| split | size | decision | recall | precision | unrelated injected | absent injected | tokens/prompt "
           "| question | instruction | follow-up | chit-chat | generic | unrelated task |",
           "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for m in lines:
        kinds = " | ".join(pct(m["by_kind"].get(k, {}).get("share")) for k in (*RELATED, *NEGATIVE))
        size = f"{m['size']:,}" if isinstance(m["size"], int) else m["size"]
        out.append(f"| {m['split']} | {size} | {m['decision']} | {pct(m['recall'])} | {m['precision']:.2f} "
                   f"| {pct(m['unrelated'])} | {pct(m['absent'])} | {m['tokens']:.0f} | {kinds} |")
    return "\n".join(out)


def calibration(rows: Sequence[dict[str, Any]], decision, bins: int = 10) -> dict[str, Any]:
    """How well `decision.relevance` is calibrated over every hit of `rows`: the Brier score, and per bin of
    predicted relevance the hits, their mean prediction and the share that was needed (a reliability table)."""
    from ops.bench.recall_prompts import hits_of

    pairs = [(p, h["label"] in set(row["wanted"])) for row in rows
             for h, p in zip(row["hits"], decision.relevance(row["text"].strip(), hits_of(row)), strict=True)]
    table = []
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = [(p, y) for p, y in pairs if low <= p < high or (b == bins - 1 and p == 1.0)]
        if inside:
            table.append({"from": low, "to": high, "hits": len(inside),
                          "predicted": sum(p for p, _ in inside) / len(inside),
                          "observed": sum(y for _, y in inside) / len(inside)})
    brier = sum((p - y) ** 2 for p, y in pairs) / len(pairs) if pairs else 0.0
    base = sum(y for _, y in pairs) / len(pairs) if pairs else 0.0
    return {"hits": len(pairs), "brier": brier, "brier_of_the_base_rate": base * (1 - base), "bins": table}


def calibration_markdown(c: dict[str, Any]) -> str:
    """`calibration` as a Markdown reliability table."""
    out = [f"Brier score {c['brier']:.4f} over {c['hits']:,} hits (a constant at the base rate: "
           f"{c['brier_of_the_base_rate']:.4f})", "",
           "| predicted relevance | hits | mean predicted | share needed |", "| --- | ---: | ---: | ---: |"]
    out += [f"| {b['from']:.1f}–{b['to']:.1f} | {b['hits']:,} | {b['predicted']:.3f} | {b['observed']:.3f} |"
            for b in c["bins"]]
    return "\n".join(out)
