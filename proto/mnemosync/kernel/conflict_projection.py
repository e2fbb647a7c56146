"""The conflict projection: conflicts, their revisions, and which revision is visible.

A conflict is opened by a changelog entry the server marked (`Entry.conflict`):

* **write**: an update or forget made from a version that was no longer
  current. Revision 1 is the memory as it stood (the line of writes that got
  there first); each stale write adds a revision, computed from the version
  its writer saw. The memory shows the revision `choose_visible` picks.
* **semantic**: a new memory whose embedding is very close to another agent's
  memory in the same scope but whose content differs. Revision 1 is the
  existing memory, revision 2 the new one; both stay visible as memories.

Conflict ids are the seq of the entry that opened them, and everything here is
folded from changelog entries alone (`mnemosync.kernel.projections` calls in), so the
server, every agent cache and a rebuild hold the same rows.

This module owns the two tables and the visibility rule; it never reads the
`memories` table (that is `mnemosync.kernel.projections`' job).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.entry import LEGACY_AUTHORITY, REDACTED_TEXT, scrub_state

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

SCHEMA = """
CREATE TABLE conflicts (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    other_memory_id TEXT NOT NULL,
    similarity REAL NOT NULL,
    scope TEXT NOT NULL,
    opened_by TEXT NOT NULL,
    opened_at_ms INTEGER NOT NULL,
    visible_revision INTEGER NOT NULL,
    resolved_seq INTEGER NOT NULL DEFAULT 0,
    resolved_by TEXT NOT NULL DEFAULT '',
    resolved_at_ms INTEGER NOT NULL DEFAULT 0,
    resolution TEXT NOT NULL DEFAULT '',
    kept_revision INTEGER NOT NULL DEFAULT 0,
    note TEXT NOT NULL DEFAULT ''
);
CREATE INDEX conflicts_memory ON conflicts (memory_id, resolved_seq);
CREATE INDEX conflicts_other ON conflicts (other_memory_id, resolved_seq);
CREATE TABLE conflict_revisions (
    conflict_id INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    memory_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    authority INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    base_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT NOT NULL,
    PRIMARY KEY (conflict_id, revision)
);
CREATE INDEX conflict_revisions_memory ON conflict_revisions (memory_id);
"""

_CONFLICT_COLUMNS = (
    "id, kind, memory_id, other_memory_id, similarity, scope, opened_by, opened_at_ms, visible_revision, "
    "resolved_seq, resolved_by, resolved_at_ms, resolution, kept_revision, note"
)
_REVISION_COLUMNS = (
    "revision, memory_id, agent_id, authority, seq, base_version, version, state, embedding, embedding_model"
)


@dataclass(frozen=True)
class Revision:
    """One side of a conflict.

    Attributes:
        revision: 1-based number within the conflict.
        memory_id: The memory it belongs to.
        agent_id: Who wrote it.
        authority: Its writer's authority (the visibility rule's first key).
        seq: The entry that created it (the rule's second key).
        base_version: The version it was made from (0 for semantic revisions).
        version: The memory version that last changed it.
        state: Its memory fields (see `mnemosync.kernel.projections.STATE_FIELDS`).
        embedding: The vector of its content (write conflicts only).
        embedding_model: The model of that vector.
        visible: True for the revision the memory shows.
    """

    revision: int
    memory_id: str
    agent_id: str
    authority: int
    seq: int
    base_version: int
    version: int
    state: Mapping[str, Any]
    embedding: bytes | None = None
    embedding_model: str = ""
    visible: bool = False

    @property
    def precedence(self) -> tuple[int, int]:
        """The visibility key: stronger (lower) authority first, then the earlier seq."""
        return (self.authority or LEGACY_AUTHORITY, self.seq)

    @property
    def text_agent(self) -> str:
        """Who wrote the text this revision shows: its writer changed only, say, the importance of an older
        version when this is someone else (its writer where the state does not record it)."""
        return self.state.get("content_agent") or self.agent_id

    @property
    def text_authority(self) -> int:
        """The authority `text_agent` wrote that text with (the writer's where not recorded)."""
        return self.state.get("content_authority") or self.authority


@dataclass(frozen=True)
class Conflict:
    """A conflict, open or resolved, with its revisions in order."""

    id: int
    kind: str
    memory_id: str
    other_memory_id: str
    similarity: float
    scope: str
    opened_by: str
    opened_at_ms: int
    visible_revision: int
    resolved_seq: int = 0
    resolved_by: str = ""
    resolved_at_ms: int = 0
    resolution: str = ""
    kept_revision: int = 0
    note: str = ""
    revisions: tuple[Revision, ...] = ()
    base: Revision | None = None
    """Write conflicts, where a reader filled it in (`mnemosync.kernel.revisions.with_base`): the memory as it
    stood at the version the conflicting writes were made from (revision 0)."""

    @property
    def resolved(self) -> bool:
        """True once a resolve_conflict entry closed it."""
        return self.resolved_seq > 0

    @property
    def agents(self) -> list[str]:
        """The agents with a revision in it, sorted."""
        return sorted({r.agent_id for r in self.revisions})


def choose_visible(revisions: Iterable[Revision]) -> Revision:
    """The revision a memory in a write conflict shows: higher authority, then the earlier seq.

    A pure function of the revisions, so every replica picks the same one, and
    concurrent writers of different authorities end in the same visible
    revision whatever order their writes arrived in.
    """
    return min(revisions, key=lambda r: r.precedence)


def _state_json(state: Mapping[str, Any]) -> str:
    return json.dumps(dict(state), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def open_conflict(conn: Conn, conflict: Conflict) -> None:
    """Records a new conflict and its first revisions (from `conflict.revisions`)."""
    conn.execute(
        f"INSERT INTO conflicts ({_CONFLICT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0, '', 0, '', 0, '')",
        (conflict.id, conflict.kind, conflict.memory_id, conflict.other_memory_id, conflict.similarity,
         conflict.scope, conflict.opened_by, conflict.opened_at_ms, conflict.visible_revision),
    )
    for revision in conflict.revisions:
        add_revision(conn, conflict.id, revision)


def add_revision(conn: Conn, conflict_id: int, r: Revision) -> None:
    """Adds one revision to a conflict, or replaces the one with its number (`ConflictMark.replaces_revision`)."""
    conn.execute(
        f"INSERT OR REPLACE INTO conflict_revisions (conflict_id, {_REVISION_COLUMNS}) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (conflict_id, r.revision, r.memory_id, r.agent_id, r.authority, r.seq, r.base_version, r.version,
         _state_json(r.state), r.embedding, r.embedding_model),
    )


def set_visible(conn: Conn, conflict_id: int, revision: int) -> None:
    """Records which revision a write conflict's memory shows."""
    conn.execute("UPDATE conflicts SET visible_revision = ? WHERE id = ?", (revision, conflict_id))


def follow(conn: Conn, memory_id: str, state: Mapping[str, Any], embedding: bytes | None, embedding_model: str,
           version: int, *, extend: bool) -> None:
    """Keeps open conflicts in step with a memory whose visible state changed.

    Args:
        memory_id: The memory.
        state: Its new visible state.
        embedding: Its new vector, or None if the content did not change.
        embedding_model: That vector's model.
        version: Its new version.
        extend: True for an ordinary write on top of the visible revision: the
            open write conflict's visible revision then carries the write (a
            later change made on what everyone sees belongs to that revision).
            Semantic revisions always follow their memory.
    """
    conn.execute(
        "UPDATE conflict_revisions SET state = ?, version = ? WHERE memory_id = ? AND conflict_id IN "
        "(SELECT id FROM conflicts WHERE kind = 'semantic' AND resolved_seq = 0 "
        "AND (memory_id = ? OR other_memory_id = ?))",
        (_state_json(state), version, memory_id, memory_id, memory_id),
    )
    if not extend:
        return
    row = conn.execute(
        "SELECT id, visible_revision FROM conflicts WHERE memory_id = ? AND kind = 'write' AND resolved_seq = 0",
        (memory_id,),
    ).fetchone()
    if row is None:
        return
    conn.execute(
        "UPDATE conflict_revisions SET state = ?, version = ?, authority = min(authority, ?), "
        "embedding = coalesce(?, embedding), embedding_model = CASE WHEN ? IS NULL THEN embedding_model "
        "ELSE ? END WHERE conflict_id = ? AND revision = ?",
        (_state_json(state), version, state["authority"] or LEGACY_AUTHORITY, embedding, embedding,
         embedding_model, row[0], row[1]),
    )


def close(conn: Conn, conflict_id: int, *, seq: int, by: str, at_ms: int, resolution: str, kept_revision: int,
          note: str) -> None:
    """Marks a conflict resolved by the entry at `seq`."""
    conn.execute(
        "UPDATE conflicts SET resolved_seq = ?, resolved_by = ?, resolved_at_ms = ?, resolution = ?, "
        "kept_revision = ?, note = ? WHERE id = ?",
        (seq, by, at_ms, resolution, kept_revision, note, conflict_id),
    )


def _revision(row: Sequence[Any], visible_revision: int) -> Revision:
    return Revision(
        revision=row[0], memory_id=row[1], agent_id=row[2], authority=row[3], seq=row[4], base_version=row[5],
        version=row[6], state=json.loads(row[7]), embedding=row[8], embedding_model=row[9],
        visible=row[0] == visible_revision,
    )


def _conflict(conn: Conn, row: Sequence[Any]) -> Conflict:
    conflict = Conflict(*row)
    revisions = tuple(
        _revision(r, conflict.visible_revision)
        for r in conn.execute(
            f"SELECT {_REVISION_COLUMNS} FROM conflict_revisions WHERE conflict_id = ? ORDER BY revision",
            (conflict.id,),
        )
    )
    return replace(conflict, revisions=revisions)


def get(conn: Conn, conflict_id: int) -> Conflict | None:
    """A conflict with its revisions, or None."""
    row = conn.execute(f"SELECT {_CONFLICT_COLUMNS} FROM conflicts WHERE id = ?", (conflict_id,)).fetchone()
    return _conflict(conn, row) if row else None


def open_write_conflict(conn: Conn, memory_id: str) -> int:
    """The id of the memory's open write conflict, or 0."""
    row = conn.execute(
        "SELECT id FROM conflicts WHERE memory_id = ? AND kind = 'write' AND resolved_seq = 0", (memory_id,)
    ).fetchone()
    return row[0] if row else 0


def hidden_revision_of(conn: Conn, conflict_id: int, agent_id: str) -> int:
    """The revision (not 1, not the visible one) `agent_id` holds in a conflict, or 0.

    A new stale write of that agent replaces it (see `ConflictMark.replaces_revision`).
    """
    row = conn.execute(
        "SELECT r.revision FROM conflict_revisions r JOIN conflicts c ON c.id = r.conflict_id "
        "WHERE r.conflict_id = ? AND r.agent_id = ? AND r.revision > 1 AND r.revision != c.visible_revision "
        "ORDER BY r.revision DESC LIMIT 1",
        (conflict_id, agent_id),
    ).fetchone()
    return row[0] if row else 0


def open_ids(conn: Conn, memory_id: str) -> tuple[int, ...]:
    """Ids of the open conflicts a memory is part of, oldest first."""
    return tuple(
        r[0] for r in conn.execute(
            "SELECT id FROM conflicts WHERE resolved_seq = 0 AND (memory_id = ? OR other_memory_id = ?) "
            "ORDER BY id",
            (memory_id, memory_id),
        )
    )


def _scope_sql(scopes: tuple[str, ...]) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for pattern in scopes:
        if pattern.endswith("*"):
            clauses.append("substr(scope, 1, ?) = ?")
            params += [len(pattern) - 1, pattern[:-1]]
        else:
            clauses.append("scope = ?")
            params.append(pattern)
    return "(" + " OR ".join(clauses) + ")", params


def listing(conn: Conn, *, scopes: tuple[str, ...] | None = None, include_resolved: bool = False,
            memory_id: str = "", limit: int = 100) -> list[Conflict]:
    """Open conflicts oldest first, then (if asked) resolved ones newest first.

    Args:
        scopes: Scope patterns (see `mnemosync.server.governance.scope_granted`) the
            conflicts must be in; None for every scope.
        include_resolved: Also list resolved conflicts.
        memory_id: Only conflicts involving this memory.
        limit: Most conflicts to return.
    """
    if scopes is not None and not scopes:
        return []
    where, params = [], []
    if scopes is not None:
        clause, scope_params = _scope_sql(scopes)
        where.append(clause)
        params += scope_params
    if memory_id:
        where.append("(memory_id = ? OR other_memory_id = ?)")
        params += [memory_id, memory_id]
    if not include_resolved:
        where.append("resolved_seq = 0")
    sql = (f"SELECT {_CONFLICT_COLUMNS} FROM conflicts {'WHERE ' + ' AND '.join(where) if where else ''} "
           "ORDER BY resolved_seq > 0, CASE WHEN resolved_seq = 0 THEN id ELSE -resolved_seq END LIMIT ?")
    return [_conflict(conn, row) for row in conn.execute(sql, [*params, limit]).fetchall()]


def waiting_for(conn: Conn, agent_id: str) -> int:
    """How many open conflicts have a revision by `agent_id` (they wait for it, among others)."""
    count: int = conn.execute(
        "SELECT count(DISTINCT c.id) FROM conflicts c JOIN conflict_revisions r ON r.conflict_id = c.id "
        "WHERE c.resolved_seq = 0 AND r.agent_id = ?",
        (agent_id,),
    ).fetchone()[0]
    return count


def scrub(conn: Conn, memory_id: str) -> None:
    """Removes a memory's text from its revisions, and the notes of the conflicts it is part of (a redaction)."""
    rows = conn.execute(
        "SELECT conflict_id, revision, state FROM conflict_revisions WHERE memory_id = ?", (memory_id,)
    ).fetchall()
    for conflict_id, revision, state in rows:
        conn.execute(
            "UPDATE conflict_revisions SET state = ?, embedding = NULL WHERE conflict_id = ? AND revision = ?",
            (_state_json(scrub_state(json.loads(state))), conflict_id, revision),
        )
    conn.execute("UPDATE conflicts SET note = ? WHERE note != '' AND (memory_id = ? OR other_memory_id = ?)",
                 (REDACTED_TEXT, memory_id, memory_id))


def snapshot(conn: Conn, memory_id: str) -> list[dict[str, Any]]:
    """The conflicts opened on a memory as plain data (for comparing replicas and rebuilds)."""
    out = []
    for row in conn.execute(f"SELECT {_CONFLICT_COLUMNS} FROM conflicts WHERE memory_id = ? ORDER BY id",
                            (memory_id,)).fetchall():
        conflict = _conflict(conn, row)
        doc = {k: v for k, v in conflict.__dict__.items() if k not in ("revisions", "base")}
        doc["revisions"] = [dict(r.__dict__) for r in conflict.revisions]
        out.append(doc)
    return out


def clear(conn: Conn) -> None:
    """Empties both tables (before folding the changelog again)."""
    conn.execute("DELETE FROM conflicts")
    conn.execute("DELETE FROM conflict_revisions")
