"""`mnemosync.server.presence`: who is connected, when each agent last called, its grant as the viewer may see it,
and what
it reported about its outbox (ListAgents through the real server)."""

from __future__ import annotations

import threading

import grpc
import pytest

from mnemosync.server.identity import Caller
from mnemosync.server.presence import visible_scopes
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, dev_settings, refused, served_agents, wait_until

POLICY = """
[agents.root]
authority = 1
scopes = ["*"]
admin = true

[agents.bob]
authority = 4
scopes = ["user", "project:web"]

[agents.carol]
authority = 3
scopes = ["user"]
"""


def _agents(viewer: RawAgent) -> pb.ListAgentsResponse:
    return viewer.call("ListAgents", pb.ListAgentsRequest())


def _by_id(answer: pb.ListAgentsResponse) -> dict[str, pb.AgentStatus]:
    return {a.agent_id: a for a in answer.agents}


def test_agents_show_their_offset_lag_grant_and_last_call(policy_agents, clock):
    root, bob = policy_agents("root"), policy_agents("bob")
    for text in ("one", "two", "three"):
        root.add(text)
    bob.call("Ack", pb.AckRequest(seq=1))
    clock.advance(5)
    root.call("Ack", pb.AckRequest(seq=3))
    agents = _by_id(_agents(root))
    assert (agents["bob"].acked_seq, agents["bob"].lag, agents["bob"].authority) == (1, 2, 4)
    assert list(agents["bob"].scopes) == ["user", "project:web"]
    assert (agents["root"].lag, agents["root"].admin, list(agents["root"].scopes)) == (0, True, ["*"])
    assert agents["root"].last_seen_ms - agents["bob"].last_seen_ms == 5000
    assert _agents(bob).caller.agent_id == "bob"


def test_an_agent_is_connected_while_its_subscribe_stream_is_open(policy_agents):
    root, bob = policy_agents("root"), policy_agents("bob")
    stream = bob.stub.Subscribe(pb.SubscribeRequest(since_seq=0), metadata=bob.metadata)

    def read():
        try:
            for _ in stream:
                pass
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.CANCELLED

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_until(lambda: _by_id(_agents(root)).get("bob", pb.AgentStatus()).subscriptions == 1,
               message="bob never showed as connected")
    stream.cancel()
    reader.join(timeout=10)
    wait_until(lambda: _by_id(_agents(root))["bob"].subscriptions == 0, message="bob still shows as connected")


def test_an_outbox_reported_with_ack_shows_until_the_next_report(policy_agents, clock):
    root, bob = policy_agents("root"), policy_agents("bob")
    root.add("one")
    assert not _by_id(_agents(root))["root"].HasField("outbox")
    bob.call("Ack", pb.AckRequest(seq=1, outbox=pb.OutboxReport(pending=3, failed=1, oldest_pending_ms=123)))
    reported = _by_id(_agents(root))["bob"]
    assert (reported.outbox.pending, reported.outbox.failed, reported.outbox.oldest_pending_ms) == (3, 1, 123)
    assert reported.outbox_reported_at_ms == clock.now_ms
    code, details = refused(lambda: bob.call("Ack", pb.AckRequest(seq=1, outbox=pb.OutboxReport(pending=-1))))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "outbox.pending" in details


