"""The consistency suite's rules for what agents and operators do: writes of every kind and field, conflicts and
their resolution, redaction, syncs and live updates, lost caches, and the server stopped, rebuilt, killed and
started again.

Every write is checked against the reference model's prediction (`ReplicationHarness._attempt`). The faults
the suite injects (crashes, a lost network, lost replies, tampered entries) are in `rules_faults.py`; searches
in `rules_search.py`; thresholds and weaker agents challenging stronger ones in `rules_boundaries.py`.
Uses and decay sweeps (issue 15) are here too.
"""

from __future__ import annotations

import subprocess
import sys

import grpc
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from harness import AGENT_NAMES, LIVE, POLICY, SCOPES, SENTENCES, TAGS, TYPES, ReplicationHarness, model_of
from helpers import RawAgent, wait_until

UPDATES = st.fixed_dictionaries({}, optional={
    "content": st.sampled_from(SENTENCES),
    "type": st.sampled_from(TYPES),
    "tags": st.lists(st.sampled_from(TAGS), max_size=3),
    "importance": st.sampled_from([0.0, 0.25, 0.5, 1.0]),
    "confidence": st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    "protected": st.booleans(),
    "trust": st.sampled_from(["", "principle", "pattern", "inference"]),
    "quote": st.sampled_from(["", "as the lead said in the review"]),
}).filter(bool)
"""Any non-empty set of the fields an update may change (content is a sentence made unique when used)."""

TRUST = st.sampled_from([("", ""), ("", ""), ("pattern", ""), ("inference", ""),
                         ("principle", "said by the lead"), ("principle", "")])


def update_op(fields: dict) -> pb.UpdateOp:
    """The UpdateOp the agent client sends for `fields` (tags replace, sorted and unique, as the server keeps them)."""
    change = pb.UpdateOp(**{k: v for k, v in fields.items() if k != "tags"})
    if "tags" in fields:
        change.replace_tags = True
        change.tags.extend(sorted(set(fields["tags"])))
    return change


ELIGIBLE = "a sweep archived a memory the model knew to be eligible"
REDACTED_QUOTE = "a redaction removed a memory's quote"
ARCHIVE_BELOW = {3: (0.1, 30), 4: (0.15, 14)}
"""The default layer table's archive rule (`proto/mnemosync/kernel/LIFECYCLE.md`): layer -> (archived under this
importance x strength, only when older than this many days)."""


def _surely_eligible(m: ref.RefMemory, entries: list[pb.ChangelogEntry], now_ms: int, archived: bool = False) -> bool:
    """A memory any decay sweep at `now_ms` must archive, whatever its strength: of an archivable layer, not
    protected by flag or tag, never used as the last decay entry says (so its level stays under 3), older than the
    layer's minimum age by a day, and with an importance already under the layer's threshold (strength is at
    most 1). `archived`: judge it as it stood before it was archived."""
    if m.state["archived"] != archived or m.layer not in ARCHIVE_BELOW or (m.lifecycle and (
            m.lifecycle[0] or m.lifecycle[4] >= 3)):
        return False
    state = m.history[m.version - 1] if archived else m.state
    below, days = ARCHIVE_BELOW[m.layer]
    age_days = (now_ms - entries[m.made_by_seq[1] - 1].server_time_ms) / 86_400_000
    return (not state["protected"] and not ref.PROTECTED_TAGS & set(state["tags"]) and state["importance"] < below
            and age_days > days + 1)


