"""The exact in-memory scan behind `mnemosync.kernel.vectors.knn`: a NumPy mirror of the vec0 index.

One mirror per database file per process, shared by every connection to it.
It holds unit-normalised float32 copies of the index rows and their filterable
attributes, and answers k-nearest-neighbour queries with a BLAS scan, exactly.

Keeping current. Every vector write records (row number, version) in the
change log table, in the writer's transaction (`mnemosync.kernel.vectors`). Before a
query the mirror reads, through its own connection and in one read
transaction, the generation token and the rows changed since it last looked:
rows this process wrote are taken from a write-through cache, others are read
from the index. So the mirror always holds exactly the latest committed state.

Inside a write transaction. A caller whose connection is inside a
transaction (the server's writer deciding whether a new memory nearly
duplicates another) sees its own uncommitted rows. The mirror then answers
for that view: its committed rows, minus the rows the transaction changed,
plus those rows as the transaction sees them (kept in a small overlay). Nothing
uncommitted ever enters the mirror itself, so a rollback needs no undo.

Similarity thresholds. For unit vectors, cosine >= t exactly when the squared
distance is <= 2 - 2t, and the squared distance over the first PREFIX_DIMS
dimensions is a lower bound of the full one. A threshold query therefore
scans only that prefix (a sixth of the memory traffic) and scores in full
only the rows the bound cannot rule out: exact, and several times cheaper.

Compact mirrors (`compact=True`, what an agent's cache opens). A float32 copy
of every vector is most of a local agent's memory (150 MB at 100,000 memories),
so a compact mirror keeps each unit vector as int8 codes with a per-row scale
and the bound of its quantisation error (a quarter of the bytes; the scan
converts a few thousand rows at a time, which costs about what the float32 scan
of four times the bytes does). A query scores every row approximately, takes
every row whose score could still reach the top k (or the threshold) given its
error bound, and scores those exactly from the vectors in the file: the answer
is the exact one. A compact mirror also fills itself in a thread of its own
when it must read the whole index (a new cache, a rebuilt index): until then it
cannot answer and `knn` runs on sqlite-vec, also exactly, so a new cache's first
search does not wait for every vector to be read.

Assumption: one process writes a given database at a time (the server's
writer thread, or one agent's cache), as mnemosync always arranges.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from sqlite_utils.utils import sqlite3

from mnemosync.kernel import heap

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from dataclasses import Field

    from mnemosync.kernel.db import Conn

PREFIX_DIMS = 64
"""Dimensions of the prefix whose partial distance bounds the full one."""
SLACK = 1e-3
"""Similarity margin kept below a threshold so float rounding never drops a qualifying row."""
NEAR_MARGIN = 1e-2
"""Extra margin of the batched pre-filter (`Mirror.may_be_near`), so rows scored by a matrix product instead of
`knn`'s own products are never ruled out by a rounding difference."""
NEAR_CHUNK = 64
"""Queries per product of the batched pre-filter (its distance matrix is rows x NEAR_CHUNK floats)."""
FAMILY_MASKS_MAX = 64
"""Most scopes' masks `Mirror._family_mask` keeps at a time (each is a byte per row of the index)."""
PENDING_MAX = 4096
"""Most rows kept in the write-through cache between refreshes (the server refreshes at
every add; an agent catching up writes far more between searches, and reloads instead)."""
CODED = ("scope", "type", "author")
"""Text attributes, stored as small integer codes."""
ERROR_MARGIN = 1e-4
"""Added to a compact row's quantisation error bound: above the float32 rounding of its approximate score even
when every term of the 384-term product rounds the same way (~2e-5)."""
SCAN_ROWS = 4096
"""Rows of int8 codes converted to float32 at once by a compact scan (a few MB: the conversion stays in cache)."""
LOAD_ROWS = 4096
"""Rows read at a time when a mirror reads the whole index (the bytes of all of them never sit in memory at once)."""
_DELETED = ()



class Restriction(Protocol):
    """The rows a query may return, as the mirror reads them: a `mnemosync.kernel.vectors.Restrict` (named by its
    shape here, since that module imports this one)."""

    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @property
    def scopes(self) -> tuple[str, ...]: ...
    @property
    def types(self) -> tuple[str, ...]: ...
    @property
    def layers(self) -> tuple[int, ...]: ...
    @property
    def authors(self) -> tuple[str, ...]: ...
    @property
    def exclude_authors(self) -> tuple[str, ...]: ...
    @property
    def include_archived(self) -> bool: ...
    @property
    def created_after_ms(self) -> int: ...
    @property
    def created_before_ms(self) -> int: ...
    @property
    def nums(self) -> tuple[int, ...] | None: ...

