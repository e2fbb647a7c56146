"""Memory versions: the states a memory had, and how writes become conflict revisions.

`memory_history` keeps, for every version a memory has moved past, the state
it had then (and its vector when the next version changed the content). It
lets a write made from an older version be folded against exactly what its
writer saw, whatever arrived in between, which is what makes the visible
revision independent of arrival order. Like every projection it is rebuilt
from the changelog.

The functions here compute states and revisions; `mnemosync.kernel.projections`
writes them into `memories`, and `mnemosync.server.admission` uses the same functions
to check a write before it is appended, so what is checked is what is folded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from mnemosync.kernel import conflict_projection, vectors
from mnemosync.kernel.conflict_projection import Conflict, Revision
from mnemosync.kernel.entry import LEGACY_AUTHORITY, Entry, scrub_state
from mnemosync.kernel.memory import MemoryRow

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

SCHEMA = """
CREATE TABLE memory_history (
    memory_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    agent_id TEXT NOT NULL,
    state TEXT NOT NULL,
    embedding BLOB,
    PRIMARY KEY (memory_id, version)
);
"""

STATE_FIELDS = ("content", "type", "tags", "importance", "confidence", "protected", "archived", "trust",
                "quote", "authority", "event_time_ms", "content_agent", "content_authority")
"""The fields a write can change and a revision holds (`authority`: who wrote them last, the authority that
guards them; `content_agent` and `content_authority`: who wrote the text they show, changed only by a write that
changes the content, quote or trust label). States recorded before `event_time_ms` existed lack it: read it with
`.get`."""

AUTHORSHIP_FIELDS = ("content", "quote", "trust")
"""The fields an update sets to make its writer the author of what a memory shows (`content_agent`). Whether it
sets them, not whether it changes them, decides: a redaction blanks texts but keeps which fields an entry set, so
every replica, the ones folding blanked entries too, agrees on the author."""

_WHO = ("authority", "content_agent", "content_authority")


@dataclass(frozen=True)
class Change:
    """A new visible state for one memory.

    Attributes:
        memory: The memory as it is now.
        state: Its STATE_FIELDS afterwards.
        embedding: The new content's vector, or None when the content stays.
        embedding_model: That vector's model.
    """

    memory: MemoryRow
    state: Mapping[str, Any]
    embedding: bytes | None = None
    embedding_model: str = ""


def memory_state(m: MemoryRow) -> dict[str, Any]:
    """The memory's STATE_FIELDS as plain data."""
    return {k: (list(getattr(m, k)) if k == "tags" else getattr(m, k)) for k in STATE_FIELDS}


def next_state(state: Mapping[str, Any], op: str, payload: Mapping[str, Any], authority: int,
               agent: str = "") -> dict[str, Any]:
    """`state` after `op` with `payload`, written by `agent` at `authority` (who becomes the author of the text
    only when the write sets the content, quote or trust label)."""
    after = dict(state)
    if op == "update":
        after.update({k: v for k, v in payload.items() if k in STATE_FIELDS and k not in _WHO})
        if any(k in payload for k in AUTHORSHIP_FIELDS):
            after["content_agent"], after["content_authority"] = agent, authority
    elif op == "forget":
        after["archived"] = True
    elif op == "restore":
        after["archived"] = False
    after["authority"] = authority
    return after


