"""Admission: how one validated operation enters the changelog, decided in the write transaction.

`mnemosync.kernel.operations.validate` has already checked the fields (sizes, formats, the
credential scan). Here, against the current state:

* the memory exists (or, for add, does not), versions make sense;
* every governance rule (`mnemosync.server.governance`) is checked for the caller;
* an add whose content a live memory of the same scope already has is not
  written: the caller gets that memory back (`Admission.duplicate`);
* an add very close to another agent's memory is marked as a semantic
  conflict, or blocked when that memory's author is a stronger authority
  (an automated agent's near copy of a stronger one's text is blocked too,
  whatever its vector: `mnemosync.server.near_copies`);
* an update or forget made from an older version is marked as a write
  conflict (unless it says exactly what the memory already says); if its
  writer already holds a revision there that the memory does not show, the
  mark says the new write replaces it (so stale resends cannot pile up).

The mark travels in the changelog entry (`Entry.conflict`), so replicas fold
the conflict without asking the server anything.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemosync.kernel import conflict_projection, links, projections, revisions, vector_mirror, vectors
from mnemosync.kernel.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    StaleVersion,
)
from mnemosync.kernel.memory import MemoryRow, content_hash
from mnemosync.kernel.operations import ValidOp
from mnemosync.server import governance, near_copies, redaction
from mnemosync.server.governance import Rules
from mnemosync.server.identity import Caller, require_admin

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Admission:
    """The decision for one operation.

    Attributes:
        version: The memory's version after it.
        conflict: The mark for the entry (see `Entry.conflict`), or None.
        duplicate: For an add: the live memory that already has this content;
            nothing is written and the caller gets this memory's id.
        blanking: For a redact: the earlier entries it blanks (`mnemosync.server.redaction`).
    """

    version: int
    conflict: dict[str, Any] | None = None
    duplicate: MemoryRow | None = None
    blanking: tuple[redaction.Blanking, ...] = ()


class LiveMemories:
    """What an Append's adds are checked against (the memory exists; a live memory of the scope has the same
    content), read a chunk of adds at a time in two statements (`look_up`) instead of two for each add. Exact while
    the Append writes nothing but adds: the writer is the only one writing, and each add this Append writes is
    recorded here as it is admitted (`_add`); the writer stops using it at the Append's first other operation (an
    update or forget changes what is live)."""

    def __init__(self) -> None:
        self._ids: set[str] = set()
        self._looked_up: set[str] = set()
        self._copies: dict[tuple[str, str], str | None] = {}  # (content hash, scope) -> its first live memory

    def look_up(self, conn, ops: list[ValidOp]) -> None:
        """Reads what the adds among `ops` will be checked against and was not read before."""
        ids = list({op.memory_id for op in ops if op.op == "add"} - self._looked_up)
        keys = {(content_hash(op.payload["content"]), op.payload["scope"]) for op in ops if op.op == "add"}
        keys -= self._copies.keys()
        hashes = sorted({digest for digest, _ in keys})
        for start in range(0, len(ids), 500):
            part = ids[start:start + 500]
            self._ids.update(memory_id for (memory_id,) in conn.execute(
                f"SELECT id FROM memories WHERE id IN ({', '.join('?' for _ in part)})", part))
        self._looked_up.update(ids)
        for start in range(0, len(hashes), 500):
            part = hashes[start:start + 500]
            for digest, scope, memory_id in conn.execute(
                    f"SELECT content_hash, scope, id FROM memories WHERE content_hash IN "
                    f"({', '.join('?' for _ in part)}) AND +archived = 0 ORDER BY num", part):
                if (digest, scope) in keys:
                    self._copies.setdefault((digest, scope), memory_id)  # the first by num, as one by one
        for key in keys:
            self._copies.setdefault(key, None)

    def exists(self, memory_id: str) -> bool:
        return memory_id in self._ids

    def live_copy(self, key: tuple[str, str]) -> str | None:
        return self._copies[key]

    def wrote(self, memory_id: str, key: tuple[str, str]) -> None:
        self._ids.add(memory_id)
        if self._copies.get(key) is None:
            self._copies[key] = memory_id

    def copy(self) -> LiveMemories:
        """What is known now, to go back to should the Append that goes on with it be refused."""
        copied = LiveMemories()
        copied._ids, copied._looked_up, copied._copies = set(self._ids), set(self._looked_up), dict(self._copies)
        return copied


def admit(conn, caller: Caller, op: ValidOp, rules: Rules, next_seq: int, *, maybe_near: bool = True,
          live: LiveMemories | None = None) -> Admission:
    """Checks `op` against the state and governance and decides how it is written.

    Args:
        conn: The writer connection, inside the transaction.
        caller: Who asks.
        op: The validated operation.
        rules: The governance rules.
        next_seq: The seq the entry will get (a conflict it opens takes this id).
        maybe_near: False when `near_candidates` ruled out any semantic conflict for this add.
        live: For an add: what its checks read, looked up beforehand for its chunk (None: read here).

    Raises:
        MnemosyncError: the subclass naming what refused it; nothing is written.
    """
    if op.op == "add":
        return _add(conn, caller, op, rules, next_seq, maybe_near, live)
    memory = projections.get_memory(conn, op.memory_id)
    if memory is None:
        raise NotFound(f"no memory with id {op.memory_id}")
    if op.op in ("link", "unlink"):
        return _link(conn, caller, op, memory, rules)
    if op.op == "resolve_conflict":
        return _resolve(conn, caller, op, memory)
    if op.op == "redact":
        return _redact(conn, caller, op, memory, next_seq)
    if op.op == "verify":
        return _verify(caller, op, memory)
    return _change(conn, caller, op, memory, next_seq)


def _redact(conn, caller: Caller, op: ValidOp, memory: MemoryRow, next_seq: int) -> Admission:
    require_admin(caller, "redacting a memory")
    governance.require_scope(caller, memory.scope, "redact memories")
    if op.base_version != memory.version:
        raise StaleVersion(memory.id, op.base_version, memory.version)
    return Admission(memory.version + 1, blanking=tuple(redaction.plan(conn, memory.id, next_seq)))


def _verify(caller: Caller, op: ValidOp, memory: MemoryRow) -> Admission:
    """A verification of the memory's sources, of the version it checked (a memory changed since must be verified
    again); it changes no version. Governed like a change (`governance.check_change`): a stale or contradicted
    status demotes the memory in every ranking and its paths show in its recalled line, so an agent weaker than
    the memory's writer may not record one."""
    governance.check_change(caller, "verify", op.payload, memory, revisions.memory_state(memory))
    if op.base_version != memory.version:
        raise StaleVersion(memory.id, op.base_version, memory.version)
    return Admission(memory.version)