class _Rows:
    """Unit vectors, their row numbers and attributes, in growable arrays: float32, or `compact` int8 codes with a
    scale and an error bound per row (see the module docstring)."""

    def __init__(self, dims: int, columns: tuple[str, ...], capacity: int = 64, *, compact: bool = False):
        self.dims, self.columns, self.n, self.compact = dims, columns, 0, compact
        self.prefix = min(PREFIX_DIMS, dims)
        if compact:
            self.codes8 = np.zeros((capacity, dims), dtype=np.int8)
            self.scale = np.zeros(capacity, dtype=np.float32)
            self.err = np.zeros(capacity, dtype=np.float32)
        else:
            self.matrix = np.zeros((capacity, dims), dtype=np.float32)
            # A contiguous copy of the prefix: a BLAS scan of it is ~5x faster than of a strided view.
            self.head = np.zeros((capacity, self.prefix), dtype=np.float32)
            self.head2 = np.zeros(capacity, dtype=np.float32)
        self.nums = np.zeros(capacity, dtype=np.int64)
        self.live = np.zeros(capacity, dtype=bool)
        self.attrs = {name: np.zeros(capacity, dtype=np.int64) for name in columns}

    def put(self, at: np.ndarray, rows: list[tuple[Any, ...]], codes: dict[str, dict[str, int]]) -> None:
        """Writes `rows` ((num, embedding, *columns)) at positions `at` (already allocated)."""
        unit = _unit_rows([r[1] for r in rows], self.dims)
        if self.compact:
            peak = np.abs(unit).max(axis=1)
            scale = np.where(peak > 0, peak / 127, 1).astype(np.float32)
            codes8 = np.clip(np.rint(unit / scale[:, None]), -127, 127).astype(np.int8)
            self.codes8[at] = codes8
            self.scale[at] = scale
            # |q.unit - q.(scale codes)| <= |unit - scale codes| for a unit query q (Cauchy-Schwarz)
            self.err[at] = np.linalg.norm(unit - codes8 * scale[:, None], axis=1) + ERROR_MARGIN
        else:
            self.matrix[at] = unit
            self.head[at] = unit[:, :self.prefix]
            self.head2[at] = np.einsum("ij,ij->i", unit[:, :self.prefix], unit[:, :self.prefix])
        self.nums[at] = [r[0] for r in rows]
        self.live[at] = True
        for i, name in enumerate(self.columns, start=2):
            values = [r[i] for r in rows]
            if name in codes:
                table = codes[name]
                values = [table.setdefault(v, len(table)) for v in values]
            self.attrs[name][at] = values

    def allocate(self, count: int) -> np.ndarray:
        """Positions for `count` new rows (growing the arrays as needed)."""
        needed = self.n + count
        capacity = len(self.nums)
        if needed > capacity:
            capacity = max(needed, int(capacity * 1.25) + 64)
            if self.compact:
                self.codes8 = _grown(self.codes8, capacity, self.n)
                self.scale = _grown(self.scale, capacity, self.n)
                self.err = _grown(self.err, capacity, self.n)
            else:
                self.matrix = _grown(self.matrix, capacity, self.n)
                self.head = _grown(self.head, capacity, self.n)
                self.head2 = _grown(self.head2, capacity, self.n)
            self.nums = _grown(self.nums, capacity, self.n)
            self.live = _grown(self.live, capacity, self.n)
            self.attrs = {name: _grown(a, capacity, self.n) for name, a in self.attrs.items()}
        at = np.arange(self.n, needed)
        self.n = needed
        return at

    def allowed(self, r: Restriction, at: np.ndarray | slice, codes: dict[str, dict[str, int]]) -> np.ndarray:
        """Which of the rows at positions `at` (an index array or slice) the restriction lets through."""
        a = {name: values[at] for name, values in self.attrs.items()}
        ok: np.ndarray = self.live[at].copy()
        if not r.include_archived:
            ok &= a["archived"] == 0
        for name, values in (("scope", r.scopes), ("type", r.types), ("author", r.authors)):
            if values:
                ok &= np.isin(a[name], _codes(codes, name, values))
        if r.exclude_authors:
            ok &= ~np.isin(a["author"], _codes(codes, "author", r.exclude_authors))
        if r.layers:
            ok &= np.isin(a["layer"], np.array(r.layers, dtype=np.int64))
        if r.created_after_ms:
            ok &= a["created_ms"] >= r.created_after_ms
        if r.created_before_ms:
            ok &= a["created_ms"] < r.created_before_ms
        if r.nums is not None:
            ok &= np.isin(self.nums[at], np.fromiter(r.nums, dtype=np.int64, count=len(r.nums)))
        return ok

    def scores(self, q: np.ndarray, at: np.ndarray) -> np.ndarray:
        """q's score against the rows at positions `at`: exact (float32), or a compact mirror's approximation (off
        by at most `err` of the row) from its codes, a few thousand rows converted at a time."""
        if not self.compact:
            exact: np.ndarray = self.matrix[at] @ q
            return exact
        out = np.empty(len(at), dtype=np.float32)
        for start in range(0, len(at), SCAN_ROWS):
            part = at[start:start + SCAN_ROWS]
            if len(part) and part[-1] - part[0] == len(part) - 1:  # consecutive: a view, not a copy
                block = self.codes8[part[0]:part[-1] + 1]
            else:
                block = self.codes8[part]
            out[start:start + len(part)] = (block.astype(np.float32) @ q) * self.scale[part]
        return out

    def candidates(self, head: np.ndarray, bound: float) -> np.ndarray:
        """Positions whose prefix distance to the query's prefix `head` is within `bound`.

        einsum, not BLAS: this small product runs on every write, and a BLAS call
        split over two threads waits for the slower one whenever the machine is busy.
        """
        dots = np.einsum("ij,j->i", self.head[:self.n], head)
        return np.flatnonzero(self.head2[:self.n] + float(head @ head) - 2.0 * dots <= bound)