def same_content(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """True when two states agree on everything but who wrote them."""
    return all(a.get(k) == b.get(k) for k in STATE_FIELDS if k not in _WHO)


def state_at(conn: Conn, m: MemoryRow, version: int) -> dict[str, Any] | None:
    """The memory's visible state at `version` (None if this replica has no record of it)."""
    if version == m.version:
        return memory_state(m)
    row = conn.execute(
        "SELECT state FROM memory_history WHERE memory_id = ? AND version = ?", (m.id, version)
    ).fetchone()
    return json.loads(row[0]) if row else None


def current_vector(conn: Conn, m: MemoryRow) -> bytes | None:
    """The memory's vector in the index."""
    stored = vectors.get(conn, m.num)
    return stored[0] if stored else None


def embedding_at(conn: Conn, m: MemoryRow, version: int) -> bytes | None:
    """The vector of the memory's content at `version`.

    A history row keeps the vector only when the next version changed the
    content, so the first such row at or after `version` holds it; without
    one, the content has not changed since and the index has it.
    """
    row = conn.execute(
        "SELECT embedding FROM memory_history WHERE memory_id = ? AND version >= ? AND embedding IS NOT NULL "
        "ORDER BY version LIMIT 1",
        (m.id, version),
    ).fetchone()
    return row[0] if row else current_vector(conn, m)


def version_seq(conn: Conn, m: MemoryRow, version: int) -> int:
    """The seq of the entry that made `version` of the memory (0 if unknown)."""
    if version == m.version:
        return m.version_seq
    row = conn.execute(
        "SELECT seq FROM memory_history WHERE memory_id = ? AND version = ?", (m.id, version)
    ).fetchone()
    return row[0] if row else 0


def versions(conn: Conn, m: MemoryRow) -> dict[int, tuple[dict[str, Any], str, int]]:
    """Every version of the memory this replica recorded: version to (state, the agent that wrote it, the seq
    that made it), the current version included."""
    found = {version: (json.loads(state), agent_id, seq) for version, state, agent_id, seq in conn.execute(
        "SELECT version, state, agent_id, seq FROM memory_history WHERE memory_id = ?", (m.id,))}
    found[m.version] = (memory_state(m), m.updated_by, m.version_seq)
    return found


def remember(conn: Conn, m: MemoryRow, next_content: str) -> None:
    """Keeps the memory's current version in the history before it is superseded."""
    vector = current_vector(conn, m) if next_content != m.content else None
    conn.execute(
        "INSERT INTO memory_history (memory_id, version, seq, agent_id, state, embedding) VALUES (?, ?, ?, ?, ?, ?)",
        (m.id, m.version, m.version_seq, m.updated_by,
         json.dumps(memory_state(m), sort_keys=True, ensure_ascii=False), vector),
    )


def stale_state(conn: Conn, m: MemoryRow, op: str, payload: Mapping[str, Any], base_version: int,
                authority: int, agent: str = "") -> dict[str, Any] | None:
    """What a write made from `base_version` says the memory should be (None: no record of that version)."""
    base = state_at(conn, m, base_version)
    return None if base is None else next_state(base, op, payload, authority, agent)


def record_stale(conn: Conn, m: MemoryRow, e: Entry) -> Change:
    """Folds an update or forget the server marked stale into its write conflict.

    Opens the conflict (entry.conflict["id"]) if this is its first stale write,
    with revision 1 the memory as it stands; adds the write as a revision made
    from the version its writer saw, or puts it in the place of the writer's
    hidden revision the mark names (entry.conflict["replaces"]); and returns
    what the memory shows now.

    Raises:
        ValueError: this replica has no record of the base version (it is not a
            fold of the whole changelog).
    """
    state = stale_state(conn, m, e.op, e.payload, e.base_version, e.effective_authority, e.agent_id)
    if state is None:
        raise ValueError(f"entry {e.seq}: no record of version {e.base_version} of memory {m.id}")
    new_content = "content" in e.payload
    mark = cast("dict[str, Any]", e.conflict)  # the server marked the write stale: it names the conflict
    conflict_id = mark["id"]
    existing = conflict_projection.get(conn, conflict_id)
    if existing is None:
        line = Revision(
            revision=1, memory_id=m.id, agent_id=m.updated_by, authority=m.authority or LEGACY_AUTHORITY,
            seq=version_seq(conn, m, e.base_version + 1), base_version=e.base_version, version=m.version,
            state=memory_state(m), embedding=current_vector(conn, m), embedding_model=m.embedding_model,
        )
        conflict_projection.open_conflict(conn, Conflict(
            id=conflict_id, kind="write", memory_id=m.id, other_memory_id="", similarity=0.0, scope=m.scope,
            opened_by=e.agent_id, opened_at_ms=e.server_time_ms, visible_revision=1, revisions=(line,),
        ))
        revisions = [line]
    else:
        revisions = list(existing.revisions)
    replaces = mark.get("replaces", 0)
    added = Revision(
        revision=replaces or len(revisions) + 1, memory_id=m.id, agent_id=e.agent_id,
        authority=e.effective_authority, seq=e.seq, base_version=e.base_version, version=e.version, state=state,
        embedding=e.embedding if new_content else embedding_at(conn, m, e.base_version),
        embedding_model=e.embedding_model if new_content else m.embedding_model,
    )
    conflict_projection.add_revision(conn, conflict_id, added)
    winner = conflict_projection.choose_visible([*(r for r in revisions if r.revision != replaces), added])
    conflict_projection.set_visible(conn, conflict_id, winner.revision)
    changed = winner.state["content"] != m.content
    return Change(m, winner.state, winner.embedding if changed else None, winner.embedding_model)


def with_base(conn: Conn, conflict: Conflict) -> Conflict:
    """A write conflict with its common base filled in (`Conflict.base`): the memory's recorded state at the lowest
    version its revisions were made from, as revision 0. Semantic conflicts, and a version this replica has no
    record of, are returned as they are."""
    made_from = [r.base_version for r in conflict.revisions if r.base_version > 0]
    if conflict.kind != "write" or not made_from:
        return conflict
    version = min(made_from)
    row = conn.execute("SELECT seq, agent_id, state FROM memory_history WHERE memory_id = ? AND version = ?",
                       (conflict.memory_id, version)).fetchone()
    if row is None:
        return conflict
    seq, agent_id, state = row[0], row[1], json.loads(row[2])
    base = Revision(revision=0, memory_id=conflict.memory_id, agent_id=agent_id,
                    authority=state.get("authority") or LEGACY_AUTHORITY, seq=seq, base_version=0, version=version,
                    state=state)
    return replace(conflict, base=base)


def resolution(conflict: Conflict, memory: MemoryRow, other: MemoryRow | None, payload: Mapping[str, Any],
               authority: int, embedding: bytes | None, embedding_model: str, agent: str = "") -> list[Change]:
    """What resolving `conflict` as `payload` says does to each memory (see ResolveConflictOp).

    Args:
        conflict: The open conflict.
        memory: Its memory (for semantic conflicts, the new memory).
        other: Semantic conflicts: the existing memory.
        payload: The resolve_conflict payload (keep_revision, merged_content or keep_all).
        authority: The resolver's authority: whatever it rewrites counts as written by it.
        agent: The resolver: a merged text is its own (a kept revision's text stays its writer's).
        embedding: The merged content's vector.
        embedding_model: Its model.

    Raises:
        ValueError: keep_revision is not one of the conflict's revisions.
    """
    keep = payload.get("keep_revision", 0)
    if keep and not 1 <= keep <= len(conflict.revisions):
        raise ValueError(f"conflict {conflict.id} has revisions 1 to {len(conflict.revisions)}, not {keep}")
    current = memory_state(memory)
    if conflict.kind == "write":
        if keep:
            kept = conflict.revisions[keep - 1]
            state = {**kept.state, "authority": authority}
            changed = state["content"] != memory.content
            return [Change(memory, state, kept.embedding if changed else None, kept.embedding_model)]
        state = {**current, "content": payload["merged_content"], "authority": authority,
                 "content_agent": agent, "content_authority": authority}
        return [Change(memory, state, embedding, embedding_model)]
    forgotten = {**current, "archived": True, "authority": authority}
    existing = cast(MemoryRow, other)  # a semantic conflict has the existing memory
    if keep == 1:
        return [Change(memory, forgotten)]
    if keep == 2:
        return [Change(memory, current), Change(existing, {**memory_state(existing), "archived": True,
                                                           "authority": authority})]
    if payload.get("keep_all"):
        return [Change(memory, current)]
    merged = {**memory_state(existing), "content": payload["merged_content"], "authority": authority,
              "content_agent": agent, "content_authority": authority}
    return [Change(memory, forgotten), Change(existing, merged, embedding, embedding_model)]


def scrub(conn: Conn, memory_id: str) -> None:
    """Removes the memory's text and vectors from its history (a redaction)."""
    rows = conn.execute("SELECT version, state FROM memory_history WHERE memory_id = ?", (memory_id,)).fetchall()
    for version, state in rows:
        conn.execute(
            "UPDATE memory_history SET state = ?, embedding = NULL WHERE memory_id = ? AND version = ?",
            (json.dumps(scrub_state(json.loads(state)), sort_keys=True, ensure_ascii=False), memory_id, version),
        )


def snapshot(conn: Conn, memory_id: str) -> list[tuple[Any, ...]]:
    """The memory's history rows (for comparing replicas and rebuilds)."""
    rows: list[tuple[Any, ...]] = conn.execute(
        "SELECT version, seq, agent_id, state, embedding FROM memory_history WHERE memory_id = ? ORDER BY version",
        (memory_id,),
    ).fetchall()
    return rows


def forget_memory(conn: Conn, memory_id: str) -> None:
    """Drops one memory's history (local overlays only)."""
    conn.execute("DELETE FROM memory_history WHERE memory_id = ?", (memory_id,))


def clear(conn: Conn) -> None:
    """Empties the history (before folding the changelog again)."""
    conn.execute("DELETE FROM memory_history")
