"""Typed links and graph walks, on the server and offline on an agent's cache, checked against the reference model.

One step, `link_and_walk` (one rule, so the machine's other rules keep their share of the steps): an agent
links two of the machine's memories with an edge type (now and then a relation name that is not one, or a
weight out of range, which the model says is refused), a weight and a reason; the model predicts the
refusals (scopes, layer 1, an inference at either end of a causal link, a weaker agent changing or removing
a stronger one's link). Then an agent walks from the link's source on the server and on its cache
(`local=True`), and both walks are compared with `reference_model.walk` over the state each one holds: the
same memories, depths and reaching links, nothing from a scope the agent may not read, no archived memory
unless asked for.

It runs in `test_consistency.GraphMachine`, a machine of its own: every rule added to the main machine moves
its derandomized runs, and with them the reach it must show.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

import reach
import reference_model as ref
from harness import AGENT_NAMES, POLICY, ReplicationHarness, model_of

RELATIONS = st.sampled_from([*ref.EDGE_TYPES, "semantic", "causal", "follows"])
WEIGHTS = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 1.5])
WALK_TYPES = st.lists(st.sampled_from(ref.EDGE_TYPES), max_size=2, unique=True)


class GraphRules(ReplicationHarness):
    """The typed link and graph walk steps; see the module docstring."""

    @precondition(lambda self: len(self.slots) >= 2)
    @rule(agent=AGENT_NAMES, first=st.integers(0, 10**6), second=st.integers(0, 10**6), relation=RELATIONS,
          weight=WEIGHTS, reason=st.sampled_from(["", "", "same incident", "the fix for it"]), walker=AGENT_NAMES,
          types=WALK_TYPES, direction=st.sampled_from(["out", "in", "both"]), depth=st.integers(1, 3),
          include_archived=st.booleans())
    def link_and_walk(self, agent, first, second, relation, weight, reason, walker, types, direction, depth,
                      include_archived):
        agent, source, target = self._agent(agent), self._slot(first), self._slot(second)
        if source != target:
            done = self._attempt(agent, f"link {source} -{relation} {weight} {reason!r}-> {target}",
                                 lambda c: c.link(source, target, relation, weight=weight or None, reason=reason),
                                 lambda f: (ref.link_refusals(f, POLICY, agent, "link", source, target, relation,
                                                              weight, reason), set()))
            if done is not None:
                reach.reached(reach.OUTCOME, "a typed link was written")
        self._walk(self._agent(walker), source, types, direction, depth, include_archived)

    def _walk(self, agent, start, types, direction, depth, include_archived):
        """A walk on the server (when it is up) and on the agent's cache, each against the model."""
        from mnemosync.kernel.errors import MnemosyncError

        client = self.clients[agent]
        args = {"edge_types": types, "direction": direction, "depth": depth, "include_archived": include_archived}
        readable = lambda scope: POLICY.granted(agent, scope)  # noqa: E731
        if self.up:
            self._wait_online(client)
            folded = self._fold()
            if start in folded.memories and readable(folded.memories[start].scope):
                want = ref.walk(folded, start, readable=readable, types=types, direction=direction, depth=depth,
                                include_archived=include_archived)
                got = [(s.memory.id, s.depth, s.via_id, s.relation, s.direction)
                       for s in client.traverse(start, **args).steps]
                note(f"{agent} walked {start} on the server ({args}): {got}")
                assert got == want, f"{agent}'s walk from {start} on the server ({args}) gave {got}, the model {want}"
                reach.reached(reach.OUTCOME, f"a walk on the server {'reached' if got else 'found no'} linked memories")
            elif start in folded.memories:
                try:
                    client.traverse(start, **args)
                except MnemosyncError as exc:
                    assert exc.code == "PERMISSION_DENIED", f"a walk from a hidden memory was refused with {exc}"
                    reach.reached(reach.OUTCOME, "a walk from a memory the agent may not read was refused")
                else:
                    raise AssertionError(f"{agent} walked from {start}, in a scope it may not read")
        offset = client.cache.offset
        entries = self._entries() if self.up else self.seen
        cached = model_of(entries[:offset], redacted=model_of(entries).redacted)
        memory = cached.memories.get(start)
        if memory is None or not readable(memory.scope):
            return
        want = ref.walk(cached, start, readable=readable, types=types, direction=direction, depth=depth,
                        include_archived=include_archived)
        got = [(s.memory.id, s.depth, s.via_id, s.relation, s.direction)
               for s in client.traverse(start, local=True, **args).steps]
        if client.cache.offset != offset:
            return  # a live update landed during the walk: no single state to compare with
        assert got == want, f"{agent}'s walk from {start} on its cache ({args}) gave {got}, the model {want}"
        reach.reached(reach.OUTCOME, "a walk on an agent's cache agreed with the model")
        reach.reached(reach.RULE, "link_and_walk")
