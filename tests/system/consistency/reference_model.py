"""A reference model of replication and governance, written independently of the server code.

`fold` turns changelog entries (the wire messages) into plain dictionaries
with its own reading of the documented rules (proto/mnemosync/v1/memory.proto,
server/GOVERNANCE.md); the consistency suite checks the server's
state and every agent cache against it. It deliberately imports nothing from
`server` or `agent_client`.

What it models:

* Versions: every update, forget, restore, set_layer and resolution makes a
  new version; links do not. The state a memory had at each version is kept,
  because a write made from an older version is judged against what its
  writer saw.
* Links: one per (target, edge type), the type one of EDGE_TYPES, with a
  weight in (0, 1] (unset: 1) and a reason. Linking again sets the weight
  and reason and keeps its maker; only an authority at least as strong as
  the maker changes them or removes the link. `walk` is the breadth-first
  walk the graph queries must agree with.
* Write conflicts: an update or forget the server marked stale
  (`conflict.kind == "write"`) opens or joins the memory's open write
  conflict. Revision 1 is the memory as it stood (authority: whoever wrote
  its visible state; seq: the first entry after the stale writer's base);
  each stale write adds a revision computed from the version its writer saw,
  except that a writer's newer stale write replaces its own earlier revision
  when the memory does not show that one (never revision 1), so an agent
  holds at most one hidden revision per conflict.
  The memory shows the revision with the lowest (authority, seq): a pure
  function of the set of revisions. An ordinary write on top extends the
  visible revision. A resolution shows the chosen revision, written by the
  resolver.
* Semantic conflicts: an add the server marked as a near duplicate of another
  agent's memory opens a conflict between the two (both stay visible); the
  model checks the mark against the cosine of the embeddings the entries
  carry.
* Consolidation (issue 16, `_fold_system`): its links and merges, and never
  a similarity link again between two memories whose semantic link was
  removed.
* The lifecycle (issue 15): only the server's system agent ("mnemosync:system",
  authority 6) writes "decay" and "archive" entries. A decay entry records a
  memory's use (uses and level never go down) and changes no version; an
  archive entry archives a live memory of an archivable layer (factual or
  ephemeral) that is not protected, carries no protected tag and was not
  recorded at level 3 or 4, at the next version, keeping the authority of its
  visible state, and carries the open write conflict's visible revision along
  like an ordinary write.
* Governance (`violations`): every entry is checked against the rules as
  documented, with the writer's authority and scopes from the policy, so an
  entry that bypassed a rule on any path (live, replayed, outbox) fails the
  fold. `refusals` predicts which rules a write the suite is about to send may
  be refused by, so every refusal can be checked too.
* Scopes: an agent writes only in the scopes its policy grants (`granted`).
* Trust labels: a principle carries its quote; an inference is no end of a
  causal link.
* Redaction: an admin's redact entry turns the memory's content (and quote)
  into "[redacted]" in every version and conflict revision and archives it;
  the entries before it that carried its text arrive blanked, so checks that
  need the original text (similarity, "says something else") are skipped for
  such memories.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import re
from dataclasses import dataclass, field

from mnemosync.v1 import memory_pb2 as pb

GENESIS = "0" * 64
HUMAN = 1
LEGACY = 3  # authority 0 (unrecorded) counts as this; the suite never writes 0
FACTUAL = 3
STATE_KEYS = ("content", "type", "tags", "importance", "confidence", "protected", "archived", "trust", "quote",
              "authority")
SYSTEM = "mnemosync:system"
SYSTEM_AUTHORITY = 6
SYSTEM_OPS = ("decay", "archive", "link", "unlink", "set_layer")
"""What the system agent writes: the decay sweep's entries and consolidation's (issue 16, `_fold_system`)."""
ARCHIVABLE_LAYERS = (3, 4)
PROTECTED_TAGS = frozenset({"correction", "decision", "identity", "emotional_anchor", "commitment", "exact_value",
                            "chain_of_command", "person"})
COSINE_SLACK = 0.003
"""How far the model's float64 cosine may differ from the server's float32 one."""
NEAR_COPY = 0.8
"""An automated agent's add whose words are this alike, in order, a stronger authority's live memory's is blocked
whatever its vector (issue 37, item 11)."""
WORD_SLACK = 0.03
"""Around NEAR_COPY the model lets the server decide (it finds its candidates by keyword, not among all)."""
AUTOMATED_FROM = 4
REDACTED = "[redacted]"
EDGE_TYPES = ("semantic", "temporal", "causal", "entity", "hierarchical", "supersedes")
"""The documented edge types: a link of any other relation is refused (INVALID_ARGUMENT)."""
CAUSAL = frozenset({"causal"})


def eff(authority: int) -> int:
    return authority or LEGACY


@dataclass
class Policy:
    """The suite's policy file, as plain data."""

    authority: dict[str, int]
    admins: frozenset[str] = frozenset()
    default_authority: int = 3
    semantic_threshold: float = 0.95
    scopes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Scope patterns per agent ("*", "project:*", "user"); an agent not listed has every scope."""
    causal_relations: frozenset[str] = CAUSAL

    def of(self, agent: str) -> int:
        return self.authority.get(agent, self.default_authority)

    def granted(self, agent: str, scope: str) -> bool:
        """The documented pattern rule: the scope itself, a prefix ending in "*", or "*"."""
        patterns = self.scopes.get(agent, ("*",))
        return any(p == scope or (p.endswith("*") and scope.startswith(p[:-1])) for p in patterns)

    def toml(self) -> str:
        relations = ", ".join(f'"{r}"' for r in sorted(self.causal_relations))
        lines = [f"[defaults]\nauthority = {self.default_authority}\n",
                 f"[conflicts]\nsemantic_threshold = {self.semantic_threshold}\n",
                 f"[trust]\ncausal_relations = [{relations}]\n"]
        for agent, authority in sorted(self.authority.items()):
            scopes = ", ".join(f'"{p}"' for p in self.scopes.get(agent, ("*",)))
            lines.append(f'[agents."{agent}"]\nauthority = {authority}\nadmin = {str(agent in self.admins).lower()}\n'
                         f"scopes = [{scopes}]\n")
        return "\n".join(lines)


@dataclass
class RefMemory:
    """One memory: its visible state, layer, links, and the state at every version."""

    id: str
    scope: str
    layer: int
    author: str
    updated_by: str
    version: int
    state: dict
    version_seq: int
    links: dict[tuple[str, str], int] = field(default_factory=dict)  # (target, type) -> authority of its maker
    link_attrs: dict[tuple[str, str], tuple[float, str]] = field(default_factory=dict)  # -> (weight, reason)
    history: dict[int, dict] = field(default_factory=dict)  # version -> state at that version
    lifecycle: tuple = ()  # (uses, last_used_ms, stability_days, use_days, level, stale) of the last decay entry
    made_by_seq: dict[int, int] = field(default_factory=dict)  # version -> seq of the entry that made it

    def visible(self) -> tuple:
        """The fields every replica must agree on."""
        s = self.state
        return (s["content"], s["type"], self.layer, tuple(s["tags"]), round(s["importance"], 9),
                round(s["confidence"], 9), bool(s["protected"]), bool(s["archived"]), s["trust"], s["quote"],
                eff(s["authority"]), self.author, self.updated_by, self.version,
                tuple(sorted((t, r, *self.link_attrs[(t, r)]) for t, r in self.links)))


@dataclass
class RefRevision:
    agent: str
    authority: int
    seq: int
    state: dict
    memory_id: str

    @property
    def precedence(self) -> tuple[int, int]:
        return (eff(self.authority), self.seq)


@dataclass
class RefConflict:
    id: int
    kind: str
    memory_id: str
    other_memory_id: str
    revisions: list[RefRevision]
    visible: int = 0
    resolved: bool = False
    resolved_by: str = ""


@dataclass
class Folded:
    """The reference state: memories and conflicts."""

    memories: dict[str, RefMemory]
    conflicts: dict[int, RefConflict]
    vectors: dict[str, tuple[float, ...]]  # content -> the embedding the entries carried for it
    redacted: frozenset[str] = frozenset()  # memories with a redact entry anywhere in the changelog
    unlinked: set[frozenset[str]] = field(default_factory=set)  # pairs whose semantic link was ever removed

    @property
    def write_conflicts(self) -> dict[int, str]:
        return {c.id: c.memory_id for c in self.conflicts.values() if c.kind == "write"}

    @property
    def resolved(self) -> set[int]:
        return {c.id for c in self.conflicts.values() if c.resolved}

    def open_conflicts(self, memory_id: str) -> tuple[int, ...]:
        return tuple(sorted(c.id for c in self.conflicts.values() if not c.resolved and memory_id in (
            c.memory_id, c.other_memory_id)))

    def open_write_conflict(self, memory_id: str) -> RefConflict | None:
        for c in self.conflicts.values():
            if c.kind == "write" and not c.resolved and c.memory_id == memory_id:
                return c
        return None

    def vector_of(self, m: RefMemory) -> tuple[float, ...] | None:
        """The memory's vector in every index: its content's, unless it was redacted (then it has none)."""
        if m.state["content"] == REDACTED and m.id in self.redacted:
            return None
        return self.vectors.get(m.state["content"])

    def near_copies(self, content: str, scope: str, agent: str, authority: int) -> list[tuple[float, RefMemory]]:
        """Live memories of other authors in `scope`, of an authority stronger than `authority`, whose words
        `content`'s are at least NEAR_COPY - WORD_SLACK alike (in order), most alike first."""
        found = []
        for m in self.memories.values():
            if m.scope != scope or m.author == agent or m.state["archived"] or eff(m.state["authority"]) >= authority:
                continue
            alike = words_alike(content, m.state["content"])
            if alike >= NEAR_COPY - WORD_SLACK:
                found.append((alike, m))
        return sorted(found, key=lambda x: -x[0])

    def cosine(self, a: str, b: str) -> float | None:
        va, vb = self.vectors.get(a), self.vectors.get(b)
        if va is None or vb is None:
            return None
        dot = sum(x * y for x, y in zip(va, vb, strict=True))
        na, nb = math.sqrt(sum(x * x for x in va)), math.sqrt(sum(y * y for y in vb))
        return dot / (na * nb) if na and nb else 0.0

    def near(self, content: str, scope: str, agent: str, threshold: float) -> list[tuple[float, RefMemory]]:
        """Live memories of other authors in `scope` at least `threshold` similar to `content`, nearest first."""
        found = []
        for m in self.memories.values():
            if m.scope != scope or m.author == agent or m.state["archived"]:
                continue
            similarity = self.cosine(content, m.state["content"])
            if similarity is not None and similarity >= threshold:
                found.append((similarity, m))
        return sorted(found, key=lambda x: -x[0])


