"""The consistency suite's harness: the system under test, its reference model, and what the rules share.

`ReplicationHarness` starts a real `mnemosync serve` subprocess with a policy
file and 3 to 6 real AgentClients (real caches, the real GGUF model). The
clients reach the server through `proxy.FaultProxy`, where the suite cuts one
agent off, loses a reply after the server committed, or redelivers live
entries; the suite's own reads (the auditor) go to the server directly. The
server streams the changelog in pages of `PAGE` entries, so every catch-up
crosses page boundaries.

The harness knows how to ask the server for its changelog as any agent sees
it (`_entries`), fold it with the reference model (`_fold`), run a write and
check it against the model's prediction (`_attempt`), bring the server back
and wait for everyone to reconnect. The rules change the system; the
invariants (`invariants.py`) say what must hold; `test_consistency.py`
composes them. `reach.py` counts what a run reached.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections import Counter
from pathlib import Path

from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine
from hypothesis.strategies._internal.featureflags import FeatureFlags

from mnemosync.kernel import codec
from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from helpers import RawAgent, ServeProcess, free_port, snapshot, wait_until
from proxy import FaultProxy

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
TAGS = ["deploy", "billing", "db", "infra", "errors", "release", "api", "style"]
TYPES = ["fact", "decision", "preference", "incident"]
SCOPES = ["user", "user", "project:x"]

POLICY = ref.Policy(
    authority={"agent-0": 1, "agent-1": 2, "agent-2": 5, "agent-3": 3, "agent-4": 4, "agent-5": 6},
    admins=frozenset({"agent-2"}),
    scopes={"agent-3": ("user",), "agent-4": ("user", "project:*"), "agent-5": ("project:*",)},
)
"""Every authority from 1 (the human, the live agent) to 6, so each pair of adjacent authorities meets; a weak
admin (5); agents granted only `user`, only `project:*`, or both. The auditor and the crashing agents get the
defaults (authority 3, every scope)."""

AGENTS = tuple(sorted(POLICY.authority))
LIVE = "agent-0"
PAGE = 3
"""Sync and Subscribe page size of the suite's server (`sync_page_size`)."""
IDS = uuid.UUID("6d6e656d-6f73-796e-6300-000000000007")

SWARM = os.environ.get("HYPOTHESIS_PROFILE") == "thorough" or os.environ.get("MNEMOSYNC_CONSISTENCY_EXPLORE") == "1"
"""Hypothesis' swarm testing (each example enables a random subset of the rules) for long runs only: a `ci`
run spreads its few hundred steps over every rule, so that each is reached every run."""

AGENT_NAMES = st.sampled_from(AGENTS)
"""The agents a rule may pick (one that is not running stands in for the live agent)."""


def model_of(entries: list[pb.ChangelogEntry], redacted: frozenset[str] | None = None) -> ref.Folded:
    """The reference model's fold of a changelog under the suite's policy."""
    return ref.fold(entries, POLICY, redacted=redacted)


_RULE_NAME = re.compile(r"^([a-z0-9]+(?:-[a-z0-9]+)+):")


def _reason(exc) -> str:
    """The rule name of a PERMISSION_DENIED refusal that names one, otherwise the status name."""
    match = _RULE_NAME.match(str(exc))
    if exc.code == "PERMISSION_DENIED" and match:
        return match.group(1)
    return exc.code


def token(n: int) -> str:
    """The word that makes the nth text unique (the keyword searches look for it)."""
    return f"n{n}q"


