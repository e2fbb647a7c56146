"""A reference model of replication, written independently of the server code.

`fold` turns changelog entries (the wire messages) into plain dictionaries
with its own rules; the consistency suite checks the server's state and every
agent cache against it. It deliberately imports nothing from `server` or
`agent_client`.

Conflicts are modelled for agents of equal authority (the suite's agents):
a write the server marked stale (`conflict.kind == "write"`) opens or joins a
write conflict and, since the earlier write wins between equals, leaves the
visible content as it was while the version still grows; resolving by
keeping the visible revision closes the conflict. Which revision wins between
different authorities, in every arrival order, is checked directly by
tests/test_conflicts.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from mnemosync.v1 import memory_pb2 as pb

GENESIS = "0" * 64


@dataclass
class RefMemory:
    """The visible state of one memory in the reference model."""

    content: str
    type: str
    layer: int
    tags: tuple[str, ...]
    importance: float
    confidence: float
    protected: bool
    author: str
    updated_by: str
    version: int
    archived: bool = False
    links: set[tuple[str, str]] = field(default_factory=set)
    write_conflicts: set[int] = field(default_factory=set)

    def visible(self) -> tuple:
        """The fields every replica must agree on."""
        return (self.content, self.type, self.layer, self.tags, round(self.importance, 9),
                round(self.confidence, 9), self.protected, self.author, self.updated_by, self.version,
                self.archived, tuple(sorted(self.links)))


@dataclass
class Folded:
    """The reference state: memories, and every write conflict's memory and status."""

    memories: dict[str, RefMemory]
    write_conflicts: dict[int, str]
    resolved: set[int]


def visible(memory) -> tuple:
    """The same tuple from a cache row or a server memory (MemoryRow-like objects)."""
    return (memory.content, memory.type, memory.layer, tuple(memory.tags), round(memory.importance, 9),
            round(memory.confidence, 9), bool(memory.protected), memory.author_agent, memory.updated_by,
            memory.version, bool(memory.archived), tuple(sorted((t, r) for t, r, *_ in memory.links)))


def fold(entries: list[pb.ChangelogEntry]) -> Folded:
    """Folds entries in seq order; raises AssertionError on anything a replica must refuse."""
    state: dict[str, RefMemory] = {}
    write_conflicts: dict[int, str] = {}
    resolved: set[int] = set()
    authorities = {e.authority for e in entries}
    assert len(authorities) <= 1, f"the model covers agents of one authority, not {authorities}"
    for expected_seq, e in enumerate(entries, start=1):
        assert e.seq == expected_seq, f"seq {e.seq} where {expected_seq} was expected"
        kind = e.operation.WhichOneof("op")
        assert kind == e.op, f"entry {e.seq}: op {e.op} but operation {kind}"
        if kind == "add":
            a = e.operation.add
            assert e.memory_id not in state, f"entry {e.seq} adds {e.memory_id} twice"
            state[e.memory_id] = RefMemory(
                content=a.content, type=a.type, layer=a.layer, tags=tuple(a.tags), importance=a.importance,
                confidence=a.confidence, protected=a.protected, author=e.agent_id, updated_by=e.agent_id,
                version=1)
            assert e.version == 1
            continue
        m = state[e.memory_id]
        if kind in ("link", "unlink"):
            link = getattr(e.operation, kind)
            if kind == "link":
                m.links.add((link.target_id, link.relation))
            else:
                m.links.discard((link.target_id, link.relation))
            assert e.version == m.version, f"entry {e.seq}: a link changed the version"
            continue
        if kind == "resolve_conflict":
            r = e.operation.resolve_conflict
            assert r.conflict_id in write_conflicts and r.conflict_id not in resolved, (
                f"entry {e.seq} resolves conflict {r.conflict_id}, which is not open")
            assert r.keep_revision == 1, "the model resolves only by keeping the visible revision"
            resolved.add(r.conflict_id)
            m.write_conflicts.discard(r.conflict_id)
            m.version += 1
            m.updated_by = e.agent_id
            assert e.version == m.version
            continue
        if e.HasField("conflict") and e.conflict.kind == "write":
            assert e.base_version < m.version, f"entry {e.seq} is marked stale but is not"
            cid = e.conflict.conflict_id
            if cid not in write_conflicts:
                assert cid == e.seq, f"entry {e.seq} opens conflict {cid}"
                write_conflicts[cid] = e.memory_id
                m.write_conflicts.add(cid)
            assert write_conflicts[cid] == e.memory_id and cid not in resolved
            m.version += 1
            m.updated_by = e.agent_id
            assert e.version == m.version, f"entry {e.seq}: version {e.version}, model says {m.version}"
            continue
        if e.base_version != m.version:
            before = m.visible()
        else:
            before = None
        if kind == "update":
            u = e.operation.update
            for name in ("content", "type", "importance", "confidence", "protected"):
                if u.HasField(name):
                    setattr(m, name, getattr(u, name))
            if u.replace_tags:
                m.tags = tuple(u.tags)
        elif kind == "forget":
            assert not m.archived
            m.archived = True
        elif kind == "restore":
            assert m.archived
            m.archived = False
        elif kind == "set_layer":
            m.layer = e.operation.set_layer.layer
        m.version += 1
        m.updated_by = e.agent_id
        assert e.version == m.version, f"entry {e.seq}: version {e.version}, model says {m.version}"
        if before is not None:
            assert m.visible()[:7] + m.visible()[10:] == before[:7] + before[10:], (
                f"entry {e.seq} is stale and unmarked, yet it changed the memory")
    return Folded(state, write_conflicts, resolved)


def chain_ok(entries: list[pb.ChangelogEntry]) -> bool:
    """True when each entry names the previous entry's hash (the links of the chain)."""
    previous = GENESIS
    for e in entries:
        if e.prev_hash != previous or len(e.hash) != 64:
            return False
        previous = e.hash
    return True


def entry_digest(e: pb.ChangelogEntry) -> str:
    """A digest of an entry's full wire form, to prove earlier entries never change."""
    return hashlib.sha256(e.SerializeToString(deterministic=True)).hexdigest()


def describe(folded: Folded) -> str:
    """Readable dump for failure messages."""
    return json.dumps({k: v.visible() for k, v in folded.memories.items()}, default=str, indent=1)[:4000]
