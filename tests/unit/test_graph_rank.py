"""`mnemosync.kernel.graph_rank.pagerank`: Personalized PageRank agrees with a plain dense implementation on random
graphs (a property test); the plain one is written here from the textbook definition, not from the module."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.graph_rank import check, pagerank


def plain_ppr(n: int, edges: list[tuple[int, int, float]], seeds: list[int], alpha: float) -> np.ndarray:
    """Solves r = alpha p + (1 - alpha) (M r + d.r p) exactly, M column-stochastic over undirected weighted edges,
    d the dangling indicator."""
    w = np.zeros((n, n))
    for a, b, weight in edges:
        w[a, b] += weight
        w[b, a] += weight
    totals = w.sum(axis=1)
    m = np.zeros((n, n))
    for u in range(n):
        if totals[u] > 0:
            m[:, u] = w[u] / totals[u]
    p = np.zeros(n)
    p[seeds] = 1.0 / len(seeds)
    dangling = (totals <= 0).astype(float)
    a = np.eye(n) - (1 - alpha) * (m + np.outer(p, dangling))
    return np.linalg.solve(a, alpha * p)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1), st.floats(0.05, 1.0)), max_size=30),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True),
    st.floats(0.05, 0.9))))
def test_personalized_pagerank_matches_a_plain_implementation_on_random_graphs(case):
    n, edges, seeds, alpha = case
    edges = [(a, b, w) for a, b, w in edges if a != b]
    adjacency: dict[str, dict[str, float]] = {str(i): {} for i in range(n)}
    for a, b, w in edges:
        adjacency[str(a)][str(b)] = adjacency[str(a)].get(str(b), 0.0) + w
        adjacency[str(b)][str(a)] = adjacency[str(b)].get(str(a), 0.0) + w
    scores, iterations = pagerank(adjacency, [str(s) for s in seeds], alpha)
    expected = plain_ppr(n, edges, seeds, alpha)
    assert sum(scores.values()) == pytest.approx(1.0, abs=1e-6)
    assert [scores[str(i)] for i in range(n)] == pytest.approx(list(expected), abs=1e-6)
    assert iterations >= 1


def test_graph_search_arguments_are_checked_naming_the_bound():
    assert check(seeds=0, alpha=0, limit=0) == (5, 0.15, 10, ())
    with pytest.raises(InvalidArgument, match="alpha must be between 0 and 1"):
        check(seeds=1, alpha=1.5, limit=1)
    with pytest.raises(InvalidArgument, match="seeds must be 1 to 50"):
        check(seeds=51, alpha=0.2, limit=1)