class ReplicationHarness(RuleBasedStateMachine):
    """The system under test and its reference; see the module docstring."""

    embedder = None
    model_path: Path | None = None
    new_store = None
    """None: the server keeps its SQLite file; else a call giving a fresh PostgreSQL URL per example."""

    def __init__(self):
        super().__init__()
        if not SWARM:
            self._rules_strategy.enabled_rules_strategy = st.just(FeatureFlags())  # every rule enabled
        self.tmp = Path(tempfile.mkdtemp(prefix="mnemosync-consistency-"))
        self.store = self.new_store() if self.new_store else ""
        self.store_args = ("--store", self.store) if self.store else ()
        self.policy_file = self.tmp / "policy.toml"
        self.policy_file.write_text(POLICY.toml())
        self.port = free_port()
        self.server = self._serve()
        self.up = True
        self.proxy = FaultProxy(self.address)
        self.clients = {}
        self.counter = 0
        self.slots: list[str] = []
        self.acknowledged: dict[tuple[str, str], str] = {}
        self.queued: dict[str, list[str]] = {}
        self.made: set[tuple[str, str]] = set()
        self.seen: list[pb.ChangelogEntry] = []
        self.acked: dict[str, int] = {}
        self.ack_floor: dict[str, int] = {}  # what an agent's lost cache may have acknowledged
        self.replicas = 0
        self.audits = Counter()  # runs of the checks that change nothing, see rules_faults.AUDITS_PER_EXAMPLE
        self.crashed: str | None = None  # a crashing agent that is down, see rules_faults
        self.crash_identity = 0
        self.agents_at_rest: dict[str, Path] = {}  # crashing agents' cache files

    def _serve(self) -> ServeProcess:
        return ServeProcess(self.tmp / "server", *self.store_args, listen=f"127.0.0.1:{self.port}",
                            embed_model=self.model_path, env={"MNEMOSYNC_POLICY_FILE": str(self.policy_file),
                                                              "MNEMOSYNC_SYNC_PAGE_SIZE": str(PAGE)}).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _open(self, agent_id: str):
        from mnemosync.agent.client import AgentClient
        from mnemosync.agent.client_settings import ClientSettings

        settings_ = ClientSettings(server=self.proxy.address, agent_id=agent_id, insecure=True,
                                   cache_dir=self.tmp / agent_id, embed_model=self.model_path, timeout=5.0)
        client = AgentClient(settings_, embedder=self.embedder, live=(agent_id == LIVE))
        client.start()
        return client

    def _entries(self, agent: str = "auditor") -> list[pb.ChangelogEntry]:
        """The whole changelog as `agent` receives it (other scopes' entries withheld)."""
        reader = RawAgent(self.address, agent)
        try:
            entries = reader.sync(0)
        finally:
            reader.close()
        if len(entries) > PAGE:
            reach.reached(reach.OUTCOME, "a Sync crossed page boundaries")
        return entries

    def _stats(self) -> pb.StatsResponse:
        """Stats as the policy's admin: any other agent sees only its own offset, so checks of every agent's
        acknowledgement would check nothing."""
        reader = RawAgent(self.address, min(POLICY.admins))
        try:
            return reader.call("Stats", pb.StatsRequest())
        finally:
            reader.close()

    def _fold(self, entries=None) -> ref.Folded:
        return model_of(self._entries() if entries is None else entries)

    def _text(self, sentence: str) -> str:
        self.counter += 1
        return f"{sentence} (note {token(self.counter)})"

    def _new_slot(self) -> str:
        """A memory id chosen by the machine: the strategies index these, never ids learnt from the server."""
        memory_id = str(uuid.uuid5(IDS, str(len(self.slots))))
        self.slots.append(memory_id)
        return memory_id

    def _slot(self, pick: int) -> str:
        return self.slots[pick % len(self.slots)]

    def _agent(self, name: str) -> str:
        return name if name in self.clients else LIVE

    def _record(self, agent: str, result) -> None:
        self.made.add((agent, result.op_id))
        if result.deduplicated or result.replayed:
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
        from mnemosync.kernel.errors import MnemosyncError

        before = must = may = None
        if predict is not None and self._predictable():
            before = self._entries()
            must, may = predict(self._fold(before))
        try:
            result = call(self.clients[agent])
        except MnemosyncError as exc:
            reason = _reason(exc)
            note(f"{agent}: {what}: refused ({reason}): {exc}")
            if before is not None and len(self._entries()) == len(before):
                assert reason in must | may, (
                    f"{what} by {agent} was refused by {reason} ({exc}); the model expected "
                    f"{sorted(must | may) or 'it to pass'}")
                reach.reached(reach.OUTCOME, f"refused as predicted: {reason}")
            return None
        self._record(agent, result)
        note(f"{agent}: {what}: {'queued' if result.pending else f'seq {result.seq}'}")
        if before is not None and not result.pending and not result.replayed:
            appended = self._entries()[len(before):]
            if [e.op_id for e in appended] == [result.op_id]:
                assert not must, f"{what} by {agent} was accepted although the model says it breaks {sorted(must)}"
                reach.reached(reach.OUTCOME, "accepted as predicted")
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
        """After a restart or a partition a client reconnects within its backoff (at most ~2 s); its live stream,
        if it has one, is waited for too, so the next step never meets it still in its own backoff."""
        self.proxy.heal(client.agent_id)
        wait_until(lambda: client.status().online, message=f"{client.agent_id} did not reconnect")
        if client.live is not None:
            wait_until(lambda: client.live.connected.is_set() or client.live.failure is not None, timeout=45,
                       message=f"{client.agent_id}'s live stream did not reconnect")
            assert client.live.failure is None, f"{client.agent_id}'s live updates stopped: {client.live.failure}"

    def _replica(self, entries: list[pb.ChangelogEntry]) -> dict:
        """The projection snapshot of a brand-new cache that applied `entries` without interruption."""
        return self._replica_read(entries, lambda cache: cache.snapshot())

    def _replica_topics(self, entries: list[pb.ChangelogEntry]) -> list[tuple]:
        """The topics (id, scope, size, label, representative) a brand-new cache that applied `entries` lists."""
        from mnemosync.kernel import topics

        listed = self._replica_read(entries, lambda cache: cache.read(topics.compute, limit=topics.MAX_LIMIT).topics)
        return [(t.id, t.scope, t.size, t.label, t.representative_id) for t in listed]

    def _replica_read(self, entries: list[pb.ChangelogEntry], read):
        """What `read(cache)` gives on a brand-new cache that applied `entries` without interruption."""
        from mnemosync.agent.cache import Cache
        from mnemosync.kernel.codec import entry_from_proto

        self.replicas += 1
        cache = Cache(self.tmp / "replicas" / f"{self.replicas}.db")
        try:
            cache.apply([entry_from_proto(e) for e in entries])
            return read(cache)
        finally:
            cache.close()

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
        offsets = {a.agent_id: a.acked_seq for a in stats.agents}
        counts = (stats.head_seq, stats.live_memories, stats.archived_memories, dict(stats.by_layer))
        return [ref.entry_digest(e) for e in entries], memories, conflicts, counts, offsets

    def _store_snapshot(self) -> dict:
        from mnemosync.server.app import open_store
        from mnemosync.server.settings import ServerSettings

        with open_store(ServerSettings(data_dir=self.tmp / "server", synchronous="normal", store=self.store)) as store:
            assert store.log.verify().ok, "the hash chain does not verify"
            return snapshot(store)

    def _settle(self) -> None:
        """Waits until every client is back online and has sent its queued writes.

        The live client flushes on reconnect in the background; doing it here makes the order of
        the next steps independent of timing, so a failure replays and shrinks the same way.
        """
        for client in self.clients.values():
            self._wait_online(client)
        for client in self.clients.values():
            client.flush()

    def _bring_up(self) -> None:
        """Starts the server again and waits until everyone is back (see `_settle`)."""
        self.server = self._serve()
        self.up = True
        self._settle()

    def _acked_offsets(self) -> dict[str, int]:
        return {a.agent_id: a.acked_seq for a in self._stats().agents}

    def _append_raw(self, agent: str, *ops: pb.Operation) -> pb.AppendResponse:
        """Appends operations as `agent` straight to the server (vectors of the suite's model), recording them."""
        model = self.embedder.fingerprint
        raw = RawAgent(self.address, agent)
        try:
            response = raw.append(*ops, model=codec.model_proto(model))
        finally:
            raw.close()
        for op in ops:
            self.made.add((agent, op.op_id))
        return response

    def teardown(self):
        """Closes the clients, stops the server and removes the files (the invariants check before this)."""
        for client in self.clients.values():
            client.close()
        self.proxy.close()
        self.server.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
