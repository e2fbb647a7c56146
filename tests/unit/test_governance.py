"""`mnemosync.server.governance`: every rule, each refusal naming it, through the real gRPC server."""

from __future__ import annotations

import contextlib
import uuid

import grpc
import pytest

from mnemosync.agent.cache import Cache
from mnemosync.kernel.codec import entry_from_proto
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, fake_vector, refused, update_op

POLICY = """
[defaults]
authority = 3
scopes = ["user", "project:*"]

[agents.human]
authority = 1
scopes = ["*"]

[agents.lead]
authority = 2

[agents.extractor]
authority = 6
scopes = ["project:app"]
"""


@pytest.fixture
def agent(tmp_path):
    """agent(id) -> RawAgent of one server started with POLICY."""
    with run_server(dev_settings(tmp_path, policy=POLICY)) as running, contextlib.ExitStack() as stack:

        def make(agent_id: str) -> RawAgent:
            made = RawAgent(running.address, agent_id)
            stack.callback(made.close)
            return made

        yield make


def op(memory_id: str, base_version: int = 0, **kind) -> pb.Operation:
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base_version, **kind)


def labelled(content: str, trust: str, quote: str = "", scope: str = "user") -> pb.Operation:
    return op(str(uuid.uuid4()), add=pb.AddOp(scope=scope, content=content, embedding=fake_vector(content),
                                              trust=trust, quote=quote))


