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
* Governed memories: the human moves a memory to layer 1 or 2, protects it,
  links it or overrides its writer, and the next weaker agent tries what
  that guards: update, forget, moving it down, unlink, resolve. That agent
  also moves a memory it may write to layer 2 or protects it itself, and
  tries the same: only the layer or the protection refuses it then.
* Stale writes across a stronger change: a stronger agent rewrites or
  protects a memory, then another updates or forgets it from the version
  before; the model predicts whether it passes.
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
from harness import AGENT_NAMES, LIVE, POLICY, SCOPES, SENTENCES, ReplicationHarness, _reason, token
from rules import update_op

NEAR = {"below": -1e-4, "at": 0.0, "above": 1e-4}
GOVERNED = ["layer 1", "layer 2", "protected", "link", "conflict", "inference", "writer's layer 2",
            "writer's protected"]
"""What the human does to a memory before the next weaker agent challenges it (an inference: before the human
tries causal links to and from it). In the writer's kinds the challenger itself moves the memory to layer 2 or
protects it, so it remains the writer and nothing but the layer or the protection stands in its way."""
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
        targets = [candidates[0]]
        if whose == "another's":  # an owner no stronger (flagged) and a stronger one (blocked), where there are
            stronger = [ref.eff(m.state["authority"]) < POLICY.of(agent) for m in candidates]
            targets = [candidates[stronger.index(s)] for s in (False, True) if s in stronger]
        for target in targets:
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
        unique = token(self.counter)  # four words of its own: no probe is a near copy of another by its words
        text = f"Boundary probe {where} the threshold (notes {unique}, {unique}a, {unique}b, {unique}c)"
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
        from mnemosync.kernel.limits import Limits

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
                (x.id, "semantic") for x in memories if x.id != m.id][:1]
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

    @precondition(lambda self: self.up and self._predictable() and self.slots)
    @rule(pick=st.integers(0, 10**6), protect=st.booleans(), op=st.sampled_from(["update", "forget", "set_layer"]),
          sentence=st.sampled_from(SENTENCES))
    def a_stale_write_after_a_stronger_agent_changed_the_memory(self, pick, protect, op, sentence):
        """A stronger agent than a memory's writer rewrites or protects it; then an agent between the two (one the
        version before allowed, when there is one) updates it, moves it or forgets it from that version; after a
        rewrite it first updates it from that version repeating the stronger one's content. A stale write is
        judged by the writer of the version it saw, a repeat of the current state and protection by what holds
        now, a stale move is refused; the model predicts each."""
        folded = self._fold()
        ordered = self.slots[pick % len(self.slots):] + self.slots
        for memory_id in ordered:
            m = folded.memories.get(memory_id)
            if m is None or m.state["archived"]:
                continue
            writer = ref.eff(m.state["authority"])
            stronger = sorted((a for a in self.clients if POLICY.of(a) < writer and POLICY.granted(a, m.scope)),
                              key=POLICY.of)
            if stronger:
                break
        else:
            return
        strong, base = stronger[0], m.version
        fields = {"protected": True} if protect else {"content": self._text(sentence)}
        done = self._attempt(strong, f"update {m.id} from v{base} by the stronger {strong}: {sorted(fields)}",
                             lambda c: c.update(m.id, base_version=base, **fields),
                             lambda f: (ref.change_refusals(f, POLICY, strong, "update", m.id, base,
                                                            update_op(fields)), set()))
        if done is None or done.pending:
            return
        others = sorted((a for a in self.clients if a != strong and POLICY.granted(a, m.scope)),
                        key=lambda a: (POLICY.of(a) > writer, POLICY.of(a)))
        if not others:
            return
        agent = others[0]
        attempts = [(op, self._text(sentence))]
        if not protect:  # first a stale update that repeats what the stronger one wrote
            attempts.insert(0, ("update", fields["content"]))
        for op, text in attempts:
            repeat = text == fields.get("content")
            change = update_op({"content": text}) if op == "update" else None
            self._attempt(agent, f"{op} {m.id} from v{base} (stale: {strong} changed it since)",
                          lambda c, op=op, text=text: (
                              c.update(m.id, base_version=base, content=text) if op == "update"
                              else c.set_layer(m.id, 3, base_version=base) if op == "set_layer"
                              else c.forget(m.id, base_version=base, reason="stale")),
                          lambda f, op=op, change=change: (ref.change_refusals(
                              f, POLICY, agent, op, m.id, base, change, layer=3 if op == "set_layer" else 0), set()))
            reach.reached(reach.OUTCOME, f"a stale {op} after a stronger agent "
                                         f"{'protected' if protect else 'rewrote'} the memory"
                                         f"{' (repeating it)' if repeat else ''}")
        reach.reached(reach.RULE, "a_stale_write_after_a_stronger_agent_changed_the_memory")

    @precondition(lambda self: self.up and self._predictable() and self.slots and LIVE in self.clients)
    @rule(pick=st.integers(0, 10**6))
    def the_human_governs_memories_and_the_next_weaker_agent_tries_everything(self, pick):
        """For each of GOVERNED, on memories in turn: the human moves one to layer 1 or 2, protects it, links
        it, or overrides its writer (a write conflict whose strongest revision is the human's); then the agent
        of the next authority (2) tries every operation that guards (update, forget, moving it down, unlink,
        resolve), each predicted by the model. Only the human may do them, so an off-by-one or the wrong party
        in any of these checks shows. For the writer's kinds that agent governs the memory itself, so the
        authority check cannot refuse it in the layer's or the protection's place."""
        tried = [self._govern(self._slot(pick + i), governed) for i, governed in enumerate(GOVERNED)]
        if any(tried):
            reach.reached(reach.RULE, "the_human_governs_memories_and_the_next_weaker_agent_tries_everything")

    def _govern(self, memory_id: str, governed: str) -> bool:
        """One governed memory challenged (see the rule above); False when it could not be set up."""
        m = self._fold().memories.get(memory_id)
        if m is None or m.state["archived"] or not self._predictable():
            return False
        challenger = next((a for a in sorted(self.clients, key=POLICY.of) if a != LIVE and POLICY.granted(a, m.scope)),
                          None)
        other = next((s for s in self.slots if s != memory_id and s in self._fold().memories), None)
        writer = m.updated_by if m.updated_by in self.clients and m.updated_by != LIVE else None
        if challenger is None or (governed in ("link", "inference") and other is None) or (
                governed == "conflict" and not writer):
            return False
        actor = LIVE
        if governed.startswith("writer's "):  # the challenger governs it, and stays its writer
            actor = challenger
            if ref.eff(m.state["authority"]) < POLICY.of(challenger) or m.layer == 1:
                return False
        base = m.version
        if governed.endswith("protected"):
            setup = (lambda c: c.update(memory_id, base_version=base, protected=True),
                     lambda f: ref.change_refusals(f, POLICY, actor, "update", memory_id, base,
                                                   update_op({"protected": True})))
        elif governed == "inference":
            setup = (lambda c: c.update(memory_id, base_version=base, trust="inference"),
                     lambda f: ref.change_refusals(f, POLICY, LIVE, "update", memory_id, base,
                                                   update_op({"trust": "inference"})))
        elif governed == "link":
            setup = (lambda c: c.link(memory_id, other, "semantic"),
                     lambda f: ref.link_refusals(f, POLICY, LIVE, "link", memory_id, other, "semantic"))
        elif governed == "conflict":
            setup = (lambda c: c.update(memory_id, base_version=base, importance=0.75),
                     lambda f: ref.change_refusals(f, POLICY, LIVE, "update", memory_id, base,
                                                   update_op({"importance": 0.75})))
        else:
            layer = int(governed[-1])
            setup = (lambda c: c.set_layer(memory_id, layer, base_version=base),
                     lambda f: ref.change_refusals(f, POLICY, actor, "set_layer", memory_id, base, layer=layer))
        done = self._attempt(actor, f"{governed}: {memory_id} from v{base} by {actor}", setup[0],
                             lambda f: (setup[1](f), set()))
        if done is None or done.pending:
            return False
        if governed == "conflict":  # the writer writes from the version the human overrode: a write conflict
            done = self._attempt(writer, f"update {memory_id} from v{base} by its writer {writer} (stale)",
                                 lambda c: c.update(memory_id, base_version=base, importance=0.5),
                                 lambda f: (ref.change_refusals(f, POLICY, writer, "update", memory_id, base,
                                                                update_op({"importance": 0.5})), set()))
            if done is None or done.pending or not done.conflict_id:
                return False
            conflict_id = done.conflict_id
            self._attempt(challenger, f"resolve conflict {conflict_id} by {challenger}",
                          lambda c: c.resolve_conflict(conflict_id, keep=2),
                          lambda f: (ref.resolve_refusals(f, POLICY, challenger, conflict_id, 2), set()))
            tried = ["resolve"]
        elif governed == "inference":  # the human itself: no authority stands in the way of the trust rule
            for source, target in ((other, memory_id), (memory_id, other)):
                self._attempt(LIVE, f"causal link {source} -> {target} (an inference)",
                              lambda c, source=source, target=target: c.link(source, target, "causal"),
                              lambda f, source=source, target=target: (ref.link_refusals(
                                  f, POLICY, LIVE, "link", source, target, "causal"), set()))
            tried = ["a causal link to", "a causal link from"]
        elif governed == "link":
            self._attempt(challenger, f"unlink {memory_id} -> {other} by {challenger}",
                          lambda c: c.unlink(memory_id, other, "semantic"),
                          lambda f: (ref.link_refusals(f, POLICY, challenger, "unlink", memory_id, other, "semantic"),
                                     set()))
            tried = ["unlink"]
        else:
            tried = []
            for op, layer in (("update", 0), ("set_layer", 3), ("set_layer", 4), ("forget", 0)):
                now = self._fold().memories[memory_id].version
                self._attempt(
                    challenger, f"{op} {layer or ''} of {memory_id} ({governed}) by {challenger}",
                    lambda c, op=op, layer=layer, now=now: (
                        c.update(memory_id, base_version=now, importance=0.25) if op == "update"
                        else c.set_layer(memory_id, layer, base_version=now) if op == "set_layer"
                        else c.forget(memory_id, base_version=now)),
                    lambda f, op=op, layer=layer, now=now: (ref.change_refusals(
                        f, POLICY, challenger, op, memory_id, now,
                        update_op({"importance": 0.25}) if op == "update" else None, layer=layer), set()))
                tried.append(f"{op} to {layer}" if layer else op)
        for op in tried:
            reach.reached(reach.OUTCOME, f"{op} on a {governed} memory was tried")
        return True

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