class Mirror:
    """The mirror of one database file.

    Args:
        path: The database file.
        tables: (index table, change log table, meta table) names.
        columns: The index's metadata columns, in order.
        connect: Opens a connection to `path` (the mirror reads through its own).
        dimensions: Reads the index's vector length from a connection (None if no index).
        compact: Keep int8 codes and score the candidates exactly from the file (see the module docstring).
        fill_aside: Read the whole index in a thread of its own, answering nothing meanwhile (default: `compact`).
    """

    FULL_RELOAD_FRACTION = 0.05
    FULL_RELOAD_MIN = 2000

    def __init__(self, path: str, tables: tuple[str, str, str], columns: tuple[str, ...],
                 connect: Callable[[str], Conn], dimensions: Callable[[Conn], int | None], *,
                 compact: bool = False, fill_aside: bool | None = None) -> None:
        self.path = path
        self.compact = compact
        self.fill_aside = compact if fill_aside is None else fill_aside
        self.table, self.changes, self.meta = tables
        self.columns = columns
        self._connect = connect
        self._dimensions = dimensions
        self.lock = threading.RLock()
        self.generation: str | None = None
        self.version = -1
        self.counter = 0
        self.pending: dict[int, tuple[int, Any]] = {}
        self._conn: Conn | None = None
        self._file_id: tuple[int, int] | None = None
        self._data_version: int | None = None
        self.full_loads = 0
        """How many times the mirror read the whole index (a process that keeps it current reads it once)."""
        self._loader: threading.Thread | None = None
        self._closed = False
        self.codes: dict[str, dict[str, int]] = {}
        self.row_of: dict[int, int] = {}
        self._family_masks: dict[Any, Any] = {}
        """`_family_mask`'s masks, and under the key None the base's state they are for."""
        self._reset(0, 1)

    # -- bookkeeping for writes -----------------------------------------------------

    def next_version(self, db_max: int) -> int:
        """A version above both the database's and any this process handed out (never reused)."""
        with self.lock:
            self.counter = max(self.counter, db_max) + 1
            return self.counter

    def next_versions(self, db_max: int, count: int) -> int:
        """The first of `count` consecutive versions, as `count` calls of `next_version` hand them out."""
        with self.lock:
            first = max(self.counter, db_max) + 1
            if count:
                self.counter = first + count - 1
            return first

    def remember_many(self, rows: list[tuple[int, int, tuple[Any, ...]]]) -> None:
        """`remember` of each (num, version, row), in order, under one taking of the lock."""
        with self.lock:
            for num, version, row in rows:
                self.remember(num, version, row)

    def remember(self, num: int, version: int, row: tuple[Any, ...] | None, deleted: bool = False) -> None:
        """Write-through: the row as written at `version` (None: unknown, read it when needed). Nothing is kept
        while the mirror holds no index (never read, or being filled): its next refresh reads every row anyway, and
        an agent whose searches go to the server kept 4,096 rows (8 MB) of its catch-up for a refresh that never
        came."""
        with self.lock:
            if self.generation is None:
                return
            if len(self.pending) >= PENDING_MAX and num not in self.pending:
                return  # a large catch-up: the next refresh reads (or reloads) instead
            self.pending[num] = (version, _DELETED if deleted else row)

    def close(self) -> None:
        """Closes the mirror's own connection (a compact mirror's fill in progress stops at its next rows)."""
        with self.lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # -- keeping current ----------------------------------------------------------

    def _reader(self) -> Conn | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        file_id = (st.st_dev, st.st_ino)
        if self._conn is None or file_id != self._file_id:  # a new file at the same path
            self.close()
            self._closed = False
            self._conn, self._file_id = self._connect(self.path), file_id
            self.generation, self.version, self._data_version = None, -1, None
        return self._conn

    def refresh(self) -> bool:
        """Brings the mirror to the latest committed state (caller holds the lock).

        Returns:
            False if the file has no change log (an index made before there was
            one; the next write adds it), so the mirror cannot be kept exact.
        """
        conn = self._reader()
        if conn is None:
            return False
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        if data_version == self._data_version and self.generation is not None:
            return True  # nothing was committed since the last look
        conn.execute("BEGIN")
        try:
            try:
                generation, version = conn.execute(
                    f"SELECT (SELECT value FROM {self.meta} WHERE key = 'generation'), "
                    f"(SELECT coalesce(max(version), 0) FROM {self.changes})").fetchone()
            except sqlite3.OperationalError:  # no change log (yet)
                return False
            if generation != self.generation:
                if self.fill_aside:
                    self._start_fill()
                    return False
                self._load_all(conn)
            elif version > self.version:
                changed = conn.execute(f"SELECT num, version FROM {self.changes} WHERE version > ?",
                                       (self.version,)).fetchall()
                known = {num: self.pending[num][1] for num, v in changed
                         if num in self.pending and self.pending[num][0] == v and self.pending[num][1] is not None}
                unknown = [num for num, _ in changed if num not in known]
                if len(unknown) > max(self.FULL_RELOAD_MIN, self.FULL_RELOAD_FRACTION * self.base.n):
                    if self.fill_aside:
                        self._start_fill()
                        return False
                    self._load_all(conn)
                else:
                    self._apply({**known, **self._read(conn, unknown)})
            if (generation, version) != (self.generation, self.version):
                self.generation, self.version = generation, version
                self.pending = {num: p for num, p in self.pending.items() if p[0] > version}
                self._clear_overlay()
            self._data_version = data_version
            return True
        except Exception:
            self.generation, self.version, self._data_version = None, -1, None  # reload next time
            raise
        finally:
            conn.execute("COMMIT")

    def _read(self, conn: Conn, nums: list[int]) -> dict[int, Any]:
        """The index rows of `nums` as `conn` sees them (_DELETED for absent ones)."""
        out: dict[int, Any] = {num: _DELETED for num in nums}
        for start in range(0, len(nums), 500):
            part = ", ".join(str(int(n)) for n in nums[start:start + 500])
            for row in conn.execute(f"SELECT rowid, embedding, {', '.join(self.columns)} FROM {self.table} "
                                    f"WHERE rowid IN ({part})"):
                out[row[0]] = tuple(row)
        return out

    def _load_all(self, conn: Conn) -> None:
        """Reads the whole index (caller holds the lock and `conn`'s read transaction)."""
        self.full_loads += 1
        self.base, self.codes, self.row_of = self._read_all(conn, lambda: False)
        self._clear_overlay()
        heap.trim()

    def _read_all(self, conn: Conn, stopped: Callable[[], bool]) -> tuple[_Rows, dict[str, dict[str, int]],
                                                                           dict[int, int]]:
        """The whole index as `conn` sees it, LOAD_ROWS at a time, in arrays of its own: (rows, attribute codes,
        the position of each row number). Touches nothing of the mirror's (`_fill` runs it without the lock)."""
        # every row ever written has a change-log row: room for all, and the headroom `allocate` grows by (the next
        # write must not copy every row)
        logged = conn.execute(f"SELECT count(*) FROM {self.changes}").fetchone()[0]
        base = _Rows(self._dimensions(conn) or 0, self.columns, logged + logged // 4 + 64, compact=self.compact)
        codes: dict[str, dict[str, int]] = {name: {} for name in CODED}
        row_of: dict[int, int] = {}
        cursor = conn.execute(f"SELECT rowid, embedding, {', '.join(self.columns)} FROM {self.table}")
        while (rows := cursor.fetchmany(LOAD_ROWS)) and not stopped():
            _put_rows(base, codes, row_of, [tuple(row) for row in rows])
        return base, codes, row_of

    def _start_fill(self) -> None:
        """Starts reading the whole index in a thread of its own (a compact mirror; one at a time): the mirror
        answers nothing until it is in (caller holds the lock), then catches up with what was written meanwhile,
        as any refresh does."""
        self.generation, self.version, self._data_version = None, -1, None
        if self._loader is not None and self._loader.is_alive():
            return
        self._loader = threading.Thread(target=self._fill, name="mnemosync-vector-mirror", daemon=True)
        self._loader.start()

    def _fill(self) -> None:
        try:
            conn = self._connect(self.path)
        except Exception:  # noqa: BLE001 - the next query starts another
            log.exception("filling the vector mirror of %s failed", self.path)
            return
        try:
            conn.execute("BEGIN")  # one read transaction: the rows read are those of (generation, version)
            try:
                generation, version = conn.execute(
                    f"SELECT (SELECT value FROM {self.meta} WHERE key = 'generation'), "
                    f"(SELECT coalesce(max(version), 0) FROM {self.changes})").fetchone()
                index = self._read_all(conn, lambda: self._closed)
            finally:
                conn.execute("COMMIT")
            with self.lock:
                if self._closed:
                    return
                self.full_loads += 1
                self.base, self.codes, self.row_of = index
                self.generation, self.version, self._data_version = generation, version, None
                self.pending = {num: p for num, p in self.pending.items() if p[0] > version}
                self._clear_overlay()
            heap.trim()  # the rows read, a chunk at a time, are garbage now
        except Exception:  # noqa: BLE001 - a failed fill leaves the mirror unable to answer; the next query retries
            log.exception("filling the vector mirror of %s failed", self.path)
        finally:
            conn.close()

    def _reset(self, dims: int, capacity: int) -> None:
        self.base = _Rows(dims, self.columns, capacity, compact=self.compact)
        self.codes = {name: {} for name in CODED}
        self.row_of = {}
        self._clear_overlay()

    def _clear_overlay(self) -> None:
        self.overlay = _Rows(self.base.dims, self.columns)
        self.overlay_at: dict[tuple[int, int], int] = {}

    def _apply(self, rows: dict[int, Any]) -> None:
        present = []
        for num, row in rows.items():
            if row is _DELETED:
                if num in self.row_of:
                    self.base.live[self.row_of.pop(num)] = False
            else:
                present.append(row)
        if present and not self.base.dims:
            self._reset(len(present[0][1]) // 4, len(present))
        _put_rows(self.base, self.codes, self.row_of, present)

    # -- searching ------------------------------------------------------------------

    def knn(self, conn: Conn, query: np.ndarray, k: int, restrict: Restriction,
            min_similarity: float | None) -> list[tuple[int, float]] | None:
        """Exact cosine top-k as (num, distance), or None if the mirror cannot answer for `conn`."""
        with self.lock:
            changed = self._view(conn)
            if changed is None:
                return None
            if len(query) != self.base.dims:
                return []
            q = _unit(query)
            hidden = [self.row_of[num] for num, _ in changed if num in self.row_of]
            if self.compact:
                nums, scores = self._scan_compact(q, restrict, min_similarity, hidden, k)
            else:
                nums, scores = self._scan_base(q, restrict, min_similarity, hidden)
            if changed:
                extra_nums, extra_scores = self._scan_overlay(conn, changed, q, restrict)
                nums, scores = np.concatenate([nums, extra_nums]), np.concatenate([scores, extra_scores])
            if min_similarity is not None:
                keep = scores >= min_similarity - SLACK
                nums, scores = nums[keep], scores[keep]
            return _top(nums, scores, k)

    def may_be_near(self, conn: Conn, queries: np.ndarray, restricts: Sequence[Restriction], min_similarity: float, *,
                    changed_only: bool = False) -> np.ndarray | None:
        """For each row of `queries`: False when `knn(conn, query, k, restricts[i], min_similarity)` would certainly
        find nothing now; True when it might. None if the mirror cannot answer for `conn`.

        One batched prefix-bound product over the committed rows for every query at once (then each query's own
        restriction on the few rows within the bound), with a margin far above float32 rounding, so it is a
        pre-filter only: a False is exact, a True is decided by `knn` itself. With `changed_only`, only the rows
        `conn`'s transaction changed are looked at (what a commit group wrote after its pre-filter ran).
        """
        with self.lock:
            changed = None if self.compact else self._view(conn)  # a compact mirror keeps no prefix to bound by
            if changed is None:
                return None
            near = np.zeros(len(queries), dtype=bool)
            if queries.shape[1] != self.base.dims:
                return near
            norms = np.linalg.norm(queries, axis=1, keepdims=True)
            q = (queries / np.where(norms > 0, norms, 1)).astype(np.float32)
            if not changed_only and self.base.n:
                self._near_base(q, restricts, min_similarity, changed, near)
            if changed:
                for restrict in set(restricts):
                    positions = self._overlay_positions(conn, changed, restrict)
                    if len(positions):
                        which = [i for i, r in enumerate(restricts) if r == restrict]
                        near[which] |= ((self.overlay.matrix[positions] @ q[which].T)
                                        >= min_similarity - SLACK - NEAR_MARGIN).any(axis=0)
            return near

    def _near_base(self, q: np.ndarray, restricts: Sequence[Restriction], min_similarity: float,
                   changed: list[tuple[int, int]], near: np.ndarray) -> None:
        """`may_be_near`'s committed rows (caller holds the lock).

        Queries whose restrictions differ only in the authors they exclude (a commit group's adds of one scope)
        share one prefix-bound product, in chunks of NEAR_CHUNK queries, over the rows any of them may see. Only the
        few (row, query) pairs within the bound are then looked at: the row must be one that query's own
        restriction allows, and its full score must reach the threshold less SLACK and NEAR_MARGIN (a margin far
        above float32 rounding, so a False is still exact).
        """
        base, n = self.base, self.base.n
        bound = _bound(min_similarity) + NEAR_MARGIN
        floor = min_similarity - SLACK - NEAR_MARGIN
        hidden = [self.row_of[num] for num, _ in changed if num in self.row_of]
        alike: dict[int, list[int]] = {}  # the queries of each restriction object (a batch shares them): hashed once
        for i, restrict in enumerate(restricts):
            alike.setdefault(id(restrict), []).append(i)
        families: dict[Restriction, list[int]] = {}
        for members in alike.values():
            families.setdefault(replace(restricts[members[0]], exclude_authors=()), []).extend(members)
        for members in families.values():
            members.sort()
        authors = base.attrs["author"][:n]
        for family, members in families.items():
            # rows no query of the family may see (a batch of one agent's adds: its own rows) are left out at once
            excluded_by_all = frozenset.intersection(*(frozenset(restricts[i].exclude_authors) for i in members))
            mask = self._family_mask(family, excluded_by_all)
            if hidden:
                mask = mask.copy()
                mask[hidden] = False
            rows = np.flatnonzero(mask)
            if not len(rows):
                continue  # e.g. a batch of one agent's adds where every row is its own
            if len(rows) > n // 2:  # a product over a few more rows costs less than copying most of them
                rows, heads, half = np.arange(n), base.head[:n], (base.head2[:n] - bound) / 2
            else:
                heads, half = base.head[rows], (base.head2[rows] - bound) / 2
            for start in range(0, len(members), NEAR_CHUNK):
                chunk = np.array(members[start:start + NEAR_CHUNK])
                head = q[chunk, :base.prefix]
                dots = heads @ head.T  # distance <= bound  <=>  dot - |q|^2 / 2 >= (|row|^2 - bound) / 2
                dots -= np.einsum("ij,ij->i", head, head)[None, :] / 2
                at, which = np.nonzero(dots >= half[:, None])
                found = rows[at]
                keep = mask[found]
                for excluded in {restricts[i].exclude_authors for i in chunk[which]} - {()}:
                    mine = np.array([restricts[i].exclude_authors == excluded for i in chunk[which]], dtype=bool)
                    keep &= ~(mine & np.isin(authors[found], _codes(self.codes, "author", excluded)))
                found, queries = found[keep], chunk[which[keep]]
                if len(found):
                    scores = np.einsum("ij,ij->i", base.matrix[found], q[queries])
                    near[queries[scores >= floor]] = True

    def _family_mask(self, family: Restriction, excluded: frozenset[str]) -> np.ndarray:
        """Which committed rows `family` lets through, less those of the `excluded` authors: a read-only mask over
        the base (caller holds the lock). Kept until the base changes (a refresh that read anything moves the
        version; a reload brings another base), so an Append fed in chunks, whose chunks are pre-filtered one by
        one, and a commit group's Appends compute each scope's mask once, not once per chunk over every committed
        row."""
        state = (self.base, self.base.n, self.generation, self.version)
        kept = self._family_masks
        if kept.get(None) != state:  # the base changed since: start again (None keys the state it is for)
            kept.clear()
            kept[None] = state
        mask: np.ndarray | None = kept.get((family, excluded))
        if mask is None:
            mask = self.base.allowed(family, slice(0, self.base.n), self.codes)
            if excluded:
                mask &= ~np.isin(self.base.attrs["author"][:self.base.n], _codes(self.codes, "author", excluded))
            mask.setflags(write=False)
            if len(kept) > FAMILY_MASKS_MAX:
                del kept[next(k for k in kept if k is not None)]
            kept[family, excluded] = mask
        return mask

    def _view(self, conn: Conn) -> list[tuple[int, int]] | None:
        """Refreshes the mirror and returns the rows `conn`'s transaction changed ([] outside one), or None when the
        mirror cannot answer for `conn` (caller holds the lock)."""
        if not self.refresh():
            return None
        return self._changed_in(conn) if conn.in_transaction else []

    def _changed_in(self, conn: Conn) -> list[tuple[int, int]] | None:
        """(num, version) of the rows `conn`'s transaction changed since the mirror's version.

        None when the mirror cannot answer for `conn`: a rebuild in progress (no
        change log, or another generation), or a reader older than the mirror.
        """
        try:
            generation, seen = conn.execute(
                f"SELECT (SELECT value FROM {self.meta} WHERE key = 'generation'), "
                f"(SELECT coalesce(max(version), 0) FROM {self.changes})").fetchone()
        except sqlite3.OperationalError:  # no change log in this view
            return None
        if generation != self.generation or seen < self.version:
            return None
        if seen == self.version:
            return []
        rows: list[tuple[int, int]] = conn.execute(f"SELECT num, version FROM {self.changes} WHERE version > ?",
                                                   (self.version,)).fetchall()
        return rows

    def _scan_base(self, q: np.ndarray, restrict: Restriction, min_similarity: float | None,
                   hidden: list[int]) -> tuple[np.ndarray, np.ndarray]:
        base = self.base
        if base.n == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if min_similarity is not None:  # few candidates: check the restriction on them only
            rows = base.candidates(q[:base.prefix], _bound(min_similarity))
            rows = rows[base.allowed(restrict, rows, self.codes)]
            if hidden:
                rows = rows[~np.isin(rows, hidden)]
            return base.nums[rows], base.matrix[rows] @ q
        mask = base.allowed(restrict, slice(0, base.n), self.codes)
        if hidden:
            mask[hidden] = False
        if mask.all():
            return base.nums[:base.n], base.matrix[:base.n] @ q
        rows = np.flatnonzero(mask)
        scores = base.matrix[rows] @ q if len(rows) < base.n // 2 else (base.matrix[:base.n] @ q)[rows]
        return base.nums[rows], scores

    def _scan_compact(self, q: np.ndarray, restrict: Restriction, min_similarity: float | None, hidden: list[int],
                      k: int) -> tuple[np.ndarray, np.ndarray]:
        """A compact mirror's committed rows that may be among the k best (or reach the threshold) given their
        approximate scores and error bounds, scored exactly from the vectors in the file (see the module
        docstring): (row numbers, exact scores)."""
        base = self.base
        mask = base.allowed(restrict, slice(0, base.n), self.codes)
        if hidden:
            mask[hidden] = False
        rows = np.flatnonzero(mask)
        if not len(rows):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        approx, err = base.scores(q, rows), base.err[rows]
        if min_similarity is not None:
            rows = rows[approx + err >= min_similarity - SLACK]
        elif len(rows) > k:  # the k-th best lower bound: a row whose upper bound is below it is not among the k best
            kth = np.partition(approx - err, len(rows) - k)[len(rows) - k]
            rows = rows[approx + err >= kth]
        return self._exact(base.nums[rows], q)

    def _exact(self, nums: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact scores of committed rows, from their vectors in the file (caller holds the lock); rows no longer
        there are left out."""
        conn = self._reader()
        found: list[tuple[int, bytes]] = []
        if conn is not None:
            for start in range(0, len(nums), 500):
                part = ", ".join(str(int(n)) for n in nums[start:start + 500])
                found += conn.execute(f"SELECT rowid, embedding FROM {self.table} WHERE rowid IN ({part})").fetchall()
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        unit = _unit_rows([embedding for _, embedding in found], self.base.dims)
        return np.array([num for num, _ in found], dtype=np.int64), unit @ q

    def _scan_overlay(self, conn: Conn, changed: list[tuple[int, int]], q: np.ndarray,
                      restrict: Restriction) -> tuple[np.ndarray, np.ndarray]:
        """Scores the transaction's changed rows, as it sees them."""
        positions = self._overlay_positions(conn, changed, restrict)
        return self.overlay.nums[positions], self.overlay.matrix[positions] @ q

    def _overlay_positions(self, conn: Conn, changed: list[tuple[int, int]], restrict: Restriction) -> np.ndarray:
        """Where the transaction's changed rows, as it sees them, are in the overlay (those `restrict` allows)."""
        missing = [(num, v) for num, v in changed if (num, v) not in self.overlay_at]
        if missing:
            rows: dict[tuple[int, int], Any] = {}
            unknown = []
            for num, version in missing:
                cached = self.pending.get(num)
                if cached is not None and cached[0] == version and cached[1] is not None:
                    rows[(num, version)] = cached[1]
                else:
                    unknown.append((num, version))
            if unknown:
                read = self._read(conn, [num for num, _ in unknown])
                rows.update({(num, v): read[num] for num, v in unknown})
            present = [(key, row) for key, row in rows.items() if row is not _DELETED]
            for key in rows:
                self.overlay_at[key] = -1  # deleted in this transaction (present rows get a position below)
            if present:
                at = self.overlay.allocate(len(present))
                self.overlay.put(at, [row for _, row in present], self.codes)
                self.overlay_at.update({key: int(p) for (key, _), p in zip(present, at, strict=True)})
        positions = np.array([self.overlay_at[key] for key in changed], dtype=np.int64)
        positions = positions[positions >= 0]
        allowed: np.ndarray = positions[self.overlay.allowed(restrict, positions, self.codes)]
        return allowed


def _put_rows(base: _Rows, codes: dict[str, dict[str, int]], row_of: dict[int, int],
              present: list[tuple[Any, ...]]) -> None:
    """Writes index rows ((num, embedding, *columns)) into `base`, new row numbers at new positions."""
    if not present:
        return
    new = [r[0] for r in present if r[0] not in row_of]
    for num, position in zip(new, base.allocate(len(new)), strict=True):
        row_of[num] = int(position)
    at = np.fromiter((row_of[r[0]] for r in present), dtype=np.int64, count=len(present))
    base.put(at, present, codes)


def _unit_rows(embeddings: list[bytes], dims: int) -> np.ndarray:
    """Little-endian float32 vectors as unit rows (a zero vector stays zero)."""
    vectors = np.frombuffer(b"".join(embeddings), dtype="<f4").reshape(len(embeddings), dims)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1)


def _bound(min_similarity: float) -> float:
    return 2.0 - 2.0 * (min_similarity - SLACK) + 1e-5


def _codes(codes: dict[str, dict[str, int]], name: str, values: Iterable[str]) -> np.ndarray:
    table = codes[name]
    return np.array([table[v] for v in values if v in table], dtype=np.int64)


def _grown(array: np.ndarray, capacity: int, used: int) -> np.ndarray:
    out = np.zeros((capacity, *array.shape[1:]), dtype=array.dtype)
    out[:used] = array[:used]
    return out


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float32)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


def _top(nums: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The k best (highest score; ties: smaller num) as (num, cosine distance)."""
    take = min(k, len(scores))
    if take == 0:
        return []
    if take < len(scores):
        kth = scores[np.argpartition(-scores, take - 1)[take - 1]]
        top = np.flatnonzero(scores >= kth)  # rows tied with the k-th compete on row number
    else:
        top = np.arange(len(scores))
    chosen = top[np.lexsort((nums[top], -scores[top]))[:take]]
    return [(int(num), float(1.0 - s)) for num, s in zip(nums[chosen], scores[chosen], strict=True)]
