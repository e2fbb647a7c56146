"""Consolidation end to end (issue 16): the real server and SQLite, real embeddings, real caches, a clock moved by
hand. Similarities in the comments are the real model's (all-MiniLM-L6-v2), measured when the test was written."""

from __future__ import annotations

import json
import uuid

import pytest

from mnemosync.kernel import topics
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import ManualClock, RawAgent, add_op, dev_settings, mnemosync, refused

DAY = 86_400.0
HOUR = 3600.0
POLICY = """
[agents.human]
authority = 1
admin = true

[agents.bot]
authority = 5
"""
STAGING = ["The staging database runs on host db-7 in Frankfurt.",  # cosine to the first: 1, 0.96, 0.97
           "Staging's database is on host db-7 (Frankfurt).",
           "The staging database is hosted on db-7, in Frankfurt."]
STAGING_FAR = "Our staging DB lives on the db-7 machine in Frankfurt."  # 0.86 to the first
DEPLOYS = ["Deploys go out every Tuesday after the standup.",
           "Release deployments happen on Tuesdays following standup."]  # 0.80: linked, not merged
UNRELATED = "Alice prefers dark mode in every editor."  # < 0.1 to all of the above


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def running(tmp_path, clock):
    with run_server(dev_settings(tmp_path, policy=POLICY), clock=clock.clock) as server:
        yield server


class Agent(RawAgent):
    """A RawAgent whose writes name the real model."""

    model: pb.EmbeddingModel

    def append(self, *ops: pb.Operation, model=None) -> pb.AppendResponse:
        return super().append(*ops, model=model or self.model)


@pytest.fixture
def agents(running, embedder):
    made = {}
    fp = embedder.fingerprint

    def agent(name: str) -> Agent:
        if name not in made:
            made[name] = Agent(running.address, name)
            made[name].model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        return made[name]

    yield agent
    for a in made.values():
        a.close()


@pytest.fixture
def add(agents, embedder, clock):
    def add(agent: str, content: str, **fields) -> str:
        clock.advance(1)  # each memory a second younger than the one before
        op = add_op(content, vector=embedder.embed(content), **{k: v for k, v in fields.items()
                                                                 if k in ("tags", "layer", "type", "scope")})
        if "protected" in fields:
            op.add.protected = fields["protected"]
        return agents(agent).append(op).results[0].memory_id

    return add


def consolidate(agents, **fields) -> pb.ConsolidateResponse:
    return agents("human").call("Consolidate", pb.ConsolidateRequest(**fields))


def links(running, memory_id: str) -> set[tuple[str, str, str]]:
    return {link[:3] for link in running.store.reads.get(memory_id).links}


def semantic(running, a: str, b: str) -> bool:
    """Whether the system linked a and b (a semantic link is symmetric; it starts at whichever came first)."""
    return ((b, "semantic", "mnemosync:system") in links(running, a)
            or (a, "semantic", "mnemosync:system") in links(running, b))


def test_three_near_duplicates_leave_one_survivor_the_others_superseded_and_linked_and_a_second_run_writes_nothing(
        running, agents, add):
    ids = [add("agent-a", text) for text in STAGING]
    deploys = [add("agent-a", text) for text in DEPLOYS]
    alone = add("agent-a", UNRELATED)
    dry = consolidate(agents, dry_run=True)
    assert dry.entries_written == 0 and dry.merged == 2 and not running.store.reads.get(ids[1]).archived
    report = consolidate(agents)
    survivor = ids[0]  # same author and layer: the oldest survives
    assert report.merged == 2
    for gone in ids[1:]:
        assert running.store.reads.get(gone).archived
        assert (gone, "supersedes", "mnemosync:system") in links(running, survivor)
    assert not running.store.reads.get(survivor).archived
    merges = [d for d in report.decisions if d.op == "archive"]
    assert all(d.reason.startswith(f"merged into {survivor}: cosine 0.9") for d in merges)
    assert semantic(running, *deploys)  # 0.80 > 0.5: linked
    assert not running.store.reads.get(deploys[0]).archived and not running.store.reads.get(deploys[1]).archived
    assert links(running, alone) == set() and all(alone not in {t for t, _, _ in links(running, m)}
                                                     for m in ids + deploys)
    entries = [e for e in agents("agent-a").sync() if e.agent_id == "mnemosync:system"]
    assert {e.op for e in entries} == {"link", "archive"} and all(e.authority == 6 for e in entries)
    head = running.store.head_seq()
    again = consolidate(agents)
    assert (again.entries_written, again.linked, again.merged) == (0, 0, 0)
    assert running.store.head_seq() == head


