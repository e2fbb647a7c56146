"""Retrieval quality on the labelled sets: recall@5, recall@10 and MRR per search mode, split and category.

Two labelled sets (`ops/bench/datasets.py`), each split into dev (tune on it)
and test (report it):

* retrieval: 300+ short memories of the kinds agents store (decisions, fixes,
  preferences, people, dates, configuration) and 150+ queries: paraphrase
  (shares no searchable word with any relevant memory, checked by
  `shares_keywords` with the server's own FTS5 tokenizer and query builder),
  identifier (error codes, paths, keys, hosts), temporal and general;
* conversations: multi-session conversations stored one memory per dialog
  turn, with single-hop, multi-hop, temporal and open-domain questions.

Each set is stored in its own fresh server with the real embedding model, and
every query runs through gRPC in each server mode (vector only, keyword only,
hybrid as the server fuses today). Next to them, in the same run, a baseline:
plain Reciprocal Rank Fusion (k = 60) of the same two channels' result lists,
fused here on the client. Search latency is measured per mode on the client.
"""

from __future__ import annotations

import re
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlite_utils.utils import sqlite3

from mnemosync.v1 import memory_pb2 as pb
from ops.bench import datasets, quality_usage, quality_variants
from ops.bench.datasets import LabelledSet, Memory, Query
from ops.bench.report import Report

DATA = datasets.DATA / "retrieval"
MODES = {"vector": pb.SEARCH_MODE_VECTOR, "keyword": pb.SEARCH_MODE_KEYWORD, "hybrid": pb.SEARCH_MODE_HYBRID,
         "fused": pb.SEARCH_MODE_HYBRID}
"""Server modes measured; "fused" is hybrid search in the fused order alone (SearchRequest.fusion_only: without the
cognitive re-ranking of issue 15), "hybrid" the default, re-ranked."""
BASELINE = "rrf"
RRF_K = 60
TOP_K = 10
BASELINE_DEPTH = 50  # the baseline's depth per channel (the server's hybrid search fused 50 before issue 14)
SCOPE = "user"
_NAMESPACE = uuid.UUID("6d9c0f1e-7a55-4b9e-9d0c-6e6d6e6d6f36")


def load_labelled_set() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(memories, queries) of the retrieval set as the records in its files."""
    return datasets.read_jsonl(DATA / "memories.jsonl"), datasets.read_jsonl(DATA / "queries.jsonl")


def memory_uuid(label_id: str) -> str:
    """The memory id a labelled memory is stored under (stable per label)."""
    return str(uuid.uuid5(_NAMESPACE, label_id))


def shares_keywords(query: str, texts: Sequence[str]) -> bool:
    """True if the keyword channel's query for `query` matches any of `texts`.

    Uses the server's FTS5 tokenizer settings and `mnemosync.kernel.search.keyword_query`,
    so "no shared words" means exactly "keyword search cannot find it".
    """
    from mnemosync.kernel import projections
    from mnemosync.kernel.search import keyword_query

    fts_query = keyword_query(query)
    if not fts_query:
        return False
    tokenize = re.search(r"tokenize\s*=\s*'([^']+)'", projections.SCHEMA).group(1)
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tokenize = '{tokenize}')")
        conn.executemany("INSERT INTO t (content) VALUES (?)", [(t,) for t in texts])
        return conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (fts_query,)).fetchone()[0] > 0
    finally:
        conn.close()


@contextmanager
def served_agent(workdir: Path, name: str, memories: Sequence[Memory], embedder, model: pb.EmbeddingModel,
                 model_path: Path, *, loading_embedder=None) -> Iterator[tuple[Any, dict[str, str]]]:
    """A server process holding `memories` (embedded with `loading_embedder`, default `embedder`) and an agent
    client of it that embeds queries with `embedder` (no live stream, no catch-up at start): (client, label of
    each memory's uuid)."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings
    from ops.bench.serverproc import Client, ServerProcess

    with ServerProcess(workdir / name, synchronous="normal", embed_model=model_path) as srv:
        loader = Client(srv.address, "bench-recall-loader")
        try:
            store(loader, loading_embedder or embedder, model, memories)
        finally:
            loader.close()
        settings = ClientSettings(server=srv.address, agent_id="bench-recall", insecure=True,
                                  cache_dir=workdir / f"{name}-agent", embed_model=model_path)
        client = AgentClient(settings, embedder=embedder, live=False, sync_on_start=False)
        try:
            yield client, {memory_uuid(m.id): m.id for m in memories}
        finally:
            client.close()


def store(client, embedder, model: pb.EmbeddingModel, memories: Sequence[Memory]) -> None:
    """Appends `memories` (embedded with `embedder.embed_many`) through `client`, 100 per call.

    A memory with an event time (a dialog turn: its session's date and time, read as UTC) is stored with it.
    """
    from mnemosync.kernel import event_time

    vectors = embedder.embed_many([m.content for m in memories])
    ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_uuid(m.id), add=pb.AddOp(
        scope=SCOPE, type=m.type, tags=m.tags, content=m.content, embedding=v,
        event_time_ms=event_time.parse(m.event_time) if m.event_time else None))
        for m, v in zip(memories, vectors, strict=True)]
    for start in range(0, len(ops), 100):
        client.append(pb.AppendRequest(operations=ops[start:start + 100], embedding_model=model))


