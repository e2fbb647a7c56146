"""The memory lifecycle end to end (issue 15): the real server, real SQLite, real caches, a clock moved by hand.

Expected numbers are computed here from the seeds' formulas (seed 000's two-component retention and FSRS
growth, seed 002's layer table), not read from the server's code.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import replace

import grpc
import pytest

from mnemosync.agent.cache import Cache
from mnemosync.kernel import codec, event_time
from mnemosync.kernel.lifecycle import LifecycleSettings
from mnemosync.server import maintenance
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, mnemosync, refused, usage, wait_until

DAY = 86_400.0
POLICY = """
[agents.human]
authority = 1
admin = true
"""
FACTUAL_S0 = math.log(2) / 0.10  # seed 002: factual decays at 0.10 a day; the fast half-life in days


def retention(days: float, stability: float) -> float:
    """Seed 000: 0.7 fast + 0.3 slow exponential, the slow half-life ten times the fast one."""
    return 0.7 * 0.5 ** (days / stability) + 0.3 * 0.5 ** (days / (10 * stability))


@pytest.fixture
def running(tmp_path, clock):
    settings = dev_settings(tmp_path, policy=POLICY)
    with run_server(settings, clock=clock.clock) as server:
        yield server


@pytest.fixture
def human(running):
    agent = RawAgent(running.address, "human")
    yield agent
    agent.close()


@pytest.fixture
def agent(running):
    agent = RawAgent(running.address, "agent-a")
    yield agent
    agent.close()


def sweep(human: RawAgent, *, dry_run: bool = False, now_ms: int = 0) -> pb.DecaySweepResponse:
    return human.call("DecaySweep", pb.DecaySweepRequest(dry_run=dry_run, now_ms=now_ms))


def archived(running, memory_id: str) -> bool:
    """Whether the memory is archived, read without counting as a use (an agent's Get is one)."""
    return running.store.reads.get(memory_id).archived


def add(agent: RawAgent, content: str, **fields) -> str:
    op = add_op(content, **{k: v for k, v in fields.items() if k in ("tags", "layer", "type")})
    for key in ("protected", "importance"):
        if key in fields:
            setattr(op.add, key, fields[key])
    return agent.append(op).results[0].memory_id


def test_a_factual_memory_never_used_is_archived_only_after_its_layers_age_and_threshold(running, human, agent, clock):
    faded = add(agent, "the staging database lives on host db-7", importance=0.2)
    important = add(agent, "the production database lives on host db-1", importance=1.0)
    clock.advance(29 * DAY)
    assert 0.2 * retention(29, FACTUAL_S0) < 0.1  # under the factual threshold already ...
    report = sweep(human)
    assert report.archived == 0 and not archived(running, faded)  # ... but younger than the layer's 30 days
    clock.advance(2 * DAY)
    assert 1.0 * retention(31, FACTUAL_S0) > 0.1
    report = sweep(human)
    assert [(d.memory_id, d.op) for d in report.decisions] == [(faded, "archive")]
    assert "factual threshold 0.1" in report.decisions[0].reason
    assert archived(running, faded) and not archived(running, important)
    entry = [e for e in agent.sync() if e.op == "archive"][0]
    assert (entry.agent_id, entry.authority) == ("mnemosync:system", 6)
    assert entry.operation.archive.strength == pytest.approx(retention(31, FACTUAL_S0), abs=1e-4)


def test_constitutional_protected_and_protected_tag_memories_are_never_archived(running, human, agent, clock):
    constitutional = add(human, "we never store customer passwords", layer=1)
    protected = add(agent, "the on-call phone number is in the runbook", protected=True)
    tagged = add(agent, "we chose SQLite for the embedded store", tags=("decision",))
    ephemeral = add(agent, "this afternoon the build was slow", layer=4)
    clock.advance(3 * 365 * DAY)
    report = sweep(human)
    assert {d.memory_id for d in report.decisions if d.op == "archive"} == {ephemeral}
    for kept in (constitutional, protected, tagged):
        assert not archived(running, kept)
    assert archived(running, ephemeral)


def test_a_fading_memory_recalled_gains_more_stability_than_one_recalled_fresh(human, agent, clock):
    fresh = add(agent, "deploys go out on Tuesdays")
    fading = add(agent, "the VPN needs the legacy client on macOS")
    created_ms = clock.now_ms
    clock.advance(60)
    agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[fresh], kind=pb.USE_KIND_RECALL))
    clock.advance(10 * DAY - 60)
    agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[fading], kind=pb.USE_KIND_RECALL))
    sweep(human)
    decays = {e.memory_id: e.operation.decay for e in agent.sync() if e.op == "decay"}
    r_fresh, r_fading = retention(60 / DAY, FACTUAL_S0), retention(10, FACTUAL_S0)
    assert decays[fresh].stability_days == pytest.approx(FACTUAL_S0 * math.exp(1 - r_fresh), abs=1e-4)
    assert decays[fading].stability_days == pytest.approx(FACTUAL_S0 * math.exp(1 - r_fading), abs=1e-4)
    assert decays[fading].stability_days > decays[fresh].stability_days
    assert (decays[fading].uses, decays[fading].last_used_ms) == (1, created_ms + round(10 * DAY * 1000))