def test_a_chain_of_near_duplicates_is_merged_in_one_run_so_a_second_run_writes_nothing(running, agents, clock):
    """Each memory is near the next (cosine 0.87) but not the one after (0.5): the oldest absorbs the second, and
    the third and fourth, still near each other once the second is gone, merge in the same run."""
    import math

    def at(degrees: float) -> list[float]:
        vector = [0.0] * 384
        vector[0], vector[1] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
        return vector

    ids = []
    for i, degrees in enumerate((0, 30, 60, 90)):
        clock.advance(1)
        op = add_op(f"chain link {i}", vector=at(degrees))
        ids.append(agents("agent-a").append(op).results[0].memory_id)
    first = consolidate(agents)
    merged = {(d.memory_id, d.reason.split(":")[0]) for d in first.decisions if d.op == "archive"}
    assert merged == {(ids[1], f"merged into {ids[0]}"), (ids[3], f"merged into {ids[2]}")}
    again = consolidate(agents, now_ms=first.as_of_ms)
    assert again.entries_written == 0, [d.reason for d in again.decisions]


def test_restoring_a_merged_memory_undoes_the_merge_and_it_is_never_merged_again(running, agents, add, clock):
    ids = [add("agent-a", text) for text in STAGING[:2]]
    consolidate(agents)
    gone = running.store.reads.get(ids[1])
    assert gone.archived
    agents("agent-a").append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[1], base_version=gone.version,
                                          restore=pb.RestoreOp()))
    assert not running.store.reads.get(ids[1]).archived and not running.store.reads.get(ids[0]).archived
    hits = agents("agent-a").search("staging database db-7 Frankfurt", limit=5)
    assert {ids[0], ids[1]} <= {h.memory.id for h in hits}
    clock.advance(HOUR)
    again = consolidate(agents)
    assert again.merged == 0 and not running.store.reads.get(ids[1]).archived


def test_a_weaker_authors_memory_never_absorbs_a_stronger_ones_and_legislative_ones_are_never_absorbed(
        running, agents, add, clock):
    weak = add("bot", STAGING[0])  # older, and authority 5
    clock.advance(60)
    strong = add("agent-a", STAGING_FAR)  # authority 3; 0.86 to the bot's
    legislative = add("bot", STAGING[2], layer=2)  # 0.97 to the bot's, but layer 2
    report = consolidate(agents)
    merged = {(d.memory_id, d.reason.split(":")[0]) for d in report.decisions if d.op == "archive"}
    assert merged == {(weak, f"merged into {strong}")}
    assert running.store.reads.get(weak).archived and not running.store.reads.get(strong).archived
    assert not running.store.reads.get(legislative).archived
    code, _ = refused(lambda: agents("bot").call("Consolidate", pb.ConsolidateRequest()))
    assert code.name == "PERMISSION_DENIED"


def test_a_new_memory_is_linked_to_its_neighbours_and_a_removed_link_is_never_made_again(running, agents, add,
                                                                                           clock):
    first = add("agent-a", DEPLOYS[0])
    clock.advance(2 * DAY)  # out of the replay window: not new any more
    second = add("agent-a", DEPLOYS[1])
    report = consolidate(agents)
    assert [(d.memory_id, d.op) for d in report.decisions] == [(second, "link")]
    assert "cosine 0.8" in report.decisions[0].reason
    agents("agent-a").append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=second,
                                          unlink=pb.UnlinkOp(target_id=first, relation="semantic")))
    assert consolidate(agents).linked == 0