def compared_with(caller: Caller, scope: str) -> vectors.Restrict:
    """The memories a new memory of `caller` in `scope` is checked against for a semantic conflict: the scope's live
    memories of other agents (an agent's own memories are never its conflicts). The one place the pre-filters and
    the check itself take it from."""
    return vectors.Restrict(scopes=(scope,), exclude_authors=(caller.agent_id,))


def near_candidates(conn, batches: list[tuple[Caller, list[ValidOp]]], rules: Rules, *,
                    changed_only: bool = False) -> list[list[bool] | None]:
    """For batches of adds (each an Append's caller and operations): for each add, whether it may be a semantic
    conflict (False: certainly not), decided for every batch in one pass (`mnemosync.kernel.vectors.may_be_near`) before
    any of them is written. A batch gets None when it holds anything else (a forget or update could change what its
    later adds conflict with).

    Exact for a batch because it changes nothing another agent's add could conflict with: the semantic check ignores
    the caller's own memories, and a batch of adds writes only the caller's. Batches whose vectors are not of the
    longest length also get None (they are refused later anyway). Batches of several callers (a commit
    group) are exact only together with a second pass with `changed_only` at the start of each batch, over what the
    group wrote since (`mnemosync.server.writes.Writes._append`).
    """
    sizes = {len(op.embedding or b"") for _, ops in batches for op in ops}
    eligible = [i for i, (_, ops) in enumerate(batches)
                if all(op.op == "add" and op.embedding and len(op.embedding) == max(sizes) for op in ops)]
    found: list[list[bool] | None] = [None] * len(batches)
    if rules.semantic_threshold <= 0 or not eligible:
        return found
    queries: list[bytes] = []
    restricts: list[vectors.Restrict] = []
    for i in eligible:
        caller, ops = batches[i]
        of_scope: dict[str, vectors.Restrict] = {}  # one object per scope: the pre-filter groups queries by object
        for op in ops:
            queries.append(op.embedding or b"")  # eligible: every one has a vector
            scope = op.payload["scope"]
            restrict = of_scope.get(scope)
            if restrict is None:
                restrict = of_scope[scope] = compared_with(caller, scope)
            restricts.append(restrict)
    near = vectors.may_be_near(conn, queries, restrict=restricts, min_similarity=rules.semantic_threshold,
                               changed_only=changed_only)
    if near is None:
        return found
    at = 0
    for i in eligible:
        count = len(batches[i][1])
        found[i], at = near[at:at + count], at + count
    return found


