"""The vector index: a sqlite-vec `vec0` table, one row per memory, and its exact scan.

Every read and write of vectors goes through here, so the index's layout
(cosine distance, which columns are filterable) can change in one place.
Rows are keyed by `memories.num`. Filterable attributes live in the index
itself (vec0 metadata columns), so a filtered search stays exact instead of
filtering an over-fetched top-k afterwards.

Why queries are answered from memory. sqlite-vec's exhaustive KNN scans with
plain C loops (its wheel is built without SIMD): at 100k 384-dim vectors a
query costs 4-5x a NumPy (BLAS) scan of the same vectors. So `knn` answers from
an exact NumPy mirror of this table (`mnemosync.kernel.vector_mirror`) when the
connection has one: whoever opens a database file owns its mirror
(`open_mirror`) and attaches it to each of its connections (`attach`); the
server's store shares one among its writer and readers, an agent's cache has
its own. sqlite-vec stays the durable index and the path for raw SQL conditions
and connections without a mirror.

The change log. Every write here also records the row number with a new
version in `memory_vec_changes`, in the caller's transaction; `memory_vec_meta`
holds a generation token that changes when the index is dropped and made
again. That is how every mirror knows exactly which rows to re-read.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from mnemosync.kernel import db
from mnemosync.kernel.vector_mirror import Mirror

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

TABLE = "memory_vec"
CHANGES = "memory_vec_changes"
META = "memory_vec_meta"
METADATA_COLUMNS = ("scope", "type", "layer", "author", "archived", "created_ms")


@dataclass(frozen=True)
class Restrict:
    """Which rows a KNN query may return; empty fields do not restrict.

    Attributes:
        nums: If not None, only these row numbers (for example those carrying every wanted tag).
    """

    scopes: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    layers: tuple[int, ...] = ()
    authors: tuple[str, ...] = ()
    exclude_authors: tuple[str, ...] = ()
    include_archived: bool = False
    created_after_ms: int = 0
    created_before_ms: int = 0
    nums: tuple[int, ...] | None = None


def dimensions(conn: Conn) -> int | None:
    """Dimensions of the index, or None before the first vector arrives."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    if row is None:
        return None
    return int(row[0].split("float[", 1)[1].split("]", 1)[0])


def count(conn: Conn) -> int:
    """Rows in the index (0 before the first vector arrives)."""
    return conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0] if dimensions(conn) is not None else 0


def table_sql(dims: int) -> str:
    """The statement that makes the index for `dims`-long vectors (as `sqlite_master` keeps it)."""
    return (f"CREATE VIRTUAL TABLE {TABLE} USING vec0("
            f"embedding float[{int(dims)}] distance_metric=cosine, "
            "scope text, type text, layer integer, author text, archived integer, created_ms integer)")


