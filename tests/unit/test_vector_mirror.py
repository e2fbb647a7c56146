"""`mnemosync.kernel.vector_mirror`'s compact mirror (an agent cache's): int8 codes, exact answers.

Its answers must be those of exact cosine search: the property test below draws stores full of near-duplicates and
exact ties (where an approximate score would most easily pick the wrong row) and compares each answer with the
top k by float64 cosine, ties broken by the smaller row number. `tests/unit/test_vectors.py` runs the same state
machine as the full-precision mirror over a compact one, against sqlite-vec.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemosync.kernel import db, vectors
from mnemosync.kernel.vector_mirror import Mirror

from helpers import wait_until

DIMS = 32


def _store(path, rows: list[tuple[bytes, str, str]]):
    """A vector index with `rows` (embedding, scope, author) numbered 1, 2, ..., and a compact mirror on it."""
    conn = db.connect(path, synchronous="normal").conn
    conn.execute("BEGIN")
    vectors.ensure_table(conn, DIMS)
    for num, (embedding, scope, author) in enumerate(rows, start=1):
        vectors.insert(conn, num, embedding, scope=scope, type="fact", layer=3, author=author, archived=False,
                       created_ms=num)
    conn.execute("COMMIT")
    mirror = Mirror(str(path), (vectors.TABLE, vectors.CHANGES, vectors.META), vectors.METADATA_COLUMNS,
                    vectors._connect, vectors.dimensions, compact=True, fill_aside=False)
    vectors.attach(conn, mirror)
    return conn, mirror


def _exact(matrix: np.ndarray, allowed: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best allowed rows by float64 cosine, ties by the smaller row number: (num, similarity)."""
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    scores = unit @ (query / np.linalg.norm(query))
    order = sorted((i for i in range(len(matrix)) if allowed[i]), key=lambda i: (-scores[i], i))
    return [(i + 1, float(scores[i])) for i in order[:k]]


