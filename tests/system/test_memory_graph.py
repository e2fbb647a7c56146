"""Typed links and graph queries (issue 16 items 1 and 2): the real server, real SQLite, real caches, the real model.

The expected walks are computed here by a plain breadth-first search over the links the test made, not read
from the server's code.
"""

from __future__ import annotations

import json
import uuid

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument, NotFound, PermissionDenied
from mnemosync.kernel.search import Filter
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, dev_settings, mnemosync, refused

TYPES = ("semantic", "temporal", "causal", "entity", "hierarchical", "supersedes")
POLICY = """
[agents.outsider]
scopes = ["project:open"]
"""


@pytest.fixture
def running(tmp_path):
    with run_server(dev_settings(tmp_path, policy=POLICY)) as server:
        yield server


@pytest.fixture
def writer(running, make_client):
    return make_client(running.address, "writer")


def _scope() -> str:
    return f"project:g{uuid.uuid4().hex[:12]}"


def _nodes(client, count: int, scope: str | None = None, **fields) -> list[str]:
    scope = scope or _scope()
    return [client.add(f"Graph node {i} of {scope}: step {i} of the deploy runbook", scope=scope, **fields).memory_id
            for i in range(count)]


def _shape(walk) -> list[tuple]:
    return [(s.memory.id, s.depth, s.via_id, s.relation, s.direction) for s in walk.steps]


def expected_walk(edges, start, *, types=(), direction="out", depth=2) -> list[tuple]:
    """Breadth-first search over (source, target, type) edges: each memory at its fewest links away, reached
    through the first (via, type, direction) from a memory one link nearer; ordered by depth, then id."""
    usable = [e for e in edges if not types or e[2] in types]
    moves = []  # (from, to, type, direction)
    if direction in ("out", "both"):
        moves += [(a, b, t, "out") for a, b, t in usable]
    if direction in ("in", "both"):
        moves += [(b, a, t, "in") for a, b, t in usable]
    level, seen, found = {start}, {start: 0}, {}
    for d in range(1, depth + 1):
        reached = {}
        for a, b, t, how in moves:
            if a in level and b not in seen:
                reached[b] = min(reached.get(b, (a, t, how)), (a, t, how))
        for node, (via, t, how) in reached.items():
            seen[node] = d
            found[node] = (node, d, via, t, how)
        level = set(reached)
    return sorted(found.values(), key=lambda r: (r[1], r[0]))


def test_a_causal_link_from_or_to_an_inference_is_refused_and_the_rule_names_itself(writer):
    guess = writer.add("The cache eviction probably caused the outage", trust="inference").memory_id
    outage = writer.add("The checkout service was down for 40 minutes on May 3", trust="pattern").memory_id
    for source, target in ((guess, outage), (outage, guess)):
        with pytest.raises(FailedPrecondition) as refusal:
            writer.link(source, target, "causal")
        assert str(refusal.value).startswith("inference-no-causal-links:") and "trust='inference'" in str(refusal.value)
    writer.link(guess, outage, "semantic", reason="a guess about it")
    assert [(k.target_id, k.relation) for k in writer.get(guess).links] == [(outage, "semantic")]


def test_links_take_only_the_edge_types_and_a_weight_in_range(writer, running):
    a, b = _nodes(writer, 2)
    with pytest.raises(InvalidArgument) as refusal:
        writer.link(a, b, "follows")
    assert "relation must be one of semantic, temporal, causal, entity, hierarchical, supersedes" in str(
        refusal.value)
    with pytest.raises(InvalidArgument, match="weight must be a number above 0 and at most 1"):
        writer.link(a, b, "semantic", weight=1.5)
    with pytest.raises(InvalidArgument, match="reason is 513 bytes; the limit is 512"):
        writer.link(a, b, "semantic", reason="x" * 513)
    raw = RawAgent(running.address, "raw")
    try:  # the server refuses what the client would have caught, with the same message
        code, details = refused(lambda: raw.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=a, link=pb.LinkOp(
            target_id=b, relation="caused_by"))))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("operations[0]: relation must be one of")
    finally:
        raw.close()
    writer.link(a, b, "entity", weight=0.25, reason="both name the deploy runbook")
    writer.link(a, b, "entity", weight=0.5)  # linking again sets the weight and reason
    link = writer.get(a).links[0]
    assert (link.relation, link.weight, link.reason, link.author_agent) == ("entity", 0.5, "", "writer")


