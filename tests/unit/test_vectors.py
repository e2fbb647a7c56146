"""`mnemosync.kernel.vectors` and `mnemosync.kernel.vector_mirror`: the index answers exactly what sqlite-vec answers,
from any connection, in any transaction state.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from mnemosync.kernel import db, vectors
from mnemosync.kernel.vector_mirror import Mirror

DIMS = 8


SCOPES = ("user", "project:a")


AUTHORS = ("alice", "bob")


def _unit(seed: int) -> bytes:
    v = np.random.default_rng(seed).standard_normal(DIMS).astype("<f4")
    return (v / np.linalg.norm(v)).astype("<f4").tobytes()


def _truth(conn, vector: bytes, k: int, restrict: vectors.Restrict) -> list[tuple[int, float]]:
    clauses, params = vectors._restrict_sql(restrict)
    return vectors._sqlite_vec_knn(conn, vector, k, clauses, params)


EVERYTHING = vectors.Restrict()


def _connect(path, mirror):
    conn = db.connect(path, synchronous="normal").conn
    vectors.attach(conn, mirror)
    return conn


def _check(conn, got: list[tuple[int, float]], query: bytes, k: int, restrict: vectors.Restrict = EVERYTHING,
           threshold: float | None = None) -> None:
    """`got` is a correct answer: true rows with true distances, the k best (ties in any order)."""
    everything = dict(_truth(conn, query, 1000, restrict))
    for num, d in got:
        assert num in everything and abs(everything[num] - d) < 1e-5
    best = sorted(everything.values())[:k]
    distances = [d for _, d in got]
    assert distances == sorted(distances)
    if threshold is None:
        assert distances == pytest.approx(best, abs=1e-5)
    else:
        need = [d for d in best if 1 - d >= threshold]
        assert distances[:len(need)] == pytest.approx(need, abs=1e-5)
        assert all(1 - d >= threshold - 1e-3 for d in distances)


class VectorIndexMachine(RuleBasedStateMachine):
    """A writer making changes in transactions with savepoints, and a reader, both searching."""

    compact = False

    def __init__(self):
        super().__init__()
        import tempfile
        from pathlib import Path

        self.dir = tempfile.TemporaryDirectory()
        path = Path(self.dir.name) / "v.db"
        self.mirror = Mirror(str(path), (vectors.TABLE, vectors.CHANGES, vectors.META), vectors.METADATA_COLUMNS,
                             vectors._connect, vectors.dimensions, compact=self.compact, fill_aside=False)
        # one mirror for both connections, as the store has
        self.writer = _connect(path, self.mirror)
        self.reader = _connect(path, self.mirror)
        self.writer.execute("BEGIN")
        vectors.ensure_table(self.writer, DIMS)
        self.writer.execute("COMMIT")
        self.nums: set[int] = set()
        self.next_num = 1
        self.savepoint = False

    def teardown(self):
        self.mirror.close()
        if self.writer.in_transaction:
            self.writer.execute("ROLLBACK")
        self.writer.close()
        self.reader.close()
        self.dir.cleanup()

    def _begin(self):
        if not self.writer.in_transaction:
            self.writer.execute("BEGIN IMMEDIATE")

    @rule(seed=st.integers(0, 10**6), scope=st.sampled_from(SCOPES), author=st.sampled_from(AUTHORS))
    def insert(self, seed, scope, author):
        self._begin()
        vectors.insert(self.writer, self.next_num, _unit(seed), scope=scope, type="fact", layer=3, author=author,
                       archived=False, created_ms=seed)
        self.nums.add(self.next_num)
        self.next_num += 1

    @precondition(lambda self: self.nums)
    @rule(data=st.data(), seed=st.integers(0, 10**6))
    def change(self, data, seed):
        num = data.draw(st.sampled_from(sorted(self.nums)))
        self._begin()
        kind = data.draw(st.sampled_from(["embedding", "archived", "layer", "delete"]))
        if kind == "embedding":
            vectors.set_embedding(self.writer, num, _unit(seed))
        elif kind == "archived":
            vectors.set_attribute(self.writer, num, "archived", seed % 2)
        elif kind == "layer":
            vectors.set_attribute(self.writer, num, "layer", 1 + seed % 4)
        else:
            vectors.delete(self.writer, num)

    @rule()
    def savepoint_start(self):
        self._begin()
        if not self.savepoint:
            self.writer.execute("SAVEPOINT sp")
            self.savepoint = True

    @precondition(lambda self: self.savepoint)
    @rule(undo=st.booleans())
    def savepoint_end(self, undo):
        if undo:
            self.writer.execute("ROLLBACK TO sp")
        self.writer.execute("RELEASE sp")
        self.savepoint = False

    @precondition(lambda self: self.writer.in_transaction)
    @rule(commit=st.booleans())
    def end(self, commit):
        self.writer.execute("COMMIT" if commit else "ROLLBACK")
        self.savepoint = False
        self.nums = {n for (n,) in self.writer.execute(f"SELECT rowid FROM {vectors.TABLE}")} | self.nums

    @rule(seed=st.integers(0, 10**6), k=st.integers(1, 6), archived=st.booleans(),
          scope=st.sampled_from(((),) + tuple((s,) for s in SCOPES)), exclude=st.sampled_from(((),) + tuple(
              (a,) for a in AUTHORS)), writer=st.booleans(), threshold=st.sampled_from([None, 0.0, 0.5, 0.9]))
    def search(self, seed, k, archived, scope, exclude, writer, threshold):
        conn = self.writer if writer else self.reader
        restrict = vectors.Restrict(scopes=scope, exclude_authors=exclude, include_archived=archived)
        query = _unit(seed)
        got = vectors.knn(conn, query, k, restrict=restrict, min_similarity=threshold)
        _check(conn, got, query, k, restrict, threshold)

    @invariant()
    def a_reader_sees_only_committed_rows(self):
        query = _unit(7)
        _check(self.reader, vectors.knn(self.reader, query, 4), query, 4)


TestVectorIndex = VectorIndexMachine.TestCase


TestVectorIndex.settings = settings(max_examples=60, stateful_step_count=40, deadline=None,
                                    suppress_health_check=[HealthCheck.too_slow])


class CompactVectorIndexMachine(VectorIndexMachine):
    """The same, over a compact mirror (an agent cache's: int8 codes, candidates scored exactly)."""

    compact = True


TestCompactVectorIndex = CompactVectorIndexMachine.TestCase
TestCompactVectorIndex.settings = settings(max_examples=30, stateful_step_count=40, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])


