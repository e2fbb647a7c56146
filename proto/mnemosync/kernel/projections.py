"""The fold: the live state (projections) computed from changelog entries, the same on the server and in every cache.

`memories` (with `memory_tags` and `links`), the FTS5 keyword index and the
sqlite-vec vector index are all derived from the changelog by `apply`, one
entry at a time. The server applies each entry in the same transaction that
appends it; agent caches apply the entries they receive with the very same
function, which is why every replica shows the same state. `rebuild` throws the
projections away and folds the changelog again.

Versions and conflicts (schema version 2). Each memory keeps the states it
had at earlier versions in `memory_history`, so a write made from an older
version can be folded against what its writer saw. An update or forget the
server marked as stale (`Entry.conflict`) does not overwrite the memory: it
becomes a revision of a write conflict (`mnemosync.kernel.conflict_projection`) and the memory
shows whichever revision `conflicts.choose_visible` picks; the version still
grows by one. A later ordinary write changes the visible revision. A
resolve_conflict entry sets what the memory shows and closes the conflict.
A redact entry removes the memory's text from every projection
(`mnemosync.server.redaction` explains what and why). Nothing here looks at anything
but the entries, so caches agree with the server.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from mnemosync.kernel import (
    conflict_projection,
    lifecycle_state,
    links,
    origin,
    procedures,
    revisions,
    source_projection,
    vectors,
)
from mnemosync.kernel.entry import LEGACY_AUTHORITY, REDACTED_TEXT, SYSTEM_AGENT, Entry
from mnemosync.kernel.memory import MEMORY_COLUMNS, MemoryRow, content_hash, row_to_memory

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

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

SCHEMA_V2 = """
ALTER TABLE memories ADD COLUMN trust TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN quote TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN authority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN version_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE links ADD COLUMN authority INTEGER NOT NULL DEFAULT 0;
""" + revisions.SCHEMA + conflict_projection.SCHEMA
"""Schema version 2 of the projections: trust labels, authorities, history and conflicts."""

SCHEMA_V3 = """
ALTER TABLE memories ADD COLUMN event_time_ms INTEGER;
"""
"""Schema version 3 of the projections: a memory's own event time (NULL: not recorded; no entry before had one)."""

SCHEMA_V4 = lifecycle_state.SCHEMA
"""Schema version 4 of the projections: the lifecycle state the sweep's decay entries record (issue 15)."""

SCHEMA_V5 = """
ALTER TABLE links ADD COLUMN weight REAL NOT NULL DEFAULT 1.0;
ALTER TABLE links ADD COLUMN reason TEXT NOT NULL DEFAULT '';
CREATE INDEX links_target ON links (target_id, relation);
CREATE INDEX memories_event_time ON memories (coalesce(event_time_ms, created_at_ms), id);
"""
"""Schema version 5 of the projections: typed links with a weight and a reason (issue 16), the reverse
index graph walks follow inwards, and the order of event times timelines read. Links folded before keep their
old relation names, so a replica folds its changelog again (the server) or fills again from the start (a
cache) to read them as types."""

SCHEMA_V6 = """
ALTER TABLE memories ADD COLUMN content_agent TEXT NOT NULL DEFAULT '';
ALTER TABLE memories ADD COLUMN content_authority INTEGER NOT NULL DEFAULT 0;
"""
"""Schema version 6 of the projections: who wrote the text a memory shows, and at what authority, apart from its
last editor (issue 33). Only a fold of every entry knows them, so a replica folds again or fills again."""

SCHEMA_V7 = source_projection.SCHEMA
"""Schema version 7 of the projections: memories' sources and their verification (issue 31); no earlier entry
carries sources or is a verify entry, so nothing is refolded."""

SCHEMA_V8 = procedures.SCHEMA
"""Schema version 8 of the projections: procedure memories' steps, preconditions and postconditions (issue 31);
no earlier entry carries them, so nothing is refolded."""

SCHEMA_V9 = origin.SCHEMA
"""Schema version 9 of the projections: imported memories' origin (issue 41); no earlier entry carries one, so
nothing is refolded."""




def get_memory(conn: Conn, memory_id: str, *, every_link: bool = False) -> MemoryRow | None:
    """The memory's current state, archived or not, or None if it never existed.

    Its links are those into memories this database holds (`shown_links`), or with `every_link` all it has (a
    local overlay, which holds only the memories with pending writes)."""
    row = conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if row is None:
        return None
    memory: MemoryRow = origin.attach(conn, procedures.attach(conn, source_projection.attach(conn, [row_to_memory(
        row, (get_links if every_link else shown_links)(conn, memory_id))])))[0]
    return replace(memory, open_conflicts=conflict_projection.open_ids(conn, memory_id))


