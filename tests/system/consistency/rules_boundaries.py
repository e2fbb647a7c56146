"""Thresholds met exactly, and weaker agents trying what only stronger ones may do.

* Semantic conflicts: a memory is added with a vector constructed to be at
  cosine `threshold - 0.0001`, exactly `threshold`, or `threshold + 0.0001`
  from another memory (and orthogonal to every other one), so the mark must
  be absent, present and present; a stronger author blocks it instead. The
  same vector near the adder's own memory, an archived memory or another
  scope's must open nothing.
* Intake limits: content bytes, number of tags and tag length at the limit,
  one below and one above, sent straight to the server.
* Challenges: an agent weaker than a memory's writer (the adjacent authority
  half of the time), or any non-human agent for layer 1-2 and protected
  memories, tries update, forget, restore, set_layer, link, unlink and
  resolve on it; the reference model predicts each refusal.
"""

from __future__ import annotations

import math
import uuid

import grpc
import numpy as np
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import AGENT_NAMES, POLICY, SCOPES, ReplicationHarness, _reason, token
from rules import update_op

NEAR = {"below": -1e-4, "at": 0.0, "above": 1e-4}
CHALLENGES = ["stronger", "layer 1", "layer 2", "protected", "stronger link", "conflict"]
"""What a weaker agent challenges: a memory written by a stronger one, a layer-1 or layer-2 memory, a protected
one, a link a stronger agent made, a conflict with a stronger revision."""


