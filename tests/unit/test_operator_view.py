"""`mnemosync.server.operator_view` through the real server: ListChangelog, GetMemoryHistory and GetActivity answer
within the
caller's scopes, and refuse bad input precisely."""

from __future__ import annotations

import uuid

import grpc

from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, refused, update_op

POLICY = """
[agents.root]
authority = 1
scopes = ["*"]
admin = true

[agents.bob]
authority = 3
scopes = ["user"]
"""


def _changelog(agent: RawAgent, **request) -> pb.ListChangelogResponse:
    return agent.call("ListChangelog", pb.ListChangelogRequest(**request))


def test_the_changelog_lists_entries_newest_first_with_their_scopes_and_without_embeddings(policy_agents):
    root = policy_agents("root")
    first = root.add("the build runs on two cores", scope="user")
    root.add("deploys go through ops/deploy.sh", scope="project:web")
    root.append(update_op(first.memory_id, 1, "the build runs on four cores"))
    page = _changelog(root)
    assert [(r.entry.seq, r.entry.op, r.scope) for r in page.rows] == [
        (3, "update", "user"), (2, "add", "project:web"), (1, "add", "user")]
    assert page.head_seq == 3
    assert page.rows[2].entry.operation.add.content == "the build runs on two cores"
    assert list(page.rows[2].entry.operation.add.embedding) == []
    assert page.rows[2].entry.embedding_sha256  # still names the embedding it carried


def test_the_changelog_filters_by_agent_scope_operation_memory_and_seq(policy_agents):
    root, bob = policy_agents("root"), policy_agents("bob")
    a = root.add("first", scope="user")
    bob.add("second", scope="user")
    root.add("third", scope="project:web")
    root.append(update_op(a.memory_id, 1, "first, changed"))
    seqs = lambda **f: [r.entry.seq for r in _changelog(root, **f).rows]  # noqa: E731
    assert seqs(agent_id="bob") == [2]
    assert seqs(scope="project:web") == [3]
    assert seqs(op="update") == [4]
    assert seqs(memory_id=a.memory_id) == [4, 1]
    assert seqs(after_seq=2) == [4, 3]
    assert seqs(before_seq=3) == [2, 1]
    assert seqs(limit=2) == [4, 3]


def test_the_changelog_leaves_out_scopes_the_caller_is_not_granted(policy_agents):
    root, bob = policy_agents("root"), policy_agents("bob")
    root.add("a secret project plan", scope="project:hidden")
    bob.add("bob's own note", scope="user")
    assert [(r.entry.agent_id, r.scope) for r in _changelog(bob).rows] == [("bob", "user")]
    code, details = refused(lambda: _changelog(bob, scope="project:hidden"))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("scope-not-granted")


def test_bad_changelog_requests_are_refused_naming_the_field(policy_agents):
    root = policy_agents("root")
    for request, field in ((dict(limit=5000), "limit must be 1 to 1000"), (dict(after_seq=-1), "after_seq"),
                           (dict(op="DROP TABLE"), "op must be an operation name")):
        code, details = refused(lambda request=request: _changelog(root, **request))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and field in details


def test_a_memory_history_shows_every_version_and_who_wrote_it(policy_agents):
    root, bob = policy_agents("root"), policy_agents("bob")
    added = bob.add("the cache TTL is 30 seconds", scope="user")
    bob.append(update_op(added.memory_id, 1, "the cache TTL is 60 seconds"))
    root.append(update_op(added.memory_id, 2, "the cache TTL is 90 seconds"))
    history = bob.call("GetMemoryHistory", pb.GetMemoryHistoryRequest(memory_id=added.memory_id))
    assert history.memory.content == "the cache TTL is 90 seconds"
    assert [(v.entry.op, v.entry.agent_id, v.shown.version, v.shown.agent_id, v.shown.authority, v.shown.content)
            for v in history.versions] == [
        ("add", "bob", 1, "bob", 3, "the cache TTL is 30 seconds"),
        ("update", "bob", 2, "bob", 3, "the cache TTL is 60 seconds"),
        ("update", "root", 3, "root", 1, "the cache TTL is 90 seconds"),
    ]


def test_a_history_outside_the_callers_scopes_or_of_no_memory_is_refused(policy_agents):
    root, bob = policy_agents("root"), policy_agents("bob")
    hidden = root.add("a hidden plan", scope="project:hidden")
    history = lambda memory_id: bob.call("GetMemoryHistory", pb.GetMemoryHistoryRequest(memory_id=memory_id))  # noqa: E731
    code, details = refused(lambda: history(hidden.memory_id))
    assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("scope-not-granted")
    missing = str(uuid.uuid4())
    code, details = refused(lambda: history(missing))
    assert code == grpc.StatusCode.NOT_FOUND and missing in details


def test_activity_counts_writes_per_minute_and_operation_and_searches_in_the_callers_scopes(policy_agents, clock):
    root, bob = policy_agents("root"), policy_agents("bob")
    start = clock.now_ms
    mine = bob.add("one", scope="user")
    root.add("hidden", scope="project:hidden")
    clock.advance(60)
    bob.append(update_op(mine.memory_id, 1, "one, changed"))
    bob.search("one")
    bob.search("changed")
    answer = bob.call("GetActivity", pb.GetActivityRequest(minutes=3))
    assert len(answer.buckets) == 3
    assert [b.start_ms for b in answer.buckets] == sorted(b.start_ms for b in answer.buckets)
    by_minute = {b.start_ms: (dict(b.writes), b.searches) for b in answer.buckets}
    minute = start - start % 60_000
    assert by_minute[minute] == ({"add": 1}, 0)  # the hidden scope's add is not bob's to count
    assert by_minute[minute + 60_000] == ({"update": 1}, 2)
    assert dict(answer.by_scope) == {"user": 1} and dict(answer.by_layer) == {"factual": 1}
    assert answer.live_memories == 1 and answer.head_seq == 3
    everything = root.call("GetActivity", pb.GetActivityRequest(minutes=3))
    assert dict(everything.by_scope) == {"user": 1, "project:hidden": 1}
    code, details = refused(lambda: bob.call("GetActivity", pb.GetActivityRequest(minutes=5000)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "minutes must be 1 to 1440" in details
