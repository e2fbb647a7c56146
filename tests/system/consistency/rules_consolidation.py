"""Consolidation (issue 16) against the reference model and on a replica.

`the_admin_consolidates` runs the server's consolidation for a time some days after the last entry, then again
for the same time: the second run must write nothing. The fold (`reference_model._fold_system` and the
lifecycle's archive rules) checks every entry it wrote at the next comparison; here each merge is checked at
once: the absorbed memory is archived, its survivor is live and links to it with `supersedes`, and no survivor
is a weaker authority's than what it absorbed, nor is a constitutional, legislative or protected memory ever
absorbed. Then the server's topics (ListTopics) must equal those a brand-new cache computes from the same
entries (`mnemosync.kernel.topics`), since clustering is a pure function of the replicated state.

`the_human_appends_a_batch_then_the_admin_consolidates` sends one Append of `BATCH_ADDS` adds or more
(the server's near-duplicate pre-filter runs once for a whole batch; the other rules send 1 to 4): near
copies of one another and of other agents' memories, from the human so that none is refused and every near one
must be marked (the fold checks each mark against the cosine of the vectors). Consolidation right after then has
near-duplicates to merge and new memories to link, outcomes the test requires. The human then removes one of the
links it made and consolidation runs again: the fold refuses a similarity link put back between them. Last, a
decay sweep 45 days ahead must archive the batch's shorter sentences, added with importance 0 (see
`rules._surely_eligible`).
"""

from __future__ import annotations

import uuid

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import LIVE, POLICY, SENTENCES, ReplicationHarness
from helpers import RawAgent

DAY_MS = 86_400_000
BATCH_ADDS = 16
"""Adds the batch rule sends at least (one Append: the pre-filter decides for all of them at once)."""
BATCH_PREFILTER = "an Append of 16 adds or more ran the batched near-duplicate pre-filter and marked a near add"
MERGED = "consolidation merged near-duplicates"
LINKED = "consolidation linked new memories to their neighbours"
UNLINKED = "consolidation ran again after a human removed one of its links"


class ConsolidationRules(ReplicationHarness):
    """The consolidation step; see the module docstring."""

    @precondition(lambda self: self.up)
    @rule(days=st.sampled_from([0, 0, 2, 40]), links_only=st.booleans())
    def the_admin_consolidates(self, days, links_only):
        from mnemosync.kernel import topics

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
            reach.reached(reach.OUTCOME, MERGED)
        if first.linked:
            reach.reached(reach.OUTCOME, LINKED)
        auditor = RawAgent(self.address, "auditor")
        try:
            served = auditor.call("ListTopics", pb.ListTopicsRequest(limit=topics.MAX_LIMIT))
        finally:
            auditor.close()
        if len(self._entries()) != len(entries):
            return  # a queued write landed meanwhile: no single state to compare with
        got = self._replica_topics(entries)
        want = [(t.id, t.scope, t.size, t.label, t.representative_id) for t in served.topics]
        assert got == want, f"a replica's topics {got} differ from the server's {want}"
        reach.reached(reach.RULE, "the_admin_consolidates")

    @precondition(lambda self: self.up)
    @rule(sentences=st.lists(st.sampled_from(SENTENCES), min_size=1, max_size=3, unique=True),
          extra=st.integers(0, 4))
    def the_human_appends_a_batch_then_the_admin_consolidates(self, sentences, extra):
        folded = self._fold()
        others = sorted(m.state["content"].rsplit(" (note ", 1)[0] for m in folded.memories.values()
                        if m.author != LIVE and m.scope == "user" and not m.state["archived"]
                        and m.id not in folded.redacted)
        related = [" ".join(s.split()[:3]) + ", in short" for s in sentences]  # linked, not merged
        picked = sentences + others[:2] + related
        chosen = [picked[i % len(picked)] for i in range(max(BATCH_ADDS + extra, len(picked)))]
        ops = [pb.Operation(op_id=str(uuid.uuid4()), memory_id=self._new_slot(), add=pb.AddOp(
            scope="user", type="fact", content=text, tags=["batch"], embedding=self.embedder.embed(text),
            importance=0.0 if sentence in related else None))
            for sentence, text in ((sentence, self._text(sentence)) for sentence in chosen)]
        before = len(self._entries())
        response = self._append_raw(LIVE, *ops)
        assert [r.op_id for r in response.results] == [op.op_id for op in ops], "the batch's results are not its ops"
        written = self._entries()[before:]
        note(f"{LIVE} appended a batch of {len(ops)} adds: {sum(e.HasField('conflict') for e in written)} marked near")
        self._fold()  # the fold checks every mark, and that no add it wrote unmarked is near another's memory
        if any(e.HasField("conflict") and e.conflict.kind == "semantic" for e in written):
            reach.reached(reach.OUTCOME, BATCH_PREFILTER)
        self.the_admin_consolidates(days=0, links_only=False)
        folded = self._fold()
        made = sorted((m.id, target) for m in folded.memories.values() if not m.state["archived"]
                      for (target, relation), (_, why) in m.link_attrs.items()
                      if relation == "semantic" and why.endswith("(consolidation, replay)")
                      and not folded.memories[target].state["archived"])
        if made:  # the human removes one of its links: consolidating again must not put it back (the fold checks)
            source, target = made[0]
            self._append_raw(LIVE, pb.Operation(op_id=str(uuid.uuid4()), memory_id=source,
                                                unlink=pb.UnlinkOp(target_id=target, relation="semantic")))
            self.the_admin_consolidates(days=0, links_only=True)
            self._fold()
            reach.reached(reach.OUTCOME, UNLINKED)
        self.the_admin_sweeps_for_a_day_ahead(days=45)  # the related adds of importance 0 must all be archived
        reach.reached(reach.RULE, "the_human_appends_a_batch_then_the_admin_consolidates")
