"""Property-based consistency: many agents, random interleavings, faults.

A Hypothesis state machine drives 2 to 4 real AgentClients (real caches, the
real GGUF model) against a real `mnemosync serve` subprocess, with outages,
kill -9, lost caches and duplicate deliveries, and checks everything against
`reference_model.fold`, which knows nothing of the server's code.

Profiles: `HYPOTHESIS_PROFILE=ci` (the default: a few minutes at most) or
`thorough` for long local runs. A failure prints the steps to reproduce it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
import reference_model as ref
from hypothesis import HealthCheck, note, settings
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

THOROUGH = os.environ.get("HYPOTHESIS_PROFILE") == "thorough"


class ReplicationMachine(RuleBasedStateMachine):
    """The system under test and its reference; see the module docstring."""

    embedder = None
    model_path: Path | None = None

    def __init__(self):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="mnemosync-consistency-"))
        self.port = free_port()
        self.server = ServeProcess(self.tmp / "server", listen=f"127.0.0.1:{self.port}",
                                   embed_model=self.model_path).start()
        self.up = True
        self.clients = {}
        self.counter = 0
        self.acknowledged: dict[tuple[str, str], str] = {}
        self.queued: dict[str, list[str]] = {}
        self.memory_ids: list[str] = []
        self.seen_digests: list[str] = []
        self.acked_offsets: dict[str, int] = {}

    # -- helpers -----------------------------------------------------------

    def _open(self, agent_id: str, live: bool = False):
        from agent_client.client import AgentClient
        from agent_client.settings import ClientSettings

        settings_ = ClientSettings(server=f"127.0.0.1:{self.port}", agent_id=agent_id, insecure=True,
                                   cache_dir=self.tmp / agent_id, embed_model=self.model_path, timeout=5.0)
        client = AgentClient(settings_, embedder=self.embedder, live=live)
        client.start()
        return client

    def _entries(self) -> list[pb.ChangelogEntry]:
        reader = RawAgent(f"127.0.0.1:{self.port}", "auditor")
        try:
            return reader.sync(0)
        finally:
            reader.close()

    def _text(self, sentence: str) -> str:
        self.counter += 1
        return f"{sentence} (note {self.counter})"

    def _record(self, agent: str, result) -> None:
        if getattr(result, "deduplicated", False):
            return
        if result.pending:
            self.queued.setdefault(agent, []).append(result.op_id)
        else:
            self.acknowledged[(agent, result.op_id)] = result.memory_id
        if result.memory_id not in self.memory_ids:
            self.memory_ids.append(result.memory_id)

    def _write(self, agent: str, action):
        from agent_client.errors import FailedPrecondition, NotFound, StaleVersion

        try:
            result = action(self.clients[agent])
        except (StaleVersion, FailedPrecondition, NotFound) as exc:
            note(f"{agent}: refused: {exc}")
            return
        self._record(agent, result)

    agent_names = st.sampled_from(["agent-0", "agent-1", "agent-2", "agent-3"])

    def _agent(self, name: str) -> str:
        return name if name in self.clients else "agent-0"

    # -- rules ---------------------------------------------------------------

    @initialize(count=st.integers(min_value=2, max_value=4))
    def start_agents(self, count):
        for i in range(count):
            self.clients[f"agent-{i}"] = self._open(f"agent-{i}", live=(i == 0))

    @rule(agent=agent_names, sentence=st.sampled_from(SENTENCES))
    def add(self, agent, sentence):
        agent = self._agent(agent)
        text = self._text(sentence)
        self._write(agent, lambda c: c.add(text, tags=[sentence.split()[1].lower()]))

    def _base(self, agent: str, memory_id: str, stale: bool) -> int | None:
        """None: the version the agent last saw; or, for `stale`, an older one if there is one."""
        if not stale:
            return None
        seen = self.clients[agent].cache.get(memory_id)
        return seen.version - 1 if seen is not None and seen.version > 1 else None

    @precondition(lambda self: self.memory_ids)
    @rule(agent=agent_names, pick=st.integers(0, 10**6), sentence=st.sampled_from(SENTENCES), stale=st.booleans())
    def update(self, agent, pick, sentence, stale):
        agent, memory_id, text = self._agent(agent), self.memory_ids[pick % len(self.memory_ids)], self._text(sentence)
        base = self._base(agent, memory_id, stale)
        self._write(agent, lambda c: c.update(memory_id, content=text, base_version=base))

    @precondition(lambda self: self.memory_ids)
    @rule(agent=agent_names, pick=st.integers(0, 10**6), stale=st.booleans())
    def forget(self, agent, pick, stale):
        agent, memory_id = self._agent(agent), self.memory_ids[pick % len(self.memory_ids)]
        base = self._base(agent, memory_id, stale)
        self._write(agent, lambda c: c.forget(memory_id, base_version=base))

    @precondition(lambda self: self.memory_ids)
    @rule(agent=agent_names, pick=st.integers(0, 10**6))
    def restore(self, agent, pick):
        agent, memory_id = self._agent(agent), self.memory_ids[pick % len(self.memory_ids)]
        self._write(agent, lambda c: c.restore(memory_id))

    @precondition(lambda self: len(self.memory_ids) >= 2 and self.up)
    @rule(agent=agent_names, first=st.integers(0, 10**6), second=st.integers(0, 10**6))
    def link(self, agent, first, second):
        source = self.memory_ids[first % len(self.memory_ids)]
        target = self.memory_ids[second % len(self.memory_ids)]
        if source != target:
            self._write(self._agent(agent), lambda c: c.link(source, target, "related"))

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
    def live_subscription_delivers(self):
        live = self.clients["agent-0"]
        head = self._entries()[-1].seq if self._entries() else 0
        deadline = time.monotonic() + 20
        while live.cache.offset < head and time.monotonic() < deadline:
            time.sleep(0.02)
        assert live.cache.offset >= head, f"live cache stuck at {live.cache.offset}, head {head}"

    @precondition(lambda self: self.up and self.acknowledged)
    @rule(pick=st.integers(0, 10**6))
    def deliver_an_operation_twice(self, pick):
        entries = self._entries()
        mine = [e for e in entries if (e.agent_id, e.op_id) in self.acknowledged]
        entry = mine[pick % len(mine)]
        agent = RawAgent(f"127.0.0.1:{self.port}", entry.agent_id)
        try:
            model = self.embedder.fingerprint
            response = agent.append(entry.operation, model=pb.EmbeddingModel(
                name=model.name, dimensions=model.dimensions, sha256=model.sha256))
        finally:
            agent.close()
        assert response.results[0].replayed and response.results[0].seq == entry.seq
        assert response.head_seq == len(entries)

    @precondition(lambda self: self.up)
    @rule(agent=agent_names, pick=st.integers(0, 10**6))
    def resolve_a_conflict(self, agent, pick):
        from agent_client.errors import Refused

        folded = ref.fold(self._entries())
        open_ids = sorted(set(folded.write_conflicts) - folded.resolved)
        if not open_ids:
            return
        conflict_id = open_ids[pick % len(open_ids)]
        client = self.clients[self._agent(agent)]
        self._wait_online(client)
        client.flush()
        client.sync()
        result = client.resolve_conflict(conflict_id, keep=1, note="keep what everyone sees")
        self._record(client.agent_id, result)
        client.sync()
        try:
            client.resolve_conflict(conflict_id, keep=1)
        except Refused as exc:
            note(f"second resolution refused: {exc}")
        else:
            raise AssertionError(f"conflict {conflict_id} was resolved twice")

    @precondition(lambda self: self.up)
    @rule()
    def restart_server(self):
        self.server.stop()
        self.server = ServeProcess(self.tmp / "server", listen=f"127.0.0.1:{self.port}",
                                   embed_model=self.model_path).start()

    @precondition(lambda self: self.up)
    @rule()
    def kill_server(self):
        self.server.kill()
        self.up = False

    @precondition(lambda self: not self.up)
    @rule()
    def start_server(self):
        self.server = ServeProcess(self.tmp / "server", listen=f"127.0.0.1:{self.port}",
                                   embed_model=self.model_path).start()
        self.up = True

    @rule(agent=agent_names)
    def lose_cache(self, agent):
        agent = self._agent(agent)
        self.clients.pop(agent).close()
        for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
            (self.tmp / agent / name).unlink(missing_ok=True)
        self.clients[agent] = self._open(agent, live=(agent == "agent-0"))

    # -- invariants ------------------------------------------------------------

    @invariant()
    def history_is_append_only_and_chained(self):
        if not self.up:
            return
        entries = self._entries()
        digests = [ref.entry_digest(e) for e in entries]
        assert digests[: len(self.seen_digests)] == self.seen_digests, "an earlier entry changed"
        self.seen_digests = digests
        assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
        assert ref.chain_ok(entries)
        for agent, client in self.clients.items():
            assert client.cache.offset <= len(entries), f"{agent}'s offset passed the head"

    @invariant()
    def acknowledged_writes_appear_exactly_once(self):
        if not self.up:
            return
        keys = [(e.agent_id, e.op_id) for e in self._entries()]
        for key in self.acknowledged:
            assert keys.count(key) == 1, f"acknowledged op {key} appears {keys.count(key)} times"

    # -- convergence -------------------------------------------------------------

    def _wait_online(self, client) -> None:
        """After a restart a client reconnects within its backoff (at most ~2 s)."""
        deadline = time.monotonic() + 20
        while not client.status().online:
            assert time.monotonic() < deadline, f"{client.agent_id} did not reconnect"
            time.sleep(0.05)

    def _check_convergence(self):
        for client in self.clients.values():
            self._wait_online(client)
            client.flush()
        for client in self.clients.values():
            client.sync()
        entries = self._entries()
        folded = ref.fold(entries)
        model = folded.memories
        note(f"reference: {ref.describe(folded)}")
        keys = [(e.agent_id, e.op_id) for e in entries]
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
            cached = {mid: ref.visible(m) for mid, m in
                      ((mid, client.cache.get(mid)) for mid in model)}
            assert cached == {mid: m.visible() for mid, m in model.items()}, f"{agent}'s cache differs"
            open_in_cache = {mid: set(client.cache.get(mid).open_conflicts) for mid in model}
            for mid, m in model.items():
                assert m.write_conflicts <= open_in_cache[mid], f"{agent} lost open conflicts of {mid}"
        reader = RawAgent(f"127.0.0.1:{self.port}", "auditor")
        try:
            served_rows = {mid: reader.get(mid) for mid in model}
        finally:
            reader.close()
        served = {mid: ref.visible(_memory_row(row)) for mid, row in served_rows.items()}
        assert served == {mid: m.visible() for mid, m in model.items()}, "the server differs from the model"
        for agent, client in self.clients.items():
            for mid, row in served_rows.items():
                assert set(client.cache.get(mid).open_conflicts) == set(row.open_conflicts), (
                    f"{agent}'s open conflicts of {mid} differ from the server's")

    def teardown(self):
        try:
            if not self.up:
                self.start_server()
            self._check_convergence()
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
            confidence=m.confidence, protected=m.protected, author_agent=m.author_agent,
            updated_by=m.updated_by, version=m.version, archived=m.archived,
            links=[(x.target_id, x.relation) for x in m.links], open_conflicts=list(m.open_conflicts))


def _memory_row(m: pb.Memory) -> _Row:
    return _Row(m)


@pytest.mark.timeout(1800)
def test_replicas_converge_and_nothing_acknowledged_is_lost(model_path, embedder):
    ReplicationMachine.embedder = embedder
    ReplicationMachine.model_path = model_path
    run_state_machine_as_test(ReplicationMachine, settings=settings(
        max_examples=100 if THOROUGH else 15,
        stateful_step_count=60 if THOROUGH else 40,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    ))


def test_the_suite_catches_a_changelog_with_a_skipped_entry():
    """The reference fold must fail on a gap, or the suite could pass with a broken Sync."""
    first = pb.ChangelogEntry(seq=1, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="x", scope="user")))
    third = pb.ChangelogEntry(seq=3, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="y", scope="user")))
    with pytest.raises(AssertionError, match="seq 3 where 2 was expected"):
        ref.fold([first, third])