def words_alike(a: str, b: str) -> float:
    """How alike two texts' words are in order (lower-cased, a plural's s dropped): difflib's ratio."""
    def words(text: str) -> list[str]:
        return [w[:-1] if len(w) > 3 and w.endswith("s") else w for w in re.findall(r"\w+", text.lower())]
    return difflib.SequenceMatcher(None, words(a), words(b), autojunk=False).ratio()


def visible_to(m: RefMemory, readable_ids: set[str]) -> tuple:
    """`m.visible()` as shown to an agent that may read the memories `readable_ids`: without its links into the
    others (the server hides them, `mnemosync.server.link_visibility`; a cache holds no such target and shows no
    link to a memory it lacks, `mnemosync.kernel.projections.shown_links`)."""
    shown = m.visible()
    return (*shown[:-1], tuple(link for link in shown[-1] if link[0] in readable_ids))


def visible(memory) -> tuple:
    """The same tuple as `RefMemory.visible` from a cache row or a served memory."""
    return (memory.content, memory.type, memory.layer, tuple(memory.tags), round(memory.importance, 9),
            round(memory.confidence, 9), bool(memory.protected), bool(memory.archived), memory.trust, memory.quote,
            eff(memory.authority), memory.author_agent, memory.updated_by, memory.version,
            tuple(sorted((k.target_id, k.relation, k.weight or 1.0, k.reason) for k in memory.links)))


