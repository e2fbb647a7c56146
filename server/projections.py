"""Projections: the live state folded from changelog entries.

`memories` (with `memory_tags` and `links`), the FTS5 keyword index and the
sqlite-vec vector index are all derived from the changelog by `apply`, one
entry at a time. The server applies each entry in the same transaction that
appends it; agent caches apply the entries they receive with the very same
function, which is why every replica shows the same state. `rebuild` throws the
projections away and folds the changelog again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from server import vectors
from server.changelog import Entry

SCHEMA = """
CREATE TABLE memories (
    num INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    scope TEXT NOT NULL,
    type TEXT NOT NULL,
    layer INTEGER NOT NULL,
    tags TEXT NOT NULL,
    content TEXT NOT NULL,
    importance REAL NOT NULL,
    confidence REAL NOT NULL,
    protected INTEGER NOT NULL,
    author_agent TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    version INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    archived INTEGER NOT NULL,
    embedding_model TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    last_seq INTEGER NOT NULL
);
CREATE INDEX memories_scope ON memories (scope, archived);
CREATE INDEX memories_created ON memories (created_at_ms);
CREATE INDEX memories_content_hash ON memories (content_hash);
CREATE TABLE memory_tags (
    tag TEXT NOT NULL,
    num INTEGER NOT NULL,
    PRIMARY KEY (tag, num)
) WITHOUT ROWID;
CREATE TABLE links (
    memory_id TEXT NOT NULL,
    target_id TEXT NOT NULL,
    relation TEXT NOT NULL,
    author_agent TEXT NOT NULL,
    seq INTEGER NOT NULL,
    PRIMARY KEY (memory_id, target_id, relation)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE memory_fts USING fts5(
    content, tags, tokenize = 'porter unicode61 remove_diacritics 2'
);
"""


MEMORY_COLUMNS = (
    "num, id, scope, type, layer, tags, content, importance, confidence, protected, "
    "author_agent, updated_by, version, created_at_ms, updated_at_ms, archived, "
    "embedding_model, content_hash, last_seq"
)


@dataclass(frozen=True)
class MemoryRow:
    """One row of `memories`, with its links."""

    num: int
    id: str
    scope: str
    type: str
    layer: int
    tags: list[str]
    content: str
    importance: float
    confidence: float
    protected: bool
    author_agent: str
    updated_by: str
    version: int
    created_at_ms: int
    updated_at_ms: int
    archived: bool
    embedding_model: str
    content_hash: str
    last_seq: int
    links: tuple[tuple[str, str, str], ...] = ()


def content_hash(content: str) -> str:
    """SHA-256 of the content's UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(content.encode()).hexdigest()


def row_to_memory(row, links=()) -> MemoryRow:
    """Builds a MemoryRow from a `SELECT MEMORY_COLUMNS` row."""
    values = list(row)
    values[5] = json.loads(values[5])
    values[9] = bool(values[9])
    values[15] = bool(values[15])
    return MemoryRow(*values, links=tuple(links))


def get_memory(conn, memory_id: str) -> MemoryRow | None:
    """The memory's current state, archived or not, or None if it never existed."""
    row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if row is None:
        return None
    return row_to_memory(row, get_links(conn, memory_id))


def get_links(conn, memory_id: str) -> list[tuple[str, str, str]]:
    """(target_id, relation, author_agent) of the memory's outgoing links."""
    return conn.execute(
        "SELECT target_id, relation, author_agent FROM links WHERE memory_id = ? "
        "ORDER BY target_id, relation",
        (memory_id,),
    ).fetchall()


def apply(conn, entry: Entry) -> None:
    """Folds one changelog entry into the projections (caller holds the transaction).

    Entries are assumed valid: the server validated them before appending.
    """
    handler = _HANDLERS[entry.op]
    handler(conn, entry)


def _add(conn, e: Entry) -> None:
    p = e.payload
    cur = conn.execute(
        "INSERT INTO memories (id, scope, type, layer, tags, content, importance, confidence, "
        "protected, author_agent, updated_by, version, created_at_ms, updated_at_ms, archived, "
        "embedding_model, content_hash, last_seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?)",
        (
            e.memory_id, p["scope"], p["type"], p["layer"], json.dumps(p["tags"]), p["content"],
            p["importance"], p["confidence"], int(p["protected"]), e.agent_id, e.agent_id,
            e.version, e.server_time_ms, e.server_time_ms, e.embedding_model,
            content_hash(p["content"]), e.seq,
        ),
    )
    num = cur.lastrowid
    _index_text(conn, num, p["content"], p["tags"])
    if e.embedding:
        vectors.insert(conn, num, e.embedding, scope=p["scope"], type=p["type"], layer=p["layer"],
                       author=e.agent_id, archived=False, created_ms=e.server_time_ms)


def _update(conn, e: Entry) -> None:
    m = get_memory(conn, e.memory_id)
    p = e.payload
    content = p.get("content", m.content)
    tags = p.get("tags", m.tags)
    conn.execute(
        "UPDATE memories SET content = ?, content_hash = ?, type = ?, tags = ?, importance = ?, "
        "confidence = ?, protected = ?, embedding_model = ? WHERE num = ?",
        (
            content, content_hash(content), p.get("type", m.type), json.dumps(tags),
            p.get("importance", m.importance), p.get("confidence", m.confidence),
            int(p.get("protected", m.protected)),
            e.embedding_model if e.embedding else m.embedding_model, m.num,
        ),
    )
    if "content" in p or "tags" in p:
        conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (m.num,))
        conn.execute("DELETE FROM memory_tags WHERE num = ?", (m.num,))
        _index_text(conn, m.num, content, tags)
    if e.embedding:
        vectors.set_embedding(conn, m.num, e.embedding)
    if "type" in p:
        vectors.set_attribute(conn, m.num, "type", p["type"])
    _touch(conn, e, m.num)