def _folded(conn: Conn, memory_id: str) -> MemoryRow:
    """The memory a folded entry acts on: the server validated the entry, so the memory exists."""
    return cast(MemoryRow, get_memory(conn, memory_id))


def link_authority(conn: Conn, memory_id: str, target_id: str, relation: str) -> int | None:
    """The authority that made a link (0 if unrecorded), or None if there is no such link."""
    row = conn.execute(
        "SELECT authority FROM links WHERE memory_id = ? AND target_id = ? AND relation = ?",
        (memory_id, target_id, relation),
    ).fetchone()
    return row[0] if row else None


def get_links(conn: Conn, memory_id: str) -> list[links.LinkRow]:
    """The memory's outgoing links, by target and type."""
    return [links.LinkRow(*row) for row in conn.execute(
        "SELECT target_id, relation, author_agent, weight, reason FROM links WHERE memory_id = ? "
        "ORDER BY target_id, relation",
        (memory_id,),
    )]


def shown_links(conn: Conn, memory_id: str) -> list[links.LinkRow]:
    """The memory's outgoing links into memories this database holds, by target and type: what a read shows.

    A replica granted some scopes folds the link entries of the memories it may read whole (they are that
    memory's entries, in the hash chain and in its scope's snapshot section), so it holds links into memories it
    never received; a read must not show such a target, not even as an id (issue 33, item 10). The server holds
    every target, so there the two agree; `get_links` is the table as folded (snapshots and `verify`)."""
    return [links.LinkRow(*row) for row in conn.execute(
        "SELECT target_id, relation, author_agent, weight, reason FROM links l WHERE memory_id = ? "
        "AND EXISTS (SELECT 1 FROM memories t WHERE t.id = l.target_id) ORDER BY target_id, relation",
        (memory_id,),
    )]


def apply(conn: Conn, entry: Entry) -> None:
    """Folds one changelog entry into the projections (caller holds the transaction).

    Entries are assumed valid: the server validated them before appending.
    """
    handler = _HANDLERS[entry.op]
    handler(conn, entry)


def apply_many(conn: Conn, entries: Sequence[Entry]) -> None:
    """Folds entries in order, exactly as `apply` one by one would; runs of adds without a conflict mark go in
    with one executemany per table (a catch-up or a batched append is mostly such runs)."""
    run: list[Entry] = []
    for e in entries:
        if e.op == "add" and not e.conflict:
            run.append(e)
            continue
        _add_run(conn, run)
        run = []
        apply(conn, e)
    _add_run(conn, run)