def walk(folded: Folded, start: str, *, readable, types=(), direction: str = "out", depth: int = 2,
         include_archived: bool = False) -> list[tuple]:
    """The documented walk, breadth first: (memory id, links away, via id, type, "out"|"in") for every memory
    within `depth` links of `start` along `types` (empty: all), each at its fewest links away through the
    smallest (via, type, direction) from a memory one link nearer; by depth, then id. Memories whose scope
    fails `readable`, and archived ones unless asked for, are neither shown nor passed through."""
    def shown(memory_id: str) -> bool:
        m = folded.memories.get(memory_id)
        return m is not None and readable(m.scope) and (include_archived or not m.state["archived"])

    moves = []
    for m in folded.memories.values():
        for target, kind in m.links:
            if not types or kind in types:
                if direction in ("out", "both"):
                    moves.append((m.id, target, kind, "out"))
                if direction in ("in", "both"):
                    moves.append((target, m.id, kind, "in"))
    level, seen, found = {start}, {start}, []
    for d in range(1, depth + 1):
        reached: dict[str, tuple] = {}
        for a, b, kind, how in moves:
            if a in level and b not in seen and shown(b):
                reached[b] = min(reached.get(b, (a, kind, how)), (a, kind, how))
        found += [(b, d, *how) for b, how in reached.items()]
        seen |= set(reached)
        level = set(reached)
    return sorted(found, key=lambda r: (r[1], r[0]))


def _next(state: dict, op: str, update: pb.UpdateOp | None, authority: int) -> dict:
    after = dict(state)
    if op == "update":
        for name in ("content", "type", "importance", "confidence", "protected", "trust", "quote"):
            if update.HasField(name):
                after[name] = getattr(update, name)
        if update.replace_tags:
            after["tags"] = tuple(update.tags)
    elif op == "forget":
        after["archived"] = True
    elif op == "restore":
        after["archived"] = False
    after["authority"] = authority
    return after


def _same(a: dict, b: dict) -> bool:
    return all(a[k] == b[k] for k in STATE_KEYS if k != "authority")


class Violation(AssertionError):
    """An entry the rules say could not have been written."""


def _require(condition: bool, seq: int, rule: str, message: str) -> None:
    if not condition:
        raise Violation(f"entry {seq} bypassed {rule}: {message}")


def change_refusals(folded: Folded, policy: Policy, agent: str, op: str, memory_id: str, base: int,
                    update: pb.UpdateOp | None = None, layer: int = 0) -> set[str]:
    """Every rule or precondition an update/forget/restore/set_layer from `base` breaks (empty: it must pass)."""
    m = folded.memories.get(memory_id)
    if m is None:
        return {"NOT_FOUND"}
    if base > m.version or base < 1:
        return {"FAILED_PRECONDITION"}
    reasons = set()
    if not policy.granted(agent, m.scope):
        reasons.add("scope-not-granted")
    stale = base != m.version
    if stale and op in ("restore", "set_layer"):
        reasons.add("ABORTED")
    seen = m.history[base]
    authority = policy.of(agent)
    human = authority == HUMAN
    if (m.layer == 1 or (op == "set_layer" and layer == 1)) and not human:
        reasons.add("layer-1-human-only")
    if authority > eff(seen["authority"]):
        reasons.add("no-overwrite-higher-authority")
    if (stale and op in ("update", "forget") and authority > eff(m.state["authority"])
            and _same(_next(seen, op, update, authority), m.state)):
        reasons.add("no-overwrite-higher-authority")  # written on top of the current state: judged there too
    protected = bool(seen["protected"] or m.state["protected"])
    if op == "forget" and protected and not human:
        reasons.add("protected-not-forgotten")
    if op == "forget" and m.layer in (1, 2) and not human:
        reasons.add("layers-1-2-not-forgotten")
    if op == "update" and protected and update.HasField("protected") and not update.protected and not human:
        reasons.add("protected-not-forgotten")
    if op == "update":
        trust = update.trust if update.HasField("trust") else seen["trust"]
        quote = update.quote if update.HasField("quote") else seen["quote"]
        if trust == "principle" and not quote.strip():
            reasons.add("INVALID_ARGUMENT")  # principle-needs-quote
    if op == "set_layer" and m.layer in (1, 2) and layer > 2 and not human:
        reasons.add("layers-1-2-not-forgotten")
    if op == "forget" and seen["archived"]:
        reasons.add("FAILED_PRECONDITION")
    if op == "restore" and not m.state["archived"]:
        reasons.add("FAILED_PRECONDITION")
    if op == "update" and seen["archived"]:
        reasons.add("FAILED_PRECONDITION")
    return reasons