def _set_archived(conn, e: Entry, archived: int) -> None:
    m = get_memory(conn, e.memory_id)
    conn.execute("UPDATE memories SET archived = ? WHERE num = ?", (archived, m.num))
    vectors.set_attribute(conn, m.num, "archived", archived)
    _touch(conn, e, m.num)


def _forget(conn, e: Entry) -> None:
    _set_archived(conn, e, 1)


def _restore(conn, e: Entry) -> None:
    _set_archived(conn, e, 0)


def _set_layer(conn, e: Entry) -> None:
    m = get_memory(conn, e.memory_id)
    layer = e.payload["layer"]
    conn.execute("UPDATE memories SET layer = ? WHERE num = ?", (layer, m.num))
    vectors.set_attribute(conn, m.num, "layer", layer)
    _touch(conn, e, m.num)


def _link(conn, e: Entry) -> None:
    conn.execute(
        "INSERT OR IGNORE INTO links (memory_id, target_id, relation, author_agent, seq) "
        "VALUES (?, ?, ?, ?, ?)",
        (e.memory_id, e.payload["target_id"], e.payload["relation"], e.agent_id, e.seq),
    )
    conn.execute("UPDATE memories SET last_seq = ? WHERE id = ?", (e.seq, e.memory_id))


def _unlink(conn, e: Entry) -> None:
    conn.execute(
        "DELETE FROM links WHERE memory_id = ? AND target_id = ? AND relation = ?",
        (e.memory_id, e.payload["target_id"], e.payload["relation"]),
    )
    conn.execute("UPDATE memories SET last_seq = ? WHERE id = ?", (e.seq, e.memory_id))


def _touch(conn, e: Entry, num: int) -> None:
    conn.execute(
        "UPDATE memories SET version = ?, updated_by = ?, updated_at_ms = ?, last_seq = ? "
        "WHERE num = ?",
        (e.version, e.agent_id, e.server_time_ms, e.seq, num),
    )


def _index_text(conn, num: int, content: str, tags: list[str]) -> None:
    conn.execute(
        "INSERT INTO memory_fts (rowid, content, tags) VALUES (?, ?, ?)",
        (num, content, " ".join(tags)),
    )
    conn.executemany(
        "INSERT OR IGNORE INTO memory_tags (tag, num) VALUES (?, ?)", [(t, num) for t in tags]
    )


_HANDLERS = {
    "add": _add,
    "update": _update,
    "forget": _forget,
    "restore": _restore,
    "set_layer": _set_layer,
    "link": _link,
    "unlink": _unlink,
}


def remove_memory(conn, memory_id: str) -> None:
    """Drops one memory from every projection (used for local overlays, never on the server)."""
    row = conn.execute("SELECT num FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if row is None:
        return
    for sql in ("DELETE FROM memories WHERE num = ?", "DELETE FROM memory_fts WHERE rowid = ?",
                "DELETE FROM memory_tags WHERE num = ?"):
        conn.execute(sql, row)
    conn.execute("DELETE FROM links WHERE memory_id = ?", (memory_id,))
    vectors.delete(conn, row[0])


def clear(conn) -> None:
    """Empties every projection (the caller then folds the changelog again)."""
    for table in ("memories", "memory_tags", "links", "memory_fts"):
        conn.execute(f"DELETE FROM {table}")
    vectors.drop(conn)


def snapshot(conn) -> dict[str, Any]:
    """The visible state as plain data, for comparing replicas and rebuilds.

    Keyed by memory id (row numbers may differ between replicas); includes
    links, the keyword index contents and each memory's vector.
    """
    memories = {}
    for row in conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories ORDER BY id"):
        m = row_to_memory(row, get_links(conn, row[1]))
        fts = conn.execute(
            "SELECT content, tags FROM memory_fts WHERE rowid = ?", (m.num,)
        ).fetchone()
        vec = vectors.get(conn, m.num)
        tags = sorted(
            t for (t,) in conn.execute("SELECT tag FROM memory_tags WHERE num = ?", (m.num,))
        )
        state = {k: v for k, v in m.__dict__.items() if k != "num"}
        memories[m.id] = {**state, "fts": tuple(fts) if fts else None, "vec": vec, "tag_index": tags}
    return memories