def ensure_table(conn: Conn, dims: int) -> None:
    """Creates the index for `dims`-long vectors (and its change log) if they do not exist."""
    known = _schema(conn)
    if known.dims is None:
        conn.execute(table_sql(dims))
    if not known.logged:
        # Also reached for an index made before the change log existed: the new
        # generation makes every mirror load it whole once.
        conn.execute(f"CREATE TABLE IF NOT EXISTS {CHANGES} (num INTEGER PRIMARY KEY, version INTEGER NOT NULL)")
        conn.execute(f"CREATE INDEX IF NOT EXISTS {CHANGES}_version ON {CHANGES} (version)")
        conn.execute(f"CREATE TABLE {META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute(f"INSERT INTO {META} VALUES ('generation', ?)", (uuid.uuid4().hex,))


def _changed(conn: Conn, num: int, row: tuple[Any, ...] | None = None, *, deleted: bool = False) -> None:
    """Logs that row `num` changed (caller's transaction) and tells the connection's mirror."""
    mirror = _own(conn).vector_mirror
    db_max = conn.execute(f"SELECT coalesce(max(version), 0) FROM {CHANGES}").fetchone()[0]
    version = mirror.next_version(db_max) if mirror is not None else db_max + 1
    conn.execute(
        f"INSERT INTO {CHANGES} (num, version) VALUES (?, ?) "
        "ON CONFLICT (num) DO UPDATE SET version = excluded.version",
        (num, version),
    )
    if mirror is not None:
        mirror.remember(num, version, row, deleted)


def insert(conn: Conn, num: int, embedding: bytes, *, scope: str, type: str, layer: int, author: str,
           archived: bool, created_ms: int) -> None:
    """Adds a memory's vector (creating the index on first use)."""
    ensure_table(conn, len(embedding) // 4)
    conn.execute(
        f"INSERT INTO {TABLE} (rowid, embedding, scope, type, layer, author, archived, created_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (num, embedding, scope, type, layer, author, int(archived), created_ms),
    )
    _changed(conn, num, (num, embedding, scope, type, layer, author, int(archived), created_ms))


def insert_many(conn: Conn, rows: list[tuple[Any, ...]]) -> None:
    """`insert` for many vectors at once: rows of (num, embedding, scope, type, layer, author, archived,
    created_ms), one executemany per table."""
    if not rows:
        return
    ensure_table(conn, len(rows[0][1]) // 4)
    conn.executemany(f"INSERT INTO {TABLE} (rowid, embedding, scope, type, layer, author, archived, created_ms) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    mirror = _own(conn).vector_mirror
    db_max = conn.execute(f"SELECT coalesce(max(version), 0) FROM {CHANGES}").fetchone()[0]
    first = mirror.next_versions(db_max, len(rows)) if mirror is not None else db_max + 1
    versions = range(first, first + len(rows))
    conn.executemany(f"INSERT INTO {CHANGES} (num, version) VALUES (?, ?) "
                     "ON CONFLICT (num) DO UPDATE SET version = excluded.version",
                     [(row[0], version) for row, version in zip(rows, versions, strict=True)])
    if mirror is not None:
        mirror.remember_many([(row[0], version, tuple(row)) for row, version in zip(rows, versions, strict=True)])


def set_embedding(conn: Conn, num: int, embedding: bytes) -> bool:
    """Replaces a memory's vector; False when it has none (a redacted memory), so nothing changed."""
    if _schema(conn).dims is None:
        return False
    ensure_table(conn, len(embedding) // 4)
    if conn.execute(f"UPDATE {TABLE} SET embedding = ? WHERE rowid = ?", (embedding, num)).rowcount == 0:
        return False
    _changed(conn, num)
    return True


def set_attribute(conn: Conn, num: int, column: str, value: object) -> None:
    """Updates one filterable attribute (one of METADATA_COLUMNS)."""
    if column not in METADATA_COLUMNS:
        raise ValueError(f"not a vector index attribute: {column}")
    dims = _schema(conn).dims
    if dims is not None:
        ensure_table(conn, dims)
        if conn.execute(f"UPDATE {TABLE} SET {column} = ? WHERE rowid = ?", (value, num)).rowcount:
            _changed(conn, num)


def delete(conn: Conn, num: int) -> None:
    """Removes a memory's vector."""
    dims = _schema(conn).dims
    if dims is not None:
        ensure_table(conn, dims)
        conn.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (num,))
        _changed(conn, num, deleted=True)


def drop(conn: Conn) -> None:
    """Drops the whole index and its change log (before a rebuild)."""
    for name in (TABLE, CHANGES, META):
        conn.execute(f"DROP TABLE IF EXISTS {name}")


def get(conn: Conn, num: int) -> tuple[Any, ...] | None:
    """(embedding, *METADATA_COLUMNS) of one row, or None."""
    if dimensions(conn) is None:
        return None
    row = conn.execute(
        f"SELECT embedding, {', '.join(METADATA_COLUMNS)} FROM {TABLE} WHERE rowid = ?", (num,)
    ).fetchone()
    return tuple(row) if row else None


def knn(conn: Conn, vector: bytes, k: int, *, restrict: Restrict = Restrict(),  # noqa: B008 - immutable
        min_similarity: float | None = None, where: list[str] | None = None,
        params: list[Any] | None = None) -> list[tuple[int, float]]:
    """The k nearest rows to `vector` as (num, cosine distance), nearest first; exact.

    Answers for the state `conn` sees, its own uncommitted writes included.
    Ties are broken by the smaller row number.

    Args:
        vector: The query as little-endian float32 bytes.
        k: Most rows to return.
        restrict: Which rows may be returned.
        min_similarity: If given, only rows with cosine similarity at least this
            are wanted (rows a little below it may still be returned); such
            queries are much cheaper (see `mnemosync.kernel.vector_mirror`).
        where: Extra raw SQL conditions on METADATA_COLUMNS or rowid, with `?`
            placeholders. These queries run on sqlite-vec directly (slow at scale).
        params: Their parameters, in order.
    """
    if k <= 0 or dimensions(conn) is None:
        return []
    if not where:
        mirror = _own(conn).vector_mirror
        if mirror is not None:
            found = mirror.knn(conn, np.frombuffer(vector, dtype="<f4"), k, restrict, min_similarity)
            if found is not None:
                return found
    clauses, values = _restrict_sql(restrict)
    found = _sqlite_vec_knn(conn, vector, k, [*clauses, *(where or [])], [*values, *(params or [])])
    if min_similarity is not None:
        found = [(num, d) for num, d in found if 1.0 - d >= min_similarity - 1e-3]
    return found


def may_be_near(conn: Conn, vectors: list[bytes], *, restrict: Restrict | list[Restrict], min_similarity: float,
                changed_only: bool = False) -> list[bool] | None:
    """For each vector (little-endian float32 bytes): False when `knn(conn, vector, k, restrict=restrict,
    min_similarity=min_similarity)` would certainly find nothing now, True when it might; one batched pass instead
    of a scan per vector. `restrict` is one for all or one per vector; with `changed_only` only the rows `conn`'s
    transaction changed are looked at. None when it cannot tell (no mirror, or the mirror cannot answer for
    `conn`)."""
    mirror = _own(conn).vector_mirror
    if mirror is None or not vectors or dimensions(conn) is None:
        return None
    queries = np.frombuffer(b"".join(vectors), dtype="<f4").reshape(len(vectors), -1)
    restricts = restrict if isinstance(restrict, list) else [restrict] * len(vectors)
    near = mirror.may_be_near(conn, queries, restricts, min_similarity, changed_only=changed_only)
    return None if near is None else near.tolist()


def _restrict_sql(r: Restrict) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    for column, values in (("scope", r.scopes), ("type", r.types), ("layer", r.layers), ("author", r.authors)):
        if values:
            where.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
    for author in r.exclude_authors:  # not `NOT IN`: sqlite-vec 0.1.9 applies that after the top-k cut
        where.append("author != ?")
        params.append(author)
    if not r.include_archived:
        where.append("archived = 0")
    if r.created_after_ms:
        where.append("created_ms >= ?")
        params.append(r.created_after_ms)
    if r.created_before_ms:
        where.append("created_ms < ?")
        params.append(r.created_before_ms)
    if r.nums is not None:
        where.append(f"rowid IN ({', '.join(str(int(n)) for n in r.nums) or 'NULL'})")
    return where, params


def _sqlite_vec_knn(conn: Conn, vector: bytes, k: int, where: list[str], params: list[Any]) -> list[tuple[int, float]]:
    clauses = ["embedding MATCH ?", "k = ?", *where]
    sql = f"SELECT rowid, distance FROM {TABLE} WHERE {' AND '.join(clauses)} ORDER BY distance"
    rows = conn.execute(sql, [vector, k, *params]).fetchall()
    return sorted(((num, float(d)) for num, d in rows), key=lambda row: (row[1], row[0]))


# -- the in-memory mirror ------------------------------------------------------------


def open_mirror(path: Path | str, *, compact: bool = False) -> Mirror:
    """A new in-memory mirror of the vector index in the database file at `path`.

    Its owner (the server's store, an agent's cache or outbox) attaches it to
    every connection it opens on that file (`attach`) and closes it when done.
    `compact`: int8 codes with exact answers, filled aside (an agent's cache; see
    `mnemosync.kernel.vector_mirror`).
    """
    return Mirror(str(path), (TABLE, CHANGES, META), METADATA_COLUMNS, _connect, dimensions, compact=compact)


def attach(conn: Conn, mirror: Mirror | None) -> None:
    """Makes `conn` answer KNN queries from `mirror` and keep it informed of its writes (None: sqlite-vec only)."""
    _own(conn).vector_mirror = mirror


class _Kept(Protocol):
    """What this module keeps on a `db.Connection` (its `vector_mirror` and `vector_schema`)."""

    vector_mirror: Mirror | None
    vector_schema: _Known | None


def _own(conn: Conn) -> _Kept:
    """`conn` as `db.connect` opened it (a `db.Connection`), with the attributes this module keeps on it."""
    return cast(_Kept, conn)


@dataclass
class _Known:
    """What this module last saw of one connection's database (writes ask on every call)."""

    schema: int = -1
    dims: int | None = None
    logged: bool = False


def _schema(conn: Conn) -> _Known:
    """The connection's database as of now: dims and change log, re-read when its schema changed."""
    own = _own(conn)
    known = own.vector_schema
    if known is None:
        known = own.vector_schema = _Known()
    version = conn.execute("PRAGMA schema_version").fetchone()[0]
    if version != known.schema:
        known.dims = dimensions(conn)
        known.logged = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (META,)).fetchone() is not None
        known.schema = version
    return known


def _connect(path: str) -> Conn:
    return db.connect(path, synchronous="normal").conn
