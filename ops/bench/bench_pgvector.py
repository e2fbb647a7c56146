"""The vector channel on PostgreSQL: pgvector (exact and HNSW) beside the NumPy scan a server's replica runs.

Why this exists. On PostgreSQL every `mnemosync serve` keeps a local SQLite
replica and answers searches from it (sqlite-vec, FTS5 and an exact NumPy
mirror of the vectors), so ranking is the same code on both stores. Issue 18
asked for pgvector; this measures what answering the vector channel from
pgvector instead would cost, on the same vectors and queries in one run:

- NumPy: the exact scan of the replica's mirror (one matrix-vector product and a
  partial sort, in the server's process);
- pgvector exact: `ORDER BY embedding <=> q LIMIT k` over the table (a
  sequential scan in PostgreSQL, one round trip through psycopg);
- pgvector HNSW: the index's build time, then queries at three `ef_search`
  values, each with its recall@k against the exact answer. pgvector already
  orders the graph's candidates by their exact distance, so rescoring them
  again cannot change the answer: recall is what the graph walk finds.

Two sets of vectors (`--vectors`): `random`, the benchmark workload's unit
vectors with no structure at all (the hard case for a graph index), and
`clustered`, unit vectors around 1,000 topics with queries near a topic, closer
to how text embeddings crowd together. The exact scans do not care which.

    .venv/bin/python -m ops.bench.bench_pgvector                      # 100k clustered vectors, 200 queries
    .venv/bin/python -m ops.bench.bench_pgvector --vectors random --size 20000 --out /tmp/pgvector
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ops.bench.bench_search import percentiles
from ops.bench.bench_stores import postgresql
from ops.bench.workload import DIMS, Workload

K = 10
EF_SEARCH = (40, 100, 400)
TOPICS = 1_000


def clustered(size: int, queries: int, seed: int = 18) -> tuple[np.ndarray, list[np.ndarray]]:
    """Unit vectors around `TOPICS` random topics (each about as close to its topic as to the rest of it),
    and queries drawn the same way."""
    rng = np.random.default_rng(seed)
    topics = rng.standard_normal((TOPICS, DIMS), dtype=np.float32)
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)

    def around(n: int) -> np.ndarray:
        v = topics[rng.integers(0, TOPICS, size=n)] + 0.05 * rng.standard_normal((n, DIMS), dtype=np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    return around(size), list(around(queries))


def _literal(v: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in v) + "]"


def _timed(run, queries: list[np.ndarray]) -> tuple[dict[int, float], list]:
    """p50/p95/p99 of `run` over `queries` (after one untimed warm-up call), and its answers."""
    run(queries[0])
    samples, answers = [], []
    for q in queries:
        started = time.perf_counter()
        answers.append(run(q))
        samples.append(time.perf_counter() - started)
    return percentiles(samples), answers


def _recall(got: list[list[int]], exact: list[list[int]]) -> float:
    return float(np.mean([len(set(g) & set(e)) / len(e) for g, e in zip(got, exact, strict=True)]))


def measure(url: str, size: int, queries: int, vectors: str = "clustered", log=print) -> dict:
    """Loads `size` vectors into a pgvector table at `url` and times the three ways of answering top-K."""
    import psycopg

    if vectors == "random":
        workload = Workload()
        matrix, asked = workload.vectors(0, size), [v for _, v in workload.queries(queries, salt=3)]
    else:
        matrix, asked = clustered(size, queries)
    result: dict = {"size": size, "queries": queries, "k": K, "dims": DIMS, "vectors": vectors}

    def numpy_topk(q: np.ndarray) -> list[int]:
        scores = matrix @ q
        top = np.argpartition(-scores, K)[:K]
        return [int(i) for i in top[np.argsort(-scores[top])]]

    result["numpy_ms"], exact = _timed(numpy_topk, asked)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(f"CREATE TABLE vecs (id integer PRIMARY KEY, embedding vector({DIMS}) NOT NULL)")
        log(f"pgvector: loading {size:,} vectors")
        started = time.perf_counter()
        with conn.cursor().copy("COPY vecs (id, embedding) FROM STDIN") as copy:
            for i, v in enumerate(matrix):
                copy.write_row((i, _literal(v)))
        conn.execute("ANALYZE vecs")
        result["load_s"] = time.perf_counter() - started

        def pg_topk(q: np.ndarray) -> list[int]:
            rows = conn.execute("SELECT id FROM vecs ORDER BY embedding <=> %s::vector LIMIT %s",
                                (_literal(q), K)).fetchall()
            return [r[0] for r in rows]

        log("pgvector: exact scans")
        result["pgvector_exact_ms"], answers = _timed(pg_topk, asked)
        result["pgvector_exact_recall"] = _recall(answers, exact)

        log("pgvector: building the HNSW index")
        conn.execute("SET maintenance_work_mem = '1GB'")
        started = time.perf_counter()
        conn.execute("CREATE INDEX vecs_hnsw ON vecs USING hnsw (embedding vector_cosine_ops)")
        result["hnsw_build_s"] = time.perf_counter() - started
        result["hnsw"] = []
        for ef in EF_SEARCH:
            conn.execute(f"SET hnsw.ef_search = {int(ef)}")
            latency, answers = _timed(pg_topk, asked)
            result["hnsw"].append({"ef_search": ef, "ms": latency, "recall": _recall(answers, exact)})
    return result


def markdown(r: dict) -> str:
    def row(name: str, ms: dict, recall: float) -> str:
        return f"| {name} | {ms[50]:.1f} | {ms[95]:.1f} | {recall:.3f} |"

    lines = [f"Top-{r['k']} of {r['size']:,} {r['vectors']} {r['dims']}-dim vectors, {r['queries']} queries "
             f"(load {r['load_s']:.0f} s, HNSW build {r['hnsw_build_s']:.0f} s)", "",
             "| vector channel | p50 ms | p95 ms | recall@k |", "| --- | ---: | ---: | ---: |",
             row("NumPy exact scan (the replica's mirror)", r["numpy_ms"], 1.0),
             row("pgvector exact (sequential scan)", r["pgvector_exact_ms"], r["pgvector_exact_recall"])]
    for h in r["hnsw"]:
        lines.append(row(f"pgvector HNSW, ef_search {h['ef_search']}", h["ms"], h["recall"]))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    doc = (__doc__ or "").strip().splitlines()
    parser = argparse.ArgumentParser(prog="python -m ops.bench.bench_pgvector", description=doc[0],
                                     epilog="\n".join(doc[1:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=100_000, help="vectors in the table [default 100000]")
    parser.add_argument("--queries", type=int, default=200, help="queries timed per method [default 200]")
    parser.add_argument("--vectors", choices=("clustered", "random"), default="clustered",
                        help="vectors around topics, or without any structure [default clustered]")
    parser.add_argument("--out", type=Path, default=None, help="directory for pgvector.json and pgvector.md")
    args = parser.parse_args(argv)
    if args.size <= K or args.queries < 1:
        parser.error(f"--size must be above {K} and --queries at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-pgvector-") as tmp, postgresql(Path(tmp)) as (_, new_database):
        result = measure(new_database(), args.size, args.queries, args.vectors, log=lambda m: print(m, file=sys.stderr))
    text = markdown(result)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pgvector.json").write_text(json.dumps(result, indent=2))
        (args.out / "pgvector.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
