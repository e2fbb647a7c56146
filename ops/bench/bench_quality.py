"""Retrieval quality on the labelled set: recall@5, recall@10 and MRR per search mode.

The labelled set (`ops/bench/data/retrieval/`) holds 300+ memories of the kinds
agents store (decisions, fixes, preferences, people, dates, configuration)
and 150+ queries in four categories:

* paraphrase: shares no searchable word with any relevant memory (checked by
  `shares_keywords`, with the server's own FTS5 tokenizer and query builder);
* identifier: error codes, file paths, configuration keys, host names;
* temporal: when something happened;
* general: ordinary questions that share some words with the answer.

Everything goes through the real server over gRPC with the real embedding
model, so the numbers are what agents get.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlite_utils.utils import sqlite3

from mnemosync.v1 import memory_pb2 as pb
from ops.bench.report import Report

DATA = Path(__file__).resolve().parent / "data" / "retrieval"
MODES = {"vector": pb.SEARCH_MODE_VECTOR, "keyword": pb.SEARCH_MODE_KEYWORD, "hybrid": pb.SEARCH_MODE_HYBRID}
_NAMESPACE = uuid.UUID("6d9c0f1e-7a55-4b9e-9d0c-6e6d6e6d6f36")


def load_labelled_set() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(memories, queries) of the labelled set."""
    memories = [json.loads(line) for line in (DATA / "memories.jsonl").read_text(encoding="utf-8").splitlines()]
    queries = [json.loads(line) for line in (DATA / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    return memories, queries


def memory_uuid(label_id: str) -> str:
    """The memory id a labelled memory is stored under (stable per label)."""
    return str(uuid.uuid5(_NAMESPACE, label_id))


def shares_keywords(query: str, texts: Sequence[str]) -> bool:
    """True if the keyword channel's query for `query` matches any of `texts`.

    Uses the server's FTS5 tokenizer settings and `server.core.search.keyword_query`,
    so "no shared words" means exactly "keyword search cannot find it".
    """
    from server.core import projections
    from server.core.search import keyword_query

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


def load_into(client, embedder, model: pb.EmbeddingModel, memories: list[dict[str, Any]]) -> None:
    """Appends the labelled memories (embedded with `embedder`) through `client`."""
    vectors = embedder.embed_many([m["content"] for m in memories])
    ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_uuid(m["id"]), add=pb.AddOp(
        scope="user", type=m["type"], tags=m["tags"], content=m["content"], embedding=v))
        for m, v in zip(memories, vectors, strict=True)]
    for start in range(0, len(ops), 100):
        client.append(pb.AppendRequest(operations=ops[start:start + 100], embedding_model=model))


def evaluate(client, embedder, model: pb.EmbeddingModel, queries: list[dict[str, Any]],
             memories: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs every query in every mode and returns the metrics, overall and per category."""
    label_of = {memory_uuid(m["id"]): m["id"] for m in memories}
    per_query = []
    for q in queries:
        vector = embedder.embed(q["query"])
        row = {"id": q["id"], "category": q["category"], "query": q["query"], "relevant": q["relevant"]}
        for mode, value in MODES.items():
            request = pb.SearchRequest(query=q["query"], limit=10, mode=value)
            if mode != "keyword":
                request.query_vector.extend(vector)
                request.embedding_model.CopyFrom(model)
            found = [label_of.get(r.memory.id, "?") for r in client.search(request).results]
            row[mode] = found
        per_query.append(row)
    return summarise(per_query)


def summarise(per_query: list[dict[str, Any]]) -> dict[str, Any]:
    """recall@5, recall@10 and MRR@10 per mode, overall and per category, with the misses."""
    def metrics(rows: list[dict[str, Any]], mode: str) -> dict[str, float]:
        r5 = r10 = rr = 0.0
        for row in rows:
            relevant, found = set(row["relevant"]), row[mode]
            r5 += len(relevant & set(found[:5])) / len(relevant)
            r10 += len(relevant & set(found[:10])) / len(relevant)
            rank = next((i for i, f in enumerate(found[:10], 1) if f in relevant), 0)
            rr += 1.0 / rank if rank else 0.0
        n = max(len(rows), 1)
        return {"recall@5": r5 / n, "recall@10": r10 / n, "mrr": rr / n}

    categories = sorted({row["category"] for row in per_query})
    modes = {mode: metrics(per_query, mode) for mode in MODES}
    by_category = {c: {mode: metrics([r for r in per_query if r["category"] == c], mode) for mode in MODES}
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


def run_into(report: Report, workdir: Path, model_path: Path | None) -> None:
    """Loads the labelled set into a fresh server and records the quality table in `report`."""
    if model_path is None:
        report.notes.append("retrieval quality skipped: no embedding model available")
        return
    from agent_client.embeddings import Embedder
    from ops.bench.serverproc import Client, ServerProcess

    memories, queries = load_labelled_set()
    with Embedder(model_path) as embedder, ServerProcess(workdir, synchronous="normal",
                                                         embed_model=model_path) as server:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        client = Client(server.address, "bench-quality")
        try:
            load_into(client, embedder, model, memories)
            quality = evaluate(client, embedder, model, queries, memories)
        finally:
            client.close()
    quality["memories"] = len(memories)
    quality["model"] = fp.name
    report.quality = quality