@st.composite
def _stores(draw):
    """Vectors in a few tight clusters (near-duplicates), some repeated exactly (ties), with scopes and authors."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    centres = rng.standard_normal((draw(st.integers(1, 4)), DIMS))
    count = draw(st.integers(1, 120))
    spread = draw(st.sampled_from([1e-4, 1e-3, 1e-2, 0.3]))
    matrix = centres[rng.integers(len(centres), size=count)] + spread * rng.standard_normal((count, DIMS))
    for i in range(1, count):
        if rng.random() < 0.15:
            matrix[i] = matrix[rng.integers(i)]  # an exact tie
    matrix = matrix.astype("<f4")
    scopes = rng.choice(["user", "project:a"], size=count).tolist()
    authors = rng.choice(["alice", "bob"], size=count).tolist()
    query = (centres[rng.integers(len(centres))] + spread * rng.standard_normal(DIMS)).astype("<f4")
    return matrix, scopes, authors, query


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(store=_stores(), k=st.integers(1, 12), scope=st.sampled_from([(), ("user",)]),
       exclude=st.sampled_from([(), ("alice",)]))
def test_a_compact_mirror_answers_exactly_what_exact_cosine_search_answers(tmp_path_factory, store, k, scope,
                                                                            exclude):
    matrix, scopes, authors, query = store
    path = tmp_path_factory.mktemp("compact") / "v.db"
    conn, mirror = _store(path, [(v.tobytes(), s, a) for v, s, a in zip(matrix, scopes, authors, strict=True)])
    try:
        restrict = vectors.Restrict(scopes=scope, exclude_authors=exclude)
        got = vectors.knn(conn, query.tobytes(), k, restrict=restrict)
        assert mirror.base.compact and mirror.full_loads == 1  # answered by the compact mirror, not sqlite-vec
        allowed = np.array([(not scope or s in scope) and a not in exclude for s, a in zip(scopes, authors,
                                                                                           strict=True)])
        every = dict(_exact(matrix.astype(np.float64), allowed, query.astype(np.float64), len(matrix)))
        want = _exact(matrix.astype(np.float64), allowed, query.astype(np.float64), k)
        # one of the exact top-k lists: the k best scores in order, each row's own; rows whose scores tie to float32
        # precision may stand in for one another
        assert len(got) == len(want) and all(num in every for num, _ in got)
        for (num, distance), (_, similarity) in zip(got, want, strict=True):
            assert abs((1 - distance) - every[num]) < 1e-5 and abs(every[num] - similarity) < 1e-5
        threshold = want[min(k, len(want)) - 1][1] - 1e-3 if want else 0.5
        near = vectors.knn(conn, query.tobytes(), len(matrix), restrict=restrict, min_similarity=threshold)
        assert {n for n, s in _exact(matrix.astype(np.float64), allowed, query.astype(np.float64), len(matrix))
                if s >= threshold} <= {n for n, _ in near}
    finally:
        mirror.close()
        conn.close()


def test_a_compact_mirror_keeps_a_quarter_of_the_bytes_of_a_float32_one(tmp_path):
    rng = np.random.default_rng(3)
    rows = [(rng.standard_normal(DIMS).astype("<f4").tobytes(), "user", "alice") for _ in range(500)]
    conn, mirror = _store(tmp_path / "v.db", rows)
    try:
        vectors.knn(conn, rows[0][0], 3)
        assert mirror.base.codes8.dtype == np.int8 and not hasattr(mirror.base, "matrix")
        assert mirror.base.codes8.nbytes == mirror.base.codes8.shape[0] * DIMS
    finally:
        mirror.close()
        conn.close()


def test_a_new_caches_first_search_is_answered_by_sqlite_vec_while_the_mirror_fills_aside(tmp_path):
    rng = np.random.default_rng(5)
    rows = [(rng.standard_normal(DIMS).astype("<f4").tobytes(), "user", "alice") for _ in range(300)]
    conn, _ = _store(tmp_path / "v.db", rows)
    mirror = vectors.open_mirror(tmp_path / "v.db", compact=True)  # as an agent's cache opens it
    vectors.attach(conn, mirror)
    try:
        first = vectors.knn(conn, rows[7][0], 5)
        assert first[0][0] == 8  # exact, from sqlite-vec: the mirror was not read first
        wait_until(lambda: mirror.full_loads == 1, message="the mirror never filled")
        again = vectors.knn(conn, rows[7][0], 5)  # from the mirror now: the same rows, the same distances
        assert [n for n, _ in again] == [n for n, _ in first]
        assert [d for _, d in again] == pytest.approx([d for _, d in first], abs=1e-6)
        assert mirror.full_loads == 1
    finally:
        mirror.close()
        conn.close()


def test_a_mirror_that_holds_no_index_keeps_no_rows_of_the_writes_it_sees(tmp_path):
    """An agent whose searches go to the server never reads its mirror: the rows its catch-up wrote must not wait in
    the mirror's write-through cache for a refresh that never comes. Once it holds the index, it keeps them again."""
    rng = np.random.default_rng(7)
    conn, mirror = _store(tmp_path / "v.db", [])
    rows = [rng.standard_normal(DIMS).astype("<f4").tobytes() for _ in range(40)]
    try:
        conn.execute("BEGIN")
        for num, embedding in enumerate(rows[:20], start=1):
            vectors.insert(conn, num, embedding, scope="user", type="fact", layer=3, author="alice", archived=False,
                           created_ms=num)
        conn.execute("COMMIT")
        assert mirror.pending == {}
        assert vectors.knn(conn, rows[3], 1)[0][0] == 4  # the mirror reads the index now
        conn.execute("BEGIN")
        vectors.insert(conn, 21, rows[20], scope="user", type="fact", layer=3, author="alice", archived=False,
                       created_ms=21)
        conn.execute("COMMIT")
        assert list(mirror.pending) == [21]
        assert vectors.knn(conn, rows[20], 1)[0][0] == 21
    finally:
        mirror.close()
        conn.close()