def search_all(client, embedder, model: pb.EmbeddingModel, queries: Sequence[Query],
               memories: Sequence[Memory], *, baseline: bool = True, weak: bool = False) -> list[dict[str, Any]]:
    """Runs every query in every server mode, plus (with `baseline`) the RRF baseline; one row per query.

    Each row holds the top-10 label ids per mode and the client-side time
    (seconds) of each mode's call. The baseline fuses the vector-only and
    keyword-only lists, BASELINE_DEPTH deep each. With `weak`, every query
    vector is first weakened (`quality_variants.weakened`).
    """
    label_of = {memory_uuid(m.id): m.id for m in memories}
    vectors = embedder.embed_many([q.text for q in queries])
    if weak:
        vectors = [quality_variants.weakened(v, q.id) for q, v in zip(queries, vectors, strict=True)]

    def call(query: Query, vector: list[float], mode: str, limit: int) -> tuple[list[str], float]:
        request = pb.SearchRequest(query=query.text, limit=limit, mode=MODES[mode], fusion_only=mode == "fused")
        if mode != "keyword":
            request.query_vector.extend(vector)
            request.embedding_model.CopyFrom(model)
        started = time.perf_counter()
        response = client.search(request)
        elapsed = time.perf_counter() - started
        return [label_of.get(r.memory.id, "?") for r in response.results], elapsed

    rows = []
    for query, vector in zip(queries, vectors, strict=True):
        row = {"id": query.id, "category": query.category, "split": query.split, "query": query.text,
               "relevant": list(query.evidence), "seconds": {}}
        for mode in MODES:
            row[mode], row["seconds"][mode] = call(query, vector, mode, TOP_K)
        if baseline:
            row[BASELINE] = rrf([call(query, vector, mode, BASELINE_DEPTH)[0]
                                 for mode in ("vector", "keyword")])[:TOP_K]
        rows.append(row)
    return rows


def rrf(ranked_lists: Sequence[Sequence[str]], k: int = RRF_K) -> list[str]:
    """Plain Reciprocal Rank Fusion: each list adds 1 / (k + rank); ties go to the earlier list's order."""
    score: dict[str, float] = {}
    first_seen: dict[str, tuple[int, ...]] = {}
    for position, ranked in enumerate(ranked_lists):
        for rank, item in enumerate(ranked, 1):
            score[item] = score.get(item, 0.0) + 1.0 / (k + rank)
            first_seen.setdefault(item, (position, rank))
    return sorted(score, key=lambda item: (-score[item], first_seen[item], item))


def _metrics(rows: list[dict[str, Any]], mode: str) -> dict[str, float]:
    r5 = r10 = rr = 0.0
    for row in rows:
        relevant, found = set(row["relevant"]), row[mode]
        r5 += len(relevant & set(found[:5])) / len(relevant)
        r10 += len(relevant & set(found[:10])) / len(relevant)
        rank = next((i for i, f in enumerate(found[:10], 1) if f in relevant), 0)
        rr += 1.0 / rank if rank else 0.0
    n = max(len(rows), 1)
    return {"recall@5": r5 / n, "recall@10": r10 / n, "mrr": rr / n}


def summarise(per_query: list[dict[str, Any]]) -> dict[str, Any]:
    """recall@5, recall@10 and MRR@10 per mode (and the RRF baseline), overall and per category, with the misses."""
    categories = sorted({row["category"] for row in per_query})
    measured = (*MODES, BASELINE) if all(BASELINE in row for row in per_query) else tuple(MODES)
    modes = {mode: _metrics(per_query, mode) for mode in measured}
    by_category = {c: {mode: _metrics([r for r in per_query if r["category"] == c], mode) for mode in measured}
                   for c in categories}
    hybrid_misses = [
        {"id": r["id"], "query": r["query"], "relevant": r["relevant"], "hybrid": r["hybrid"],
         "found_by": [m for m in ("vector", "keyword") if set(r["relevant"]) & set(r[m])]}
        for r in per_query if set(r["relevant"]) - set(r["hybrid"])
    ]
    return {
        "queries": len(per_query),
        "category_counts": {c: sum(r["category"] == c for r in per_query) for c in categories},
        "modes": modes,
        "by_category": by_category,
        "hybrid_beats_single_channels_at_recall@10": all(
            modes["hybrid"]["recall@10"] >= modes[m]["recall@10"] for m in ("vector", "keyword")),
        "hybrid_misses": hybrid_misses,
    }