def near_earlier(batches: list[tuple[Caller, list[ValidOp]]], rules: Rules) -> list[list[bool] | None]:
    """For batches of adds with vectors of one length (a commit group's Appends, in the order the writer runs
    them): for each add, whether an add of an earlier batch may be a semantic conflict of it (False: certainly not,
    whatever of those was written), decided for the whole group with one product of its vectors. What
    `near_candidates` with `changed_only` finds after those batches wrote, without reading what they wrote: their
    rows are exactly their adds (same scope, another author, the same vector), and the same margins keep a False
    exact. Every batch gets None past `NEAR_EARLIER_MAX` adds in all (the product grows with their square)."""
    total = sum(len(ops) for _, ops in batches)
    if not batches or total > NEAR_EARLIER_MAX or rules.semantic_threshold <= 0:
        return [None] * len(batches)
    if len(batches) == 1:  # no earlier batch: no product of its vectors
        return [[False] * total]
    rows = np.frombuffer(b"".join(op.embedding or b"" for _, ops in batches for op in ops), dtype="<f4")
    unit = rows.reshape(total, -1)
    unit = unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), np.float32(1e-30))
    batch = np.repeat(np.arange(len(batches)), [len(ops) for _, ops in batches])
    scopes = [op.payload["scope"] for _, ops in batches for op in ops]
    authors = [caller.agent_id for caller, ops in batches for _ in ops]
    restricts = [compared_with(caller, op.payload["scope"]) for caller, ops in batches for op in ops]
    near = (unit @ unit.T) >= rules.semantic_threshold - vector_mirror.SLACK - vector_mirror.NEAR_MARGIN
    near &= batch[None, :] < batch[:, None]
    pairs = np.argwhere(near)
    found = np.zeros(total, dtype=bool)
    for row, earlier in pairs:  # few: only pairs near enough to be looked at
        if scopes[earlier] in restricts[row].scopes and authors[earlier] not in restricts[row].exclude_authors:
            found[row] = True
    out: list[list[bool] | None] = []
    at = 0
    for _, ops in batches:
        out.append(found[at:at + len(ops)].tolist())
        at += len(ops)
    return out


NEAR_EARLIER_MAX = 2048
"""Most adds in a commit group for `near_earlier`'s one product of their vectors (a 2048 x 2048 product is ~10 ms
on a busy core; past it, each Append looks at what the group wrote before it)."""