def test_traverse_follows_depth_direction_and_edge_types(writer):
    a, b, c, d, e = _nodes(writer, 5)
    writer.link(a, b, "causal", weight=0.9, reason="the runbook step triggers it")
    writer.link(b, c, "semantic")
    writer.link(c, d, "temporal")
    writer.link(e, a, "hierarchical")
    assert _shape(writer.traverse(a, depth=1)) == [(b, 1, a, "causal", "out")]
    assert _shape(writer.traverse(a, depth=3)) == [(b, 1, a, "causal", "out"), (c, 2, b, "semantic", "out"),
                                                    (d, 3, c, "temporal", "out")]
    assert _shape(writer.traverse(a, depth=3, edge_types=["causal", "temporal"])) == [(b, 1, a, "causal", "out")]
    assert _shape(writer.traverse(a, direction="in")) == [(e, 1, a, "hierarchical", "in")]
    both = writer.traverse(a, direction="both", depth=1)
    assert sorted(_shape(both)) == sorted([(b, 1, a, "causal", "out"), (e, 1, a, "hierarchical", "in")])
    first = writer.traverse(a, depth=1).steps[0]
    assert (first.weight, first.reason) == (0.9, "the runbook step triggers it")
    cut = writer.traverse(a, depth=3, limit=2)
    assert cut.truncated and [s.memory.id for s in cut.steps] == [b, c]
    chain = writer.causal_chain(b)
    assert _shape(chain) == [(a, 1, b, "causal", "in")]
    for bad, message in (({"depth": 7}, "depth must be 1 to 6"), ({"direction": "up"}, "direction must be one of"),
                         ({"edge_types": ["follows"]}, "edge_types must be one of"),
                         ({"limit": 1001}, "limit must be 1 to 1000")):
        with pytest.raises(InvalidArgument, match=message):
            writer.traverse(a, **bad)
    with pytest.raises(NotFound):
        writer.traverse(str(uuid.uuid4()))


def test_archived_memories_are_left_out_of_walks_unless_asked_for(writer):
    a, b, c = _nodes(writer, 3)
    writer.link(a, b, "semantic")
    writer.link(b, c, "semantic")
    writer.forget(b)
    assert _shape(writer.traverse(a, depth=2)) == []
    assert [s.memory.id for s in writer.traverse(a, depth=2, include_archived=True).steps] == [b, c]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(data=st.data())
def test_traverse_agrees_with_a_breadth_first_search_on_the_server_and_in_the_cache(writer, data):
    nodes = _nodes(writer, data.draw(st.integers(2, 7), label="memories"))
    pairs = st.tuples(st.sampled_from(nodes), st.sampled_from(nodes), st.sampled_from(TYPES)).filter(
        lambda e: e[0] != e[1])
    edges = data.draw(st.lists(pairs, max_size=14, unique_by=lambda e: e), label="links")
    for source, target, kind in edges:
        writer.link(source, target, kind)
    writer.sync()
    for _ in range(3):
        start = data.draw(st.sampled_from(nodes), label="start")
        types = data.draw(st.lists(st.sampled_from(TYPES), max_size=2, unique=True), label="edge types")
        direction = data.draw(st.sampled_from(["out", "in", "both"]), label="direction")
        depth = data.draw(st.integers(1, 4), label="depth")
        want = expected_walk(edges, start, types=types, direction=direction, depth=depth)
        served = writer.traverse(start, edge_types=types, direction=direction, depth=depth)
        cached = writer.traverse(start, edge_types=types, direction=direction, depth=depth, local=True)
        assert _shape(served) == want
        assert _shape(cached) == want


