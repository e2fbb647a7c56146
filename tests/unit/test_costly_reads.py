"""`mnemosync.server.costly_reads`: searches, walks, timelines and topics bounded per agent and server-wide, and the
topics computed once for every limit (issue 33, item 9)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import grpc
import pytest

from mnemosync.kernel.limits import Limits
from mnemosync.kernel.topics import MAX_LIMIT, Topics
from mnemosync.server.app import run_server
from mnemosync.server.costly_reads import CREDIT_SECONDS, CostlyReads, TopicCache
from mnemosync.server.ratelimit import RateLimited
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings


def test_an_agent_over_its_costly_reads_in_flight_is_refused_at_once_while_another_agent_runs():
    async def scenario():
        bounds = CostlyReads(per_agent=2, total=4)
        release = asyncio.Event()

        async def hold(agent):
            async with bounds.slot(agent, "Search"):
                await release.wait()

        held = [asyncio.ensure_future(hold("flooder")) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(RateLimited, match=r"already has 2 costly reads .*\(costly_reads_per_agent") as refused:
            async with bounds.slot("flooder", "Search"):
                pass
        async with bounds.slot("honest", "Search"):
            assert bounds.in_flight("honest") == 1
        release.set()
        await asyncio.gather(*held)
        assert bounds.in_flight("flooder") == 0
        return refused.value.retry_after

    assert asyncio.run(scenario()) > 0


def test_costly_reads_past_the_server_wide_bound_and_its_reserve_wait_their_turn_instead_of_running():
    async def scenario():
        bounds = CostlyReads(per_agent=0, total=1)
        release, order = asyncio.Event(), []

        async def run(agent):
            async with bounds.slot(agent, "Traverse"):
                order.append(agent)
                await release.wait()

        calls = [asyncio.ensure_future(run("busy")) for _ in range(2)]
        await asyncio.sleep(0.01)
        calls.append(asyncio.ensure_future(run("alone")))  # its only call in flight: the reserve takes it
        calls.append(asyncio.ensure_future(run("other")))
        await asyncio.sleep(0.05)
        assert order == ["busy", "alone"] and bounds.in_flight("other") == 1  # admitted, waiting
        release.set()
        await asyncio.gather(*calls)
        return order

    assert asyncio.run(scenario()) == ["busy", "alone", "other", "busy"]


def test_a_freed_slot_goes_to_the_agent_that_used_the_least_not_to_the_call_that_queued_first():
    """Issue 37 item 6: one agent running 16 threads of GraphSearch took another agent's Search p95 from 17 ms to
    3.1 s: its calls queued first for the server-wide slots, and a slot went to whoever had waited longest. Each
    freed slot now goes to the agent with the fewest running, then the one that has used the least time; and the
    only call an agent has in flight may run in the reserve, so it does not wait for the flood's running call."""
    async def scenario():
        bounds = CostlyReads(per_agent=4, total=1)
        releases = {name: asyncio.Event() for name in ("f0", "f1", "f2", "f3", "h0", "h1", "h2")}
        order = []

        async def run(agent, name):
            async with bounds.slot(agent, "GraphSearch"):
                order.append(name)
                await releases[name].wait()

        flood = [asyncio.ensure_future(run("flooder", f"f{i}")) for i in range(4)]
        await asyncio.sleep(0.01)
        honest = [asyncio.ensure_future(run("honest", "h0"))]  # after the flooder's three waiting calls
        await asyncio.sleep(0.01)
        assert order == ["f0", "h0"]  # in the reserve, beside the running call
        honest.append(asyncio.ensure_future(run("honest", "h1")))  # no longer its only call: it waits
        honest.append(asyncio.ensure_future(run("honest", "h2")))
        await asyncio.sleep(0.01)
        releases["h0"].set()
        await asyncio.sleep(0.01)
        assert order == ["f0", "h0"]  # two calls in flight: not for the reserve
        releases["f0"].set()
        await asyncio.sleep(0.01)
        assert order == ["f0", "h0", "h1"]  # honest has used less than the flooder
        for name in ("h1", "h2", "f1", "f2", "f3"):
            releases[name].set()
            await asyncio.sleep(0.01)
        await asyncio.gather(*flood, *honest)
        assert bounds.in_flight("flooder") == bounds.in_flight("honest") == 0
        return order

    assert asyncio.run(scenario())[:4] == ["f0", "h0", "h1", "h2"]


def test_shares_are_by_time_used_and_an_agent_back_from_idle_goes_ahead_by_the_credit_only():
    now = [0.0]

    async def scenario():
        bounds = CostlyReads(per_agent=0, total=1, clock=lambda: now[0])
        order, gates, tasks = [], {}, []

        async def run(agent, name, seconds):
            async with bounds.slot(agent, "GraphSearch"):
                order.append(name)
                await gates[name].wait()
                now[0] += seconds

        def start(agent, name, seconds):
            gates[name] = asyncio.Event()
            tasks.append(asyncio.ensure_future(run(agent, name, seconds)))

        for i in range(4):
            start("heavy", f"h{i}", 3.0)
        await asyncio.sleep(0.01)
        start("solo", "s", 0.0)  # holds the reserve throughout: the shares alone decide
        await asyncio.sleep(0.01)
        order.remove("s")
        gates["h0"].set()
        await asyncio.sleep(0.01)
        for i in range(3):  # heavy has used 3 s: the newcomer starts at 3 - CREDIT_SECONDS, not at 0
            start("burst", f"b{i}", 2.5)
        await asyncio.sleep(0.01)
        while len(order) < 7:
            gates[order[-1]].set()
            await asyncio.sleep(0.01)
        gates[order[-1]].set()
        gates["s"].set()
        await asyncio.gather(*tasks)
        return order

    assert CREDIT_SECONDS == 1.0
    # heavy 6 s after h1; burst 2 -> 4.5 -> 7 s: it goes ahead by its credit, then they alternate by time used
    assert asyncio.run(scenario()) == ["h0", "h1", "b0", "b1", "h2", "b2", "h3"]