def link_refusals(folded: Folded, policy: Policy, agent: str, op: str, source: str, target: str,
                  relation: str, weight: float = 0.0, reason: str = "") -> set[str]:
    """Every rule or precondition a link/unlink breaks (empty: it must pass). `weight` 0 is unset (1)."""
    if relation not in EDGE_TYPES or not 0 <= weight <= 1:
        return {"INVALID_ARGUMENT"}  # checked by the client before anything is sent
    m = folded.memories.get(source)
    if m is None:
        return {"NOT_FOUND"}
    reasons = set()
    if op == "link" and target not in folded.memories:
        reasons.add("NOT_FOUND")
    if op == "unlink" and (target, relation) not in m.links:
        return {"NOT_FOUND"}
    authority = policy.of(agent)
    other = folded.memories.get(target)
    if not policy.granted(agent, m.scope) or (other is not None and not policy.granted(agent, other.scope)):
        reasons.add("scope-not-granted")
    if m.layer == 1 and authority != HUMAN:
        reasons.add("layer-1-human-only")
    if op == "link" and relation in policy.causal_relations and "inference" in (
            m.state["trust"], other.state["trust"] if other is not None else ""):
        reasons.add("FAILED_PRECONDITION")  # inference-no-causal-links
    if op == "unlink" and authority > eff(m.links[(target, relation)]):
        reasons.add("no-overwrite-higher-authority")
    if (op == "link" and (target, relation) in m.links and m.link_attrs[(target, relation)] != (weight or 1.0, reason)
            and authority > eff(m.links[(target, relation)])):
        reasons.add("no-overwrite-higher-authority")  # linking again changes the weight or reason
    return reasons


def _resolution(folded: Folded, c: RefConflict, keep: int, keep_all: bool, merged: str | None,
                authority: int) -> list[tuple[RefMemory, dict]]:
    """(memory, its state after) for each memory a resolution changes."""
    m = folded.memories[c.memory_id]
    if c.kind == "write":
        if keep:
            return [(m, {**c.revisions[keep - 1].state, "authority": authority})]
        return [(m, {**m.state, "content": merged, "authority": authority})]
    other = folded.memories[c.other_memory_id]
    forgotten = {**m.state, "archived": True, "authority": authority}
    if keep == 1:
        return [(m, forgotten)]
    if keep == 2:
        return [(m, dict(m.state)), (other, {**other.state, "archived": True, "authority": authority})]
    if keep_all:
        return [(m, dict(m.state))]
    return [(m, forgotten), (other, {**other.state, "content": merged, "authority": authority})]


def resolve_refusals(folded: Folded, policy: Policy, agent: str, conflict_id: int, keep: int,
                     keep_all: bool = False, merged: str | None = None) -> set[str]:
    """Every rule or precondition resolving `conflict_id` by keeping revision `keep` (or all revisions, or
    writing `merged` content) breaks."""
    c = folded.conflicts.get(conflict_id)
    if c is None:
        return {"NOT_FOUND"}
    if c.resolved:
        return {"FAILED_PRECONDITION"}
    if (keep and not 1 <= keep <= len(c.revisions)) or (keep_all and c.kind != "semantic"):
        return {"INVALID_ARGUMENT"}
    reasons = set()
    authority = policy.of(agent)
    if not policy.granted(agent, folded.memories[c.memory_id].scope):
        reasons.add("scope-not-granted")
    if agent not in policy.admins and authority > min(eff(r.authority) for r in c.revisions):
        reasons.add("resolve-needs-authority")
    for m, after in _resolution(folded, c, keep, keep_all, merged, authority):
        reasons |= _resolution_rules(m, after, authority)
    return reasons


def _resolution_rules(m: RefMemory, after: dict, authority: int) -> set[str]:
    reasons = set()
    if authority == HUMAN:
        return reasons
    if m.layer == 1:
        reasons.add("layer-1-human-only")
    if after["archived"] and not m.state["archived"]:
        if m.state["protected"]:
            reasons.add("protected-not-forgotten")
        if m.layer in (1, 2):
            reasons.add("layers-1-2-not-forgotten")
    return reasons


def redact_refusals(folded: Folded, policy: Policy, agent: str, memory_id: str, base: int) -> set[str]:
    """Every rule or precondition a redaction from `base` breaks (empty: it must pass)."""
    m = folded.memories.get(memory_id)
    if m is None:
        return {"NOT_FOUND"}
    reasons = set()
    if agent not in policy.admins:
        reasons.add("PERMISSION_DENIED")  # an admin operation
    if not policy.granted(agent, m.scope):
        reasons.add("scope-not-granted")
    if base != m.version:
        reasons.add("ABORTED")
    return reasons


def add_refusals(folded: Folded, policy: Policy, agent: str, content: str, layer: int,
                 scope: str = "user", trust: str = "", quote: str = "") -> tuple[set[str], set[str]]:
    """(rules an add must be refused by, rules it may be refused by) when its content has a known vector."""
    must, may = set(), set()
    authority = policy.of(agent)
    if trust == "principle" and not quote.strip():
        return {"INVALID_ARGUMENT"}, set()  # principle-needs-quote, refused before anything else
    if not policy.granted(agent, scope):
        must.add("scope-not-granted")
    if layer == 1 and authority != HUMAN:
        must.add("layer-1-human-only")
    threshold = policy.semantic_threshold
    if threshold > 0 and content in folded.vectors:
        near = folded.near(content, scope, agent, threshold - COSINE_SLACK)
        if any(eff(m.state["authority"]) < authority for _, m in near):
            may.add("semantic-conflict-higher-authority")
        if near and near[0][0] >= threshold + COSINE_SLACK and eff(near[0][1].state["authority"]) < authority and (
                len(near) == 1 or near[1][0] < near[0][0] - COSINE_SLACK):
            must.add("semantic-conflict-higher-authority")
    if threshold > 0 and authority >= AUTOMATED_FROM:
        copies = folded.near_copies(content, scope, agent, authority)
        if copies:
            may.add("semantic-conflict-higher-authority")
        if copies and copies[0][0] >= NEAR_COPY + WORD_SLACK:
            must.add("semantic-conflict-higher-authority")
    return must, may