def test_a_sweep_run_twice_for_the_same_time_writes_nothing_the_second_time(human, agent, clock):
    ids = [add(agent, f"note {i} about the release train", layer=4 if i % 2 else 3) for i in range(6)]
    agent.call("RecordUse", pb.RecordUseRequest(memory_ids=ids[:2]))
    clock.advance(40 * DAY)
    first = sweep(human)
    assert first.entries_written > 0 and first.archived > 0
    second = sweep(human, now_ms=first.as_of_ms)
    assert (second.entries_written, second.decayed, second.archived) == (0, 0, 0)
    assert second.head_seq == first.head_seq


def test_a_dry_run_reports_what_it_would_archive_and_writes_nothing(running, human, agent, clock):
    memory = add(agent, "a scratch note from a debugging session", layer=4)
    clock.advance(30 * DAY)
    head = agent.call("Stats", pb.StatsRequest()).head_seq
    report = sweep(human, dry_run=True)
    assert report.dry_run and report.entries_written == 0 and report.archived == 1
    assert report.decisions[0].memory_id == memory and "ephemeral threshold 0.15" in report.decisions[0].reason
    assert agent.call("Stats", pb.StatsRequest()).head_seq == head and not archived(running, memory)


def test_two_agents_caches_show_the_same_archive_state_after_a_sweep(running, human, agent, clock, tmp_path):
    other = RawAgent(running.address, "agent-b")
    try:
        ids = [add(agent, f"fact {i} about the payment service", layer=3 + i % 2) for i in range(8)]
        add(other, "a fact agent b wrote about the queue")
        agent.call("RecordUse", pb.RecordUseRequest(memory_ids=ids[:3]))
        clock.advance(45 * DAY)
        report = sweep(human)
        assert report.archived > 0
        caches = []
        for name, client in (("a", agent), ("b", other)):
            cache = Cache(tmp_path / f"cache-{name}.db")
            cache.apply([codec.entry_from_proto(e) for e in client.sync()])
            caches.append(cache)
        a, b = (c.snapshot() for c in caches)
        assert a == b
        assert {k for k, v in a.items() if v["archived"]} == {d.memory_id for d in report.decisions
                                                               if d.op == "archive"}
        assert all(a[i]["lifecycle"] is not None for i in ids[:3])
        for cache in caches:
            cache.close()
    finally:
        other.close()


def test_a_frequently_used_memory_ranks_above_an_equally_relevant_unused_one_and_the_parts_add_up(agent):
    unused = add(agent, "the cache warmer runs nightly alpha")
    used = add(agent, "the cache warmer runs nightly beta")
    plain = agent.search("cache warmer nightly", mode=pb.SEARCH_MODE_KEYWORD, fusion_only=True)
    assert [r.memory.id for r in plain] == [unused, used]  # a tie, broken by row order
    assert plain[0].score.fused == pytest.approx(plain[1].score.fused)
    for _ in range(5):
        agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[used]))
    ranked = agent.search("cache warmer nightly", mode=pb.SEARCH_MODE_KEYWORD)
    assert [r.memory.id for r in ranked] == [used, unused]
    for r in ranked:
        s = r.score
        assert s.final == pytest.approx(s.relevance_part + s.activation_part + s.confidence_part
                                        + s.importance_part)
        assert s.relevance_part == pytest.approx(0.60 * s.relevance)
        assert s.activation_part == pytest.approx(0.25 * s.activation / 10)
        assert s.confidence_part == pytest.approx(0.15 * s.confidence)
    assert ranked[0].score.activation - ranked[1].score.activation == pytest.approx(math.log(6), abs=1e-6)


