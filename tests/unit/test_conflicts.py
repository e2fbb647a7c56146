"""`mnemosync.kernel.conflict_projection` and `mnemosync.kernel.revisions`: write and semantic conflicts, the visible
revision whatever the arrival order, and resolutions, on the server and folded in caches.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid

import grpc
import numpy as np
import pytest

from mnemosync.agent.cache import Cache
from mnemosync.kernel.codec import entry_from_proto
from mnemosync.server import maintenance
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, fake_vector, snapshot, update_op

POLICY = """
[agents.human]
authority = 1

[agents.lead]
authority = 2

[agents.bot]
authority = 5

[agents.ops]
authority = 4
admin = true
"""


@pytest.fixture
def cluster(tmp_path):
    """start(name) -> (running server, agent factory); each name gets its own data directory."""
    with contextlib.ExitStack() as stack:
        def start(name: str = "server"):
            running = stack.enter_context(run_server(dev_settings(tmp_path, policy=POLICY, name=name)))

            def agent(agent_id: str) -> RawAgent:
                made = RawAgent(running.address, agent_id)
                stack.callback(made.close)
                return made

            return running, agent

        yield start


def fold(agent: RawAgent, path) -> Cache:
    """A real agent cache folded from the agent's Sync stream (as agent_sync does)."""
    cache = Cache(path)
    cache.apply([entry_from_proto(m) for m in agent.sync(cache.offset)])
    return cache


def conflicts_of(agent: RawAgent, **request) -> list[pb.Conflict]:
    return list(agent.call("ListConflicts", pb.ListConflictsRequest(**request)).conflicts)


def get_conflict(agent: RawAgent, conflict_id: int) -> pb.Conflict:
    return agent.call("GetConflict", pb.GetConflictRequest(id=conflict_id)).conflict


def resolve_op(memory_id: str, base_version: int, conflict_id: int, **choice) -> pb.Operation:
    if "merged_content" in choice:
        choice["embedding"] = fake_vector(choice["merged_content"])
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base_version,
                        resolve_conflict=pb.ResolveConflictOp(conflict_id=conflict_id, **choice))


def forget_op(memory_id: str, base_version: int) -> pb.Operation:
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base_version,
                        forget=pb.ForgetOp(reason="outdated"))


def near(text: str, noise: float = 0.01) -> list[float]:
    """A vector within a hair of `text`'s (cosine about 0.9999)."""
    v = np.asarray(fake_vector(text)) + noise * np.asarray(fake_vector(text + " noise"))
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


def test_two_agents_updating_from_the_same_version_open_one_conflict_keeping_both_revisions(cluster, tmp_path):
    running, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("The cache TTL is 60s").memory_id
    first = a.append(update_op(memory_id, 1, "The cache TTL is 120s")).results[0]
    second = b.append(update_op(memory_id, 1, "The cache TTL is 30s")).results[0]
    assert first.conflict_id == 0 and second.conflict_id == second.seq
    listed = conflicts_of(a)
    assert [c.id for c in listed] == [second.conflict_id]
    conflict = get_conflict(b, second.conflict_id)
    assert conflict.kind == "write" and conflict.memory_id == memory_id and not conflict.resolved
    assert [(r.revision, r.agent_id, r.content, r.base_version, r.visible) for r in conflict.revisions] == [
        (1, "agent-a", "The cache TTL is 120s", 1, True),
        (2, "agent-b", "The cache TTL is 30s", 1, False),
    ]
    assert list(conflict.agents) == ["agent-a", "agent-b"] and conflict.memory_version == 3
    caches = [fold(a, tmp_path / "a.db"), fold(b, tmp_path / "b.db")]
    server_view = snapshot(running.store)[memory_id]
    for cache in caches:
        cached = cache.snapshot()[memory_id]
        assert cached["content"] == "The cache TTL is 120s" and cached["version"] == 3
        assert cached == server_view
        assert [c.id for c in cache.conflicts()] == [second.conflict_id]
        cache.close()


def test_a_write_conflict_holds_the_common_base_both_sides_were_made_from_on_the_server_and_in_caches(cluster,
                                                                                                       tmp_path):
    _, agent = cluster()
    a, b, c = agent("agent-a"), agent("agent-b"), agent("agent-c")
    memory_id = a.add("The cache TTL is 60s").memory_id
    a.append(update_op(memory_id, 1, "The cache TTL is 45s"))
    a.append(update_op(memory_id, 2, "The cache TTL is 120s"))
    second = b.append(update_op(memory_id, 2, "The cache TTL is 30s")).results[0]
    c.append(update_op(memory_id, 1, "The cache TTL is 10s"))  # a third writer, from an older version still
    base = get_conflict(b, second.conflict_id).base
    assert (base.revision, base.version, base.content, base.agent_id, base.seq) == (
        0, 1, "The cache TTL is 60s", "agent-a", 1)  # the version every revision descends from
    cache = fold(a, tmp_path / "a.db")
    cached = cache.conflict(second.conflict_id).base
    assert (cached.version, cached.state["content"]) == (1, "The cache TTL is 60s")
    assert [x.base.version for x in cache.conflicts()] == [1]
    cache.close()