def fold(entries: list[pb.ChangelogEntry], policy: Policy | None = None,
         redacted: frozenset[str] | None = None) -> Folded:
    """Folds entries in seq order; raises AssertionError on anything a replica must refuse.

    `redacted` names the memories redacted anywhere in the changelog when
    `entries` is only a prefix of it (its entries may be blanked already).

    With `policy`, every entry must carry its writer's authority from the
    policy and obey every governance rule (`Violation` otherwise). A stale
    write that repeats the memory's current state is written as an ordinary
    write on top of it, so it must also obey no-overwrite-higher-authority
    there: otherwise a weaker agent would take over what a stronger authority
    wrote.
    """
    memories: dict[str, RefMemory] = {}
    conflicts: dict[int, RefConflict] = {}
    vectors: dict[str, tuple[float, ...]] = {}
    if redacted is None:
        redacted = frozenset(e.memory_id for e in entries if e.op == "redact")
    folded = Folded(memories, conflicts, vectors, redacted)
    for expected_seq, e in enumerate(entries, start=1):
        assert e.seq == expected_seq, f"seq {e.seq} where {expected_seq} was expected"
        kind = e.operation.WhichOneof("op")
        assert kind == e.op, f"entry {e.seq}: op {e.op} but operation {kind}"
        if e.agent_id == SYSTEM:
            assert e.authority == SYSTEM_AUTHORITY, f"entry {e.seq}: the system agent at authority {e.authority}"
            assert e.op in SYSTEM_OPS, f"entry {e.seq}: the system agent wrote {e.op}"
        elif policy is not None:
            assert e.authority == policy.of(e.agent_id), (
                f"entry {e.seq} records authority {e.authority} for {e.agent_id}, the policy says "
                f"{policy.of(e.agent_id)}")
        _fold_one(folded, e, policy)
    return folded


def _remember(m: RefMemory, e: pb.ChangelogEntry, version: int, state: dict) -> None:
    m.state = state
    m.version = version
    m.version_seq = e.seq
    m.updated_by = e.agent_id
    m.history[version] = dict(state)
    m.made_by_seq[version] = e.seq