def test_a_costly_read_cancelled_while_it_waits_or_just_as_its_slot_comes_gives_the_slot_on():
    async def scenario():
        bounds = CostlyReads(per_agent=0, total=1)
        hold, ran = asyncio.Event(), []

        async def run(agent, name):
            async with bounds.slot(agent, "Search"):
                ran.append(name)
                if name in ("first", "solo"):
                    await hold.wait()

        held = [asyncio.ensure_future(run(name, name)) for name in ("first", "solo")]  # the slot and the reserve
        await asyncio.sleep(0.01)
        gone, later = asyncio.ensure_future(run("other", "gone")), asyncio.ensure_future(run("other", "later"))
        await asyncio.sleep(0.01)
        gone.cancel()
        hold.set()
        await asyncio.gather(*held, later)
        assert bounds.in_flight("other") == 0
        return ran

    assert asyncio.run(scenario()) == ["first", "solo", "later"]


def test_topics_are_computed_once_per_head_scopes_and_novelty_for_every_limit():
    computed = []

    def compute(most):
        computed.append(most)
        return Topics([f"topic {i}" for i in range(30)], [])

    cache = TopicCache()
    assert cache.get(7, ("user",), 5, 0, compute).topics == [f"topic {i}" for i in range(5)]
    assert len(cache.get(7, ("user",), 20, 0, compute).topics) == 20
    assert computed == [MAX_LIMIT]
    cache.get(8, ("user",), 5, 0, compute)  # the changelog moved
    assert computed == [MAX_LIMIT, MAX_LIMIT]


TOPIC_POLICY = """
[agents.teamlead]
scopes = ["team"]

[agents.builder]
scopes = ["project:app"]
"""


def test_each_caller_is_served_the_topics_of_its_own_scopes_at_one_changelog_position(tmp_path):
    """Issue 37 item 13: topics computed for one caller's scopes and served to another survived every test (the
    cache of `TopicCache` is per head, scopes and novelty time)."""
    with run_server(dev_settings(tmp_path, policy=TOPIC_POLICY)) as server:
        writer = RawAgent(server.address, "writer")
        for scope, words in (("team", "release train"), ("project:app", "frontend build")):
            writer.append(*(add_op(f"{words} note {i}", scope=scope, vector=_clustered(words, i)) for i in range(6)))
        answers = {agent: RawAgent(server.address, agent).call("ListTopics", pb.ListTopicsRequest(limit=10)).topics
                   for agent in ("teamlead", "builder", "writer")}
    assert {t.scope for t in answers["teamlead"]} == {"team"}
    assert {t.scope for t in answers["builder"]} == {"project:app"}
    assert {t.scope for t in answers["writer"]} == {"team", "project:app"}


def _clustered(words: str, i: int) -> list[float]:
    """Vectors of one topic per `words`: its own direction, a little noise per memory."""
    import numpy as np

    from helpers import fake_vector

    v = np.asarray(fake_vector(words)) + 0.05 * np.asarray(fake_vector(f"{words} {i}"))
    return (v / np.linalg.norm(v)).astype(np.float32).tolist()


COSTLY_CALLS = {
    "Search": lambda agent, query: agent.stub.Search.future(
        pb.SearchRequest(query=query, limit=100, neighbours=3), metadata=agent.metadata, timeout=60),
    "GraphSearch": lambda agent, query: agent.stub.GraphSearch.future(
        pb.GraphSearchRequest(query=query, limit=100), metadata=agent.metadata, timeout=60),
}


@pytest.mark.parametrize("rpc", sorted(COSTLY_CALLS))
def test_the_server_refuses_an_agents_costly_call_past_its_limit_and_serves_other_agents(tmp_path, rpc):
    settings = replace(dev_settings(tmp_path), limits=Limits(costly_reads_per_agent=1))
    with run_server(settings) as server:
        writer = RawAgent(server.address, "writer")
        for start in range(0, 3000, 500):
            writer.append(*(add_op(f"note {i} about service {i % 97} and its owner {i % 13}")
                            for i in range(start, start + 500)))
        flooder = RawAgent(server.address, "flooder")
        calls = [COSTLY_CALLS[rpc](flooder, f"service {i} owner") for i in range(12)]
        codes = []
        for call in calls:
            try:
                call.result()
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as exc:
                codes.append(exc.code())
                assert "costly_reads_per_agent" in exc.details()
        assert grpc.StatusCode.RESOURCE_EXHAUSTED in codes and grpc.StatusCode.OK in codes
        assert writer.search("service 5 owner", limit=5)  # another agent is served meanwhile