_INSERT_MEMORY = (
    "INSERT INTO memories (num, id, scope, type, layer, tags, content, importance, confidence, "
    "protected, author_agent, updated_by, version, created_at_ms, updated_at_ms, archived, "
    "embedding_model, content_hash, last_seq, trust, quote, authority, version_seq, event_time_ms, content_agent, "
    "content_authority) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _memory_row(num: int | None, e: Entry) -> tuple[Any, ...]:
    p = e.payload
    return (
        num, e.memory_id, p["scope"], p["type"], p["layer"], json.dumps(p["tags"]), p["content"],
        p["importance"], p["confidence"], int(p["protected"]), e.agent_id, e.agent_id,
        e.version, e.server_time_ms, e.server_time_ms, e.embedding_model,
        content_hash(p["content"]), e.seq, p.get("trust", ""), p.get("quote", ""), e.authority, e.seq,
        p.get("event_time_ms"), e.agent_id, e.authority,
    )


def _add_run(conn: Conn, run: list[Entry]) -> None:
    """Adds without conflict marks, in order. The nums are those SQLite would give one insert at a time
    (max + 1: `num` is a rowid without AUTOINCREMENT)."""
    if len(run) < 2:
        for e in run:
            _add(conn, e)
        return
    first = conn.execute("SELECT coalesce(max(num), 0) + 1 FROM memories").fetchone()[0]
    nums = range(first, first + len(run))
    conn.executemany(_INSERT_MEMORY, [_memory_row(num, e) for num, e in zip(nums, run, strict=True)])
    conn.executemany("INSERT INTO memory_fts (rowid, content, tags) VALUES (?, ?, ?)",
                     [(num, e.payload["content"], " ".join(e.payload["tags"]))
                      for num, e in zip(nums, run, strict=True) if e.payload["content"] != REDACTED_TEXT])
    conn.executemany("INSERT OR IGNORE INTO memory_tags (tag, num) VALUES (?, ?)",
                     [(t, num) for num, e in zip(nums, run, strict=True) for t in e.payload["tags"]])
    vectors.insert_many(conn, [
        (num, e.embedding, e.payload["scope"], e.payload["type"], e.payload["layer"], e.agent_id, 0,
         e.server_time_ms) for num, e in zip(nums, run, strict=True) if e.embedding])
    for num, e in zip(nums, run, strict=True):
        source_projection.apply_write(conn, e)
        origin.apply_add(conn, e)
        if procedures.apply_write(conn, e):
            _reindex_text(conn, num, e.payload["content"], e.payload["tags"])


def _add(conn: Conn, e: Entry) -> None:
    p = e.payload
    cur = conn.execute(_INSERT_MEMORY, _memory_row(None, e))
    num = cast(int, cur.lastrowid)  # set by the insert
    _index_text(conn, num, p["content"], p["tags"], new=True)
    if e.embedding:
        vectors.insert(conn, num, e.embedding, scope=p["scope"], type=p["type"], layer=p["layer"],
                       author=e.agent_id, archived=False, created_ms=e.server_time_ms)
    if e.conflict and e.conflict.get("kind") == "semantic":
        _open_semantic(conn, e)
    source_projection.apply_write(conn, e)
    origin.apply_add(conn, e)
    if procedures.apply_write(conn, e):
        _reindex_text(conn, num, p["content"], p["tags"])


def _open_semantic(conn: Conn, e: Entry) -> None:
    mark = cast("dict[str, Any]", e.conflict)  # the entry opens the conflict its mark names
    new, existing = _folded(conn, e.memory_id), _folded(conn, mark["with"])

    def revision(number: int, m: MemoryRow) -> conflict_projection.Revision:
        return conflict_projection.Revision(
            revision=number, memory_id=m.id, agent_id=m.author_agent, authority=m.authority or LEGACY_AUTHORITY,
            seq=m.version_seq, base_version=0, version=m.version, state=revisions.memory_state(m),
        )

    conflict_projection.open_conflict(conn, conflict_projection.Conflict(
        id=mark["id"], kind="semantic", memory_id=new.id, other_memory_id=existing.id,
        similarity=mark["similarity"], scope=new.scope, opened_by=e.agent_id,
        opened_at_ms=e.server_time_ms, visible_revision=0, revisions=(revision(1, existing), revision(2, new)),
    ))


def _show(conn: Conn, e: Entry, change: revisions.Change, version: int, *, extend: bool) -> None:
    """Makes `change.state` the memory's visible state at `version`, written by entry `e`.

    The version it moves past goes into the history first. `extend` (an
    ordinary write) also carries the change into the open write conflict's
    visible revision.
    """
    m, state = change.memory, change.state
    revisions.remember(conn, m, state["content"])
    conn.execute(
        "UPDATE memories SET content = ?, content_hash = ?, type = ?, tags = ?, importance = ?, confidence = ?, "
        "protected = ?, archived = ?, trust = ?, quote = ?, authority = ?, embedding_model = ?, version = ?, "
        "version_seq = ?, updated_by = ?, updated_at_ms = ?, last_seq = ?, event_time_ms = ?, content_agent = ?, "
        "content_authority = ? WHERE num = ?",
        (
            state["content"], content_hash(state["content"]), state["type"], json.dumps(state["tags"]),
            state["importance"], state["confidence"], int(state["protected"]), int(state["archived"]),
            state["trust"], state["quote"], state["authority"],
            change.embedding_model if change.embedding else m.embedding_model,
            version, e.seq, e.agent_id, e.server_time_ms, e.seq, state.get("event_time_ms"),
            state.get("content_agent", m.content_agent), state.get("content_authority", m.content_authority), m.num,
        ),
    )
    if state["content"] != m.content or list(state["tags"]) != list(m.tags):
        conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (m.num,))
        conn.execute("DELETE FROM memory_tags WHERE num = ?", (m.num,))
        _index_text(conn, m.num, state["content"], state["tags"])
    if change.embedding and not vectors.set_embedding(conn, m.num, change.embedding):
        vectors.insert(conn, m.num, change.embedding, scope=m.scope, type=state["type"], layer=m.layer,
                       author=m.author_agent, archived=bool(state["archived"]), created_ms=m.created_at_ms)
    if state["type"] != m.type:
        vectors.set_attribute(conn, m.num, "type", state["type"])
    if bool(state["archived"]) != m.archived:
        vectors.set_attribute(conn, m.num, "archived", int(state["archived"]))
    conflict_projection.follow(conn, m.id, state, change.embedding, change.embedding_model, version, extend=extend)