class BoundaryRules(ReplicationHarness):
    """The boundary steps; see the module docstring."""

    @precondition(lambda self: self.up and self._predictable() and self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), order=st.permutations(sorted(NEAR)),
          whose=st.sampled_from(["another's", "another's", "another's", "own", "archived", "other scope"]))
    def near_duplicates_at_the_semantic_threshold(self, agent, pick, order, whose):
        """Below, at and above the threshold from one memory, each probe orthogonal to every other vector."""
        agent = self._agent(agent)
        folded = ref.fold(self._entries(), POLICY)
        ordered = self.slots[pick % len(self.slots):] + self.slots
        candidates = [m for m in (folded.memories[s] for s in ordered if s in folded.memories)
                      if folded.vector_of(m) is not None and POLICY.granted(agent, m.scope)
                      and (m.author == agent) == (whose == "own") and m.state["archived"] == (whose == "archived")]
        if not candidates:
            return
        target = candidates[0]
        scope = target.scope
        if whose == "other scope":
            scope = next((s for s in SCOPES if s != target.scope and POLICY.granted(agent, s)), None)
            if scope is None:
                return
        for where in order:
            self._probe(agent, folded, target, scope, where, whose)
            folded = ref.fold(self._entries(), POLICY)
        reach.reached(reach.RULE, "near_duplicates_at_the_semantic_threshold")

    def _probe(self, agent: str, folded: ref.Folded, target: ref.RefMemory, scope: str, where: str,
               whose: str) -> None:
        threshold = POLICY.semantic_threshold
        cosine = threshold + NEAR[where]
        self.counter += 1
        text = f"Boundary probe {where} the threshold (note {token(self.counter)})"
        memory_id = self._new_slot()
        vector = _at_cosine(folded, target, cosine, seed=self.counter)
        op = pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, add=pb.AddOp(
            scope=scope, type="fact", content=text, embedding=vector, tags=["probe"]))
        flagged = where != "below" and whose == "another's"
        blocked = flagged and ref.eff(target.state["authority"]) < POLICY.of(agent)
        note(f"{agent} adds {memory_id} at cosine {cosine} to {whose} {target.id} (authority "
             f"{ref.eff(target.state['authority'])}): flagged {flagged}, blocked {blocked}")
        try:
            result = self._append_raw(agent, op).results[0]
        except grpc.RpcError as exc:
            refusal = _reason(_Refusal(exc))
            assert blocked and refusal == "semantic-conflict-higher-authority", (
                f"a near duplicate at cosine {cosine} of {whose} memory was refused: {exc.details()}")
            reach.reached(reach.OUTCOME, f"a near duplicate {where} the threshold was blocked")
            return
        assert not blocked, f"a near duplicate at cosine {cosine} of a stronger authority's memory was accepted"
        entry = self._entries()[result.seq - 1]
        if flagged:
            assert entry.conflict.kind == "semantic" and entry.conflict.other_memory_id == target.id, (
                f"a memory at cosine {cosine} (threshold {threshold}) to {target.id} was not flagged")
            assert abs(entry.conflict.similarity - round(cosine, 4)) <= 1e-4, (
                f"marked similarity {entry.conflict.similarity}, constructed {cosine} (the vectors the entries "
                f"carry say {ref.fold(self._entries()).cosine(text, target.state['content'])})")
        else:
            assert not entry.HasField("conflict"), (
                f"a memory at cosine {cosine} to {whose} memory {target.id} was flagged: {entry.conflict}")
        reach.reached(reach.OUTCOME, f"a near duplicate {where} the threshold of {whose} memory")

    @precondition(lambda self: self.up)
    @rule(which=st.sampled_from(["content", "tags", "tag"]), delta=st.sampled_from([-1, 0, 1]))
    def a_write_at_an_intake_limit(self, which, delta):
        from server.core.limits import Limits

        limits = Limits()
        self.counter += 1
        text = f"Limits probe (note {token(self.counter)})"
        tags = ["probe"]
        if which == "content":
            text += " " + "lorem ipsum dolor " * ((limits.max_content_bytes + delta - len(text) - 1) // 18 + 1)
            text = text[:limits.max_content_bytes + delta]
        elif which == "tags":
            tags = [f"t{i}" for i in range(limits.max_tags + delta)]
        else:
            tags = ["t" * (limits.max_tag_chars + delta)]
        memory_id = self._new_slot()
        op = pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, add=pb.AddOp(
            scope="user", type="fact", content=text, tags=tags, embedding=self.embedder.embed(text[:200])))
        try:
            self._append_raw("agent-0", op)
        except grpc.RpcError as exc:
            assert delta > 0 and exc.code() == grpc.StatusCode.INVALID_ARGUMENT, (
                f"an add with {which} at the limit {'+' if delta >= 0 else ''}{delta} was refused: {exc.details()}")
            reach.reached(reach.OUTCOME, f"an add with {which} over the limit was refused")
        else:
            assert delta <= 0, f"an add with {which} one over the limit was accepted"
        reach.reached(reach.RULE, "a_write_at_an_intake_limit")

    @precondition(lambda self: self.slots)
    @rule(kind=st.sampled_from(CHALLENGES),
          op=st.sampled_from(["update", "forget", "restore", "set_layer", "link", "unlink", "resolve"]),
          pick=st.integers(0, 10**6), adjacent=st.booleans(), layer=st.integers(1, 4))
    def a_weaker_agent_challenges_a_stronger_memory(self, kind, op, pick, adjacent, layer):
        folded = self._fold() if self.up else ref.fold(self.seen, POLICY)
        memories = [folded.memories[s] for s in self.slots if s in folded.memories]
        if op == "resolve":
            kind = "conflict"
        for tried in CHALLENGES[CHALLENGES.index(kind):] + CHALLENGES:  # the drawn kind, else the next there is
            found = _challenge(folded, memories, tried, pick)
            weaker = [] if found is None else sorted(
                (a for a in self.clients
                 if POLICY.of(a) > found[1] and not (tried == "conflict" and a in POLICY.admins)), key=POLICY.of)
            if weaker:
                kind = tried
                break
        else:
            return
        if kind == "conflict":
            op = "resolve"
        elif kind == "stronger link":
            op = "unlink"
        elif op == "resolve":
            op = "update"
        target, strength = found
        agent = weaker[0] if adjacent else weaker[pick % len(weaker)]
        m = folded.memories[target] if kind != "conflict" else None
        what = f"{kind} {op} of {target} by {agent} (authority {POLICY.of(agent)} against {strength})"
        if kind == "conflict":
            c = folded.conflicts[target]
            self._attempt(agent, what, lambda cl: cl.resolve_conflict(c.id, keep=1),
                          lambda f: (ref.resolve_refusals(f, POLICY, agent, c.id, 1), set()))
        elif op == "unlink" or op == "link":
            links = sorted(m.links) if op == "unlink" else [
                (x.id, "related") for x in memories if x.id != m.id][:1]
            if not links:
                return
            other, relation = links[pick % len(links)]
            self._attempt(agent, what, lambda cl: getattr(cl, op)(m.id, other, relation),
                          lambda f: (ref.link_refusals(f, POLICY, agent, op, m.id, other, relation), set()))
        else:
            base = m.version
            if op == "update":
                fields = {"importance": 0.1} if pick % 2 else {"protected": False}
                call, predict = (lambda cl: cl.update(m.id, base_version=base, **fields),
                                 lambda f: ref.change_refusals(f, POLICY, agent, op, m.id, base, update_op(fields)))
            elif op == "set_layer":
                call, predict = (lambda cl: cl.set_layer(m.id, layer, base_version=base),
                                 lambda f: ref.change_refusals(f, POLICY, agent, op, m.id, base, layer=layer))
            else:
                call, predict = (lambda cl: getattr(cl, op)(m.id, base_version=base),
                                 lambda f: ref.change_refusals(f, POLICY, agent, op, m.id, base))
            self._attempt(agent, what, call, lambda f: (predict(f), set()))
        reach.reached(reach.OUTCOME, f"a weaker agent tried {op} on a {kind} memory")
        reach.reached(reach.RULE, "a_weaker_agent_challenges_a_stronger_memory")


