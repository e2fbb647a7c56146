"""Property-based consistency: many agents of different authorities, random interleavings, faults.

A Hypothesis state machine drives 2 to 4 real AgentClients (real caches, the
real GGUF model) against a real `mnemosync serve` subprocess started with a
policy file that gives them different authorities (a human, two agents of
equal authority, a weak admin). It adds, updates and forgets from current and
stale versions, restores, moves layers, links and unlinks, resolves conflicts,
syncs, takes the server down (SIGTERM with a rebuild, or kill -9), loses
caches, crashes an agent in the middle of applying a batch, delivers
operations and old suffixes twice, and checks everything against
`reference_model.fold`, which knows nothing of the server's code:

* every changelog entry obeys every governance rule and the model's folding
  rules (seq gap-free, append-only, hash chain, versions, conflict marks);
* every refusal is one the model predicts, and nothing the model says must be
  refused is accepted;
* once everyone has synced, every cache, the server and the model agree on
  every memory, its open conflicts and every conflict's revisions, and each
  cache's full projection equals a fresh fold of the changelog;
* acknowledged and queued writes arrive exactly once and in order; offsets
  only move forward and never pass the head or what a cache durably applied;
* a restart in a fresh process and `mnemosync rebuild` change nothing.

Every strategy and precondition depends only on what the machine itself did
(memory ids are chosen by the machine, agents are fixed at start), so a
failure shrinks and prints a reproducible example.

Profiles: `HYPOTHESIS_PROFILE=ci` (the default: bounded for CI) or `thorough`
for long local runs.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import reference_model as ref
from hypothesis import HealthCheck, Phase, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mnemosync.v1 import memory_pb2 as pb

from conftest import RawAgent, free_port
from serving import ServeProcess

SENTENCES = [
    "The deploy pipeline runs on GitHub Actions",
    "Alice owns the billing service",
    "Use Postgres 16 for new services",
    "The staging cluster lives in eu-west-1",
    "Error E1042 means the cache is cold",
    "Releases happen every second Tuesday",
    "The API rate limit is 600 requests per minute",
    "Bob prefers tabs over spaces",
]

POLICY = ref.Policy(
    authority={"agent-0": 1, "agent-1": 3, "agent-2": 3, "agent-3": 5},
    admins=frozenset({"agent-3"}),
)
"""A human (the live agent), two agents of equal authority, and a weak admin; the auditor gets the defaults."""

LIVE = "agent-0"
THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"
NO_SHRINK = os.environ.get("MNEMOSYNC_CONSISTENCY_NO_SHRINK") == "1"
"""For fault-injection campaigns: report the first failing example as found, without shrinking it."""
IDS = uuid.UUID("6d6e656d-6f73-796e-6300-000000000007")

CRASH_SCRIPT = """
import os, signal, sys
from agent_client.cache import Cache
from agent_client.remote import Remote
from agent_client.sync import catch_up
from server.core import projections

path, address, agent, die_at, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
real_apply, applied = projections.apply, [0]

def apply(conn, entry):
    applied[0] += 1
    if applied[0] == die_at:
        os.kill(os.getpid(), signal.SIGKILL)  # dies inside the open transaction, like a crash
    real_apply(conn, entry)

