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
from mnemosync.server.costly_reads import CostlyReads, TopicCache
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


def test_costly_reads_past_the_server_wide_bound_wait_their_turn_instead_of_running():
    async def scenario():
        bounds = CostlyReads(per_agent=0, total=1)
        release, order = asyncio.Event(), []

        async def run(agent):
            async with bounds.slot(agent, "Traverse"):
                order.append(agent)
                if agent == "first":
                    await release.wait()

        first = asyncio.ensure_future(run("first"))
        await asyncio.sleep(0)
        second = asyncio.ensure_future(run("second"))
        await asyncio.sleep(0.05)
        assert order == ["first"] and bounds.in_flight("second") == 1  # admitted, waiting for the running one
        release.set()
        await asyncio.gather(first, second)
        return order

    assert asyncio.run(scenario()) == ["first", "second"]


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
