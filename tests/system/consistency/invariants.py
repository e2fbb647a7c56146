"""The consistency suite's invariants: what must hold after every step, when everyone has synced, and at the end.

* every changelog entry obeys every governance rule and the model's folding
  rules (seq gap-free, append-only except a redaction's blanking, hash chain,
  versions, conflict marks); every entry was written by an operation the
  machine made, and acknowledged writes appear once; offsets only move
  forward and never pass the head
  (`history_is_append_only_chained_governed_and_acknowledged_once`, after
  every step);
* no agent's acknowledged offset passes what its cache durably applied, a
  crashed agent's included (`acknowledgements_never_pass_what_was_applied`);
* once everyone has synced, every cache, the server and the model agree on
  every memory the agent may see (and the cache holds none it may not), its
  open conflicts and every conflict's revisions; each cache's full projection
  equals a fresh fold of the changelog as that agent receives it; queued
  writes arrived exactly once and in order, or were refused for good
  (`_check_convergence`: a step of its own, since syncing everyone changes the
  state, and again at the end);
* at the end the server's own projections equal a fresh fold.
"""

from __future__ import annotations

from hypothesis import note
from hypothesis.stateful import invariant, precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import POLICY, ReplicationHarness, model_of
from helpers import RawAgent

FINAL = {"INVALID_ARGUMENT", "NOT_FOUND", "ALREADY_EXISTS", "FAILED_PRECONDITION", "ABORTED", "PERMISSION_DENIED",
         "OUT_OF_RANGE"}
"""The refusals that park a queued write for good (the server failing is not one: the write stays queued)."""