@pytest.mark.parametrize("order", [("lead", "agent-a"), ("agent-a", "lead")])
def test_the_higher_authority_revision_is_visible_whatever_order_the_writes_arrive_in(cluster, order):
    _, agent = cluster()
    writers = {"lead": agent("lead"), "agent-a": agent("agent-a")}
    memory_id = writers["agent-a"].add("Deploys run from main", tags=["deploy"]).memory_id
    changes = {
        "lead": update_op(memory_id, 1, "Deploys run from the release branch"),
        "agent-a": update_op(memory_id, 1, "Deploys run from main after CI", tags=["deploy", "ci"],
                             replace_tags=True),
    }
    for writer in order:
        writers[writer].append(changes[writer])
    memory = writers["lead"].get(memory_id)
    assert memory.content == "Deploys run from the release branch" and list(memory.tags) == ["deploy"]
    assert memory.version == 3 and memory.authority == 2
    conflict = get_conflict(writers["lead"], memory.open_conflicts[0])
    visible = [r for r in conflict.revisions if r.visible]
    assert [(r.agent_id, r.authority) for r in visible] == [("lead", 2)]
    assert sorted(r.content for r in conflict.revisions) == [
        "Deploys run from main after CI", "Deploys run from the release branch"]


def test_every_arrival_order_of_three_concurrent_writes_shows_the_same_revision_in_every_replica(cluster, tmp_path):
    running, agent = cluster()
    writers = {name: agent(name) for name in ("human", "lead", "agent-a")}
    for n, order in enumerate(itertools.permutations(writers)):
        memory_id = writers["agent-a"].add(f"Release {n} ships on Monday").memory_id
        for name in order:
            writers[name].append(update_op(memory_id, 1, f"Release {n} ships on {name}'s day"))
        memory = writers["lead"].get(memory_id)
        assert (memory.content, memory.authority, memory.version) == (f"Release {n} ships on human's day", 1, 4)
    cache = fold(writers["agent-a"], tmp_path / "a.db")
    assert cache.snapshot() == snapshot(running.store)
    assert len(cache.conflicts()) == 6
    cache.close()


def test_with_equal_authority_the_earlier_write_stays_visible_and_a_third_writer_joins_the_same_conflict(cluster):
    _, agent = cluster()
    a, b, c = agent("agent-a"), agent("agent-b"), agent("agent-c")
    memory_id = a.add("Use Postgres 15").memory_id
    b.append(update_op(memory_id, 1, "Use Postgres 16"))
    first_stale = a.append(update_op(memory_id, 1, "Use Postgres 14")).results[0]
    second_stale = c.append(update_op(memory_id, 2, "Use Postgres 17")).results[0]
    assert first_stale.conflict_id == second_stale.conflict_id
    assert len(conflicts_of(a)) == 1
    conflict = get_conflict(a, first_stale.conflict_id)
    assert [r.content for r in conflict.revisions] == ["Use Postgres 16", "Use Postgres 14", "Use Postgres 17"]
    assert conflict.visible_revision == 1 and a.get(memory_id).content == "Use Postgres 16"


def test_a_stale_write_that_says_what_the_memory_already_says_opens_no_conflict(cluster):
    _, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("Lint with ruff").memory_id
    a.append(update_op(memory_id, 1, "Lint with ruff and mypy"))
    same = b.append(update_op(memory_id, 1, "Lint with ruff and mypy")).results[0]
    assert same.conflict_id == 0 and same.version == 3
    assert conflicts_of(a) == []


def test_later_writes_on_a_conflicted_memory_work_and_change_the_visible_revision(cluster, tmp_path):
    running, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("Backups run nightly").memory_id
    a.append(update_op(memory_id, 1, "Backups run nightly at 02:00"))
    conflict_id = b.append(forget_op(memory_id, 1)).results[0].conflict_id
    later = a.append(update_op(memory_id, 3, "Backups run nightly at 03:00")).results[0]
    assert later.conflict_id == 0 and later.version == 4
    memory = a.get(memory_id)
    assert memory.content == "Backups run nightly at 03:00" and not memory.archived
    assert list(memory.open_conflicts) == [conflict_id]
    revisions = get_conflict(a, conflict_id).revisions
    assert (revisions[0].content, revisions[0].version, revisions[0].visible) == (
        "Backups run nightly at 03:00", 4, True)
    assert revisions[1].archived and revisions[1].agent_id == "agent-b"
    assert fold(b, tmp_path / "b.db").snapshot() == snapshot(running.store)