projections.apply = apply
catch_up(Cache(path), Remote(address, agent, insecure=True, timeout=10.0), batch=batch)
"""
"""An agent process that catches up in small batches and is killed -9 as it applies entry `die_at`."""


def _fold(entries: list[pb.ChangelogEntry]) -> ref.Folded:
    return ref.fold(entries, POLICY)


def _reason(exc) -> str:
    """The rule name of a PERMISSION_DENIED refusal, otherwise the status name."""
    if exc.code == "PERMISSION_DENIED":
        return str(exc).split(":", 1)[0]
    return exc.code


class ReplicationMachine(RuleBasedStateMachine):
    """The system under test and its reference; see the module docstring."""

    embedder = None
    model_path: Path | None = None

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="mnemosync-consistency-"))
        self.policy_file = self.tmp / "policy.toml"
        self.policy_file.write_text(POLICY.toml())
        self.port = free_port()
        self.server = self._serve()
        self.up = True
        self.clients = {}
        self.counter = 0
        self.slots: list[str] = []
        self.acknowledged: dict[tuple[str, str], str] = {}
        self.queued: dict[str, list[str]] = {}
        self.seen_digests: list[str] = []
        self.acked: dict[str, int] = {}
        self.replicas = 0

    # -- helpers -----------------------------------------------------------

    def _serve(self) -> ServeProcess:
        return ServeProcess(self.tmp / "server", listen=f"127.0.0.1:{self.port}", embed_model=self.model_path,
                            env={"MNEMOSYNC_POLICY_FILE": str(self.policy_file)}).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _open(self, agent_id: str):
        from agent_client.client import AgentClient
        from agent_client.settings import ClientSettings

        settings_ = ClientSettings(server=self.address, agent_id=agent_id, insecure=True,
                                   cache_dir=self.tmp / agent_id, embed_model=self.model_path, timeout=5.0)
        client = AgentClient(settings_, embedder=self.embedder, live=(agent_id == LIVE))
        client.start()
        return client

    def _entries(self) -> list[pb.ChangelogEntry]:
        reader = RawAgent(self.address, "auditor")
        try:
            return reader.sync(0)
        finally:
            reader.close()

    def _stats(self) -> pb.StatsResponse:
        reader = RawAgent(self.address, "auditor")
        try:
            return reader.call("Stats", pb.StatsRequest())
        finally:
            reader.close()

    def _fold(self, entries=None) -> ref.Folded:
        return _fold(self._entries() if entries is None else entries)

    def _text(self, sentence: str) -> str:
        self.counter += 1
        return f"{sentence} (note {self.counter})"

    def _new_slot(self) -> str:
        """A memory id chosen by the machine: the strategies index these, never ids learnt from the server."""
        memory_id = str(uuid.uuid5(IDS, str(len(self.slots))))
        self.slots.append(memory_id)
        return memory_id

    def _slot(self, pick: int) -> str:
        return self.slots[pick % len(self.slots)]

    agent_names = st.sampled_from(["agent-0", "agent-1", "agent-2", "agent-3"])

    def _agent(self, name: str) -> str:
        return name if name in self.clients else LIVE

    def _record(self, agent: str, result) -> None:
        if getattr(result, "deduplicated", False) or getattr(result, "replayed", False):
            return
        if result.pending:
            self.queued.setdefault(agent, []).append(result.op_id)
        else:
            self.acknowledged[(agent, result.op_id)] = result.memory_id

    def _predictable(self) -> bool:
        """True when nothing but the next write can append (no outbox that a reconnect may flush)."""
        return self.up and not any(c.outbox.counts()[0] for c in self.clients.values())

    def _attempt(self, agent: str, what: str, call, predict=None):
        """Runs one write; checks a refusal, or an acceptance, against the model's prediction.

        `predict(folded)` returns (rules it must be refused by, rules it may be refused by).
        """
        from agent_client.errors import Refused

        before = must = may = None
        if predict is not None and self._predictable():
            before = self._entries()
            must, may = predict(self._fold(before))
        try:
            result = call(self.clients[agent])
        except Refused as exc:
            reason = _reason(exc)
            note(f"{agent}: {what}: refused ({reason}): {exc}")
            if before is not None and len(self._entries()) == len(before):
                assert reason in must | may, (
                    f"{what} by {agent} was refused by {reason} ({exc}); the model expected "
                    f"{sorted(must | may) or 'it to pass'}")
            return None
        self._record(agent, result)
        note(f"{agent}: {what}: {'queued' if result.pending else f'seq {result.seq}'}")
        if before is not None and not result.pending and not result.replayed:
            appended = self._entries()[len(before):]
            if [e.op_id for e in appended] == [result.op_id]:
                assert not must, f"{what} by {agent} was accepted although the model says it breaks {sorted(must)}"
        return result

    def _base(self, agent: str, memory_id: str, stale: int) -> int:
        """The version the agent last saw (its cache, else the server's), or `stale` versions before it."""
        seen = self.clients[agent].cache.get(memory_id)
        if seen is None and self.up:
            served = self._fold().memories.get(memory_id)
            version = served.version if served else 1
        else:
            version = seen.version if seen is not None else 1
        return max(1, version - stale)

    def _wait_online(self, client) -> None:
        """After a restart a client reconnects within its backoff (at most ~2 s)."""
        deadline = time.monotonic() + 20
        while not client.status().online:
            assert time.monotonic() < deadline, f"{client.agent_id} did not reconnect"
            time.sleep(0.05)

    def _replica(self, entries: list[pb.ChangelogEntry]) -> dict:
        """The projection snapshot of a brand-new cache that applied `entries` without interruption."""
        from agent_client.cache import Cache
        from server.core.codec import entry_from_proto

        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        try:
            cache.apply([entry_from_proto(e) for e in entries])
            return cache.snapshot()
        finally:
            cache.close()

    # -- writes ----------------------------------------------------------------

    @initialize(count=st.integers(min_value=2, max_value=4),
                seeds=st.lists(st.tuples(agent_names, st.sampled_from(SENTENCES)), min_size=1, max_size=4))
    def start_agents_with_a_few_memories(self, count, seeds):
        for i in range(count):
            self.clients[f"agent-{i}"] = self._open(f"agent-{i}")
        for agent, sentence in seeds:
            self.add(agent, sentence, 0, False)

    @rule(agent=agent_names, sentence=st.sampled_from(SENTENCES), layer=st.sampled_from([0, 0, 0, 1, 2, 4]),
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
    @rule(agent=agent_names, pick=st.integers(0, 10**6), sentence=st.sampled_from(SENTENCES),
          stale=st.sampled_from([0, 0, 1, 2]), protect=st.sampled_from([None, None, True, False]))
    def update(self, agent, pick, sentence, stale, protect):
        agent, memory_id, text = self._agent(agent), self._slot(pick), self._text(sentence)
        base = self._base(agent, memory_id, stale)
        change = pb.UpdateOp(content=text, protected=protect) if protect is not None else pb.UpdateOp(content=text)
        self._attempt(agent, f"update {memory_id} from v{base}",
                      lambda c: c.update(memory_id, content=text, protected=protect, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, "update", memory_id, base, change), set()))

    @precondition(lambda self: self.up and self.slots)
    @rule(first=agent_names, second=agent_names, pick=st.integers(0, 10**6), sentences=st.lists(
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
    @rule(agent=agent_names, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 1, 2]))
    def forget(self, agent, pick, stale):
        self._archive("forget", agent, pick, stale)

    @precondition(lambda self: self.slots)
    @rule(agent=agent_names, pick=st.integers(0, 10**6), stale=st.sampled_from([0, 0, 0, 1]))
    def restore(self, agent, pick, stale):
        self._archive("restore", agent, pick, stale)

    def _archive(self, op: str, agent, pick, stale) -> None:
        """forget or restore, from the current version or one `stale` versions back."""
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, stale)
        self._attempt(agent, f"{op} {memory_id} from v{base}",
                      lambda c: getattr(c, op)(memory_id, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, op, memory_id, base), set()))

    @precondition(lambda self: self.slots)
    @rule(agent=agent_names, pick=st.integers(0, 10**6), layer=st.integers(1, 4))
    def set_layer(self, agent, pick, layer):
        agent, memory_id = self._agent(agent), self._slot(pick)
        base = self._base(agent, memory_id, 0)
        self._attempt(agent, f"set_layer {memory_id} to {layer} from v{base}",
                      lambda c: c.set_layer(memory_id, layer, base_version=base),
                      lambda f: (ref.change_refusals(f, POLICY, agent, "set_layer", memory_id, base, layer=layer),
                                 set()))

    @precondition(lambda self: len(self.slots) >= 2)
    @rule(agent=agent_names, first=st.integers(0, 10**6), second=st.integers(0, 10**6), unlink=st.booleans())
    def link(self, agent, first, second, unlink):
        agent, source, target = self._agent(agent), self._slot(first), self._slot(second)
        if source == target:
            return
        op = "unlink" if unlink else "link"
        self._attempt(agent, f"{op} {source} -> {target}",
                      lambda c: getattr(c, op)(source, target, "related"),
                      lambda f: (ref.link_refusals(f, POLICY, agent, op, source, target, "related"), set()))

    @precondition(lambda self: self.up)
    @rule(agent=agent_names, pick=st.integers(0, 10**6), keep=st.integers(0, 10**6))
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
    @rule(agent=agent_names)
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
        deadline = time.monotonic() + 20
        while live.cache.offset < head and time.monotonic() < deadline:
            time.sleep(0.02)
        assert live.cache.offset >= head, f"live cache stuck at {live.cache.offset}, head {head}"

    @precondition(lambda self: self.up and self.slots)
    @rule(pick=st.integers(0, 10**6))
    def deliver_an_operation_twice(self, pick):
        entries = self._entries()
        if not entries:
            return
        entry = entries[pick % len(entries)]
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
    @rule(agent=agent_names, back=st.integers(0, 6))
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
    @rule(agent=agent_names, die_at=st.integers(1, 8), batch=st.integers(1, 3))
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

    @rule(agent=agent_names)
    def lose_cache(self, agent):
        agent = self._agent(agent)
        self.clients.pop(agent).close()
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (self.tmp / agent / name).unlink(missing_ok=True)
        self.clients[agent] = self._open(agent)

    # -- the server going away -----------------------------------------------------

    def _served(self) -> tuple:
        """Everything a fresh server process must show again: entries, memories, conflicts, offsets."""
        entries = self._entries()
        folded = ref.fold(entries)
        reader = RawAgent(self.address, "auditor")
        try:
            memories = {mid: reader.get(mid).SerializeToString(deterministic=True) for mid in folded.memories}
            conflicts = {cid: reader.call("GetConflict", pb.GetConflictRequest(id=cid)).conflict.SerializeToString(
                deterministic=True) for cid in folded.conflicts}
        finally:
            reader.close()
        stats = self._stats()
        offsets = sorted((a.agent_id, a.acked_seq) for a in stats.agents)
        counts = (stats.head_seq, stats.live_memories, stats.archived_memories, dict(stats.by_layer))
        return [ref.entry_digest(e) for e in entries], memories, conflicts, offsets, counts

    def _store_snapshot(self) -> dict:
        from server.sqlite_store import SqliteStore

        with SqliteStore(self.tmp / "server" / "mnemosync.db", synchronous="normal") as store:
            assert store.verify().ok, "the hash chain does not verify"
            return store.snapshot()

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
                                   str(self.tmp / "server")], capture_output=True, text=True, timeout=120)
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
        self.server = self._serve()
        self.up = True
        self._settle()

    def _settle(self) -> None:
        """Waits until every client is back online and the live one has sent its queued writes.

        The live client flushes on reconnect in the background; doing it here makes the order of
        the next steps independent of timing, so a failure replays and shrinks the same way.
        """
        for client in self.clients.values():
            self._wait_online(client)
        self.clients[LIVE].flush()

    @precondition(lambda self: self.up)
    @rule()
    def everyone_syncs_and_converges(self):
        self._check_convergence()

    # -- invariants ------------------------------------------------------------

    def _acked_offsets(self) -> dict[str, int]:
        return {a.agent_id: a.acked_seq for a in self._stats().agents}

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
        _fold(entries)  # every entry obeys the folding and governance rules
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

    # -- convergence -------------------------------------------------------------

    def _check_convergence(self):
        for client in self.clients.values():
            self._wait_online(client)
            client.flush()
        for client in self.clients.values():
            client.sync()
        entries = self._entries()
        folded = _fold(entries)
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
                self.start_server()
            self._check_convergence()
            replica = self._replica(self._entries())
            self.server.stop()
            self.up = False
            assert self._store_snapshot() == replica, "the server's projections differ from a fresh fold"
        finally:
            for client in self.clients.values():
                client.close()
            self.server.stop()
            shutil.rmtree(self.tmp, ignore_errors=True)


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


@pytest.mark.timeout(1800)
def test_replicas_of_agents_with_different_authorities_converge_and_obey_governance(model_path, embedder):
    ReplicationMachine.embedder = embedder
    ReplicationMachine.model_path = model_path
    run_state_machine_as_test(ReplicationMachine, settings=settings(
        max_examples=100 if THOROUGH else 8,
        stateful_step_count=60 if THOROUGH else 30,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        print_blob=True,
        phases=[Phase.explicit, Phase.generate] if NO_SHRINK else list(Phase),
    ))


def test_the_suite_catches_a_changelog_with_a_skipped_entry():
    """The reference fold must fail on a gap, or the suite could pass with a broken Sync."""
    first = pb.ChangelogEntry(seq=1, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="x", scope="user")))
    third = pb.ChangelogEntry(seq=3, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="y", scope="user")))
    with pytest.raises(AssertionError, match="seq 3 where 2 was expected"):
        ref.fold([first, third])
