"""Baselines: the same rows inserted into the same tables with plain SQL, nothing else.

`server_rows` reads what the server wrote for a set of changelog entries (the
changelog rows and every projection row they produced); `insert_server_rows`
writes them into another database with `executemany`, one transaction per
batch. `cache_rows` / `insert_cache_rows` do the same for an agent cache. The
difference between these and the real paths is everything the real paths do
beyond storing rows: gRPC, validation, hashing, state checks, per-row Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mnemosync.agent import cache as cache_module
from mnemosync.kernel import db, migrations, vectors
from mnemosync.server import ledger_context, schema

_VEC_COLUMNS = "rowid, embedding, scope, type, layer, author, archived, created_ms"


@dataclass
class Rows:
    """Rows per table, in insert order."""

    changelog: list[tuple] = field(default_factory=list)
    memories: list[tuple] = field(default_factory=list)
    tags: list[tuple] = field(default_factory=list)
    fts: list[tuple] = field(default_factory=list)
    vec: list[tuple] = field(default_factory=list)
    last_seq_at: int = 18
    """Position of `last_seq` in a memories row."""

    def __len__(self) -> int:
        return len(self.memories)

    def batches(self, size: int) -> list[Rows]:
        """Splits by memory, keeping each memory's rows together."""
        by_seq = {r[0]: r for r in self.changelog}
        tags: dict[int, list[tuple]] = {}
        for r in self.tags:
            tags.setdefault(r[1], []).append(r)
        fts, vec = {r[0]: r for r in self.fts}, {r[0]: r for r in self.vec}
        out, at = [], self.last_seq_at
        for start in range(0, len(self.memories), size):
            part = self.memories[start:start + size]
            out.append(Rows(
                changelog=[by_seq[m[at]] for m in part if m[at] in by_seq],
                memories=part,
                tags=[t for m in part for t in tags.get(m[0], ())],
                fts=[fts[m[0]] for m in part if m[0] in fts],
                vec=[vec[m[0]] for m in part if m[0] in vec],
                last_seq_at=at,
            ))
        return out


def columns(conn, table: str) -> list[str]:
    """The table's columns, in order (schemas grow as the project does)."""
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def server_rows(conn, first_seq: int, last_seq: int) -> Rows:
    """What the server stored for add entries first_seq..last_seq."""
    names = columns(conn, "changelog")
    changelog = conn.execute(f"SELECT {', '.join(names)} FROM changelog WHERE seq BETWEEN ? AND ? ORDER BY seq",
                             (first_seq, last_seq)).fetchall()
    rows = _projection_rows(conn, "last_seq BETWEEN ? AND ?", (first_seq, last_seq))
    embeddings = {r[0]: r[names.index("embedding")] for r in changelog}
    m = {name: i for i, name in enumerate(columns(conn, "memories"))}
    rows.changelog, rows.last_seq_at = changelog, m["last_seq"]
    rows.vec = [(r[m["num"]], embeddings[r[m["last_seq"]]], r[m["scope"]], r[m["type"]], r[m["layer"]],
                 r[m["author_agent"]], r[m["archived"]], r[m["created_at_ms"]]) for r in rows.memories]
    return rows


def cache_rows(conn) -> Rows:
    """Every projection row of an agent cache (vectors read from its index)."""
    rows = _projection_rows(conn, "1", ())
    rows.vec = conn.execute(f"SELECT {_VEC_COLUMNS} FROM {vectors.TABLE}").fetchall()
    order = {m[0]: i for i, m in enumerate(rows.memories)}
    rows.vec.sort(key=lambda r: order.get(r[0], 0))
    return rows


def _projection_rows(conn, where: str, params: tuple) -> Rows:
    memories = conn.execute(f"SELECT * FROM memories WHERE {where} ORDER BY num", params).fetchall()
    lo, hi = (memories[0][0], memories[-1][0]) if memories else (0, -1)
    return Rows(
        memories=memories,
        tags=conn.execute("SELECT tag, num FROM memory_tags WHERE num BETWEEN ? AND ?", (lo, hi)).fetchall(),
        fts=conn.execute("SELECT rowid, content, tags FROM memory_fts WHERE rowid BETWEEN ? AND ?",
                         (lo, hi)).fetchall(),
    )


def new_server_db(path: Path, synchronous: str, dims: int):
    """An empty database with the server's schema, vector index and writer's page cache."""
    conn = db.connect(path, synchronous=synchronous).conn
    conn.execute(f"PRAGMA cache_size = {-ledger_context.WRITER_PAGE_CACHE_KIB}")
    migrations.migrate(conn, schema.SERVER_STEPS)
    conn.execute("BEGIN")
    vectors.ensure_table(conn, dims)
    conn.execute("COMMIT")
    return conn


def new_cache_db(path: Path, dims: int):
    """An empty database with an agent cache's schema, page size, page cache and vector index."""
    conn = cache_module.connect(path)
    migrations.migrate(conn, cache_module.CACHE_STEPS)
    conn.execute("BEGIN")
    vectors.ensure_table(conn, dims)
    conn.execute("COMMIT")
    return conn


def insert_rows(conn, rows: Rows, *, offset: tuple[int, str] | None = None) -> None:
    """Inserts one batch in one transaction: plain executemany per table.

    Args:
        offset: For a cache, the (seq, hash) to record as its new offset, as the real path does.
    """
    conn.execute("BEGIN IMMEDIATE")
    if rows.changelog:
        conn.executemany(f"INSERT INTO changelog VALUES ({_marks(len(rows.changelog[0]))})", rows.changelog)
    conn.executemany(f"INSERT INTO memories VALUES ({_marks(len(rows.memories[0]))})", rows.memories)
    conn.executemany("INSERT INTO memory_tags (tag, num) VALUES (?, ?)", rows.tags)
    conn.executemany("INSERT INTO memory_fts (rowid, content, tags) VALUES (?, ?, ?)", rows.fts)
    conn.executemany(f"INSERT INTO {vectors.TABLE} ({_VEC_COLUMNS}) VALUES ({_marks(8)})", rows.vec)
    first = conn.execute(f"SELECT coalesce(max(version), 0) FROM {vectors.CHANGES}").fetchone()[0] + 1
    conn.executemany(f"INSERT INTO {vectors.CHANGES} (num, version) VALUES (?, ?)",
                     [(r[0], first + i) for i, r in enumerate(rows.vec)])
    if offset is not None:
        conn.execute("UPDATE cache_state SET value = ? WHERE key = 'offset'", (offset[0],))
        conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (offset[1],))
    conn.execute("COMMIT")


def _marks(n: int) -> str:
    return ", ".join("?" for _ in range(n))