class _Refusal:
    """A grpc error as `harness._reason` reads a client refusal."""

    def __init__(self, exc: grpc.RpcError):
        self.code = exc.code().name
        self.message = exc.details()

    def __str__(self) -> str:
        return self.message


def _challenge(folded: ref.Folded, memories: list[ref.RefMemory], kind: str, pick: int) -> tuple[str, int] | None:
    """(the memory or conflict to challenge, the authority a challenger must be weaker than), or None."""
    if kind == "conflict":
        open_ = [c for c in folded.conflicts.values() if not c.resolved]
        if not open_:
            return None
        c = open_[pick % len(open_)]
        return c.id, min(ref.eff(r.authority) for r in c.revisions)
    wanted = {
        "stronger": lambda m: ref.eff(m.state["authority"]) < 6,
        "layer 1": lambda m: m.layer == 1,
        "layer 2": lambda m: m.layer == 2,
        "protected": lambda m: m.state["protected"],
        "stronger link": lambda m: any(ref.eff(a) < 6 for a in m.links.values()),
    }[kind]
    found = [m for m in memories if wanted(m)]
    if not found:
        return None
    m = found[pick % len(found)]
    if kind == "stronger":
        return m.id, ref.eff(m.state["authority"])
    if kind == "stronger link":
        return m.id, min(ref.eff(a) for a in m.links.values())
    return m.id, 1


def _at_cosine(folded: ref.Folded, target: ref.RefMemory, cosine: float, seed: int) -> list[float]:
    """A unit vector at exactly `cosine` to the target's and orthogonal to every other memory's vector.

    `seed` must differ from one probe to the next: the direction of an earlier probe lies in the span the
    next one is made orthogonal to, so the same random start would leave nothing of it."""
    u = np.asarray(folded.vector_of(target), dtype=np.float64)
    u /= np.linalg.norm(u)
    others = [np.asarray(v, dtype=np.float64) for v in folded.vectors.values()]
    basis, _ = np.linalg.qr(np.stack([u, *others]).T)
    w = np.random.default_rng(seed).normal(size=u.shape)
    w -= basis @ (basis.T @ w)
    w /= np.linalg.norm(w)
    v = cosine * u + math.sqrt(1 - cosine * cosine) * w
    return v.astype(np.float32).tolist()