def test_a_stale_revision_is_made_from_the_version_its_writer_saw(cluster):
    _, agent = cluster()
    lead, a = agent("lead"), agent("agent-a")
    memory_id = a.add("The API rate limit is 100/s", tags=["api"]).memory_id
    a.append(update_op(memory_id, 1, tags=["api", "limits"], replace_tags=True, importance=0.9))
    lead.append(update_op(memory_id, 1, "The API rate limit is 200/s"))
    memory = a.get(memory_id)
    # The lead saw version 1: its revision keeps version 1's tags and importance, not agent-a's.
    assert (memory.content, list(memory.tags), memory.importance) == ("The API rate limit is 200/s", ["api"], 0.5)
    assert memory.authority == 2


def test_resolving_by_keeping_a_revision_replicates_closes_the_conflict_and_records_who_and_when(cluster, tmp_path):
    running, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("The queue is RabbitMQ").memory_id
    a.append(update_op(memory_id, 1, "The queue is Kafka"))
    conflict_id = b.append(update_op(memory_id, 1, "The queue is SQS")).results[0].conflict_id
    cache_b = fold(b, tmp_path / "b.db")
    resolved = b.append(resolve_op(memory_id, 3, conflict_id, keep_revision=2, note="we moved to AWS")).results[0]
    assert resolved.version == 4
    cache_b.apply([entry_from_proto(m) for m in b.sync(cache_b.offset)])
    cache_a = fold(a, tmp_path / "a.db")
    for view in (a.get(memory_id), cache_a.get(memory_id), cache_b.get(memory_id)):
        assert view.content == "The queue is SQS" and view.version == 4 and not view.open_conflicts
    conflict = get_conflict(a, conflict_id)
    assert conflict.resolved and conflict.resolved_by == "agent-b" and conflict.resolved_seq == resolved.seq
    assert conflict.resolution == "keep" and conflict.kept_revision == 2 and conflict.note == "we moved to AWS"
    assert conflict.resolved_at_ms >= conflict.opened_at_ms
    assert cache_a.conflict(conflict_id).resolved_by == "agent-b"
    assert conflicts_of(a) == [] and [c.id for c in conflicts_of(a, include_resolved=True)] == [conflict_id]
    assert cache_a.snapshot() == snapshot(running.store) == cache_b.snapshot()
    with pytest.raises(grpc.RpcError) as again:
        a.append(resolve_op(memory_id, 4, conflict_id, keep_revision=1))
    assert again.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already resolved by agent-b" in again.value.details()


def test_resolving_with_merged_content_reindexes_the_memory(cluster):
    _, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("Retries: 3").memory_id
    a.append(update_op(memory_id, 1, "Retries: 5"))
    conflict_id = b.append(update_op(memory_id, 1, "Retries: 3 with backoff")).results[0].conflict_id
    merged = "Retries: 5 with exponential backoff"
    a.append(resolve_op(memory_id, 3, conflict_id, merged_content=merged))
    assert a.get(memory_id).content == merged
    assert a.search("exponential")[0].memory.id == memory_id
    assert a.search(vector=fake_vector(merged), limit=1)[0].score.vector_distance == pytest.approx(0, abs=1e-5)
    assert get_conflict(a, conflict_id).resolution == "merged"


def test_resolving_needs_the_strongest_authority_in_the_conflict_or_an_admin(cluster):
    _, agent = cluster()
    lead, a, bot, ops = agent("lead"), agent("agent-a"), agent("bot"), agent("ops")
    memory_id = a.add("Feature flags live in LaunchDarkly").memory_id
    a.append(update_op(memory_id, 1, "Feature flags live in Unleash"))
    conflict_id = lead.append(update_op(memory_id, 1, "Feature flags live in our own service")).results[0].conflict_id
    for weaker in (a, bot):
        with pytest.raises(grpc.RpcError) as err:
            weaker.append(resolve_op(memory_id, 3, conflict_id, keep_revision=1))
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert err.value.details().startswith("resolve-needs-authority: conflict")
    assert ops.append(resolve_op(memory_id, 3, conflict_id, keep_revision=1)).results[0].version == 4
    assert get_conflict(a, conflict_id).resolved_by == "ops"