def _fold_one(folded: Folded, e: pb.ChangelogEntry, policy: Policy | None) -> None:
    memories, conflicts = folded.memories, folded.conflicts
    kind = e.op
    human = e.authority == HUMAN
    check = policy is not None
    if kind == "add":
        a = e.operation.add
        assert e.memory_id not in memories, f"entry {e.seq} adds {e.memory_id} twice"
        assert e.version == 1
        layer = a.layer or FACTUAL
        if check:
            _require(layer != 1 or human, e.seq, "layer-1-human-only", f"{e.agent_id} added a layer-1 memory")
            _require(policy.granted(e.agent_id, a.scope), e.seq, "scope-not-granted",
                     f"{e.agent_id} added a memory in scope {a.scope}")
            _require(a.trust != "principle" or bool(a.quote.strip()), e.seq, "principle-needs-quote",
                     f"{e.agent_id} added a principle without its quote")
        if a.embedding:
            folded.vectors.setdefault(a.content, tuple(a.embedding))
        state = dict(content=a.content, type=a.type, tags=tuple(a.tags),
                     importance=a.importance if a.HasField("importance") else 0.5,
                     confidence=a.confidence if a.HasField("confidence") else 0.9, protected=a.protected,
                     archived=False, trust=a.trust, quote=a.quote, authority=e.authority)
        marked = e.HasField("conflict") and e.conflict.kind == "semantic"
        if check and policy.semantic_threshold > 0 and a.embedding:
            _check_semantic(folded, e, a, policy, marked)
        if check and policy.semantic_threshold > 0 and e.authority >= AUTOMATED_FROM:
            copies = folded.near_copies(a.content, a.scope, e.agent_id, e.authority)
            _require(not copies or copies[0][0] < NEAR_COPY + WORD_SLACK, e.seq, "semantic-conflict-higher-authority",
                     f"{e.agent_id} (authority {e.authority}) added a near copy of {copies[0][1].id if copies else ''}")
        m = RefMemory(id=e.memory_id, scope=a.scope, layer=layer, author=e.agent_id, updated_by=e.agent_id,
                      version=1, state={}, version_seq=e.seq)
        _remember(m, e, 1, state)
        if marked:
            other = memories[e.conflict.other_memory_id]
            assert e.conflict.conflict_id == e.seq, f"entry {e.seq} opens semantic conflict {e.conflict.conflict_id}"
            conflicts[e.seq] = RefConflict(e.seq, "semantic", m.id, other.id, [
                RefRevision(other.author, eff(other.state["authority"]), other.version_seq, dict(other.state),
                            other.id),
                RefRevision(m.author, e.authority, e.seq, dict(state), m.id)])
        memories[m.id] = m
        return
    assert e.memory_id in memories, f"entry {e.seq} changes unknown memory {e.memory_id}"
    m = memories[e.memory_id]
    if e.agent_id == SYSTEM and kind in ("link", "unlink", "set_layer"):
        _fold_system(folded, e, m)
    if kind in ("link", "unlink"):
        link = getattr(e.operation, kind)
        key = (link.target_id, link.relation)
        if check and e.agent_id != SYSTEM:
            _require(m.layer != 1 or human, e.seq, "layer-1-human-only", f"{e.agent_id} {kind}ed layer-1 {m.id}")
            _require(policy.granted(e.agent_id, m.scope), e.seq, "scope-not-granted",
                     f"{e.agent_id} {kind}ed {m.id} in scope {m.scope}")
            other = memories.get(link.target_id)
            _require(kind != "link" or link.relation not in policy.causal_relations or "inference" not in (
                m.state["trust"], other.state["trust"] if other else ""), e.seq, "inference-no-causal-links",
                f"{e.agent_id} made a causal link from or to an inference")
        assert link.relation in EDGE_TYPES, f"entry {e.seq} {kind}s with relation {link.relation!r}, not an edge type"
        if kind == "link":
            assert link.target_id in memories, f"entry {e.seq} links to unknown memory {link.target_id}"
            attrs = (link.weight or 1.0, link.reason)
            assert 0 < attrs[0] <= 1, f"entry {e.seq} links with weight {link.weight}"
            if check and key in m.links and m.link_attrs[key] != attrs:
                _require(e.authority <= eff(m.links[key]), e.seq, "no-overwrite-higher-authority",
                         f"{e.agent_id} (authority {e.authority}) changed a link of authority {m.links[key]}")
            m.links.setdefault(key, e.authority)
            m.link_attrs[key] = attrs
        else:
            assert key in m.links, f"entry {e.seq} unlinks a link that does not exist"
            if check:
                _require(e.authority <= eff(m.links[key]), e.seq, "no-overwrite-higher-authority",
                         f"{e.agent_id} (authority {e.authority}) removed a link of authority {m.links[key]}")
            del m.links[key]
            del m.link_attrs[key]
            if link.relation == "semantic":
                folded.unlinked.add(frozenset((m.id, link.target_id)))
        assert e.version == m.version, f"entry {e.seq}: a link changed the version"
        return
    if kind == "resolve_conflict":
        _fold_resolution(folded, e, m, policy)
        return
    if kind in ("decay", "archive"):
        _fold_lifecycle(folded, e, m)
        return
    if kind == "redact":
        _fold_redaction(folded, e, m, policy)
        return
    update = e.operation.update if kind == "update" else None
    if update is not None and update.HasField("content") and update.embedding:
        folded.vectors.setdefault(update.content, tuple(update.embedding))
    base = e.base_version
    assert 1 <= base <= m.version, f"entry {e.seq}: base_version {base} of a memory at version {m.version}"
    stale = base != m.version
    seen = m.history[base]
    assert not (stale and kind in ("restore", "set_layer")), f"entry {e.seq}: a stale {kind} was written"
    if check and e.agent_id != SYSTEM:
        reasons = change_refusals(folded, policy, e.agent_id, kind, m.id, base, update,
                                  e.operation.set_layer.layer if kind == "set_layer" else 0)
        _require(not reasons, e.seq, ", ".join(sorted(reasons)), f"{e.agent_id} {kind} of {m.id} from version {base}")
    wanted = _next(seen, kind, update, e.authority)
    if e.HasField("conflict") and e.conflict.kind == "write":
        assert stale, f"entry {e.seq} is marked stale but is not"
        assert m.id in folded.redacted or not _same(wanted, m.state), (
            f"entry {e.seq} is marked stale but says what the memory says")
        c = folded.open_write_conflict(m.id)
        if c is None:
            assert e.conflict.conflict_id == e.seq, f"entry {e.seq} opens conflict {e.conflict.conflict_id}"
            c = RefConflict(e.seq, "write", m.id, "", [RefRevision(
                m.updated_by, eff(m.state["authority"]), m.made_by_seq[base + 1], dict(m.state), m.id)])
            conflicts[c.id] = c
        assert e.conflict.conflict_id == c.id, f"entry {e.seq} joins conflict {e.conflict.conflict_id}, not {c.id}"
        # The writer's own revision that the memory does not show (never revision 1) gives way to the new one.
        hidden = [n for n, r in enumerate(c.revisions, 1) if n > 1 and n != c.visible and r.agent == e.agent_id]
        replaces = hidden[-1] if hidden else 0
        assert e.conflict.replaces_revision == replaces, (
            f"entry {e.seq} replaces revision {e.conflict.replaces_revision}, the model says {replaces}")
        revision = RefRevision(e.agent_id, e.authority, e.seq, wanted, m.id)
        if replaces:
            c.revisions[replaces - 1] = revision
        else:
            c.revisions.append(revision)
        winner = min(range(len(c.revisions)), key=lambda i: c.revisions[i].precedence)
        c.visible = winner + 1
        after = dict(c.revisions[winner].state)
    else:
        if stale:
            assert _same(wanted, m.state), f"entry {e.seq} is stale and unmarked, yet it changes the memory"
            if check:
                _require(e.authority <= eff(m.state["authority"]), e.seq, "no-overwrite-higher-authority",
                         f"{e.agent_id} (authority {e.authority}) repeated the current state of {m.id} from "
                         f"version {base} and so took over what authority {eff(m.state['authority'])} wrote")
        after = _next(m.state, kind, update, e.authority)
        if e.agent_id == SYSTEM:  # a promotion: the memory stays its writer's
            after["authority"] = m.state["authority"]
        if kind == "set_layer":
            m.layer = e.operation.set_layer.layer
        c = folded.open_write_conflict(m.id)
        if c is not None:
            line = c.revisions[c.visible - 1]
            line.state = dict(after)
            line.authority = min(eff(line.authority), eff(e.authority))
    assert e.version == m.version + 1, f"entry {e.seq}: version {e.version}, model says {m.version + 1}"
    _remember(m, e, e.version, after)
    _follow_semantic(folded, m)


def _fold_system(folded: Folded, e: pb.ChangelogEntry, m: RefMemory) -> None:
    """Consolidation's rules (issue 16) on one of its link, unlink or set_layer entries: it links by similarity
    (semantic) or records a merge (supersedes), never from a constitutional memory's by similarity, and never
    links by similarity two memories whose semantic link anyone removed before (an unlink is a verdict it keeps);
    it unlinks only decaying links the system or an automated extractor made; it promotes only ephemeral memories,
    to factual."""
    if e.op == "link":
        link = e.operation.link
        assert link.relation in ("semantic", "supersedes"), f"entry {e.seq}: the system made a {link.relation} link"
        assert link.relation == "supersedes" or m.layer != 1, f"entry {e.seq}: auto-link from layer-1 {m.id}"
        assert link.reason, f"entry {e.seq}: a system link without its reason"
        assert link.relation != "semantic" or frozenset((m.id, link.target_id)) not in folded.unlinked, (
            f"entry {e.seq}: the system linked {m.id} and {link.target_id} again after their link was removed")
    elif e.op == "unlink":
        key = (e.operation.unlink.target_id, e.operation.unlink.relation)
        assert key[1] not in ("hierarchical", "supersedes"), f"entry {e.seq}: the system pruned a {key[1]} link"
        assert m.links.get(key, 0) >= SYSTEM_AUTHORITY, f"entry {e.seq}: the system pruned an agent's link"
    else:
        assert (m.layer, e.operation.set_layer.layer) == (4, 3), (
            f"entry {e.seq}: the system moved {m.id} from layer {m.layer} to {e.operation.set_layer.layer}")
        assert not m.state["archived"], f"entry {e.seq}: promoted archived memory {m.id}"


