"""Consolidation (issue 16) against the reference model and on a replica.

`the_admin_consolidates` runs the server's consolidation for a time some days after the last entry, then again
for the same time: the second run must write nothing. The fold (`reference_model._fold_system` and the
lifecycle's archive rules) checks every entry it wrote at the next comparison; here each merge is checked at
once: the absorbed memory is archived, its survivor is live and links to it with `supersedes`, and no survivor
is a weaker authority's than what it absorbed, nor is a constitutional, legislative or protected memory ever
absorbed. Then the server's topics (ListTopics) must equal those a brand-new cache computes from the same
entries (`mnemosync.kernel.topics`), since clustering is a pure function of the replicated state.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import POLICY, ReplicationHarness
from helpers import RawAgent

DAY_MS = 86_400_000


class ConsolidationRules(ReplicationHarness):
    """The consolidation step; see the module docstring."""

    @precondition(lambda self: self.up)
    @rule(days=st.sampled_from([0, 0, 2, 40]), links_only=st.booleans())
    def the_admin_consolidates(self, days, links_only):
        from mnemosync.agent.cache import Cache
        from mnemosync.kernel import topics
        from mnemosync.kernel.codec import entry_from_proto

        admin = RawAgent(self.address, min(POLICY.admins))
        try:
            entries = self._entries()
            now_ms = entries[-1].server_time_ms + days * DAY_MS if entries else 0
            first = admin.call("Consolidate", pb.ConsolidateRequest(now_ms=now_ms, links_only=links_only))
            again = admin.call("Consolidate", pb.ConsolidateRequest(now_ms=first.as_of_ms, links_only=links_only))
        finally:
            admin.close()
        note(f"consolidate +{days} days: {first.linked} linked, {first.merged} merged, {first.pruned} pruned, "
             f"{first.promoted} promoted")
        assert again.entries_written == 0, f"a second consolidation for the same time wrote {again.entries_written}"
        entries = self._entries()
        folded = self._fold(entries)
        for d in first.decisions:
            if d.op != "archive":
                continue
            survivor = d.reason.split(":")[0].removeprefix("merged into ")
            gone, kept = folded.memories[d.memory_id], folded.memories[survivor]
            assert gone.state["archived"] and not kept.state["archived"], f"merge of {gone.id} into {survivor}"
            assert (gone.id, "supersedes") in kept.links, f"{survivor} does not supersede {gone.id}"
            assert ref.eff(kept.state["authority"]) <= ref.eff(gone.state["authority"]), (
                f"{survivor} (authority {kept.state['authority']}) absorbed {gone.id} "
                f"(authority {gone.state['authority']})")
            assert gone.layer >= 3 and not gone.state["protected"], f"{gone.id} of layer {gone.layer} was absorbed"
            reach.reached(reach.OUTCOME, "consolidation merged near-duplicates")
        if first.linked:
            reach.reached(reach.OUTCOME, "consolidation linked new memories to their neighbours")
        auditor = RawAgent(self.address, "auditor")
        try:
            served = auditor.call("ListTopics", pb.ListTopicsRequest(limit=topics.MAX_LIMIT))
        finally:
            auditor.close()
        if len(self._entries()) != len(entries):
            return  # a queued write landed meanwhile: no single state to compare with
        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        try:
            cache.apply([entry_from_proto(e) for e in entries])
            local = cache.read(topics.compute, limit=topics.MAX_LIMIT)
        finally:
            cache.close()
        got = [(t.id, t.scope, t.size, t.label, t.representative_id) for t in local.topics]
        want = [(t.id, t.scope, t.size, t.label, t.representative_id) for t in served.topics]
        assert got == want, f"a replica's topics {got} differ from the server's {want}"
        reach.reached(reach.RULE, "the_admin_consolidates")
