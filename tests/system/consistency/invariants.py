"""The consistency suite's invariants: what must hold after every step, when everyone has synced, and at the end.

* every changelog entry obeys every governance rule and the model's folding
  rules (seq gap-free, append-only, hash chain, versions, conflict marks);
  acknowledged writes appear once; offsets only move forward and never pass
  the head (`history_is_append_only_chained_governed_and_acknowledged_once`,
  after every step);
* once everyone has synced, every cache, the server and the model agree on
  every memory, its open conflicts and every conflict's revisions, each
  cache's full projection equals a fresh fold of the changelog, and queued
  writes arrived exactly once and in order (`_check_convergence`: a step of
  its own, since syncing everyone changes the state, and again at the end);
* at the end the server's own projections equal a fresh fold.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis.stateful import invariant, precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reference_model as ref
from harness import ReplicationHarness, model_of
from helpers import RawAgent


class ReplicationInvariants(ReplicationHarness):
    """What must hold; see the module docstring."""

    @invariant()
    def history_is_append_only_chained_governed_and_acknowledged_once(self):
        if not self.up:
            return
        entries = self._entries()
        digests = [ref.entry_digest(e) for e in entries]
        assert digests[: len(self.seen_digests)] == self.seen_digests, "an earlier entry changed"
        self.seen_digests = digests
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert ref.chain_ok(entries)
        model_of(entries)  # every entry obeys the folding and governance rules
        for agent, client in self.clients.items():
            assert client.cache.offset <= len(entries), f"{agent}'s offset passed the head"
        keys = [(e.agent_id, e.op_id) for e in entries]
        for key in self.acknowledged:
            assert keys.count(key) == 1, f"acknowledged op {key} appears {keys.count(key)} times"
        acked = self._acked_offsets()
        for agent, seq in acked.items():
            assert seq <= len(entries), f"{agent}'s acknowledged offset {seq} passed the head {len(entries)}"
            assert seq >= self.acked.get(agent, 0), f"{agent}'s acknowledged offset moved back"
        self.acked = acked

    @precondition(lambda self: self.up)
    @rule()
    def everyone_syncs_and_converges(self):
        self._check_convergence()

    def _check_convergence(self):
        for client in self.clients.values():
            self._wait_online(client)
            client.flush()
        for client in self.clients.values():
            client.sync()
        entries = self._entries()
        folded = model_of(entries)
        model = folded.memories
        note(f"reference: {ref.describe(folded)}")
        keys = [(e.agent_id, e.op_id) for e in entries]
        replica = self._replica(entries)
        for agent, client in self.clients.items():
            refused = {op_id for op_id, *_ in client.outbox.failed()}
            position = {op_id: keys.index((agent, op_id)) for op_id in self.queued.get(agent, [])
                        if (agent, op_id) in keys}
            for op_id in self.queued.get(agent, []):
                count = keys.count((agent, op_id))
                assert count == 1 or (count == 0 and op_id in refused), (
                    f"queued op {op_id} of {agent} arrived {count} times")
            order = [op_id for op_id in self.queued.get(agent, []) if op_id in position]
            assert [position[o] for o in order] == sorted(position[o] for o in order), "outbox order broken"
            assert client.cache.offset == len(entries)
            rows = {mid: client.cache.get(mid) for mid in model}
            assert {mid: ref.visible(r) for mid, r in rows.items()} == {mid: m.visible() for mid, m in model.items()}, (
                f"{agent}'s cache differs from the model")
            assert {mid: tuple(r.open_conflicts) for mid, r in rows.items()} == {
                mid: folded.open_conflicts(mid) for mid in model}, f"{agent}'s open conflicts differ from the model"
            assert {cid: _cached_conflict_view(client.cache.conflict(cid)) for cid in folded.conflicts} == {
                cid: ref.conflict_view(c) for cid, c in folded.conflicts.items()}, (
                f"{agent}'s conflicts differ from the model")
            assert client.cache.snapshot() == replica, f"{agent}'s cache differs from a fresh fold of the changelog"
        reader = RawAgent(self.address, "auditor")
        try:
            served = {mid: reader.get(mid) for mid in model}
            served_conflicts = {cid: reader.call("GetConflict", pb.GetConflictRequest(id=cid)).conflict
                                for cid in folded.conflicts}
        finally:
            reader.close()
        assert {mid: ref.visible(_Row(m)) for mid, m in served.items()} == {
            mid: m.visible() for mid, m in model.items()}, "the server differs from the model"
        assert {mid: tuple(m.open_conflicts) for mid, m in served.items()} == {
            mid: folded.open_conflicts(mid) for mid in model}, "the server's open conflicts differ from the model"
        assert {cid: ref.served_conflict_view(c) for cid, c in served_conflicts.items()} == {
            cid: ref.conflict_view(c) for cid, c in folded.conflicts.items()}, "the server's conflicts differ"

    def teardown(self):
        try:
            if not self.up:
                self._bring_up()
            self._check_convergence()
            replica = self._replica(self._entries())
            self.server.stop()
            self.up = False
            assert self._store_snapshot() == replica, "the server's projections differ from a fresh fold"
        finally:
            super().teardown()


class _Row:
    """Adapts a wire Memory to the attribute names `reference_model.visible` reads."""

    def __init__(self, m: pb.Memory):
        self.__dict__.update(
            content=m.content, type=m.type, layer=m.layer, tags=list(m.tags), importance=m.importance,
            confidence=m.confidence, protected=m.protected, archived=m.archived, trust=m.trust, quote=m.quote,
            authority=m.authority, author_agent=m.author_agent, updated_by=m.updated_by, version=m.version,
            links=[(x.target_id, x.relation) for x in m.links], open_conflicts=list(m.open_conflicts))


def _cached_conflict_view(c) -> tuple | None:
    """`reference_model.conflict_view` of a conflict in an agent cache (`server.core.conflicts.Conflict`)."""
    if c is None:
        return None
    revisions = tuple((r.memory_id, r.agent_id, ref.eff(r.authority), r.seq, r.state["content"],
                       bool(r.state["archived"])) for r in c.revisions)
    return (c.id, c.kind, c.memory_id, c.other_memory_id, c.visible_revision, c.resolved, c.resolved_by, revisions)