def test_a_rebuilt_index_is_searched_as_it_is_now(tmp_path):
    mirror = vectors.open_mirror(tmp_path / "v.db")
    conn = _connect(tmp_path / "v.db", mirror)
    conn.execute("BEGIN")
    for num in range(1, 6):
        vectors.insert(conn, num, _unit(num), scope="user", type="fact", layer=3, author="a", archived=False,
                       created_ms=0)
    conn.execute("COMMIT")
    assert vectors.knn(conn, _unit(3), 1)[0][0] == 3
    conn.execute("BEGIN")
    vectors.drop(conn)
    vectors.insert(conn, 9, _unit(3), scope="user", type="fact", layer=3, author="a", archived=False, created_ms=0)
    assert [n for n, _ in vectors.knn(conn, _unit(3), 5)] == [9]  # inside the rebuild
    conn.execute("COMMIT")
    assert [n for n, _ in vectors.knn(conn, _unit(3), 5)] == [9]
    mirror.close()
    conn.close()


def test_connections_without_a_mirror_are_searched_with_sqlite_vec():
    conn = db.connect(":memory:", synchronous="normal").conn
    conn.execute("BEGIN")
    vectors.insert(conn, 1, _unit(1), scope="user", type="fact", layer=3, author="a", archived=False, created_ms=0)
    conn.execute("COMMIT")
    assert vectors.knn(conn, _unit(1), 3)[0][0] == 1
    conn.close()


@pytest.mark.parametrize("threshold", [0.3, 0.95])
def test_a_threshold_query_finds_every_row_at_least_that_similar(tmp_path, threshold):
    mirror = vectors.open_mirror(tmp_path / "v.db")
    conn = _connect(tmp_path / "v.db", mirror)
    rng = np.random.default_rng(1)
    base = rng.standard_normal(384).astype("<f4")
    conn.execute("BEGIN")
    for num in range(1, 400):
        v = base + rng.standard_normal(384).astype("<f4") * (num / 100)
        vectors.insert(conn, num, v.astype("<f4").tobytes(), scope="user", type="fact", layer=3, author="a",
                       archived=False, created_ms=0)
    conn.execute("COMMIT")
    query = base.astype("<f4").tobytes()
    want = {n for n, d in _truth(conn, query, 399, vectors.Restrict()) if 1 - d >= threshold}
    got = vectors.knn(conn, query, 399, min_similarity=threshold)
    assert want and want <= {n for n, _ in got}
    _check(conn, got, query, 399, threshold=threshold)
    mirror.close()
    conn.close()


