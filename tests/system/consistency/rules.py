"""The consistency suite's rules: what agents and operators do to the system, and what each step checks.

Writes from current and stale versions (each checked against the reference
model's prediction), concurrent updates from one version, conflict
resolution, syncs and live updates, redelivery, a crash inside an apply, a
lost cache, uses and decay sweeps (issue 15), and the server stopped,
rebuilt, killed and started again.
"""

from __future__ import annotations

import signal
import subprocess
import sys

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reference_model as ref
from harness import AGENT_NAMES, CRASH_SCRIPT, LIVE, POLICY, SENTENCES, ReplicationHarness
from helpers import RawAgent, wait_until


class ReplicationRules(ReplicationHarness):
    """The steps; see the module docstring."""

    # -- writes ----------------------------------------------------------------

    @initialize(count=st.integers(min_value=2, max_value=4),
                seeds=st.lists(st.tuples(AGENT_NAMES, st.sampled_from(SENTENCES)), min_size=1, max_size=4))
    def start_agents_with_a_few_memories(self, count, seeds):
        for i in range(count):
            self.clients[f"agent-{i}"] = self._open(f"agent-{i}")
        for agent, sentence in seeds:
            self.add(agent, sentence, 0, False)

    @rule(agent=AGENT_NAMES, sentence=st.sampled_from(SENTENCES), layer=st.sampled_from([0, 0, 0, 1, 2, 4]),
          protected=st.booleans())
    def add(self, agent, sentence, layer, protected):
        agent, text, memory_id = self._agent(agent), self._text(sentence), self._new_slot()

        def predict(folded):
            folded.vectors.setdefault(text, tuple(self.embedder.embed(text)))
            return ref.add_refusals(folded, POLICY, agent, text, layer)

        self._attempt(agent, f"add {memory_id} layer {layer}{' protected' if protected else ''}",
                      lambda c: c.add(text, tags=[sentence.split()[1].lower()], layer=layer or None,
                                      protected=protected, memory_id=memory_id), predict)

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), sentence=st.sampled_from(SENTENCES),
          stale=st.sampled_from([0, 0, 1, 2]), protect=st.sampled_from([None, None, True, False]))
    def update(self, agent, pick, sentence, stale, protect):
        agent, memory_id, text = self._agent(agent), self._slot(pick), self._text(sentence)
        base = self._base(agent, memory_id, stale)
        change = pb.UpdateOp(content=text, protected=protect) if protect is not None else pb.UpdateOp(content=text)
        self._attempt(agent, f"update {memory_id} from v{base}",
                      lambda c: c.update(memory_id, content=text, protected=protect, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, "update", memory_id, base, change), set()))

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), sentences=st.lists(
        st.sampled_from(SENTENCES), min_size=2, max_size=3), stale=st.sampled_from([1, 2]))
    def an_agent_resends_stale_writes(self, agent, pick, sentences, stale):
        """Stale writes sent again and again from one old version: each replaces the agent's hidden revision
        (the model predicts `replaces_revision`), so the conflict does not grow with them."""
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, stale)
        for sentence in sentences:
            text = self._text(sentence)
            self._attempt(agent, f"update {memory_id} from v{base} (resent stale)",
                          lambda c, text=text: c.update(memory_id, content=text, base_version=base),
                          lambda f, text=text: (ref.change_refusals(f, POLICY, agent, "update", memory_id, base,
                                                                    pb.UpdateOp(content=text)), set()))

    @precondition(lambda self: self.up and self.slots)
    @rule(first=AGENT_NAMES, second=AGENT_NAMES, pick=st.integers(0, 10**6), sentences=st.lists(
        st.sampled_from(SENTENCES), min_size=3, max_size=3))
    def two_agents_update_from_the_same_version(self, first, second, pick, sentences):
        """Concurrent writes from one base make exactly one conflict; a write on top of it none.

        The weaker agent writes first, so that when authorities differ the visible revision by
        authority is not the one that arrived first (what an arrival-order rule would show).
        """
        first, second = sorted((self._agent(first), self._agent(second)), key=POLICY.of, reverse=True)
        memory_id = self._slot(pick)
        quiet = self._predictable()  # else a queued write may land first and make the first write stale too
        current = self._fold().memories.get(memory_id)
        if current is None:
            return
        base = current.version
        results = []
        for agent, sentence in ((first, sentences[0]), (second, sentences[1])):
            text = self._text(sentence)
            results.append(self._attempt(
                agent, f"update {memory_id} from v{base} (concurrently)",
                lambda c, text=text: c.update(memory_id, content=text, base_version=base),
                lambda f, text=text, agent=agent: (ref.change_refusals(
                    f, POLICY, agent, "update", memory_id, base, pb.UpdateOp(content=text)), set())))
        if quiet and all(r is not None and not r.pending for r in results):
            assert not results[0].conflict_id, "the first of two writes from one version opened a conflict"
            assert results[1].conflict_id, "the second of two writes from one version opened no conflict"
            text, top = self._text(sentences[2]), results[1].version
            on_top = self._attempt(
                first, f"update {memory_id} from v{top}, on top of conflict {results[1].conflict_id}",
                lambda c: c.update(memory_id, content=text, base_version=top),
                lambda f: (ref.change_refusals(f, POLICY, first, "update", memory_id, top,
                                               pb.UpdateOp(content=text)), set()))
            if on_top is not None and not on_top.pending:
                assert not on_top.conflict_id, "a write from the current version opened or joined a conflict"

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 1, 2]))
    def forget(self, agent, pick, stale):
        self._archive("forget", agent, pick, stale)

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 0, 1]))
    def restore(self, agent, pick, stale):
        self._archive("restore", agent, pick, stale)

    def _archive(self, op: str, agent, pick, stale) -> None:
        """forget or restore, from the current version or one `stale` versions back."""
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, stale)
        self._attempt(agent, f"{op} {memory_id} from v{base}",
                      lambda c: getattr(c, op)(memory_id, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, op, memory_id, base), set()))

    # -- the lifecycle (issue 15) ------------------------------------------------------

    @precondition(lambda self: self.up and self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), recall=st.booleans(), times=st.integers(1, 3))
    def an_agent_uses_a_memory(self, agent, pick, recall, times):
        agent, memory_id = self._agent(agent), self._slot(pick)
        user = RawAgent(self.address, agent)
        try:
            request = pb.RecordUseRequest(memory_ids=[memory_id] * times,
                                          kind=pb.USE_KIND_RECALL if recall else pb.USE_KIND_USED)
            counted = user.call("RecordUse", request).counted
        finally:
            user.close()
        assert counted in (0, times), f"{times} uses of {memory_id} counted as {counted}"

    @precondition(lambda self: self.up)
    @rule(days=st.sampled_from([0, 20, 45, 400]))
    def the_admin_sweeps_for_a_day_ahead(self, days):
        """A decay sweep for `days` from now, then the same sweep again: the second writes nothing. The fold
        checks every entry it wrote (the model's lifecycle rules) at the next comparison."""
        admin = RawAgent(self.address, "agent-3")
        try:
            now_ms = self._entries()[-1].server_time_ms + days * 86_400_000 if self._entries() else 0
            first = admin.call("DecaySweep", pb.DecaySweepRequest(now_ms=now_ms))
            again = admin.call("DecaySweep", pb.DecaySweepRequest(now_ms=first.as_of_ms))
        finally:
            admin.close()
        note(f"sweep +{days} days: {first.decayed} decay, {first.archived} archive entries")
        assert again.entries_written == 0, f"a second sweep for the same time wrote {again.entries_written} entries"
        folded = self._fold()
        for d in first.decisions:
            if d.op == "archive":
                assert folded.memories[d.memory_id].state["archived"], f"{d.memory_id} was not archived"

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), layer=st.integers(1, 4))
    def set_layer(self, agent, pick, layer):
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, 0)
        self._attempt(agent, f"set_layer {memory_id} to {layer} from v{base}",
                      lambda c: c.set_layer(memory_id, layer, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, "set_layer", memory_id, base, layer=layer),
                                 set()))

    @precondition(lambda self: len(self.slots) >= 2)
    @rule(agent=AGENT_NAMES, first=st.integers(0, 10**6), second=st.integers(0, 10**6), unlink=st.booleans())
    def link(self, agent, first, second, unlink):
        agent, source, target = self._agent(agent), self._slot(first), self._slot(second)
        if source == target:
            return
        op = "unlink" if unlink else "link"
        self._attempt(agent, f"{op} {source} -> {target}",
                      lambda c: getattr(c, op)(source, target, "related"),
                      lambda f: (ref.link_refusals(f, POLICY, agent, op, source, target, "related"), set()))

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), keep=st.integers(0, 10**6))
    def resolve_a_conflict(self, agent, pick, keep):
        from agent_client.errors import Refused

        agent = self._agent(agent)
        client = self.clients[agent]
        self._wait_online(client)
        client.flush()
        client.sync()
        folded = self._fold()
        open_ids = sorted(c.id for c in folded.conflicts.values() if not c.resolved)
        if not open_ids:
            return
        conflict_id = open_ids[pick % len(open_ids)]
        revision = 1 + keep % len(folded.conflicts[conflict_id].revisions)
        result = self._attempt(
            agent, f"resolve conflict {conflict_id} keeping revision {revision}",
            lambda c: c.resolve_conflict(conflict_id, keep=revision, note="chosen by the machine"),
            lambda f: (ref.resolve_refusals(f, POLICY, agent, conflict_id, revision), set()))
        if result is None or result.pending:
            return
        client.sync()
        try:
            client.resolve_conflict(conflict_id, keep=revision)
        except Refused as exc:
            assert exc.code == "FAILED_PRECONDITION", f"a second resolution was refused with {exc.code}: {exc}"
        else:
            raise AssertionError(f"conflict {conflict_id} was resolved twice")

    # -- replication -------------------------------------------------------------

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES)
    def sync(self, agent):
        client = self.clients[self._agent(agent)]
        self._wait_online(client)
        client.flush()
        before = client.cache.offset
        summary = client.sync()
        assert summary.offset >= before, "an offset moved backwards"

    @precondition(lambda self: self.up)
    @rule()
    def agent_0_receives_every_entry_live(self):
        live = self.clients[LIVE]
        head = len(self._entries())
        wait_until(lambda: live.cache.offset >= head, interval=0.02,
                   message=lambda: f"live cache stuck at {live.cache.offset}, head {head}")

    @precondition(lambda self: self.up and self.slots)
    @rule(pick=st.integers(0, 10**6))
    def deliver_an_operation_twice(self, pick):
        entries = self._entries()
        agents_entries = [e for e in entries if e.agent_id != ref.SYSTEM]  # the sweep's are not sent by anyone
        if not agents_entries:
            return
        entry = agents_entries[pick % len(agents_entries)]
        agent = RawAgent(self.address, entry.agent_id)
        try:
            model = self.embedder.fingerprint
            response = agent.append(entry.operation, model=pb.EmbeddingModel(
                name=model.name, dimensions=model.dimensions, sha256=model.sha256))
        finally:
            agent.close()
        assert response.results[0].replayed and response.results[0].seq == entry.seq
        assert response.head_seq == len(entries)

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, back=st.integers(0, 6))
    def deliver_an_old_suffix_again(self, agent, back):
        """Applying entries a cache already has (a suffix, or a sync from an older offset) changes nothing."""
        from server.core.codec import entry_from_proto

        client = self.clients[self._agent(agent)]
        offset, before = client.cache.offset, client.cache.snapshot()
        again = [entry_from_proto(e) for e in self._entries()[max(0, offset - back):offset]]
        applied = client.cache.apply(again)
        if client.cache.offset != offset:
            return  # a live update landed meanwhile: nothing to compare
        assert applied == 0, f"{len(again)} entries delivered again, {applied} applied twice"
        assert client.cache.snapshot() == before, "delivering entries again changed the cache"

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, die_at=st.integers(1, 8), batch=st.integers(1, 3))
    def agent_crashes_while_applying(self, agent, die_at, batch):
        """kill -9 of an agent inside a batch's transaction; then its boot sync ends as an uninterrupted run."""
        from agent_client.cache import Cache

        agent = self._agent(agent)
        self.clients.pop(agent).close()
        path = self.tmp / agent / "cache.db"
        acked_before = self._acked_offsets().get(agent, 0)
        done = subprocess.run([sys.executable, "-c", CRASH_SCRIPT, str(path), self.address, agent, str(die_at),
                               str(batch)], capture_output=True, text=True, timeout=120)
        assert done.returncode in (0, -signal.SIGKILL), f"the crashing agent failed otherwise:\n{done.stderr}"
        note(f"{agent} {'was killed applying entry #' + str(die_at) if done.returncode else 'caught up'}")
        entries = self._entries()
        cache = Cache(path)
        try:
            offset, state = cache.offset, cache.snapshot()
        finally:
            cache.close()
        assert state == self._replica(entries[:offset]), "a crash left a cache that is not a fold of a prefix"
        acked = self._acked_offsets().get(agent, 0)
        assert acked <= max(acked_before, offset), (
            f"{agent} acknowledged seq {acked} but had durably applied only {offset}")
        self.clients[agent] = client = self._open(agent)
        entries = self._entries()
        assert client.cache.offset == len(entries), "the boot sync after a crash did not reach the head"
        assert client.cache.snapshot() == self._replica(entries), (
            "after a crash and a boot sync the cache differs from an uninterrupted fold")

    @rule(agent=AGENT_NAMES)
    def lose_cache(self, agent):
        agent = self._agent(agent)
        self.clients.pop(agent).close()
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (self.tmp / agent / name).unlink(missing_ok=True)
        self.clients[agent] = self._open(agent)

    # -- the server going away -----------------------------------------------------

    @precondition(lambda self: self.up)
    @rule(rebuild=st.booleans())
    def restart_server(self, rebuild):
        """SIGTERM, optionally `mnemosync rebuild`, and a fresh process: the same changelog, state and offsets."""
        for client in self.clients.values():
            self._wait_online(client)
            client.flush()
        before = self._served()
        self.server.stop()
        if rebuild:
            live = self._store_snapshot()
            done = subprocess.run([sys.executable, "-m", "server.cli", "rebuild", "--data-dir",
                                   str(self.tmp / "server"), *self.store_args], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr
            assert self._store_snapshot() == live, "projections rebuilt from the changelog differ from the live ones"
        self.server = self._serve()
        self._settle()
        after = self._served()
        assert after[0] == before[0], "the changelog changed across a restart"
        assert after[1:] == before[1:], "memories, conflicts or offsets changed across a restart"

    @precondition(lambda self: self.up)
    @rule()
    def kill_server(self):
        self.server.kill()
        self.up = False

    @precondition(lambda self: not self.up)
    @rule()
    def start_server(self):
        self._bring_up()