class ReplicationInvariants(ReplicationHarness):
    """What must hold; see the module docstring."""

    @invariant()
    def history_is_append_only_chained_governed_and_acknowledged_once(self):
        if not self.up:
            return
        entries = self._entries()
        assert len(entries) >= len(self.seen), f"the changelog shrank from {len(self.seen)} to {len(entries)}"
        for old, new in zip(self.seen, entries, strict=False):
            if ref.entry_digest(old) != ref.entry_digest(new):
                assert ref.blanked_by_redaction(old, new, entries), f"entry {old.seq} changed"
        self.seen = entries
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert ref.chain_ok(entries)
        model_of(entries)  # every entry obeys the folding and governance rules
        for agent, client in self.clients.items():
            assert client.cache.offset <= len(entries), f"{agent}'s offset passed the head"
        keys = [(e.agent_id, e.op_id) for e in entries if e.agent_id != ref.SYSTEM]  # sweeps: checked by the fold
        phantoms = [key for key in keys if key not in self.made]
        assert not phantoms, f"entries {phantoms[:3]} were written by no operation the agents made"
        for key in self.acknowledged:
            assert keys.count(key) == 1, f"acknowledged op {key} appears {keys.count(key)} times"
        acked = self._acked_offsets()
        for agent, seq in acked.items():
            assert seq <= len(entries), f"{agent}'s acknowledged offset {seq} passed the head {len(entries)}"
            assert seq >= self.acked.get(agent, 0), f"{agent}'s acknowledged offset moved back"
        self.acked = acked
        reach.reached(reach.INVARIANT, "history_is_append_only_chained_governed_and_acknowledged_once")

    @invariant()
    def acknowledgements_never_pass_what_was_applied(self):
        """Read the server's offsets first: a cache only moves forward, so a later read of it is an upper bound."""
        if not self.up:
            return
        acked = self._acked_offsets()
        for agent, client in self.clients.items():
            applied = max(client.cache.offset, self.ack_floor.get(agent, 0))
            assert acked.get(agent, 0) <= applied, (
                f"{agent} acknowledged seq {acked[agent]} but its cache holds only {client.cache.offset}")
            if acked.get(agent, 0):
                reach.reached(reach.OUTCOME, "an agent's acknowledgement was checked against its cache")
        if self.crashed is not None:
            from mnemosync.agent.cache import Cache

            cache = Cache(self.agents_at_rest[self.crashed])
            try:
                applied = cache.offset
            finally:
                cache.close()
            assert acked.get(self.crashed, 0) <= applied, (
                f"{self.crashed}, killed while applying, acknowledged seq {acked.get(self.crashed)} but had durably "
                f"applied only {applied}")
            if acked.get(self.crashed, 0):
                reach.reached(reach.OUTCOME, "the acknowledgement of an agent killed while applying was checked")
        reach.reached(reach.INVARIANT, "acknowledgements_never_pass_what_was_applied")

    @precondition(lambda self: self.up)
    @rule()
    def everyone_syncs_and_converges(self):
        self._check_convergence()
        reach.reached(reach.RULE, "everyone_syncs_and_converges")

    def _check_convergence(self):
        self._settle()
        for client in self.clients.values():
            client.sync()
        entries = self._entries()
        folded = model_of(entries)
        model = folded.memories
        note(f"reference: {ref.describe(folded)}")
        keys = [(e.agent_id, e.op_id) for e in entries]
        replicas: dict[tuple, dict] = {}
        for agent, client in self.clients.items():
            self._queued_arrived_once_in_order(agent, client, keys)
            assert client.cache.offset == len(entries)
            granted = {mid for mid, m in model.items() if POLICY.granted(agent, m.scope)}
            rows = {mid: client.cache.get(mid) for mid in model}
            outside = sorted(mid for mid in model if mid not in granted and rows[mid] is not None)
            assert not outside, f"{agent}'s cache holds memories of scopes it is not granted: {outside}"
            assert {mid: ref.visible(rows[mid]) for mid in granted} == {
                mid: ref.visible_to(model[mid], granted) for mid in granted}, f"{agent}'s cache differs from the model"
            assert {mid: tuple(rows[mid].open_conflicts) for mid in granted} == {
                mid: folded.open_conflicts(mid) for mid in granted}, f"{agent}'s open conflicts differ from the model"
            seen_conflicts = {cid for cid, c in folded.conflicts.items() if c.memory_id in granted}
            assert {cid: _cached_conflict_view(client.cache.conflict(cid)) for cid in folded.conflicts} == {
                cid: ref.conflict_view(c) if cid in seen_conflicts else None for cid, c in folded.conflicts.items()}, (
                f"{agent}'s conflicts differ from the model")
            grant = POLICY.scopes.get(agent, ("*",))
            if grant not in replicas:
                replicas[grant] = self._replica(self._entries(agent))
            assert client.cache.snapshot() == replicas[grant], f"{agent}'s cache differs from a fresh fold"
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

    def _queued_arrived_once_in_order(self, agent: str, client, keys: list[tuple[str, str]]) -> None:
        """Every write `agent` queued arrived exactly once and in the order queued, or was refused for good."""
        parked = {op_id: error for op_id, _, _, error in client.outbox.failed()}
        position = {op_id: keys.index((agent, op_id)) for op_id in self.queued.get(agent, [])
                    if (agent, op_id) in keys}
        for op_id in self.queued.get(agent, []):
            count = keys.count((agent, op_id))
            assert count == 1 or (count == 0 and op_id in parked), (
                f"queued op {op_id} of {agent} arrived {count} times")
            assert not (count and op_id in parked), f"queued op {op_id} of {agent} was written and also parked"
            if op_id in parked:
                code = parked[op_id].split(":", 1)[0]
                assert code in FINAL, f"queued op {op_id} of {agent} was parked for a passing failure: {code}"
        order = [op_id for op_id in self.queued.get(agent, []) if op_id in position]
        assert [position[o] for o in order] == sorted(position[o] for o in order), "outbox order broken"

    def teardown(self):
        try:
            if not self.up:
                self._bring_up()
            self._check_convergence()
            replica = self._replica(self._entries())
            self.server.stop()
            self.up = False
            assert self._store_snapshot() == replica, "the server's projections differ from a fresh fold"
            reach.reached(reach.INVARIANT, "at the end every replica and the server converged")
        finally:
            super().teardown()


class _Row:
    """Adapts a wire Memory to the attribute names `reference_model.visible` reads."""

    def __init__(self, m: pb.Memory):
        self.__dict__.update(
            content=m.content, type=m.type, layer=m.layer, tags=list(m.tags), importance=m.importance,
            confidence=m.confidence, protected=m.protected, archived=m.archived, trust=m.trust, quote=m.quote,
            authority=m.authority, author_agent=m.author_agent, updated_by=m.updated_by, version=m.version,
            links=list(m.links), open_conflicts=list(m.open_conflicts))


def _cached_conflict_view(c) -> tuple | None:
    """`reference_model.conflict_view` of a conflict in an agent cache
    (`mnemosync.kernel.conflict_projection.Conflict`)."""
    if c is None:
        return None
    revisions = tuple((r.memory_id, r.agent_id, ref.eff(r.authority), r.seq, r.state["content"],
                       bool(r.state["archived"])) for r in c.revisions)
    return (c.id, c.kind, c.memory_id, c.other_memory_id, c.visible_revision, c.resolved, c.resolved_by, revisions)