def test_only_a_human_adds_or_changes_constitutional_memories(agent):
    human, a = agent("human"), agent("agent-a")
    code, details = refused(lambda: a.add("The agents answer to the user", layer=pb.LAYER_CONSTITUTIONAL))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("layer-1-human-only:")
    rule = human.add("The agents answer to the user", layer=pb.LAYER_CONSTITUTIONAL).memory_id
    code, details = refused(lambda: a.append(update_op(rule, 1, tags=["core"], replace_tags=True)))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("layer-1-human-only:")
    mine = a.add("Prefer small pull requests").memory_id
    code, details = refused(lambda: a.append(op(mine, 1, set_layer=pb.SetLayerOp(layer=pb.LAYER_CONSTITUTIONAL))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "layer-1-human-only" in details
    assert human.append(update_op(rule, 1, tags=["core"], replace_tags=True)).results[0].version == 2


def test_nobody_overwrites_or_forgets_what_a_higher_authority_wrote(agent):
    lead, a, extractor = agent("lead"), agent("agent-a"), agent("extractor")
    decision = lead.add("Services talk over gRPC").memory_id
    code, details = refused(lambda: a.append(update_op(decision, 1, "Services talk over REST")))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details.startswith("no-overwrite-higher-authority:") and "written by authority 2" in details
    code, details = refused(lambda: a.append(op(decision, 1, forget=pb.ForgetOp())))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("no-overwrite-higher-authority:")
    extracted = extractor.add("The app uses Postgres", scope="project:app").memory_id
    assert a.append(update_op(extracted, 1, "The app uses Postgres 16")).results[0].version == 2
    assert lead.append(update_op(decision, 1, "Services talk over gRPC with TLS")).results[0].version == 2


def test_nobody_removes_a_link_a_higher_authority_made(agent):
    lead, a = agent("lead"), agent("agent-a")
    source, target = a.add("Outage on May 3").memory_id, a.add("Expired certificate").memory_id
    lead.append(op(target, link=pb.LinkOp(target_id=source, relation="causal", weight=0.8, reason="it expired")))
    code, details = refused(lambda: a.append(op(target, unlink=pb.UnlinkOp(target_id=source, relation="causal"))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("no-overwrite-higher-authority:")
    code, details = refused(lambda: a.append(op(target, link=pb.LinkOp(target_id=source, relation="causal",
                                                                        weight=0.1))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "change its weight or reason" in details
    a.append(op(target, link=pb.LinkOp(target_id=source, relation="causal", weight=0.8, reason="it expired")))
    assert [(k.relation, k.weight, k.reason, k.author_agent) for k in a.get(target).links] == [
        ("causal", 0.8, "it expired", "lead")]
    a.append(op(source, link=pb.LinkOp(target_id=target, relation="semantic")))
    a.append(op(source, unlink=pb.UnlinkOp(target_id=target, relation="semantic")))


def test_agents_do_not_forget_or_unprotect_protected_memories(agent):
    human, a = agent("human"), agent("agent-a")
    protected = a.append(op(str(uuid.uuid4()), add=pb.AddOp(
        scope="user", content="Never force-push main", embedding=fake_vector("Never force-push main"),
        protected=True))).results[0].memory_id
    code, details = refused(lambda: a.append(op(protected, 1, forget=pb.ForgetOp())))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("protected-not-forgotten:")
    code, details = refused(lambda: a.append(op(protected, 1, update=pb.UpdateOp(protected=False))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("protected-not-forgotten:")
    assert a.append(update_op(protected, 1, tags=["git"], replace_tags=True)).results[0].version == 2
    assert human.append(op(protected, 2, forget=pb.ForgetOp())).results[0].version == 3


def test_agents_do_not_forget_constitutional_or_legislative_memories(agent):
    human, a = agent("human"), agent("agent-a")
    decision = a.add("We ship on Thursdays", layer=pb.LAYER_LEGISLATIVE).memory_id
    code, details = refused(lambda: a.append(op(decision, 1, forget=pb.ForgetOp())))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("layers-1-2-not-forgotten:")
    code, details = refused(lambda: a.append(op(decision, 1, set_layer=pb.SetLayerOp(layer=pb.LAYER_FACTUAL))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("layers-1-2-not-forgotten:")
    fact = a.add("The office wifi is slow").memory_id
    assert a.append(op(fact, 1, forget=pb.ForgetOp())).results[0].version == 2
    assert human.append(op(decision, 1, forget=pb.ForgetOp())).results[0].version == 2


def test_a_principle_must_carry_its_quote(agent):
    a = agent("agent-a")
    code, details = refused(lambda: a.append(labelled("Always pin dependencies", "principle")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("operations[0]: principle-needs-quote:")
    quoted = a.append(labelled("Always pin dependencies", "principle", quote="Pin everything. - Ana")).results[0]
    memory = a.get(quoted.memory_id)
    assert (memory.trust, memory.quote) == ("principle", "Pin everything. - Ana")
    observed = a.append(labelled("Builds break after upgrades", "pattern")).results[0].memory_id
    code, details = refused(lambda: a.append(op(observed, 1, update=pb.UpdateOp(trust="principle"))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "principle-needs-quote" in details
    code, details = refused(lambda: a.append(op(quoted.memory_id, 1, update=pb.UpdateOp(quote=""))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "principle-needs-quote" in details


def test_an_inference_cannot_make_causal_links(agent):
    a = agent("agent-a")
    guess = a.append(labelled("The cache probably caused the outage", "inference")).results[0].memory_id
    outage = a.append(labelled("Outage on May 3", "pattern")).results[0].memory_id
    code, details = refused(lambda: a.append(op(guess, link=pb.LinkOp(target_id=outage, relation="causal"))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and details.startswith("inference-no-causal-links:")
    code, details = refused(lambda: a.append(op(outage, link=pb.LinkOp(target_id=guess, relation="causal"))))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and "target memory" in details
    a.append(op(guess, link=pb.LinkOp(target_id=outage, relation="semantic")))
    observed = a.append(labelled("Cache evictions spiked at 10:02", "pattern")).results[0].memory_id
    a.append(op(observed, link=pb.LinkOp(target_id=outage, relation="causal")))
    assert {(lk.target_id, lk.relation) for lk in a.get(observed).links} == {(outage, "causal")}


def test_an_agent_writes_reads_and_searches_only_its_scopes(agent):
    human, a, extractor = agent("human"), agent("agent-a"), agent("extractor")
    private = human.add("Salary review is in March", scope="team:hr").memory_id
    code, details = refused(lambda: a.add("HR notes", scope="team:hr"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("scope-not-granted:")
    assert "'user', 'project:*'" in details
    code, details = refused(lambda: a.get(private))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "scope-not-granted" in details
    code, details = refused(lambda: a.append(update_op(private, 1, "changed")))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "scope-not-granted" in details
    app = extractor.add("The app is written in Go", scope="project:app").memory_id
    mine = a.add("Salary bands are public", scope="project:wiki").memory_id
    code, _ = refused(lambda: extractor.add("wiki page", scope="project:wiki"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, details = refused(lambda: a.append(op(mine, link=pb.LinkOp(target_id=private))))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "scope-not-granted" in details
    assert {h.memory.id for h in a.search("salary")} == {mine}
    assert {h.memory.id for h in human.search("salary")} == {private, mine}
    assert {h.memory.id for h in extractor.search("salary app Go")} == {app}
    code, details = refused(lambda: a.search("salary", filter=pb.SearchFilter(scopes=["team:hr"])))
    assert code == grpc.StatusCode.PERMISSION_DENIED and "scope-not-granted" in details


def test_sync_redacts_entries_of_other_scopes_and_the_cache_still_follows_the_chain(agent, tmp_path):
    human, a = agent("human"), agent("agent-a")
    human.add("Board meeting notes", scope="team:board")
    shared = a.add("Standup is at 9:30").memory_id
    human.append(update_op(shared, 1, "Standup is at 9:45"))
    entries = a.sync(0)
    assert [e.withheld for e in entries] == [True, False, False]
    assert entries[0].op == "" and entries[0].memory_id == "" and not entries[0].HasField("operation")
    assert entries[1].prev_hash == entries[0].hash
    cache = Cache(tmp_path / "a.db")
    assert cache.apply([entry_from_proto(e) for e in entries]) == 3
    assert cache.offset == 3 and set(cache.snapshot()) == {shared}
    assert cache.get(shared).content == "Standup is at 9:45"
    cache.close()
    assert [e.withheld for e in human.sync(0)] == [False, False, False]


def test_unknown_agents_get_the_policy_defaults(agent):
    stranger = agent("stranger")
    assert stranger.add("note", scope="project:x").version == 1
    code, _ = refused(lambda: stranger.add("note", scope="team:x"))
    assert code == grpc.StatusCode.PERMISSION_DENIED
    code, details = refused(lambda: stranger.add("rule", layer=pb.LAYER_CONSTITUTIONAL))
    assert "agent stranger has authority 3" in details


def test_every_entry_records_its_writers_authority(agent):
    human, extractor = agent("human"), agent("extractor")
    human.add("one")
    extractor.append(add_op("two", scope="project:app"))
    assert [(e.agent_id, e.authority) for e in human.sync(0)] == [("human", 1), ("extractor", 6)]
