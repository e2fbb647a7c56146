"""Search latency: hybrid search through the server vs. NumPy brute force, the fusion's cost, and end to end.

Queries alternate with their baselines one by one (NumPy top-10, then the
server's hybrid search with the same query vector; today's search, then the
search before issue 14), so load from other processes on the machine hits
both alike.
"""

from __future__ import annotations

import time

import numpy as np

from mnemosync.v1 import memory_pb2 as pb
from ops.bench.report import Figure
from ops.bench.serverproc import Client
from ops.bench.workload import Workload

PERCENTILES = (50, 95, 99)


def numpy_top10(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Brute-force cosine top-10 over unit rows: one BLAS matrix-vector product and a partial sort."""
    scores = matrix @ query
    top = np.argpartition(-scores, 10)[:10]
    return top[np.argsort(-scores[top])]


def percentiles(samples: list[float]) -> dict[int, float]:
    """p50/p95/p99 of samples in seconds, as milliseconds."""
    values = np.percentile(np.array(samples) * 1000.0, PERCENTILES)
    return dict(zip(PERCENTILES, (float(v) for v in values), strict=True))


def hybrid_vs_numpy(client: Client, matrix: np.ndarray, workload: Workload, model: pb.EmbeddingModel,
                    *, queries: int, label: str, size_key: str) -> tuple[list[Figure], dict]:
    """Hybrid (and vector-only) search latency through gRPC vs NumPy top-10 over the same vectors.

    Returns:
        The p50/p95/p99 figures, and details (cold first search, vector-only
        latencies, agreement of the top hit with NumPy's).
    """
    pairs = workload.queries(queries + 5, salt=len(matrix))
    started = time.perf_counter()
    _search(client, *pairs[0], model, pb.SEARCH_MODE_HYBRID)
    cold = time.perf_counter() - started
    for text, vector in pairs[1:5]:  # warm both sides
        numpy_top10(matrix, vector)
        _search(client, text, vector, model, pb.SEARCH_MODE_HYBRID)
    base, hybrid, vector_only, agree = [], [], [], 0
    for text, vector in pairs[5:]:
        t = time.perf_counter()
        expected = numpy_top10(matrix, vector)
        base.append(time.perf_counter() - t)
        t = time.perf_counter()
        _search(client, text, vector, model, pb.SEARCH_MODE_HYBRID)
        hybrid.append(time.perf_counter() - t)
        t = time.perf_counter()
        found = _search(client, "", vector, model, pb.SEARCH_MODE_VECTOR)
        vector_only.append(time.perf_counter() - t)
        agree += [r.memory.content.split(":", 1)[0] for r in found.results[:10]] == [
            _content_key(i) for i in expected]
    hp, bp, vp = percentiles(hybrid), percentiles(base), percentiles(vector_only)
    figures = [
        Figure(id=f"search.hybrid.{size_key}.p{p}", title=f"hybrid search p{p} @ {label} (gRPC, query vector given)",
               value=hp[p], unit="ms", baseline_title=f"NumPy brute-force cosine top-10 p{p}, same vectors",
               baseline=bp[p], better="lower", details={"memories": len(matrix), "queries": len(hybrid)})
        for p in PERCENTILES
    ]
    details = {"memories": len(matrix), "queries": len(hybrid), "cold_first_search_ms": cold * 1000,
               "vector_only_ms": vp, "numpy_ms": bp, "hybrid_ms": hp,
               "vector_top10_identical_to_numpy": f"{agree}/{len(hybrid)}"}
    return figures, details


def fusion_cost(db_path, workload: Workload, *, queries: int, label: str, size_key: str) -> tuple[list[Figure], dict]:
    """Today's hybrid search vs. the one before issue 14 (`ops.bench.legacy_search`), in this process.

    Both run on a read connection to the server's database file, with the same
    query text and vector, alternating query by query: the difference is the
    cost of score fusion over 100 candidates per channel against rank fusion
    over 50, without the gRPC round trip both would share.
    """
    from mnemosync.kernel import db, search, vectors
    from ops.bench import legacy_search

    conn = db.connect(db_path).conn
    mirror = vectors.open_mirror(db_path)
    vectors.attach(conn, mirror)
    try:
        pairs = [(text, vector.astype("<f4").tobytes()) for text, vector in
                 workload.queries(queries + 5, salt=len(label))]
        for text, vector in pairs[:5]:  # loads the mirror and warms both
            search.search(conn, query=text, vector=vector, limit=10)
            legacy_search.search(conn, query=text, vector=vector, limit=10)
        now, before = [], []
        for text, vector in pairs[5:]:
            t = time.perf_counter()
            search.search(conn, query=text, vector=vector, limit=10)
            now.append(time.perf_counter() - t)
            t = time.perf_counter()
            legacy_search.search(conn, query=text, vector=vector, limit=10)
            before.append(time.perf_counter() - t)
    finally:
        conn.close()
        mirror.close()
    np_, bp = percentiles(now), percentiles(before)
    figures = [
        Figure(id=f"search.fusion.{size_key}.p{p}", title=f"hybrid search p{p} @ {label} (in process, score fusion)",
               value=np_[p], unit="ms", baseline_title=f"the same search before issue 14 (rank fusion) p{p}",
               baseline=bp[p], better="lower", details={"queries": len(now)})
        for p in (50, 95)
    ]
    return figures, {"queries": len(now), "score_fusion_ms": np_, "rank_fusion_ms": bp}


def _content_key(index: int) -> str:
    from ops.bench.workload import TYPES

    return f"{TYPES[index % len(TYPES)]} {index}"


def _search(client: Client, text: str, vector: np.ndarray, model: pb.EmbeddingModel, mode) -> pb.SearchResponse:
    return client.search(pb.SearchRequest(query=text, query_vector=vector.tolist(), embedding_model=model,
                                          limit=10, mode=mode))


def end_to_end(agent, embedder, queries: list[str], *, label: str) -> tuple[list[Figure], dict]:
    """AgentClient.search (embed the query + hybrid search) vs embedding the query alone.

    Both run with the embedder's cache off, alternating query by query.
    """
    agent.search(queries[0])
    e2e, embed = [], []
    for text in queries:
        t = time.perf_counter()
        embedder.embed(text)
        embed.append(time.perf_counter() - t)
        t = time.perf_counter()
        agent.search(text, limit=10)
        e2e.append(time.perf_counter() - t)
    ep, bp = percentiles(e2e), percentiles(embed)
    figures = [
        Figure(id=f"search.e2e.p{p}", title=f"end-to-end search p{p} @ {label} (AgentClient: embed + hybrid)",
               value=ep[p], unit="ms", baseline_title=f"embedding the query alone p{p}", baseline=bp[p],
               better="lower", details={"queries": len(e2e)})
        for p in (50, 95)
    ]
    return figures, {"queries": len(e2e), "e2e_ms": ep, "embed_ms": bp,
                     "search_share_of_p50_ms": ep[50] - bp[50]}