def _write(conn: Conn, e: Entry) -> None:
    """update, forget, restore and set_layer: a new version of the memory (the system agent's set_layer keeps the
    visible authority)."""
    m = _folded(conn, e.memory_id)
    if e.op == "set_layer":
        conn.execute("UPDATE memories SET layer = ? WHERE num = ?", (e.payload["layer"], m.num))
        vectors.set_attribute(conn, m.num, "layer", e.payload["layer"])
    if e.conflict and e.conflict.get("kind") == "write":
        _show(conn, e, revisions.record_stale(conn, m, e), e.version, extend=False)
        return
    state = revisions.next_state(revisions.memory_state(m), e.op, e.payload, e.authority, e.agent_id)
    if e.agent_id == SYSTEM_AGENT:  # consolidation's promotion: the memory stays its writer's, as an archive does
        state["authority"] = m.authority
    embedding = e.embedding if "content" in e.payload else None
    _show(conn, e, revisions.Change(m, state, embedding, e.embedding_model), e.version, extend=True)
    source_projection.apply_write(conn, e)
    if procedures.apply_write(conn, e):
        _reindex_text(conn, m.num, state["content"], state["tags"])


def _resolve(conn: Conn, e: Entry) -> None:
    p = e.payload
    conflict = cast(conflict_projection.Conflict, conflict_projection.get(conn, p["conflict_id"]))  # validated
    memory = _folded(conn, e.memory_id)
    other = get_memory(conn, conflict.other_memory_id) if conflict.other_memory_id else None
    for change in revisions.resolution(conflict, memory, other, p, e.authority, e.embedding, e.embedding_model,
                                       e.agent_id):
        version = e.version if change.memory.id == e.memory_id else change.memory.version + 1
        _show(conn, e, change, version, extend=False)
    if "keep_revision" in p:
        how = "keep"
    else:
        how = "merged" if "merged_content" in p else "keep_all"
    conflict_projection.close(conn, conflict.id, seq=e.seq, by=e.agent_id, at_ms=e.server_time_ms, resolution=how,
                    kept_revision=p.get("keep_revision", 0), note=p.get("note", ""))


def _redact(conn: Conn, e: Entry) -> None:
    """Removes the memory's text everywhere (content, quote, tags, its links' reasons, history, conflict
    revisions, procedure, sources and their last verification, vector and keyword index), then archives it at
    the entry's version (see `mnemosync.server.redaction`)."""
    m = _folded(conn, e.memory_id)
    revisions.scrub(conn, m.id)
    conflict_projection.scrub(conn, m.id)
    procedures.scrub(conn, m.id)
    source_projection.scrub(conn, m.id)
    vectors.delete(conn, m.num)
    conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (m.num,))
    conn.execute("DELETE FROM memory_tags WHERE num = ?", (m.num,))
    conn.execute("UPDATE links SET reason = ? WHERE memory_id = ? AND reason != ''", (REDACTED_TEXT, m.id))
    m = replace(m, content=REDACTED_TEXT, quote=REDACTED_TEXT if m.quote else "", tags=[])  # _show writes it
    state = {**revisions.memory_state(m), "archived": True, "authority": e.authority, "content_agent": e.agent_id,
             "content_authority": e.authority}
    _show(conn, e, revisions.Change(m, state), e.version, extend=False)
    conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('optimize')")  # deleted terms leave the segments


def _archive(conn: Conn, e: Entry) -> None:
    """The lifecycle sweep archived a decayed memory: a new version, archived, the visible authority unchanged."""
    m = _folded(conn, e.memory_id)
    state = {**revisions.memory_state(m), "archived": True}
    _show(conn, e, revisions.Change(m, state), e.version, extend=True)