def test_the_sessions_a_local_agent_reports_with_ack_show_to_an_admin_and_never_to_others(policy_agents):
    root, bob, carol = policy_agents("root"), policy_agents("bob"), policy_agents("carol")
    root.add("one")
    bob.call("Ack", pb.AckRequest(seq=1))
    assert not _by_id(_agents(root))["bob"].HasField("sessions")  # no local agent process: nothing reported
    bob.call("Ack", pb.AckRequest(seq=1, sessions=3))
    assert _by_id(_agents(root))["bob"].sessions == 3
    bob.call("Ack", pb.AckRequest(seq=1, sessions=0))
    assert _by_id(_agents(root))["bob"].HasField("sessions") and _by_id(_agents(root))["bob"].sessions == 0
    assert not _by_id(_agents(carol))["bob"].HasField("sessions")
    code, details = refused(lambda: bob.call("Ack", pb.AckRequest(seq=1, sessions=-1)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "sessions must be >= 0, got -1" in details


def test_a_viewer_sees_another_agents_scopes_only_as_far_as_it_is_granted_them(policy_agents):
    root, bob, carol = policy_agents("root"), policy_agents("bob"), policy_agents("carol")
    for agent in (root, bob):
        agent.call("Stats", pb.StatsRequest())
    seen_by_carol = _by_id(_agents(carol))
    assert (list(seen_by_carol["bob"].scopes), seen_by_carol["bob"].hidden_scopes) == (["user"], 1)
    assert sorted(seen_by_carol) == ["bob", "carol"]


def test_a_viewer_who_is_not_admin_sees_no_other_agents_offset_lag_or_outbox(policy_agents):
    """ListAgents showed other agents' offsets and outbox to any agent sharing a scope with them."""
    root, bob, carol = policy_agents("root"), policy_agents("bob"), policy_agents("carol")
    root.add("one")
    bob.call("Ack", pb.AckRequest(seq=1, outbox=pb.OutboxReport(pending=3, failed=1, oldest_pending_ms=123)))
    carol.call("Ack", pb.AckRequest(seq=1))
    bob_seen_by_carol = _by_id(_agents(carol))["bob"]
    assert (bob_seen_by_carol.acked_seq, bob_seen_by_carol.lag, bob_seen_by_carol.acked_at_ms) == (0, 0, 0)
    assert not bob_seen_by_carol.HasField("outbox") and bob_seen_by_carol.outbox_reported_at_ms == 0
    assert list(bob_seen_by_carol.scopes) == ["user"]  # its grant, as far as carol holds it, still shows
    assert _by_id(_agents(carol))["carol"].acked_seq == 1  # its own offset it sees
    bob_seen_by_root = _by_id(_agents(root))["bob"]
    assert (bob_seen_by_root.acked_seq, bob_seen_by_root.outbox.pending) == (1, 3)


def test_a_viewer_who_is_not_admin_does_not_see_agents_it_shares_no_scope_with(policy_agents):
    root, bob, carol = policy_agents("root"), policy_agents("bob"), policy_agents("carol")
    root.add("one")
    for agent in (root, bob):
        agent.call("Ack", pb.AckRequest(seq=1))
    assert "root" not in _by_id(_agents(carol)) and "root" not in _by_id(_agents(bob))
    assert {"root", "bob", "carol"} <= set(_by_id(_agents(root)))
    assert _agents(carol).hidden_agents == len({"root", "bob", "carol"}) - len(_by_id(_agents(carol))) >= 1
    assert _agents(root).hidden_agents == 0  # an admin sees every agent, so is told of none hidden


def test_agents_with_an_offset_not_seen_since_a_restart_count_as_hidden_from_a_viewer_who_is_not_admin(
        tmp_path, clock):
    """After a restart the server knows bob and root only by their offsets (not their grants, which come with a
    call): carol cannot be shown them, but is told that two agents are not shown to her."""
    settings = dev_settings(tmp_path, policy=POLICY)
    with served_agents(settings, clock.clock) as agent:
        root, bob, carol = agent("root"), agent("bob"), agent("carol")
        root.add("one")
        for each in (root, bob, carol):
            each.call("Ack", pb.AckRequest(seq=1))
        assert {"bob", "carol"} <= set(_by_id(_agents(carol)))
    with served_agents(settings, clock.clock) as agent:
        carol, root = agent("carol"), agent("root")
        seen_by_carol = _agents(carol)
        assert sorted(_by_id(seen_by_carol)) == ["carol"]
        assert seen_by_carol.hidden_agents == 2  # root and bob: neither has called since the start
        seen_by_root = _agents(root)
        assert {"root", "bob", "carol"} <= set(_by_id(seen_by_root)) and seen_by_root.hidden_agents == 0
        assert _by_id(seen_by_root)["bob"].acked_seq == 1 and _by_id(seen_by_root)["bob"].last_seen_ms == 0


@pytest.mark.parametrize(("agent", "viewer", "shown"), [
    ((), None, ((), 0)),
    (None, ("user",), ((), 1)),
    (None, None, (("*",), 0)),
    (("project:*", "user"), ("project:*",), (("project:*",), 1)),
    (("project:web", "user"), ("project:*",), (("project:web",), 1)),
    (("project:*",), ("project:web",), ((), 1)),
])
def test_visible_scopes_shows_patterns_the_viewer_holds_and_scopes_its_grant_covers(agent, viewer, shown):
    assert visible_scopes(Caller("a", scopes=agent), Caller("v", scopes=viewer)) == shown