def _add(conn, caller: Caller, op: ValidOp, rules: Rules, next_seq: int, maybe_near: bool = True,
         live: LiveMemories | None = None) -> Admission:
    p = op.payload
    governance.check_add(caller, p)
    key = (content_hash(p["content"]), p["scope"])
    if live.exists(op.memory_id) if live is not None else conn.execute(
            "SELECT 1 FROM memories WHERE id = ?", (op.memory_id,)).fetchone() is not None:
        raise AlreadyExists(f"memory_id {op.memory_id} already exists; use update to change it")
    if live is not None:
        copy = live.live_copy(key)
    else:
        row = conn.execute("SELECT id FROM memories WHERE content_hash = ? AND +scope = ? AND +archived = 0 "
                           "ORDER BY num LIMIT 1", key).fetchone()
        copy = row[0] if row is not None else None
    if copy is not None:
        duplicate = _memory(conn, copy)
        return Admission(duplicate.version, duplicate=duplicate)
    if rules.semantic_threshold > 0:  # the vector is the writer's: an automated one's words are checked too
        copied = near_copies.stronger_copy(conn, caller.agent_id, caller.authority, p["content"], p["scope"])
        if copied is not None:
            governance.check_semantic(caller, _memory(conn, copied[0]), 0.0, words_alike=copied[1])
    decision = Admission(1, _semantic(conn, caller, op, rules, next_seq) if maybe_near else None)
    if live is not None:
        live.wrote(op.memory_id, key)
    return decision


def _semantic(conn, caller: Caller, op: ValidOp, rules: Rules, next_seq: int) -> dict[str, Any] | None:
    if rules.semantic_threshold <= 0 or not op.embedding:
        return None
    scope = op.payload["scope"]
    nearest = vectors.knn(conn, op.embedding, 1, min_similarity=rules.semantic_threshold,
                          restrict=compared_with(caller, scope))
    if not nearest:
        return None
    num, distance = nearest[0]
    similarity = round(1.0 - distance, 4)
    if similarity < rules.semantic_threshold:
        return None
    existing_id = conn.execute("SELECT id FROM memories WHERE num = ?", (num,)).fetchone()[0]
    existing = _memory(conn, existing_id)
    try:
        governance.check_semantic(caller, existing, similarity)
    except PermissionDenied:
        log.warning("blocked a semantic conflict: agent %s (authority %d) added memory %s at cosine %.4f to "
                    "memory %s of authority %d in scope %s", caller.agent_id, caller.authority, op.memory_id,
                    similarity, existing.id, governance.effective(existing.authority), scope)
        raise
    return {"id": next_seq, "kind": "semantic", "with": existing.id, "similarity": similarity}


def _memory(conn, memory_id: str) -> MemoryRow:
    """A memory this transaction has just seen a row of."""
    found = projections.get_memory(conn, memory_id)
    if found is None:
        raise NotFound(f"no memory with id {memory_id}")
    return found


def _change(conn, caller: Caller, op: ValidOp, memory: MemoryRow, next_seq: int) -> Admission:
    """update, forget, restore, set_layer."""
    if op.base_version > memory.version:
        raise FailedPrecondition(
            f"base_version {op.base_version} is newer than memory {memory.id}'s version {memory.version}; "
            "read it again (Get) and use its version"
        )
    stale = op.base_version != memory.version
    if stale and op.op in ("restore", "set_layer"):
        raise StaleVersion(memory.id, op.base_version, memory.version)
    seen = revisions.state_at(conn, memory, op.base_version)
    if seen is None:
        raise FailedPrecondition(f"memory {memory.id} has no record of version {op.base_version}")
    governance.check_change(caller, op.op, op.payload, memory, seen)
    when = f" at version {op.base_version}, the version this write was made from" if stale else ""
    if op.op == "forget" and seen["archived"]:
        raise FailedPrecondition(f"memory {memory.id} was already forgotten{when}")
    if op.op == "restore" and not memory.archived:
        raise FailedPrecondition(f"memory {memory.id} is not forgotten; nothing to restore")
    if op.op == "update" and seen["archived"]:
        raise FailedPrecondition(f"memory {memory.id} was forgotten{when}; restore it before updating")
    version = memory.version + 1
    if not stale:
        return Admission(version)
    wanted = revisions.next_state(seen, op.op, op.payload, caller.authority)
    if revisions.same_content(wanted, revisions.memory_state(memory)):
        # It says what the memory already says, so it is written as an ordinary write on top of the
        # current state and must pass the rules there too: else a weaker agent's stale write would take
        # over (and then undo) what a stronger authority wrote.
        governance.check_change(caller, op.op, op.payload, memory, revisions.memory_state(memory))
        return Admission(version)
    open_id = conflict_projection.open_write_conflict(conn, memory.id)
    mark: dict[str, Any] = {"id": open_id or next_seq, "kind": "write"}
    replaced = conflict_projection.hidden_revision_of(conn, open_id, caller.agent_id) if open_id else 0
    if replaced:  # the agent's newer stale write takes the place of its older one (the changelog keeps both)
        mark["replaces"] = replaced
    return Admission(version, mark)