def _link(conn: Conn, e: Entry) -> None:
    """A new link, or new weight and reason for the link of that type (its maker stays). An entry from before
    the edge types (no weight, an old relation name) only ever adds, as it did then."""
    p = e.payload
    weight, reason = p.get("weight", links.DEFAULT_WEIGHT), p.get("reason", "")
    conn.execute(
        "INSERT INTO links (memory_id, target_id, relation, author_agent, seq, authority, weight, reason) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (memory_id, target_id, relation) DO "
        + ("UPDATE SET weight = excluded.weight, reason = excluded.reason"
           if p["relation"] in links.EDGE_TYPES else "NOTHING"),
        (e.memory_id, p["target_id"], links.edge_type(p["relation"]), e.agent_id, e.seq, e.authority, weight,
         reason),
    )
    conn.execute("UPDATE memories SET last_seq = ? WHERE id = ?", (e.seq, e.memory_id))


def _unlink(conn: Conn, e: Entry) -> None:
    conn.execute(
        "DELETE FROM links WHERE memory_id = ? AND target_id = ? AND relation = ?",
        (e.memory_id, e.payload["target_id"], links.edge_type(e.payload["relation"])),
    )
    conn.execute("UPDATE memories SET last_seq = ? WHERE id = ?", (e.seq, e.memory_id))


def _index_text(conn: Conn, num: int, content: str, tags: list[str], *, new: bool = False) -> None:
    """Indexes the memory's text for keyword search: its content, with a procedure's steps, preconditions and
    postconditions after it (`procedures.index_text`), and its tags. A `new` memory has no procedure yet."""
    if content != REDACTED_TEXT:
        found = {} if new else procedures.lookup(
            conn, [r[0] for r in conn.execute("SELECT id FROM memories WHERE num = ?", (num,))])
        steps = "".join("\n" + procedures.index_text(p) for p in found.values())
        conn.execute(
            "INSERT INTO memory_fts (rowid, content, tags) VALUES (?, ?, ?)",
            (num, content + steps, " ".join(tags)),
        )
    conn.executemany(
        "INSERT OR IGNORE INTO memory_tags (tag, num) VALUES (?, ?)", [(t, num) for t in tags]
    )


def _reindex_text(conn: Conn, num: int, content: str, tags: list[str]) -> None:
    """Indexes a memory's text again after its procedure changed."""
    conn.execute("DELETE FROM memory_fts WHERE rowid = ?", (num,))
    conn.execute("DELETE FROM memory_tags WHERE num = ?", (num,))
    _index_text(conn, num, content, tags)


_HANDLERS: dict[str, Callable[[Conn, Entry], None]] = {
    "add": _add,
    "update": _write,
    "forget": _write,
    "restore": _write,
    "set_layer": _write,
    "link": _link,
    "unlink": _unlink,
    "resolve_conflict": _resolve,
    "redact": _redact,
    "decay": lifecycle_state.apply_decay,
    "archive": _archive,
    "verify": source_projection.apply_verify,
}


def remove_memory(conn: Conn, memory_id: str) -> int | None:
    """Drops one memory from every projection (used for local overlays, never on the server).

    Returns:
        The row number it had, or None if there was no such memory.
    """
    row = conn.execute("SELECT num FROM memories WHERE id = ?", (memory_id,)).fetchone()
    if row is None:
        return None
    for sql in ("DELETE FROM memories WHERE num = ?", "DELETE FROM memory_fts WHERE rowid = ?",
                "DELETE FROM memory_tags WHERE num = ?"):
        conn.execute(sql, row)
    conn.execute("DELETE FROM links WHERE memory_id = ?", (memory_id,))
    conn.execute("DELETE FROM memory_sources WHERE memory_id = ?", (memory_id,))
    procedures.scrub(conn, memory_id)
    origin.remove(conn, memory_id)
    revisions.forget_memory(conn, memory_id)
    vectors.delete(conn, row[0])
    return cast(int, row[0])


def put_memory(conn: Conn, m: MemoryRow, embedding: bytes | None) -> None:
    """Writes a memory as it is into `memories`, its tags, links, keyword and vector index (local overlays only).

    The row keeps `m.num`, or takes the next free number when it is 0; the
    memory must not be there already (see `remove_memory`).
    """
    columns = [c.strip() for c in MEMORY_COLUMNS.split(",")]
    values = [json.dumps(m.tags) if c == "tags" else getattr(m, c) for c in columns]
    values[0] = m.num or None
    num = cast(int, conn.execute(f"INSERT INTO memories ({MEMORY_COLUMNS}) VALUES ({', '.join('?' for _ in columns)})",
                                 values).lastrowid)
    _index_text(conn, num, m.content, m.tags)
    conn.executemany("INSERT INTO links (memory_id, target_id, relation, author_agent, weight, reason, seq) "
                     "VALUES (?, ?, ?, ?, ?, ?, 0)", [(m.id, *link) for link in m.links])
    if embedding:
        vectors.insert(conn, num, embedding, scope=m.scope, type=m.type, layer=m.layer, author=m.author_agent,
                       archived=m.archived, created_ms=m.created_at_ms)


