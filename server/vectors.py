"""The vector index: a sqlite-vec `vec0` table, one row per memory.

Every read and write of vectors goes through here, so the index's layout
(cosine distance, which columns are filterable) can change in one place.
Rows are keyed by `memories.num`. Filterable attributes live in the index
itself (vec0 metadata columns), so a filtered KNN query stays exact instead of
filtering an over-fetched top-k afterwards.
"""

from __future__ import annotations

TABLE = "memory_vec"
METADATA_COLUMNS = ("scope", "type", "layer", "author", "archived", "created_ms")


def dimensions(conn) -> int | None:
    """Dimensions of the index, or None before the first vector arrives."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchone()
    if row is None:
        return None
    return int(row[0].split("float[", 1)[1].split("]", 1)[0])


def ensure_table(conn, dims: int) -> None:
    """Creates the index for `dims`-long vectors if it does not exist."""
    if dimensions(conn) is None:
        conn.execute(
            f"CREATE VIRTUAL TABLE {TABLE} USING vec0("
            f"embedding float[{int(dims)}] distance_metric=cosine, "
            "scope text, type text, layer integer, author text, archived integer, created_ms integer)"
        )


def insert(conn, num: int, embedding: bytes, *, scope: str, type: str, layer: int, author: str,
           archived: bool, created_ms: int) -> None:
    """Adds a memory's vector (creating the index on first use)."""
    ensure_table(conn, len(embedding) // 4)
    conn.execute(
        f"INSERT INTO {TABLE} (rowid, embedding, scope, type, layer, author, archived, created_ms) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (num, embedding, scope, type, layer, author, int(archived), created_ms),
    )


def set_embedding(conn, num: int, embedding: bytes) -> None:
    """Replaces a memory's vector."""
    if dimensions(conn) is not None:
        conn.execute(f"UPDATE {TABLE} SET embedding = ? WHERE rowid = ?", (embedding, num))


def set_attribute(conn, num: int, column: str, value) -> None:
    """Updates one filterable attribute (one of METADATA_COLUMNS)."""
    if column not in METADATA_COLUMNS:
        raise ValueError(f"not a vector index attribute: {column}")
    if dimensions(conn) is not None:
        conn.execute(f"UPDATE {TABLE} SET {column} = ? WHERE rowid = ?", (value, num))


def delete(conn, num: int) -> None:
    """Removes a memory's vector."""
    if dimensions(conn) is not None:
        conn.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (num,))


def drop(conn) -> None:
    """Drops the whole index (before a rebuild)."""
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")


def get(conn, num: int) -> tuple | None:
    """(embedding, *METADATA_COLUMNS) of one row, or None."""
    if dimensions(conn) is None:
        return None
    row = conn.execute(
        f"SELECT embedding, {', '.join(METADATA_COLUMNS)} FROM {TABLE} WHERE rowid = ?", (num,)
    ).fetchone()
    return tuple(row) if row else None


def knn(conn, vector: bytes, k: int, *, where: list[str], params: list) -> list[tuple[int, float]]:
    """The k nearest rows to `vector` as (num, cosine distance), nearest first.

    Args:
        where: Extra SQL conditions on METADATA_COLUMNS or rowid, with `?` placeholders.
        params: Their parameters, in order.
    """
    if dimensions(conn) is None:
        return []
    clauses = ["embedding MATCH ?", "k = ?", *where]
    sql = f"SELECT rowid, distance FROM {TABLE} WHERE {' AND '.join(clauses)} ORDER BY distance"
    return conn.execute(sql, [vector, k, *params]).fetchall()