def test_a_write_undone_by_a_savepoint_rollback_is_not_searched(tmp_path):
    mirror = vectors.open_mirror(tmp_path / "v.db")
    conn = _connect(tmp_path / "v.db", mirror)
    conn.execute("BEGIN")
    for num in (1, 2):
        vectors.insert(conn, num, _unit(num), scope="user", type="fact", layer=3, author="a", archived=False,
                       created_ms=0)
    conn.execute("COMMIT")
    assert vectors.knn(conn, _unit(1), 1)[0][0] == 1  # the mirror now holds both rows
    conn.execute("BEGIN")
    vectors.insert(conn, 3, _unit(1), scope="user", type="fact", layer=3, author="a", archived=False,
                   created_ms=0)  # row 3 looks like row 1 ...
    conn.execute("SAVEPOINT sp")
    vectors.delete(conn, 3)  # ... then like something else, which is undone
    vectors.insert(conn, 3, _unit(99), scope="user", type="fact", layer=3, author="a", archived=False,
                   created_ms=0)
    conn.execute("ROLLBACK TO sp")
    conn.execute("RELEASE sp")
    _check(conn, vectors.knn(conn, _unit(1), 2), _unit(1), 2)
    assert sorted(n for n, _ in vectors.knn(conn, _unit(1), 2)) == [1, 3]
    conn.execute("ROLLBACK")
    _check(conn, vectors.knn(conn, _unit(1), 2), _unit(1), 2)
    mirror.close()
    conn.close()


@pytest.mark.parametrize("changed_in_transaction", [False, True])
def test_the_batched_pre_filter_rules_out_only_queries_that_find_nothing(tmp_path, changed_in_transaction):
    """`may_be_near` with one restriction per query (a commit group's adds of several agents and scopes): a False
    is exact against `knn`'s own answer, committed rows and the transaction's own writes alike."""
    path = tmp_path / f"near-{changed_in_transaction}.db"
    mirror = vectors.open_mirror(path)
    conn = _connect(path, mirror)
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((300, 384)).astype("<f4")
    rows[150:] = rows[:150] + 0.3 * rng.standard_normal((150, 384)).astype("<f4")  # pairs at cosine ~0.95
    conn.execute("BEGIN")
    for num, v in enumerate(rows[:200], start=1):
        vectors.insert(conn, num, v.tobytes(), scope=SCOPES[num % 2], type="fact", layer=3,
                       author=AUTHORS[num % 3 == 0], archived=num % 7 == 0, created_ms=0)
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    for num, v in enumerate(rows[200:], start=201):  # the transaction's own, uncommitted, when asked
        vectors.insert(conn, num, v.tobytes(), scope=SCOPES[num % 2], type="fact", layer=3,
                       author=AUTHORS[num % 3 == 0], archived=False, created_ms=0)
    if not changed_in_transaction:
        conn.execute("COMMIT")
        conn.execute("BEGIN")
    queries = [rows[i] + 0.05 * rng.standard_normal(384).astype("<f4") for i in range(0, 300, 3)]
    restricts = [vectors.Restrict(scopes=(SCOPES[(3 * i + 1 + (i % 4 == 0)) % 2],),  # mostly its row's scope
                                  exclude_authors=(AUTHORS[i % 5 == 1],)) for i in range(len(queries))]
    decided: set[tuple[bool, bool]] = set()
    for threshold in (0.5, 0.9, 0.97):
        near = vectors.may_be_near(conn, [q.tobytes() for q in queries], restrict=restricts,
                                   min_similarity=threshold)
        found = [bool(vectors.knn(conn, q.tobytes(), 1, restrict=r, min_similarity=threshold))
                 for q, r in zip(queries, restricts, strict=True)]
        assert all(n or not f for n, f in zip(near, found, strict=True))  # never ruled out wrongly
        decided.update(zip(near, found, strict=True))
        shared = {r: r for r in restricts}  # one object for equal restrictions, as a batch of adds sends them
        assert vectors.may_be_near(conn, [q.tobytes() for q in queries], restrict=[shared[r] for r in restricts],
                                   min_similarity=threshold) == near
    assert {(True, True), (False, False)} <= decided  # some queries found a row, some were ruled out
    conn.execute("ROLLBACK")
    mirror.close()
    conn.close()