def test_a_semantic_link_nobody_uses_is_pruned_and_an_agents_hierarchical_link_never(running, agents, add, clock):
    a, b = (add("agent-a", text) for text in DEPLOYS)
    part = add("agent-a", UNRELATED)
    agents("agent-a").append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=a,
                                          link=pb.LinkOp(target_id=part, relation="hierarchical")))
    consolidate(agents)
    assert semantic(running, a, b)
    weight = next(link[3] for m in (a, b) for link in running.store.reads.get(m).links if link[1] == "semantic")
    assert weight == pytest.approx(0.80, abs=0.01)  # the cosine
    clock.advance(30 * DAY)  # 0.80 * 0.95 ** 30 = 0.172: kept
    agents("agent-a").get(a)  # a use of one end refreshes the edge
    assert consolidate(agents).pruned == 0
    clock.advance(32 * DAY)  # 0.80 * 0.95 ** 32 = 0.155 > 0.15 since the use
    assert consolidate(agents).pruned == 0
    clock.advance(DAY)  # 0.80 * 0.95 ** 33 = 0.148
    report = consolidate(agents, links_only=True)
    assert [d.op for d in report.decisions] == ["unlink"]
    assert not semantic(running, a, b) and (part, "hierarchical", "agent-a") in links(running, a)
    assert consolidate(agents).entries_written == 0


def test_an_episode_used_on_several_days_is_promoted_and_stays_its_authors(running, agents, add, clock):
    episode = add("agent-a", "the user asked to always run ruff before committing", layer=4, type="episode")
    idle = add("agent-a", "the build took four minutes this afternoon", layer=4, type="episode")
    for _ in range(2):
        agents("agent-a").call("RecordUse", pb.RecordUseRequest(memory_ids=[episode]))
        clock.advance(DAY)
    assert consolidate(agents).promoted == 0  # two uses on two days: not yet
    agents("agent-a").call("RecordUse", pb.RecordUseRequest(memory_ids=[episode]))
    report = consolidate(agents)
    assert [(d.memory_id, d.op) for d in report.decisions] == [(episode, "set_layer")]
    promoted = running.store.reads.get(episode)
    assert promoted.layer == 3 and promoted.authority == 3 and running.store.reads.get(idle).layer == 4
    code, _ = refused(lambda: agents("bot").append(pb.Operation(
        op_id=str(uuid.uuid4()), memory_id=episode, base_version=promoted.version, set_layer=pb.SetLayerOp(layer=4))))
    assert code.name == "PERMISSION_DENIED"  # still agent-a's: a weaker agent may not move it


def test_two_agents_caches_agree_with_the_server_on_topics_after_consolidation(running, agents, add, make_client,
                                                                              clock):
    for text in [*STAGING, STAGING_FAR, *DEPLOYS, UNRELATED]:
        add("agent-a", text, tags=("ops",) if "staging" in text.lower() else ())
    clock.advance(60)
    consolidate(agents)
    since = clock.now_ms - DAY * 1000
    server = agents("agent-a").call("ListTopics", pb.ListTopicsRequest(novel_since_ms=int(since)))
    answers = []
    for name in ("alice", "bob"):
        client = make_client(running.address, name)
        client.sync()
        answers.append(client.list_topics(novel_since_ms=int(since)))
    assert answers[0] == answers[1]
    assert [(t.id, t.size, t.label, t.representative_id) for t in answers[0].topics] == [
        (t.id, t.size, t.label, t.representative_id) for t in server.topics]
    assert [(n.memory_id, n.surprise) for n in answers[0].novel] == [(n.memory_id, n.surprise) for n in server.novel]
    sizes = sorted(t.size for t in answers[0].topics)
    assert sizes == [1, 1, 2]  # the four staging ones merged into one, the two deploys (0.80), the unrelated one
    deploys = answers[0].topics[0]
    assert deploys.size == 2 and deploys.cohesion > topics.TOPIC_THRESHOLD and "Tuesday" in deploys.label
    assert next(t for t in answers[0].topics if t.label == "ops").size == 1


def test_maintain_consolidate_prints_what_it_would_do_and_reflect_summarises(running, add, tmp_path, clock):
    ids = [add("agent-a", text) for text in STAGING]
    env = {"MNEMOSYNC_SERVER": running.address, "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_AGENT_ID": "human",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "human")}
    dry = mnemosync("maintain", "consolidate", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert f"would archive {ids[1]}: merged into {ids[0]}" in dry.stdout and "nothing written" in dry.stdout
    assert not running.store.reads.get(ids[1]).archived
    done = mnemosync("maintain", "consolidate", "--json", env=env)
    assert done.returncode == 0, done.stderr
    listed = mnemosync("topics", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [t["size"] for t in json.loads(listed.stdout)] == [1]  # the three merged into one
    reflect = mnemosync("reflect", env=env)
    assert reflect.returncode == 0, reflect.stderr
    assert "## Themes" in reflect.stdout and "supersedes links: 2" in reflect.stdout
