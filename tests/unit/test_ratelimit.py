"""`mnemosync.server.ratelimit`: the per-agent rate limit (on a clock the test moves) and stream cap."""

from __future__ import annotations

import grpc
import pytest

from mnemosync.agent.remote import Remote
from mnemosync.kernel.errors import ResourceExhausted
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.metadata import RETRY_AFTER_KEY
from mnemosync.server.app import run_server
from mnemosync.server.ratelimit import TokenBuckets
from mnemosync.server.settings import ServerSettings
from mnemosync.v1 import memory_pb2 as pb

from helpers import ManualClock, RawAgent, add_op, wait_until


def test_an_agent_over_its_rate_limit_gets_resource_exhausted_with_a_retry_hint(tmp_path):
    settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              limits=Limits(rate_per_agent=2, rate_burst=3))
    clock = ManualClock()  # the rate limit's clock: it moves only when the test moves it
    with run_server(settings, clock=clock.clock) as server:
        flooder, other = RawAgent(server.address, "flooder"), RawAgent(server.address, "other")
        for _ in range(3):
            flooder.call("Stats", pb.StatsRequest())
        with pytest.raises(grpc.RpcError) as err:
            flooder.append(add_op("one too many"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details().startswith("rate limit: agent flooder may make 2 calls per second (bursts of 3); "
                                              "retry after ")
        retry_ms = int(dict(err.value.trailing_metadata())[RETRY_AFTER_KEY])
        assert 0 < retry_ms <= 500
        assert server.store.head_seq() == 0
        other.call("Stats", pb.StatsRequest())  # another agent has its own bucket
        remote = Remote(server.address, "flooder", insecure=True, timeout=5)
        with pytest.raises(ResourceExhausted) as typed:
            remote.stats()
        assert typed.value.retry_after is not None and 0 < typed.value.retry_after <= 0.5
        clock.advance(typed.value.retry_after)  # the hint is right: after that wait the bucket has a token again
        remote.stats()
        for agent in (flooder, other):
            agent.close()
        remote.close()


def test_a_token_bucket_refills_at_its_rate():
    now = [0.0]
    buckets = TokenBuckets(rate=10, burst=2, clock=lambda: now[0])
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(0.1)
    now[0] += 0.1
    assert buckets.take("a") == 0
    assert TokenBuckets(rate=0, burst=1).take("a") == 0  # 0 disables


def test_an_agent_cannot_hold_more_streams_than_its_cap(tmp_path):
    settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              limits=Limits(max_streams_per_agent=2))
    with run_server(settings) as server:
        agent = RawAgent(server.address, "greedy")
        streams = [agent.stub.Subscribe(pb.SubscribeRequest(), metadata=agent.metadata) for _ in range(2)]
        for s in streams:
            s.initial_metadata()  # accepted and open
        with pytest.raises(grpc.RpcError) as err:
            agent.sync(0)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "already has 2 Sync/Subscribe streams open; the limit is 2 per agent" in err.value.details()
        assert RawAgent(server.address, "someone-else").sync(0) == []
        streams[0].cancel()

        def a_slot_is_free() -> bool:  # the server notices the cancelled stream within its poll interval
            try:
                return agent.sync(0) == []
            except grpc.RpcError:
                return False

        wait_until(a_slot_is_free, timeout=10, message="the cancelled stream's slot was never freed")
        streams[1].cancel()
        agent.close()