def test_a_resolution_made_on_an_outdated_view_is_refused(cluster):
    _, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    memory_id = a.add("Logs go to Loki").memory_id
    a.append(update_op(memory_id, 1, "Logs go to Elasticsearch"))
    conflict_id = b.append(update_op(memory_id, 1, "Logs go to CloudWatch")).results[0].conflict_id
    with pytest.raises(grpc.RpcError) as err:
        a.append(resolve_op(memory_id, 2, conflict_id, keep_revision=1))
    assert err.value.code() == grpc.StatusCode.ABORTED and "is at version 3" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        a.append(resolve_op(memory_id, 3, conflict_id, keep_revision=7))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "1 to 2" in err.value.details()


def test_a_near_duplicate_of_another_agents_memory_is_stored_and_flagged(cluster, tmp_path):
    running, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    existing = a.add("The staging database is on port 5432").memory_id
    own_near = a.add("The staging database is on port 5434",
                     vector=near("The staging database is on port 5432", noise=0.05))
    assert own_near.conflict_id == 0  # near its author's own memory: not a conflict
    flagged = b.add("The staging database is on port 5433",
                    vector=near("The staging database is on port 5432"))
    assert flagged.conflict_id == flagged.seq
    unrelated = b.add("The staging cache is Redis")
    assert unrelated.conflict_id == 0
    conflict = get_conflict(a, flagged.conflict_id)
    assert (conflict.kind, conflict.memory_id, conflict.other_memory_id) == ("semantic", flagged.memory_id, existing)
    assert conflict.similarity > 0.99
    assert [(r.revision, r.memory_id, r.agent_id) for r in conflict.revisions] == [
        (1, existing, "agent-a"), (2, flagged.memory_id, "agent-b")]
    assert list(a.get(existing).open_conflicts) == [flagged.conflict_id]
    b.append(resolve_op(flagged.memory_id, 1, flagged.conflict_id, keep_revision=1))
    assert a.get(flagged.memory_id).archived and not a.get(existing).archived
    assert fold(a, tmp_path / "a.db").snapshot() == snapshot(running.store)


def test_keeping_both_memories_of_a_semantic_conflict_changes_neither(cluster):
    _, agent = cluster()
    a, b = agent("agent-a"), agent("agent-b")
    existing = a.add("Release on Tuesdays").memory_id
    flagged = b.add("Release on Tuesdays and Thursdays", vector=near("Release on Tuesdays"))
    b.append(resolve_op(flagged.memory_id, 1, flagged.conflict_id, keep_all=True))
    assert a.get(existing).content == "Release on Tuesdays" and not a.get(flagged.memory_id).archived
    assert get_conflict(a, flagged.conflict_id).resolution == "keep_all"


def test_a_near_duplicate_that_contradicts_a_higher_authority_is_blocked_and_nothing_is_stored(cluster):
    _, agent = cluster()
    human, bot = agent("human"), agent("bot")
    human.add("Production deploys need two approvals")
    before = len(bot.sync(0))
    with pytest.raises(grpc.RpcError) as err:
        bot.add("Production deploys need one approval", vector=near("Production deploys need two approvals"))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    details = err.value.details()
    assert details.startswith("semantic-conflict-higher-authority:") and "written by authority 1" in details
    assert len(bot.sync(0)) == before


def _at_cosine(text: str, cosine: float) -> list[float]:
    """A unit vector at exactly `cosine` to `text`'s (`fake_vector`): a writer's chosen vector."""
    u = np.asarray(fake_vector(text), dtype=np.float64)
    w = np.asarray(fake_vector(text + " elsewhere"), dtype=np.float64)
    w -= (w @ u) * u
    v = cosine * u + np.sqrt(1 - cosine ** 2) * w / np.linalg.norm(w)
    return v.astype(np.float32).tolist()


def test_a_bot_cannot_contradict_a_human_by_choosing_a_vector_below_the_threshold(cluster):
    """Issue 37 item 11: a bot's near copy of a human's rule, saying the opposite, with the human's vector nudged to
    cosine 0.872 (under the 0.95 threshold), was no semantic conflict: the check trusted the writer's vector. The
    server has no model, but it can read the words: a near copy by an automated agent of a stronger authority's
    memory is blocked whatever its vector says."""
    _, agent = cluster()
    human, bot, lead = agent("human"), agent("bot"), agent("lead")
    rule = "Deploys to production require two reviewers"
    human.add(rule)
    before = len(bot.sync(0))
    with pytest.raises(grpc.RpcError) as err:
        bot.add("Deploys to production require zero reviewers", vector=_at_cosine(rule, 0.872))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert err.value.details().startswith(
        "semantic-conflict-higher-authority: the new memory's text is a near copy (word sequence 0.83 alike) of "
        "memory ") and "written by authority 1" in err.value.details()
    assert len(bot.sync(0)) == before
    unrelated = bot.add("Deploys to staging run the smoke tests first", vector=_at_cosine(rule, 0.5))
    assert unrelated.seq and unrelated.conflict_id == 0  # sharing a few words is no near copy
    assert lead.add("Deploys to production require one reviewer", vector=_at_cosine(rule, 0.872)).seq  # not automated