def _fold_lifecycle(folded: Folded, e: pb.ChangelogEntry, m: RefMemory) -> None:
    assert e.agent_id == SYSTEM, f"entry {e.seq}: {e.op} by {e.agent_id}, not the system agent"
    assert not m.state["archived"], f"entry {e.seq}: {e.op} of archived memory {m.id}"
    level = m.lifecycle[4] if m.lifecycle else 1
    if e.op == "decay":
        d = e.operation.decay
        assert e.version == 0 and e.base_version == 0, f"entry {e.seq}: a decay entry names a version"
        assert not m.lifecycle or (d.uses >= m.lifecycle[0] and d.level >= level), (
            f"entry {e.seq}: uses or level of {m.id} went down")
        assert 1 <= d.level <= 4 and 0 <= d.strength <= 1, f"entry {e.seq}: level {d.level}, strength {d.strength}"
        m.lifecycle = (d.uses, d.last_used_ms, d.stability_days, d.use_days, d.level, d.stale)
        return
    assert e.base_version == m.version and e.version == m.version + 1, f"entry {e.seq}: archive versions"
    assert m.layer in ARCHIVABLE_LAYERS, f"entry {e.seq}: archived layer-{m.layer} memory {m.id}"
    assert not m.state["protected"], f"entry {e.seq}: archived protected memory {m.id}"
    assert not PROTECTED_TAGS & set(m.state["tags"]), f"entry {e.seq}: archived {m.id} despite a protected tag"
    assert level < 3, f"entry {e.seq}: archived {m.id} at level {level}"
    after = dict(m.state, archived=True)
    c = folded.open_write_conflict(m.id)
    if c is not None:
        line = c.revisions[c.visible - 1]
        line.state = dict(after)
        line.authority = min(eff(line.authority), eff(after["authority"]))
    _remember(m, e, e.version, after)
    _follow_semantic(folded, m)


def _follow_semantic(folded: Folded, m: RefMemory) -> None:
    for c in folded.conflicts.values():
        if c.kind == "semantic" and not c.resolved:
            for r in c.revisions:
                if r.memory_id == m.id:
                    r.state = dict(m.state)


def _check_semantic(folded: Folded, e: pb.ChangelogEntry, a: pb.AddOp, policy: Policy, marked: bool) -> None:
    threshold = policy.semantic_threshold
    near = folded.near(a.content, a.scope, e.agent_id, threshold - COSINE_SLACK)
    if marked:
        other = folded.memories.get(e.conflict.other_memory_id)
        assert other is not None, f"entry {e.seq} is marked near unknown memory {e.conflict.other_memory_id}"
        assert other.author != e.agent_id and other.scope == a.scope and not other.state["archived"], (
            f"entry {e.seq} is marked near {other.id}, which is its own, archived or in another scope")
        similarity = folded.cosine(a.content, other.state["content"])
        assert other.id in folded.redacted or (
            similarity is not None and abs(similarity - e.conflict.similarity) <= COSINE_SLACK), (
            f"entry {e.seq}: marked similarity {e.conflict.similarity}, the vectors say {similarity}")
        assert e.conflict.similarity >= threshold - COSINE_SLACK
        _require(eff(other.state["authority"]) >= e.authority, e.seq, "semantic-conflict-higher-authority",
                 f"{e.agent_id} (authority {e.authority}) added a near duplicate of {other.id} (authority "
                 f"{eff(other.state['authority'])})")
    else:
        clear = [(s, m) for s, m in near if s >= threshold + COSINE_SLACK]
        assert not clear, (f"entry {e.seq} is a near duplicate (cosine {clear[0][0]:.4f}) of {clear[0][1].id} by "
                           f"{clear[0][1].author}, but was not marked")


def _fold_resolution(folded: Folded, e: pb.ChangelogEntry, m: RefMemory, policy: Policy | None) -> None:
    r = e.operation.resolve_conflict
    c = folded.conflicts.get(r.conflict_id)
    assert c is not None and not c.resolved, f"entry {e.seq} resolves conflict {r.conflict_id}, which is not open"
    assert c.memory_id == m.id, f"entry {e.seq} resolves conflict {c.id} on another memory"
    assert e.base_version == m.version, f"entry {e.seq}: a stale resolution was written"
    merged = r.merged_content if r.HasField("merged_content") else None
    if merged is not None and r.embedding:
        folded.vectors.setdefault(merged, tuple(r.embedding))
    changes = _resolution(folded, c, r.keep_revision, r.keep_all, merged, e.authority)
    if policy is not None:
        reasons = set()
        if e.agent_id not in policy.admins and e.authority > min(eff(x.authority) for x in c.revisions):
            reasons.add("resolve-needs-authority")
        for changed, after in changes:
            reasons |= _resolution_rules(changed, after, e.authority)
        _require(not reasons, e.seq, ", ".join(sorted(reasons)), f"{e.agent_id} resolved conflict {c.id}")
    for changed, after in changes:
        version = e.version if changed.id == m.id else changed.version + 1
        _remember(changed, e, version, after)
    assert m.version == e.version, f"entry {e.seq}: version {e.version}, model says {m.version}"
    for changed, _ in changes:
        _follow_semantic(folded, changed)
    c.resolved, c.resolved_by = True, e.agent_id