def _link(conn, caller: Caller, op: ValidOp, memory: MemoryRow, rules: Rules) -> Admission:
    target_id, relation = op.payload["target_id"], op.payload["relation"]
    target = projections.get_memory(conn, target_id)
    if op.op == "link" and target is None:
        raise NotFound(f"target_id: no memory with id {target_id}")
    link_authority = projections.link_authority(conn, memory.id, target_id, relation)
    if op.op == "unlink" and link_authority is None:
        raise NotFound(f"memory {memory.id} has no {relation!r} link to {target_id}")
    if op.op == "link" and link_authority is not None and not _changes_link(conn, memory.id, op.payload):
        link_authority = None  # linking again as it is changes nothing anyone made
    governance.check_link(caller, op.op, relation, memory, target, link_authority, rules)
    return Admission(memory.version)


def _changes_link(conn, memory_id: str, payload) -> bool:
    """Whether a link operation on an existing link gives it another weight or reason."""
    for link in projections.get_links(conn, memory_id):
        if (link.target_id, link.relation) == (payload["target_id"], payload["relation"]):
            return (link.weight, link.reason) != (payload.get("weight", links.DEFAULT_WEIGHT),
                                                  payload.get("reason", ""))
    return True


def _resolve(conn, caller: Caller, op: ValidOp, memory: MemoryRow) -> Admission:
    p = op.payload
    conflict = conflict_projection.get(conn, p["conflict_id"])
    if conflict is None:
        raise NotFound(f"no conflict with id {p['conflict_id']}")
    governance.require_scope(caller, conflict.scope, "resolve conflicts")
    if op.memory_id != conflict.memory_id:
        raise InvalidArgument(
            f"memory_id must be conflict {conflict.id}'s memory {conflict.memory_id}, got {op.memory_id}"
        )
    if conflict.resolved:
        raise FailedPrecondition(
            f"conflict {conflict.id} was already resolved by {conflict.resolved_by} (seq {conflict.resolved_seq}, "
            f"{conflict.resolution}); nothing to do"
        )
    if op.base_version != memory.version:
        raise StaleVersion(memory.id, op.base_version, memory.version)
    if p.get("keep_all") and conflict.kind != "semantic":
        raise InvalidArgument("keep_all is only for semantic conflicts; keep a revision or give merged_content")
    keep = p.get("keep_revision", 0)
    if keep and not 1 <= keep <= len(conflict.revisions):
        raise InvalidArgument(
            f"keep_revision must be one of conflict {conflict.id}'s revisions, 1 to {len(conflict.revisions)}; "
            f"got {keep}"
        )
    other = projections.get_memory(conn, conflict.other_memory_id) if conflict.other_memory_id else None
    changes = revisions.resolution(conflict, memory, other, p, caller.authority, op.embedding, "")
    governance.check_resolve(caller, conflict.id, conflict.scope, [r.authority for r in conflict.revisions],
                             [(c.memory, c.state) for c in changes])
    return Admission(memory.version + 1)