def test_the_semantic_threshold_comes_from_the_policy_file(tmp_path):
    with run_server(dev_settings(tmp_path, policy="[conflicts]\nsemantic_threshold = 0\n", name="off")) as running:
        a, b = RawAgent(running.address, "agent-a"), RawAgent(running.address, "agent-b")
        a.add("Tabs, not spaces")
        assert b.add("Spaces, not tabs", vector=near("Tabs, not spaces")).conflict_id == 0
        a.close()
        b.close()


def test_rebuilding_the_projections_reproduces_conflicts_and_visible_revisions(cluster):
    running, agent = cluster()
    a, b, lead = agent("agent-a"), agent("agent-b"), agent("lead")
    ids = [a.add(f"memory {i}").memory_id for i in range(4)]
    a.append(update_op(ids[0], 1, "memory 0, first"))
    b.append(update_op(ids[0], 1, "memory 0, second"))
    lead.append(update_op(ids[1], 1, "memory 1 by the lead"))
    conflict_id = b.append(forget_op(ids[1], 1)).results[0].conflict_id
    lead.append(resolve_op(ids[1], 3, conflict_id, keep_revision=1))
    b.append(add_op("memory 2, nearly", vector=near("memory 2")))
    live = snapshot(running.store)
    maintenance.rebuild(running.store)
    assert snapshot(running.store) == live
    assert running.store.log.verify().ok  # the conflict marks and authorities are inside the hash chain


def test_a_weak_agent_resending_stale_writes_holds_one_hidden_revision_and_the_changelog_keeps_every_write(
        cluster, tmp_path):
    running, agent = cluster()
    human, bot, other = agent("human"), agent("bot"), agent("agent-a")
    memory_id = bot.add("Releases are cut on Tuesdays").memory_id
    human.append(update_op(memory_id, 1, "Releases are cut on Wednesdays"))  # the human's word now
    sent = [bot.append(update_op(memory_id, 1, f"Releases are cut whenever, take {i}")).results[0] for i in range(20)]
    conflict_id = sent[0].conflict_id
    assert {r.conflict_id for r in sent} == {conflict_id}
    other.append(update_op(memory_id, 1, "Releases are cut on Fridays"))
    bot.append(forget_op(memory_id, 1))
    conflict = get_conflict(human, conflict_id)
    assert [(r.revision, r.agent_id, r.content, r.archived, r.visible) for r in conflict.revisions] == [
        (1, "human", "Releases are cut on Wednesdays", False, True),
        (2, "bot", "Releases are cut on Tuesdays", True, False),  # its newest stale write: the forget
        (3, "agent-a", "Releases are cut on Fridays", False, False),
    ]
    assert human.get(memory_id).content == "Releases are cut on Wednesdays"
    entries = human.sync(0)
    stale = [e for e in entries if e.agent_id == "bot" and e.op != "add"]
    assert len(stale) == 21  # nothing acknowledged is lost
    assert [e.conflict.replaces_revision for e in stale] == [0] + [2] * 20
    cache = fold(human, tmp_path / "human.db")
    assert cache.snapshot()[memory_id] == snapshot(running.store)[memory_id]
    cache.close()
    live = snapshot(running.store)
    maintenance.rebuild(running.store)
    assert snapshot(running.store) == live and running.store.log.verify().ok


def test_an_agent_whose_revision_is_shown_adds_at_most_one_more(cluster):
    running, agent = cluster()
    a, lead = agent("agent-a"), agent("lead")
    memory_id = a.add("The staging database is pg-2").memory_id
    a.append(update_op(memory_id, 1, "The staging database is pg-3"))
    first = lead.append(update_op(memory_id, 1, "The staging database is pg-4")).results[0]  # stronger: shown
    for i in range(5):
        lead.append(update_op(memory_id, 1, f"The staging database is pg-{5 + i}"))
    conflict = get_conflict(a, first.conflict_id)
    assert [(r.agent_id, r.content, r.visible) for r in conflict.revisions] == [
        ("agent-a", "The staging database is pg-3", False),
        ("lead", "The staging database is pg-4", True),
        ("lead", "The staging database is pg-9", False),
    ]