def _scrubbed(state: dict) -> dict:
    return {**state, "content": REDACTED, "quote": REDACTED if state["quote"] else "", "tags": ()}


def _fold_redaction(folded: Folded, e: pb.ChangelogEntry, m: RefMemory, policy: Policy | None) -> None:
    if policy is not None:
        _require(e.agent_id in policy.admins, e.seq, "admin-only", f"{e.agent_id} redacted {m.id}")
        _require(policy.granted(e.agent_id, m.scope), e.seq, "scope-not-granted", f"{e.agent_id} redacted {m.id}")
    assert e.base_version == m.version, f"entry {e.seq}: a stale redaction was written"
    for version, state in m.history.items():
        m.history[version] = _scrubbed(state)
    for c in folded.conflicts.values():
        for r in c.revisions:
            if r.memory_id == m.id:
                r.state = _scrubbed(r.state)
    assert e.version == m.version + 1, f"entry {e.seq}: version {e.version}, model says {m.version + 1}"
    _remember(m, e, e.version, {**_scrubbed(m.state), "archived": True, "authority": e.authority})
    _follow_semantic(folded, m)


def conflict_view(c: RefConflict) -> tuple:
    """What every replica must agree on about a conflict."""
    revisions = tuple((r.memory_id, r.agent, eff(r.authority), r.seq,
                       r.state["content"], bool(r.state["archived"])) for r in c.revisions)
    return (c.id, c.kind, c.memory_id, c.other_memory_id, c.visible, c.resolved, c.resolved_by, revisions)


def served_conflict_view(c: pb.Conflict) -> tuple:
    """The same tuple from a served Conflict."""
    revisions = tuple((r.memory_id, r.agent_id, eff(r.authority), r.seq, r.content, r.archived)
                      for r in c.revisions)
    return (c.id, c.kind, c.memory_id, c.other_memory_id, c.visible_revision, c.resolved, c.resolved_by,
            revisions)


def entry_texts(e: pb.ChangelogEntry, merged: bool = True) -> tuple[list[str], bool]:
    """The free texts an entry carries (content, quote, reason, note, merged content unless `merged` is False),
    and whether it carries a vector: what a redaction of its memory must blank."""
    op = getattr(e.operation, e.op)
    texts = {
        "add": lambda: [op.content, op.quote],
        "update": lambda: [op.content, op.quote],
        "forget": lambda: [op.reason],
        "link": lambda: [op.reason],
        "resolve_conflict": lambda: [op.note] + ([op.merged_content] if merged else []),
    }.get(e.op, lambda: [])()
    embedded = bool(getattr(op, "embedding", None)) and (e.op != "resolve_conflict" or merged)
    return texts, embedded


def _blanked(operation: pb.Operation, fields: tuple[str, ...], drop_embedding: bool) -> pb.Operation:
    out = pb.Operation()
    out.CopyFrom(operation)
    op = getattr(out, out.WhichOneof("op"))
    for name in fields:
        if name in op.DESCRIPTOR.fields_by_name and getattr(op, name):
            setattr(op, name, REDACTED)
    if drop_embedding and "embedding" in op.DESCRIPTOR.fields_by_name:
        del op.embedding[:]
    if drop_embedding and "tags" in op.DESCRIPTOR.fields_by_name:  # a full blanking empties the tags too
        del op.tags[:]
    return out


def blanked_by_redaction(old: pb.ChangelogEntry, new: pb.ChangelogEntry, entries: list[pb.ChangelogEntry]) -> bool:
    """True when `new` is `old` with only what a redaction may change changed: its texts replaced by "[redacted]"
    (all of them, its tags and its vector, or only the note of a resolution that merged into another memory), its salt
    dropped, and `redacted_by` naming a later redact entry (what a delivery attaches, the checkpoint and the
    redaction proof, aside: the agents check the proof)."""
    if old.redacted_by or not old.seq < new.redacted_by <= len(entries):
        return False
    if entries[new.redacted_by - 1].op != "redact":
        return False
    texts = ("content", "quote", "reason", "note", "merged_content")
    if new.operation not in (_blanked(old.operation, texts, True), _blanked(old.operation, ("note",), False)):
        return False
    rest_old, rest_new = pb.ChangelogEntry(), pb.ChangelogEntry()
    rest_old.CopyFrom(old)
    rest_new.CopyFrom(new)
    for e in (rest_old, rest_new):
        for name in ("operation", "payload_salt", "redacted_by", "checkpoint", "redaction"):
            e.ClearField(name)
    return rest_old == rest_new


def chain_ok(entries: list[pb.ChangelogEntry]) -> bool:
    """True when each entry names the previous entry's hash (the links of the chain)."""
    previous = GENESIS
    for e in entries:
        if e.prev_hash != previous or len(e.hash) != 64:
            return False
        previous = e.hash
    return True


def entry_digest(e: pb.ChangelogEntry) -> str:
    """A digest of an entry's full wire form, to prove earlier entries never change (without what a delivery
    attaches: the checkpoint closing a page and a blanked entry's redaction proof)."""
    entry = pb.ChangelogEntry()
    entry.CopyFrom(e)
    entry.ClearField("checkpoint")
    entry.ClearField("redaction")
    return hashlib.sha256(entry.SerializeToString(deterministic=True)).hexdigest()


def describe(folded: Folded) -> str:
    """Readable dump for failure messages."""
    doc = {k: v.visible() for k, v in folded.memories.items()}
    doc["conflicts"] = [conflict_view(c) for c in folded.conflicts.values()]
    return json.dumps(doc, default=str, indent=1)[:6000]


def clone(folded: Folded) -> Folded:
    return copy.deepcopy(folded)