class ReplicationRules(ReplicationHarness):
    """The steps; see the module docstring."""

    # -- writes ----------------------------------------------------------------

    @initialize(count=st.integers(min_value=3, max_value=6),
                seeds=st.lists(st.tuples(AGENT_NAMES, st.sampled_from(SENTENCES)), min_size=1, max_size=4))
    def start_agents_with_a_few_memories(self, count, seeds):
        for i in range(count):
            self.clients[f"agent-{i}"] = self._open(f"agent-{i}")
        for agent, sentence in seeds:
            self.add(agent, sentence, 0, False, "user", ("", ""), [], "fact")

    @rule(agent=AGENT_NAMES, sentence=st.sampled_from(SENTENCES), layer=st.sampled_from([0, 0, 0, 1, 2, 4]),
          protected=st.booleans(), scope=st.sampled_from(SCOPES), trust=TRUST,
          tags=st.lists(st.sampled_from(TAGS), max_size=2), type=st.sampled_from(TYPES))
    def add(self, agent, sentence, layer, protected, scope, trust, tags, type):
        agent, text, memory_id = self._agent(agent), self._text(sentence), self._new_slot()
        tags = [sentence.split()[1].lower(), *tags]

        def predict(folded):
            folded.vectors.setdefault(text, tuple(self.embedder.embed(text)))
            return ref.add_refusals(folded, POLICY, agent, text, layer, scope, *trust)

        done = self._attempt(agent, f"add {memory_id} in {scope} layer {layer}{' protected' if protected else ''}",
                             lambda c: c.add(text, tags=tags, layer=layer or None, protected=protected,
                                             memory_id=memory_id, scope=scope, type=type, trust=trust[0],
                                             quote=trust[1]), predict)
        if done is not None:
            reach.reached(reach.RULE, "add")
            if done.conflict_id:
                reach.reached(reach.OUTCOME, "an add opened a semantic conflict")

    def _writer_or(self, agent: str, memory_id: str, by_writer: bool) -> str:
        """The agent that last wrote the memory (so that writes are not all refused to weaker agents), if asked
        and running; else `agent`."""
        if by_writer:
            m = model_of(self._entries() if self.up else self.seen).memories.get(memory_id)
            if m is not None and m.updated_by in self.clients:
                return m.updated_by
        return self._agent(agent)

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), fields=UPDATES, stale=st.sampled_from([0, 0, 1, 2]),
          by_writer=st.booleans())
    def update(self, agent, pick, fields, stale, by_writer):
        memory_id = self._slot(pick)
        agent = self._writer_or(agent, memory_id, by_writer)
        if "content" in fields:
            fields = {**fields, "content": self._text(fields["content"])}
        base = self._base(agent, memory_id, stale)
        change = update_op(fields)
        before = self._fold().memories.get(memory_id) if self.up else None
        done = self._attempt(agent, f"update {memory_id} from v{base}: {sorted(fields)}",
                             lambda c: c.update(memory_id, base_version=base, **fields),
                             lambda f: (ref.change_refusals(f, POLICY, agent, "update", memory_id, base, change),
                                        set()))
        if done is not None:
            reach.reached(reach.RULE, "update")
            for name in fields:
                reach.reached(reach.OUTCOME, f"an update changed {name}")
            new_tags = sorted(set(fields.get("tags", ())) - set(before.state["tags"] if before else ()))
            if new_tags and not done.pending and self.up:  # the tag and keyword indexes follow a change of tags
                self._search_as(agent, self._entries(), pick, False, "tag", False, tag=new_tags[0])
                reach.reached(reach.OUTCOME, "a memory was searched on the server by a tag an update gave it")

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), sentences=st.lists(
        st.sampled_from(SENTENCES), min_size=2, max_size=3), stale=st.sampled_from([1, 2]))
    def an_agent_resends_stale_writes(self, agent, pick, sentences, stale):
        """Stale writes sent again and again from one old version: each replaces the agent's hidden revision
        (the model predicts `replaces_revision`), so the conflict does not grow with them."""
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, stale)
        written = 0
        for sentence in sentences:
            text = self._text(sentence)
            result = self._attempt(agent, f"update {memory_id} from v{base} (resent stale)",
                                   lambda c, text=text: c.update(memory_id, content=text, base_version=base),
                                   lambda f, text=text: (ref.change_refusals(f, POLICY, agent, "update", memory_id,
                                                                             base, pb.UpdateOp(content=text)), set()))
            written += result is not None and not result.pending
        if written >= 2:
            reach.reached(reach.RULE, "an_agent_resends_stale_writes")

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
            reach.reached(reach.RULE, "two_agents_update_from_the_same_version")
            text, top = self._text(sentences[2]), results[1].version
            on_top = self._attempt(
                first, f"update {memory_id} from v{top}, on top of conflict {results[1].conflict_id}",
                lambda c: c.update(memory_id, content=text, base_version=top),
                lambda f: (ref.change_refusals(f, POLICY, first, "update", memory_id, top,
                                               pb.UpdateOp(content=text)), set()))
            if on_top is not None and not on_top.pending:
                assert not on_top.conflict_id, "a write from the current version opened or joined a conflict"

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 1, 2]), by_writer=st.booleans())
    def forget(self, agent, pick, stale, by_writer):
        self._archive("forget", agent, pick, stale, by_writer)

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 0, 1]), by_writer=st.booleans())
    def restore(self, agent, pick, stale, by_writer):
        self._archive("restore", agent, pick, stale, by_writer)

    def _archive(self, op: str, agent, pick, stale, by_writer) -> None:
        """forget or restore, from the current version or one `stale` versions back."""
        memory_id = self._slot(pick)
        agent = self._writer_or(agent, memory_id, by_writer)
        base = self._base(agent, memory_id, stale)
        done = self._attempt(agent, f"{op} {memory_id} from v{base}",
                             lambda c: getattr(c, op)(memory_id, base_version=base),
                             lambda f: (ref.change_refusals(f, POLICY, agent, op, memory_id, base), set()))
        if done is not None:
            reach.reached(reach.RULE, op)

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
        except grpc.RpcError as exc:  # only a memory in a scope the agent is not granted
            memory = self._fold().memories.get(memory_id)
            assert exc.code() == grpc.StatusCode.PERMISSION_DENIED and memory is not None and not POLICY.granted(
                agent, memory.scope), f"{agent}'s use of {memory_id} was refused: {exc.details()}"
            return
        finally:
            user.close()
        # an id listed `times` times counts once, or not at all (gone, or the agent's daily quota of it spent)
        assert counted in (0, 1), f"{memory_id} listed {times} times counted as {counted} uses"
        reach.reached(reach.RULE, "an_agent_uses_a_memory")

    @precondition(lambda self: self.up)
    @rule(days=st.sampled_from([0, 20, 45, 400]))
    def the_admin_sweeps_for_a_day_ahead(self, days):
        """A decay sweep for `days` from now, then the same sweep again: the second writes nothing. The fold
        checks every entry it wrote (the model's lifecycle rules) at the next comparison."""
        admin = RawAgent(self.address, min(POLICY.admins))
        try:
            now_ms = self._entries()[-1].server_time_ms + days * 86_400_000 if self._entries() else 0
            first = admin.call("DecaySweep", pb.DecaySweepRequest(now_ms=now_ms))
            again = admin.call("DecaySweep", pb.DecaySweepRequest(now_ms=first.as_of_ms))
        finally:
            admin.close()
        note(f"sweep +{days} days: {first.decayed} decay, {first.archived} archive entries")
        assert again.entries_written == 0, f"a second sweep for the same time wrote {again.entries_written} entries"
        entries = self._entries()
        folded = self._fold(entries)
        for d in first.decisions:
            if d.op == "archive":
                assert folded.memories[d.memory_id].state["archived"], f"{d.memory_id} was not archived"
        eligible = [m for m in folded.memories.values() if _surely_eligible(m, entries, first.as_of_ms)]
        assert not eligible, (f"the sweep for +{days} days left eligible memories live: "
                              f"{[(m.id, m.layer, m.state['importance']) for m in eligible]}")
        if any(_surely_eligible(m, entries, first.as_of_ms, archived=True) for m in folded.memories.values()
               if any(d.op == "archive" and d.memory_id == m.id for d in first.decisions)):
            reach.reached(reach.OUTCOME, ELIGIBLE)
        reach.reached(reach.RULE, "the_admin_sweeps_for_a_day_ahead")

    @precondition(lambda self: self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), layer=st.integers(1, 4), by_writer=st.booleans())
    def set_layer(self, agent, pick, layer, by_writer):
        memory_id = self._slot(pick)
        agent = self._writer_or(agent, memory_id, by_writer)
        base = self._base(agent, memory_id, 0)
        done = self._attempt(agent, f"set_layer {memory_id} to {layer} from v{base}",
                             lambda c: c.set_layer(memory_id, layer, base_version=base),
                             lambda f: (ref.change_refusals(f, POLICY, agent, "set_layer", memory_id, base,
                                                            layer=layer), set()))
        if done is not None:
            reach.reached(reach.RULE, "set_layer")

    @precondition(lambda self: len(self.slots) >= 2)
    @rule(agent=AGENT_NAMES, first=st.integers(0, 10**6), second=st.integers(0, 10**6), unlink=st.booleans(),
          relation=st.sampled_from(["semantic", "semantic", "causal"]))
    def link(self, agent, first, second, unlink, relation):
        agent, source, target = self._agent(agent), self._slot(first), self._slot(second)
        if source == target:
            return
        op = "unlink" if unlink else "link"
        done = self._attempt(agent, f"{op} {source} -{relation}-> {target}",
                             lambda c: getattr(c, op)(source, target, relation),
                             lambda f: (ref.link_refusals(f, POLICY, agent, op, source, target, relation), set()))
        if done is not None:
            reach.reached(reach.RULE, op)

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), keep=st.integers(0, 10**6),
          how=st.sampled_from(["keep", "keep", "merge", "keep_all"]), sentence=st.sampled_from(SENTENCES))
    def resolve_a_conflict(self, agent, pick, keep, how, sentence):
        from mnemosync.kernel.errors import MnemosyncError

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
        conflict = folded.conflicts[conflict_id]
        revision = 1 + keep % len(conflict.revisions)
        choice: dict = {"keep": revision}
        merged = None
        if how == "merge":
            merged = self._text(sentence)
            choice = {"merged_content": merged}
        elif how == "keep_all" and conflict.kind == "semantic":
            choice = {"keep_all": True}
        result = self._attempt(
            agent, f"resolve conflict {conflict_id} ({conflict.kind}) with {choice}",
            lambda c: c.resolve_conflict(conflict_id, note="chosen by the machine", **choice),
            lambda f: (ref.resolve_refusals(f, POLICY, agent, conflict_id, revision if "keep" in choice else 0,
                                            keep_all="keep_all" in choice, merged=merged), set()))
        if result is None or result.pending:
            return
        reach.reached(reach.RULE, "resolve_a_conflict")
        reach.reached(reach.OUTCOME, f"a {conflict.kind} conflict resolved by {sorted(choice)[0]}")
        client.sync()
        try:
            client.resolve_conflict(conflict_id, keep=1)
        except MnemosyncError as exc:
            assert exc.code == "FAILED_PRECONDITION", f"a second resolution was refused with {exc.code}: {exc}"
        else:
            raise AssertionError(f"conflict {conflict_id} was resolved twice")

    @precondition(lambda self: self.up and self.slots)
    @rule(agent=AGENT_NAMES, pick=st.integers(0, 10**6), as_admin=st.booleans())
    def redact(self, agent, pick, as_admin):
        """An admin removes a memory's text everywhere: every earlier entry that carried it arrives blanked."""
        admin = next((a for a in self.clients if a in POLICY.admins), None)
        agent = admin if as_admin and admin else self._agent(agent)
        memory_id = self._slot(pick)
        shown = self._fold().memories
        quoted = sorted(m.id for m in shown.values() if m.state["quote"] and m.state["quote"] != ref.REDACTED)
        if agent == admin and quoted:  # an admin's redaction goes to a memory with a quote when there is one
            memory_id = quoted[pick % len(quoted)]
        had_quote = memory_id in shown and shown[memory_id].state["quote"] not in ("", ref.REDACTED)
        client = self.clients[agent]
        self._wait_online(client)
        client.flush()
        base = self._base(agent, memory_id, 0)
        result = self._attempt(agent, f"redact {memory_id} from v{base}",
                               lambda c: c.redact(memory_id, "a secret was pasted into it", base_version=base),
                               lambda f: (ref.redact_refusals(f, POLICY, agent, memory_id, base), set()))
        if result is None:
            return
        entries = self._entries()
        folded = self._fold(entries)
        for e in entries[:result.seq - 1]:
            resolved = folded.conflicts.get(e.operation.resolve_conflict.conflict_id) if e.op == "resolve_conflict" \
                else None
            merged_into_it = resolved is not None and resolved.other_memory_id == memory_id
            if e.memory_id != memory_id and not merged_into_it:
                continue
            merged_elsewhere = resolved is not None and resolved.kind == "semantic" and not merged_into_it
            texts, embedded = ref.entry_texts(e, merged=not merged_elsewhere)
            assert set(texts) <= {"", ref.REDACTED} and not embedded, (
                f"entry {e.seq} still carries the text or vector of redacted memory {memory_id}")
        if had_quote:
            auditor = RawAgent(self.address, "auditor")
            try:
                served = auditor.get(memory_id)
            finally:
                auditor.close()
            assert served.quote in ("", ref.REDACTED), f"redacted {memory_id} still shows its quote {served.quote!r}"
            reach.reached(reach.OUTCOME, REDACTED_QUOTE)
        reach.reached(reach.RULE, "redact")

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
        reach.reached(reach.RULE, "sync")

    @precondition(lambda self: self.up)
    @rule()
    def agent_0_receives_every_entry_live(self):
        live = self.clients[LIVE]
        self._wait_online(live)
        head = len(self._entries())
        wait_until(lambda: live.cache.offset >= head, interval=0.02,
                   message=lambda: f"live cache stuck at {live.cache.offset}, head {head}")
        reach.reached(reach.RULE, "agent_0_receives_every_entry_live")

    @precondition(lambda self: self.up and self.slots)
    @rule(pick=st.integers(0, 10**6))
    def deliver_an_operation_twice(self, pick):
        entries = self._entries()
        # the agents still hold those ops as they sent them; the sweep's are not sent by anyone
        intact = [e for e in entries if not e.redacted_by and e.agent_id != ref.SYSTEM]
        if not intact:
            return
        entry = intact[pick % len(intact)]
        response = self._append_raw(entry.agent_id, entry.operation)
        assert response.results[0].replayed and response.results[0].seq == entry.seq
        assert response.head_seq == len(entries)
        reach.reached(reach.RULE, "deliver_an_operation_twice")

    @precondition(lambda self: self.up)
    @rule(agent=AGENT_NAMES, back=st.integers(1, 6))
    def deliver_an_old_suffix_again(self, agent, back):
        """Applying entries a cache already has (a suffix, or a sync from an older offset) changes nothing."""
        from mnemosync.kernel.codec import entry_from_proto

        agent = self._agent(agent)
        client = self.clients[agent]
        offset, before = client.cache.offset, client.cache.snapshot()
        again = [entry_from_proto(e) for e in self._entries(agent)[max(0, offset - back):offset]]
        applied = client.cache.apply(again)
        if client.cache.offset != offset or not again:
            return  # a live update landed meanwhile, or nothing to deliver: nothing to compare
        assert applied == 0, f"{len(again)} entries delivered again, {applied} applied twice"
        assert client.cache.snapshot() == before, "delivering entries again changed the cache"
        reach.reached(reach.RULE, "deliver_an_old_suffix_again")

    @rule(agent=AGENT_NAMES)
    def lose_cache(self, agent):
        agent = self._agent(agent)
        lost = self.clients.pop(agent)
        self.ack_floor[agent] = max(self.ack_floor.get(agent, 0), lost.cache.offset)
        lost.close()
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (self.tmp / agent / name).unlink(missing_ok=True)
        self.clients[agent] = self._open(agent)
        reach.reached(reach.RULE, "lose_cache")

    # -- the server going away -----------------------------------------------------

    @precondition(lambda self: self.up)
    @rule(rebuild=st.booleans())
    def restart_server(self, rebuild):
        """SIGTERM, optionally `mnemosync rebuild`, and a fresh process: the same changelog and state, and every
        acknowledged offset kept (agents may acknowledge more meanwhile)."""
        self._settle()
        before = self._served()
        self.server.stop()
        if rebuild:
            live = self._store_snapshot()
            done = subprocess.run([sys.executable, "-m", "mnemosync.cli", "rebuild", "--data-dir",
                                   str(self.tmp / "server"), *self.store_args], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, done.stderr
            assert self._store_snapshot() == live, "projections rebuilt from the changelog differ from the live ones"
        self.server = self._serve()
        self._settle()
        after = self._served()
        assert after[0] == before[0], "the changelog changed across a restart"
        assert after[1:4] == before[1:4], "memories, conflicts or counts changed across a restart"
        lost = {a: seq for a, seq in before[4].items() if after[4].get(a, 0) < seq}
        assert not lost, f"acknowledged offsets went back across a restart: {lost} (now {after[4]})"
        reach.reached(reach.RULE, "restart_server")
        if rebuild:
            reach.reached(reach.OUTCOME, "the projections were rebuilt from the changelog")

    @precondition(lambda self: self.up)
    @rule()
    def kill_server(self):
        self.server.kill()
        self.up = False
        reach.reached(reach.RULE, "kill_server")

    @precondition(lambda self: not self.up)
    @rule()
    def start_server(self):
        self._bring_up()
        reach.reached(reach.RULE, "start_server")