@pytest.mark.parametrize("energy", ["head", "spread", "tail"])
def test_the_batched_pre_filter_keeps_a_row_that_sits_right_at_the_threshold(tmp_path, energy):
    """An add whose nearest memory is just over the semantic threshold is truly near: the pre-filter must not rule it
    out, wherever the two vectors hold their energy (the prefix bound sees only the head)."""
    path = tmp_path / f"margin-{energy}.db"
    mirror = vectors.open_mirror(path)
    conn = _connect(path, mirror)
    rng = np.random.default_rng(11)
    dims, threshold = 384, 0.9
    fillers = rng.standard_normal((400, dims)).astype("<f4")
    span = {"head": slice(0, 16), "spread": slice(0, dims), "tail": slice(dims - 64, dims)}[energy]
    a, b = np.zeros(dims), np.zeros(dims)
    basis = rng.standard_normal((2, span.stop - span.start))
    basis[0] /= np.linalg.norm(basis[0])
    basis[1] -= basis[1] @ basis[0] * basis[0]
    basis[1] /= np.linalg.norm(basis[1])
    cos = threshold + 2e-4
    a[span], b[span] = basis[0], cos * basis[0] + np.sqrt(1 - cos * cos) * basis[1]
    conn.execute("BEGIN")
    for num, v in enumerate(fillers, start=1):
        vectors.insert(conn, num, v.tobytes(), scope="user", type="fact", layer=3, author="bob", archived=False,
                       created_ms=0)
    vectors.insert(conn, 999, a.astype("<f4").tobytes(), scope="user", type="fact", layer=3, author="bob",
                   archived=False, created_ms=0)
    conn.execute("COMMIT")
    query = b.astype("<f4").tobytes()
    restrict = vectors.Restrict(scopes=("user",), exclude_authors=("alice",))
    assert vectors.knn(conn, query, 1, restrict=restrict, min_similarity=threshold)  # truly near
    assert vectors.may_be_near(conn, [query], restrict=[restrict], min_similarity=threshold) == [True]
    mirror.close()
    conn.close()


def test_the_batched_pre_filter_sees_every_commit_since_it_last_looked_at_a_scope(tmp_path):
    """`may_be_near` keeps each scope's committed rows between calls (an Append fed in chunks asks once per chunk):
    a row committed since, one archived since and one another author wrote must change its answer as they change
    `knn`'s."""
    path = tmp_path / "kept.db"
    mirror = vectors.open_mirror(path)
    conn = _connect(path, mirror)
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((60, 384)).astype("<f4")
    query = rows[58]
    mine = vectors.Restrict(scopes=("user",), exclude_authors=("alice",))
    theirs = vectors.Restrict(scopes=("user",), exclude_authors=("bob",))

    def write(*steps) -> None:
        conn.execute("BEGIN")
        for step in steps:
            step()
        conn.execute("COMMIT")

    def insert(num: int, author: str) -> None:
        vectors.insert(conn, num, rows[num - 1].tobytes(), scope="user", type="fact", layer=3, author=author,
                       archived=False, created_ms=0)

    def answers() -> list[tuple[bool, bool]]:
        near = vectors.may_be_near(conn, [query.tobytes()] * 2, restrict=[mine, theirs], min_similarity=0.9)
        found = [bool(vectors.knn(conn, query.tobytes(), 1, restrict=r, min_similarity=0.9)) for r in (mine, theirs)]
        assert all(n or not f for n, f in zip(near, found, strict=True))
        return list(zip(near, found, strict=True))

    write(*(lambda num=num: insert(num, "bob") for num in range(1, 59)))
    assert answers() == [(False, False), (False, False)]
    write(lambda: insert(59, "bob"))  # the query's own vector, by bob: near for alice, bob's own for bob
    assert answers() == [(True, True), (False, False)]
    write(lambda: vectors.set_attribute(conn, 59, "archived", 1))  # as many rows, one no longer live
    assert answers() == [(False, False), (False, False)]
    write(lambda: vectors.set_attribute(conn, 59, "archived", 0), lambda: vectors.set_attribute(conn, 59, "author",
                                                                                                 "alice"))
    assert answers() == [(False, False), (True, True)]
    mirror.close()
    conn.close()


@given(counter=st.integers(0, 50), steps=st.lists(st.tuples(st.integers(0, 60), st.integers(1, 5)), max_size=6))
def test_a_batch_of_versions_is_the_versions_one_by_one_would_hand_out(tmp_path_factory, counter, steps):
    """`vectors.insert_many` takes its rows' change-log versions in one call: the same versions, in order, and the
    same counter after, as one `next_version` per row."""
    path = tmp_path_factory.mktemp("versions") / "v.db"
    batched, single = vectors.open_mirror(path), vectors.open_mirror(path)
    batched.counter = single.counter = counter
    for db_max, count in steps:
        first = batched.next_versions(db_max, count)
        assert list(range(first, first + count)) == [single.next_version(db_max) for _ in range(count)]
        assert batched.counter == single.counter