def clear(conn: Conn) -> None:
    """Empties every projection (the caller then folds the changelog again)."""
    for table in ("memories", "memory_tags", "links", "memory_fts"):
        conn.execute(f"DELETE FROM {table}")
    revisions.clear(conn)
    conflict_projection.clear(conn)
    lifecycle_state.clear(conn)
    source_projection.clear(conn)
    procedures.clear(conn)
    origin.clear(conn)
    vectors.drop(conn)


def snapshot(conn: Conn) -> dict[str, Any]:
    """The visible state as plain data, for comparing replicas and rebuilds.

    Keyed by memory id (row numbers may differ between replicas); includes
    links, the keyword index contents, each memory's vector, its history and
    the conflicts opened on it.
    """
    return dict(_memory_states(conn))


def _memory_states(conn: Conn) -> Iterator[tuple[str, dict[str, Any]]]:
    """(memory id, its state as `snapshot` shows it), in id order, one memory at a time."""
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
        yield m.id, {**state, "fts": tuple(fts) if fts else None, "vec": vec, "tag_index": tags,
                     "history": revisions.snapshot(conn, m.id), "conflicts": conflict_projection.snapshot(conn, m.id),
                     "open_conflicts": conflict_projection.open_ids(conn, m.id),
                     "lifecycle": lifecycle_state.snapshot(conn, m.id),
                     "sources": source_projection.snapshot(conn, m.id),
                     "procedure": procedures.snapshot(conn, m.id), "origin": origin.snapshot(conn, m.id)}


_ROW_COUNTS = {
    "memories": "SELECT count(*) FROM memories",
    "keyword index": "SELECT count(*) FROM memory_fts",
    "tag index": "SELECT count(*) FROM memory_tags",
    "links": "SELECT count(*) FROM links",
    "history": "SELECT count(*) FROM memory_history",
    "conflicts": "SELECT count(*) FROM conflicts",
    "conflict revisions": "SELECT count(*) FROM conflict_revisions",
    "lifecycle": "SELECT count(*) FROM memory_lifecycle",
}

MAX_DIFFERENCES = 100
"""How many differences `differences` names at most."""


def differences(stored: Conn, folded: Conn) -> list[str]:
    """What the projections in `stored` show that a fresh fold of the same changelog (`folded`) does not.

    Compares every memory field by field (content, metadata, links, keyword and
    tag index rows, vector, history, conflicts), then the row counts of each
    table, so a row with no memory behind it shows too. At most MAX_DIFFERENCES.
    """
    found: list[str] = []
    left, right = _memory_states(stored), _memory_states(folded)
    a, b = next(left, None), next(right, None)
    while (a is not None or b is not None) and len(found) < MAX_DIFFERENCES:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None  # the loop goes on while either is left
            found.append(f"memory {a[0]} is in the projections but no changelog entry makes it")
            a = next(left, None)
        elif a is None or b[0] < a[0]:
            found.append(f"memory {b[0]} is missing from the projections")
            b = next(right, None)
        else:
            for key in sorted(set(a[1]) | set(b[1])):
                if a[1].get(key) != b[1].get(key):
                    found.append(f"memory {a[0]}: {key} is {_short(a[1].get(key))} in the projections, "
                                 f"{_short(b[1].get(key))} by the changelog")
            a, b = next(left, None), next(right, None)
    for name, sql in _ROW_COUNTS.items():
        kept, made = stored.execute(sql).fetchone()[0], folded.execute(sql).fetchone()[0]
        if kept != made:
            found.append(f"{name}: {kept} rows in the projections, {made} by the changelog")
    kept, made = vectors.count(stored), vectors.count(folded)
    if kept != made:
        found.append(f"vector index: {kept} rows in the projections, {made} by the changelog")
    return found[:MAX_DIFFERENCES]


def _short(value: Any) -> str:
    text = repr(value.hex() if isinstance(value, bytes) else value)
    return text if len(text) <= 60 else text[:57] + "..."