def test_use_counts_cannot_be_inflated_an_id_counts_once_per_call_and_per_agent_a_few_times_a_day(
        running, human, agent, clock):
    """One RecordUse listing an id 500 times counted 500 uses, and one sweep lifted the memory's activation from
    0.69 to 6.9, past the never-archived level. An id counts once per call, and an agent's uses of one memory
    count at most MAX_USES_PER_AGENT_DAY times a day (Gets included)."""
    from mnemosync.server.usage_stats import MAX_USES_PER_AGENT_DAY

    memory = add(agent, "the staging database is rebuilt every Sunday", layer=4)
    assert agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory] * 500)).counted == 1
    counted = [agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory])).counted for _ in range(10)]
    agent.get(memory)
    assert sum(counted) == MAX_USES_PER_AGENT_DAY - 1
    running.store.lifecycle.flush_uses()
    assert usage(running.store, memory).uses == MAX_USES_PER_AGENT_DAY
    assert human.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory, memory])).counted == 1  # another agent
    clock.advance(DAY)
    assert agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory])).counted == 1  # a new day
    assert usage(running.store, memory).uses == MAX_USES_PER_AGENT_DAY + 2


def test_archived_memories_leave_default_search_but_stay_reachable_and_recall_brings_one_back(
        running, human, agent, clock):
    old = add(agent, "the old build server was called hermes")
    live = add(agent, "the new build server is called apollo, replacing hermes", importance=1.0)
    agent.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=live,
                              link=pb.LinkOp(target_id=old, relation="supersedes")))
    clock.advance(60 * DAY)
    sweep(human)
    assert archived(running, old)
    assert [r.memory.id for r in agent.search("hermes build server")] == [live]
    assert {r.memory.id for r in agent.search("hermes build server",
                                              filter=pb.SearchFilter(include_archived=True))} == {live, old}
    assert [link.target_id for link in agent.get(live).links] == [old]
    version = running.store.reads.get(old).version  # read without counting as a use
    agent.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=old, base_version=version,
                              restore=pb.RestoreOp()))
    agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[old], kind=pb.USE_KIND_RECALL))
    assert not archived(running, old)
    sweep(human)
    decay = [e.operation.decay for e in agent.sync() if e.op == "decay" and e.memory_id == old][-1]
    assert decay.stability_days == pytest.approx(FACTUAL_S0 * math.exp(1 - retention(60, FACTUAL_S0)), abs=1e-3)