def latency(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """p50 and p95 of the client-side search time per server mode, in milliseconds."""
    from ops.bench.bench_search import percentiles

    out = {}
    for mode in MODES:
        ms = percentiles([r["seconds"][mode] for r in rows])
        out[mode] = {"p50": ms[50], "p95": ms[95], "n": len(rows)}
    return out


def measure_set(labelled: LabelledSet, embedder, model: pb.EmbeddingModel, workdir: Path, model_path: Path,
                log: Callable[[str], None], *, weak_too: bool = False, use_too: bool = False,
                ) -> dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Stores one labelled set in a fresh server and measures it (and, with `weak_too`, its weak-vector variant;
    with `use_too`, then its simulated-use variants, `ops.bench.quality_usage`).

    Returns:
        Report name -> (summary per split with latency, the per-query rows).
    """
    from ops.bench.serverproc import Client, ServerProcess

    runs = {labelled.name: False, f"{labelled.name}-weak-vector": True} if weak_too else {labelled.name: False}
    measured = {}
    with ServerProcess(workdir / labelled.name, synchronous="normal", embed_model=model_path) as server:
        client = Client(server.address, "bench-quality")
        try:
            log(f"  {labelled.name}: storing {len(labelled.memories)} memories")
            store(client, embedder, model, labelled.memories)
            for name, weak in runs.items():
                log(f"  {name}: {len(labelled.queries)} queries x {len(MODES)} modes + RRF baseline")
                rows = search_all(client, embedder, model, labelled.queries, labelled.memories, weak=weak)
                measured[name] = (_measured(labelled, rows), rows)
            if use_too:
                quality_usage.record_uses(client, quality_usage.popular(labelled, memory_uuid),
                                          quality_usage.POPULAR_USES)
                log(f"  {labelled.name}-popular: {len(labelled.queries)} queries")
                rows = search_all(client, embedder, model, labelled.queries, labelled.memories, baseline=False)
                measured[f"{labelled.name}-popular"] = (_measured(labelled, rows), rows)
                split = quality_usage.evidence_used(labelled)
                evidence = [memory_uuid(e) for q in split.queries if q.category == quality_usage.USED
                            for e in q.evidence]
                quality_usage.record_uses(client, evidence, quality_usage.EVIDENCE_USES)
                log(f"  {labelled.name}-used-evidence: {len(labelled.queries)} queries")
                rows = search_all(client, embedder, model, split.queries, labelled.memories, baseline=False)
                measured[f"{labelled.name}-used-evidence"] = (_measured(split, rows), rows)
        finally:
            client.close()
    return measured


def _measured(labelled: LabelledSet, rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "memories": len(labelled.memories),
        "queries": len(labelled.queries),
        "categories": list(labelled.categories),
        "latency_ms": latency(rows),
        "splits": {split: summarise([r for r in rows if r["split"] == split]) for split in datasets.SPLITS},
    }


def run_into(report: Report, workdir: Path, model_path: Path | None, *, variants: bool = True,
             cache_dir: Path | None = None, log: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> None:
    """Measures every labelled set (and its variants, `ops.bench.quality_variants`) into `report.quality`.

    `report.quality["sets"][name]["splits"][split]` holds the metrics per mode
    (vector, keyword, hybrid, rrf) and per category; the top-level `modes` and
    `by_category` keep the retrieval set over all its queries, as before.

    Args:
        variants: Also measure the variants (they about double the time).
        cache_dir: Where embeddings are cached across runs [default
            `<data home>/labelled-set-embeddings`, shared with the tests].
    """
    if model_path is None:
        report.notes.append("retrieval quality skipped: no embedding model available")
        return
    from mnemosync.agent.embeddings import Embedder
    from ops.bench.embedding_cache import DEFAULT_DIR, CachedEmbeddings

    measured: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    with Embedder(model_path) as embedder:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        cached = CachedEmbeddings(embedder, cache_dir or DEFAULT_DIR, log)
        retrieval, conversations = datasets.labelled_sets()
        runs = [(retrieval, variants), (conversations, variants)]
        if variants:
            runs.append((quality_variants.dated(conversations), False))
        for labelled, weak_too in runs:
            measured.update(measure_set(labelled, cached, model, workdir, model_path, log, weak_too=weak_too,
                                        use_too=variants and (labelled is retrieval or labelled is conversations)))
    used = {f"{s.name}-{v}": d for s in (retrieval, conversations) for v, d in quality_usage.DESCRIPTIONS.items()}
    described = {**quality_variants.DESCRIPTIONS, **used}
    order = [retrieval.name, conversations.name, *(n for n in described if n in measured)]
    report.quality = {
        **summarise(measured[retrieval.name][1]),
        "memories": len(retrieval.memories),
        "model": fp.name,
        "baseline": f"plain RRF (k={RRF_K}) of the vector-only and keyword-only lists, {BASELINE_DEPTH} deep each",
        "sets": {name: measured[name][0] for name in order},
        "variants": {n: d for n, d in described.items() if n in measured},
        "embedding_cache": {"path": str(cached.path), "hits": cached.hits, "computed": cached.computed},
    }