def test_the_server_and_the_cache_give_the_same_chains_timelines_and_neighbours(writer):
    scope = _scope()
    cause, outage, fix, note = (writer.add(f"Incident {scope} step {i}: the deploy runbook", scope=scope,
                                           event_time=f"2024-05-0{i + 1}T10:00Z").memory_id for i in range(4))
    late = writer.add("An earlier incident, stored late", scope=scope, event_time="2020-01-02T03:04Z").memory_id
    writer.link(cause, outage, "causal", weight=0.8, reason="evictions preceded the errors")
    writer.link(outage, fix, "causal")
    writer.link(note, outage, "semantic", weight=0.3)
    writer.sync()
    for local in (False, True):
        chain = writer.causal_chain(outage, local=local)
        assert _shape(chain) == [(cause, 1, outage, "causal", "in"), (fix, 1, outage, "causal", "out")]
        assert chain.steps[0].reason == "evictions preceded the errors"
        effects = writer.causal_chain(cause, direction="out", local=local)
        assert _shape(effects) == [(outage, 1, cause, "causal", "out"), (fix, 2, outage, "causal", "out")]
        window = writer.timeline(scopes=[scope], local=local)
        assert [m.id for m in window.memories] == [late, cause, outage, fix, note]
        around = writer.timeline(memory_id=outage, limit=1, local=local)
        assert [m.id for m in around.memories] == [cause, outage, fix] and around.anchor_index == 1
        since = writer.timeline(scopes=[scope], start_ms=1_600_000_000_000, limit=2, local=local)
        assert [m.id for m in since.memories] == [cause, outage]
    served = writer.search("incident deploy runbook", scopes=[scope], limit=5, neighbours=2, mode="keyword")
    cached = writer.local_search("incident deploy runbook", vector=None, limit=5, mode="keyword", neighbours=2,
                                 filter=Filter(scopes=(scope,)))
    assert not served.offline and cached.offline
    for outcome in (served, cached):
        by_id = {h.memory.id: [(n.memory.id, n.relation, n.weight, n.direction) for n in h.neighbours]
                 for h in outcome.hits}
        assert by_id[outage] == [(fix, "causal", 1.0, "out"), (cause, "causal", 0.8, "in")]  # strongest first
        assert by_id[note] == [(outage, "semantic", 0.3, "out")] and by_id[late] == []