def test_lifecycle_calls_refuse_bad_input_with_a_precise_status(human, agent):
    memory = add(agent, "a memory to use")
    code, message = refused(lambda: agent.call("RecordUse", pb.RecordUseRequest()))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "memory_ids" in message
    code, message = refused(lambda: agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory], kind=9)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "kind" in message
    code, message = refused(lambda: agent.call("DecaySweep", pb.DecaySweepRequest()))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "admin" in message
    code, message = refused(lambda: agent.append(pb.Operation(
        op_id=str(uuid.uuid4()), memory_id=memory, decay=pb.DecayOp(as_of_ms=1))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "lifecycle sweep only" in message


def test_uses_survive_a_restart_and_a_rebuild_empties_them_without_harm(tmp_path, clock):
    settings = dev_settings(tmp_path, policy=POLICY)
    with run_server(settings, clock=clock.clock) as server:
        agent = RawAgent(server.address, "agent-a")
        memory = add(agent, "the metrics dashboard is at /grafana")
        agent.get(memory)
        agent.get(memory)
        agent.close()
    with run_server(settings, clock=clock.clock) as server:
        assert usage(server.store, memory).uses == 2
        server.store.lifecycle.sweep()
        maintenance.rebuild(server.store)
        assert usage(server.store, memory).uses == 2  # the sweep's decay entry keeps what the statistics said
        agent = RawAgent(server.address, "agent-a")
        agent.get(memory)
        agent.close()
        assert usage(server.store, memory).uses == 3


def test_maintain_decay_prints_what_it_would_archive_and_why_then_archives_it(running, agent, clock, tmp_path):
    memory = add(agent, "the flaky test was retried twice today", layer=4)
    later = event_time.text(clock.now_ms + 20 * 86_400_000)
    connection = ("--server", running.address, "--agent-id", "human", "--insecure", "--cache-dir",
                  str(tmp_path / "cli-cache"))
    dry = mnemosync("maintain", "decay", "--dry-run", "--now", later, *connection)
    assert dry.returncode == 0, dry.stderr
    assert f"would archive {memory}: importance 0.50 x strength" in dry.stdout
    assert "ephemeral threshold 0.15" in dry.stdout and "nothing written (dry run)" in dry.stdout
    assert not archived(running, memory)
    done = mnemosync("maintain", "decay", "--now", later, "--json", *connection)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["archived"] == 1 and report["entries_written"] == 1 and archived(running, memory)
    refused_run = mnemosync("maintain", "decay", "--server", running.address, "--agent-id", "agent-a", "--insecure",
                            "--cache-dir", str(tmp_path / "cli-cache-a"))
    assert refused_run.returncode != 0 and "admin" in refused_run.stderr


def test_the_server_sweeps_on_its_own_every_interval_and_writes_gets_in_the_background(tmp_path, clock):
    settings = replace(dev_settings(tmp_path), lifecycle=LifecycleSettings(sweep_interval_seconds=0.5))
    with run_server(settings, clock=clock.clock) as server:
        agent = RawAgent(server.address, "agent-a")
        try:
            memory = add(agent, "a note about a one-off incident", layer=4)
            used = add(agent, "the incident runbook is in docs/incidents.md", layer=4)
            agent.get(used)
            wait_until(lambda: usage(server.store, used).uses == 1, message="the Get was never written")
            clock.advance(30 * DAY)
            wait_until(lambda: archived(server, memory), message="no sweep archived the faded memory")
            entry = [e for e in agent.sync() if e.op == "archive"][0]
            assert entry.memory_id == memory and entry.agent_id == "mnemosync:system"
        finally:
            agent.close()


def test_promotion_counts_distinct_days_not_uses_on_one_day(running, human, agent, clock):
    """Several uses on one day are one day of use: an ephemeral memory used three times today is not yet promoted
    (it needs uses on two distinct days); one more use tomorrow promotes it to the factual layer."""
    memory = add(agent, "the flaky integration test is test_billing_retry", layer=4)
    for _ in range(3):
        agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory]))
    assert usage(running.store, memory).use_days == 1
    human.call("Consolidate", pb.ConsolidateRequest())
    assert running.store.reads.get(memory).layer == 4
    clock.advance(DAY)
    agent.call("RecordUse", pb.RecordUseRequest(memory_ids=[memory]))
    assert usage(running.store, memory).use_days == 2
    human.call("Consolidate", pb.ConsolidateRequest())
    assert running.store.reads.get(memory).layer == 3


def test_type_weights_change_the_archive_order_as_seed_004s_formula_says(running, human, agent, clock):
    weights = {"general": 0.8, "problem": 0.9, "fact": 1.0, "decision": 1.3, "procedure": 1.4}  # fact: not in the seed
    made = {kind: add(agent, f"A {kind} memory about the staging host", type=kind, importance=0.5) for kind in weights}
    expected = {kind: next(d for d in range(31, 200) if 0.5 * retention(d, FACTUAL_S0) * w < 0.1)
                for kind, w in weights.items()}
    assert len(set(expected.values())) == len(weights)  # the weights alone separate them
    clock.advance(30 * DAY)
    gone: dict[str, int] = {}
    for day in range(31, max(expected.values()) + 1):
        clock.advance(DAY)
        for d in sweep(human).decisions:
            if d.op == "archive":
                kind = next(k for k, i in made.items() if i == d.memory_id)
                gone[kind] = day
                if weights[kind] != 1:
                    assert f"x {kind} weight {weights[kind]:g}" in d.reason
    assert gone == expected
    assert sorted(gone, key=gone.get) == sorted(weights, key=weights.get)  # lighter types go first