def test_walks_timelines_and_neighbours_never_show_a_memory_the_caller_may_not_read(running, make_client):
    writer = make_client(running.address, "writer")
    outsider = make_client(running.address, "outsider")
    a, b = _nodes(writer, 2, "project:open")
    hidden = writer.add("The private deploy key lives in the ops vault", scope="user").memory_id
    writer.link(a, hidden, "semantic")
    writer.link(hidden, b, "semantic")
    writer.link(a, b, "entity", weight=0.5)
    outsider.sync()
    for local in (False, True):
        walk = outsider.traverse(a, direction="both", depth=3, local=local)
        assert _shape(walk) == [(b, 1, a, "entity", "out")]
        assert hidden not in {s.via_id for s in walk.steps}
        assert hidden not in [m.id for m in outsider.timeline(memory_id=a, local=local).memories]
    assert sorted(s.memory.id for s in writer.traverse(a, depth=1).steps) == sorted([b, hidden])
    with pytest.raises(PermissionDenied, match="scope-not-granted"):
        outsider.traverse(hidden)
    with pytest.raises(PermissionDenied, match="scope-not-granted"):
        outsider.timeline(scopes=["user"])
    hits = outsider.search("deploy runbook", limit=5, neighbours=5).hits
    assert hits and all(n.memory.id != hidden for h in hits for n in h.neighbours)
    raw = RawAgent(running.address, "outsider")
    try:
        code, details = refused(lambda: raw.call("Traverse", pb.TraverseRequest(memory_id=hidden)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "scope-not-granted" in details
        code, details = refused(lambda: raw.call("Search", pb.SearchRequest(query="deploy", neighbours=11)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "neighbours must be 0 to 10" in details
    finally:
        raw.close()


def test_the_graph_commands_link_walk_trace_and_list_by_event_time(running, writer, tmp_path, model_path):
    env = {"MNEMOSYNC_SERVER": running.address, "MNEMOSYNC_AGENT_ID": "cli-agent", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cli-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}
    scope = _scope()
    first, second = (writer.add(f"Release {i} of {scope} shipped", scope=scope, tags=["release-train"],
                                event_time=f"2025-0{i + 1}-01").memory_id for i in range(2))
    linked = mnemosync("graph", "link", second, first, "--type", "temporal", "--reason", "the next release",
                       "--json", env=env)
    assert linked.returncode == 0, linked.stderr
    assert json.loads(linked.stdout)["op"] == "link"
    for local in ((), ("--local",)):
        walk = mnemosync("graph", "traverse", first, "--direction", "in", "--json", *local, env=env)
        assert walk.returncode == 0, walk.stderr
        steps = json.loads(walk.stdout)["steps"]
        assert [(s["memory"]["id"], s["relation"], s["reason"], s["direction"]) for s in steps] == [
            (second, "temporal", "the next release", "in")]
    assert json.loads(mnemosync("graph", "causes", first, "--json", env=env).stdout)["steps"] == []
    timeline = json.loads(mnemosync("graph", "timeline", "--tag", "release-train", "--json", env=env).stdout)
    assert [m["id"] for m in timeline["memories"]] == [first, second]
    text = mnemosync("graph", "traverse", second, env=env)
    assert text.returncode == 0 and f"-> temporal {first}" in text.stdout
    shown = mnemosync("get", second, env=env)
    assert f"-> temporal {first}  (the next release)" in shown.stdout
    bad = mnemosync("graph", "link", second, first, "--type", "follows", env=env)
    assert bad.returncode == 2 and "'follows' is not one of" in bad.stderr
    too_deep = mnemosync("graph", "traverse", first, "--depth", "9", env=env)
    assert too_deep.returncode != 0 and "depth must be 1 to 6" in too_deep.stderr


def test_with_the_server_down_the_graph_queries_answer_from_the_cache(tmp_path, make_client):
    with run_server(dev_settings(tmp_path)) as server:
        client = make_client(server.address, "writer")
        a, b = _nodes(client, 2)
        client.link(a, b, "causal", reason="the first step breaks the second")
        client.sync()
        served = _shape(client.traverse(a))
    assert served == [(b, 1, a, "causal", "out")]
    assert _shape(client.traverse(a)) == served and not client.online
    assert _shape(client.causal_chain(b)) == [(a, 1, b, "causal", "in")]
    assert {m.id for m in client.timeline(memory_id=a).memories} == {a, b}


READ_PATHS = {
    "Get": lambda raw, a: raw.call("Get", pb.GetRequest(id=a)),
    "Traverse": lambda raw, a: raw.call("Traverse", pb.TraverseRequest(memory_id=a, direction=pb.DIRECTION_BOTH,
                                                                       depth=3)),
    "GetCausalChain": lambda raw, a: raw.call("GetCausalChain", pb.CausalChainRequest(memory_id=a, depth=3)),
    "GetTimeline": lambda raw, a: raw.call("GetTimeline", pb.TimelineRequest(memory_id=a)),
    "Search": lambda raw, a: raw.call("Search", pb.SearchRequest(query="deploy runbook", limit=10, neighbours=5)),
    "GraphSearch": lambda raw, a: raw.call("GraphSearch", pb.GraphSearchRequest(query="deploy runbook")),
    "ListChangelog": lambda raw, a: raw.call("ListChangelog", pb.ListChangelogRequest(limit=1000)),
    "GetMemoryHistory": lambda raw, a: raw.call("GetMemoryHistory", pb.GetMemoryHistoryRequest(memory_id=a)),
    "ListMemories": lambda raw, a: raw.call("ListMemories", pb.ListMemoriesRequest(id_prefix=a)),
}
"""Every server read that can carry a memory of the caller's scopes, called as that caller."""

CACHE_READ_PATHS = {
    "cache get (offline get)": lambda agent, a: agent.cache.get(a),
    "local traverse": lambda agent, a: agent.traverse(a, direction="both", depth=3, local=True),
    "local causal chain": lambda agent, a: agent.causal_chain(a, depth=3, local=True),
    "local timeline": lambda agent, a: agent.timeline(memory_id=a, local=True),
    "local search": lambda agent, a: agent.local_search("deploy runbook", vector=None, limit=10, filter=Filter(),
                                                        mode="keyword", neighbours=5).hits,
    "local graph search": lambda agent, a: agent.graph_search("deploy runbook", local=True),
}
"""The same reads from the caller's own cache (offline, or asked with `local`): the cache receives the link
entries of the memories it may read whole, so it holds links into memories it never received."""


def _linked_into_a_hidden_scope(writer) -> tuple[str, str]:
    """(a memory of project:open, a memory of `user` it links to); the hidden one links back into the open scope."""
    a, b = _nodes(writer, 2, "project:open")
    hidden = writer.add("The private deploy key lives in the ops vault", scope="user").memory_id
    writer.link(a, hidden, "causal", reason="the vault note explains the hidden runbook step")
    writer.link(hidden, b, "causal", reason="the vault note explains the hidden runbook step")
    writer.link(a, b, "causal", reason="step order")
    return a, hidden


@pytest.mark.parametrize("path", sorted(READ_PATHS))
def test_no_read_path_shows_a_memory_of_a_scope_the_caller_may_not_read_not_even_as_a_links_target(running,
                                                                                                   make_client, path):
    """`Get` listed links into scopes the caller cannot read, with the target id and the reason, and the causal
    chain was not checked for this at all: every read and graph query must keep such a memory out entirely
    (the changelog view and a memory's history show the link entry, without its target and reason)."""
    a, hidden = _linked_into_a_hidden_scope(make_client(running.address, "writer"))
    raw = RawAgent(running.address, "outsider")
    try:
        shown = str(READ_PATHS[path](raw, a))
    finally:
        raw.close()
    assert a in shown
    assert hidden not in shown and "vault note" not in shown


@pytest.mark.parametrize("path", sorted(CACHE_READ_PATHS))
def test_no_read_of_the_agents_own_cache_shows_a_link_into_a_scope_it_may_not_read(running, make_client, path):
    """Issue 33 item 10 on the agent side: the outsider's cache holds the link from an open memory to a hidden
    one (the link entry is the open memory's), and offline `get` and local walks showed it, target id and reason."""
    a, hidden = _linked_into_a_hidden_scope(make_client(running.address, "writer"))
    outsider = make_client(running.address, "outsider", scope="project:open")
    outsider.sync()
    shown = repr(CACHE_READ_PATHS[path](outsider, a))
    assert a in shown
    assert hidden not in shown and "vault note" not in shown


def test_the_operators_view_shows_a_link_into_a_hidden_scope_as_made_without_its_target_or_reason(running,
                                                                                                    make_client):
    """The changelog view and a memory's history still say that a link was made (the entry is the readable
    memory's), with its type, but not where it points nor why; a viewer granted the target's scope sees both."""
    from mnemosync.agent.dashboard.views_changelog import summary

    writer = make_client(running.address, "writer")
    a, hidden = _linked_into_a_hidden_scope(writer)
    outsider = make_client(running.address, "outsider", scope="project:open")
    rows, _ = outsider.remote.list_changelog(memory_id=a, op="link")
    history = outsider.remote.memory_history(a).versions
    for entries in ([r.entry for r in rows], [v.entry for v in history if v.entry.op == "link"]):
        assert sorted(e.payload["target_id"] for e in entries) == ["", _nodes_linked_from(writer, a, hidden)]
        emptied = next(e for e in entries if not e.payload["target_id"])
        assert "reason" not in emptied.payload and emptied.payload["relation"] == "causal"
        assert summary(emptied) == "causal → a memory of a scope you may not read"
    seen_by_writer = [r.entry.payload for r in writer.remote.list_changelog(memory_id=a, op="link")[0]]
    assert {(p["target_id"], p.get("reason")) for p in seen_by_writer} >= {
        (hidden, "the vault note explains the hidden runbook step")}


def _nodes_linked_from(writer, a: str, hidden: str) -> str:
    """The one target of `a` other than `hidden` (the open memory it links to)."""
    return next(k.target_id for k in writer.get(a).links if k.target_id != hidden)


NAMES = ("harbor", "quartz", "meadow", "falcon", "copper", "lantern", "glacier")


def plain_pagerank(nodes: list[str], edges: list[tuple[str, str, float]], seeds: list[str], alpha: float) -> dict:
    """Personalized PageRank solved exactly: r = alpha p + (1 - alpha)(M r + (d . r) p) over the undirected,
    weight-summed edges, M column-stochastic, d the memories without links, p uniform over the seeds."""
    index = {n: i for i, n in enumerate(nodes)}
    w = np.zeros((len(nodes), len(nodes)))
    for a, b, weight in edges:
        w[index[a], index[b]] += weight
        w[index[b], index[a]] += weight
    totals = w.sum(axis=1)
    m = np.zeros_like(w)
    for u in range(len(nodes)):
        if totals[u] > 0:
            m[:, u] = w[u] / totals[u]
    p = np.zeros(len(nodes))
    for s in seeds:
        p[index[s]] = 1 / len(seeds)
    r = np.linalg.solve(np.eye(len(nodes)) - (1 - alpha) * (m + np.outer(p, totals <= 0)), alpha * p)
    return {n: r[index[n]] for n in nodes}


def _ranking(found) -> list[tuple]:
    return [(r.memory.id, round(r.score, 9), r.path, r.relations, r.seed) for r in found.results]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                HealthCheck.too_slow])
@given(data=st.data())
def test_graph_search_is_personalized_pagerank_and_the_server_and_the_cache_rank_alike(writer, data):
    scope = _scope()
    count = data.draw(st.integers(2, 7), label="memories")
    nodes = [writer.add(f"The {NAMES[i]} service of {scope} keeps its own ledger", scope=scope).memory_id
             for i in range(count)]
    pairs = st.tuples(st.sampled_from(nodes), st.sampled_from(nodes), st.sampled_from(TYPES),
                      st.sampled_from([0.25, 0.5, 1.0])).filter(lambda e: e[0] != e[1])
    edges = data.draw(st.lists(pairs, max_size=12, unique_by=lambda e: e[:3]), label="links")
    for source, target, kind, weight in edges:
        writer.link(source, target, kind, weight=weight)
    writer.sync()
    target = data.draw(st.integers(0, count - 1), label="query")
    alpha = data.draw(st.sampled_from([0.15, 0.3, 0.6]), label="alpha")
    served = writer.graph_search(f"{NAMES[target]} service", seeds=1, alpha=alpha, limit=100, scopes=[scope])
    cached = writer.graph_search(f"{NAMES[target]} service", seeds=1, alpha=alpha, limit=100, scopes=[scope],
                                 local=True)
    assert [r.memory.id for r in served.results if r.seed] == [nodes[target]]
    assert _ranking(served) == _ranking(cached)
    expected = plain_pagerank(nodes, [(a, b, w) for a, b, _, w in edges], [nodes[target]], alpha)
    reached = {r.memory.id: r.score for r in served.results}
    assert set(reached) == {n for n, score in expected.items() if score > 1e-12}
    assert reached == pytest.approx({n: expected[n] for n in reached}, abs=1e-7)
    assert [r.score for r in served.results] == sorted(reached.values(), reverse=True)
    links_made = {(a, b, t) for a, b, t, _ in edges} | {(b, a, t) for a, b, t, _ in edges}
    for r in served.results:
        assert r.path[0] == nodes[target] and r.path[-1] == r.memory.id
        assert all((a, b, t) in links_made for a, b, t in zip(r.path[:-1], r.path[1:], r.relations, strict=True))


def test_graph_search_never_shows_a_memory_the_caller_may_not_read_not_even_on_a_path(running, make_client):
    writer = make_client(running.address, "writer")
    outsider = make_client(running.address, "outsider")
    seed = writer.add("The zeppelin rollout checklist lives in the runbook", scope="project:open").memory_id
    beyond = writer.add("Rollback steps for the rollout", scope="project:open").memory_id
    hidden = writer.add("The zeppelin deploy key lives in the ops vault", scope="user").memory_id
    writer.link(seed, hidden, "semantic")
    writer.link(hidden, beyond, "causal")
    outsider.sync()
    by_writer = writer.graph_search("zeppelin rollout checklist", seeds=1, limit=20)
    assert hidden in {r.memory.id for r in by_writer.results}
    assert next(r for r in by_writer.results if r.memory.id == beyond).path == (seed, hidden, beyond)
    for local in (False, True):
        found = outsider.graph_search("zeppelin deploy key", seeds=5, limit=100, local=local)
        seen = {r.memory.id for r in found.results} | {m for r in found.results for m in r.path}
        assert seed in seen and hidden not in seen  # not as a result, and no path runs through it
        assert all(len(r.path) == 1 for r in found.results)  # seed and beyond are linked only through it
    with pytest.raises(PermissionDenied, match="scope-not-granted"):
        outsider.graph_search("zeppelin", scopes=["user"])
    raw = RawAgent(running.address, "outsider")
    try:
        answer = raw.call("GraphSearch", pb.GraphSearchRequest(query="zeppelin deploy key vault", limit=100))
        assert hidden not in {m for r in answer.results for m in (r.memory.id, *r.path)}
        code, details = refused(lambda: raw.call("GraphSearch", pb.GraphSearchRequest(query="x", alpha=2)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "alpha must be between 0 and 1" in details
    finally:
        raw.close()


def test_the_graph_search_command_prints_scores_and_paths_from_the_server_and_the_cache(running, writer, tmp_path,
                                                                                        model_path):
    env = {"MNEMOSYNC_SERVER": running.address, "MNEMOSYNC_AGENT_ID": "cli-agent", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cli-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}
    scope = _scope()
    outage = writer.add(f"The {scope} outage began when the certificate expired", scope=scope).memory_id
    renewal = writer.add(f"Certificates of {scope} now renew thirty days early", scope=scope).memory_id
    writer.link(outage, renewal, "causal", reason="the outage led to early renewal")
    answers = []
    for local in ((), ("--local",)):
        done = mnemosync("graph", "search", "outage began when the certificate expired", "--seeds", "1",
                         "--scope", scope, "--json", *local, env=env)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout))
    assert answers[0]["results"] == answers[1]["results"] and answers[1]["offline"] is True
    assert [(r["memory"]["id"], r["path"], r["relations"], r["seed"]) for r in answers[0]["results"]] == [
        (outage, [outage], [], True), (renewal, [outage, renewal], ["causal"], False)]
    text = mnemosync("graph", "search", "outage began when the certificate expired", "--seeds", "1", env=env)
    assert text.returncode == 0 and f"{renewal}" in text.stdout and "-causal-" in text.stdout
    bad = mnemosync("graph", "search", "outage", "--seeds", "99", env=env)
    assert bad.returncode != 0 and "seeds must be 1 to 50" in bad.stderr
