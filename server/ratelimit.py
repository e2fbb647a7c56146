"""Per-agent limits on calls and open streams, enforced by the servicer's `_rpc` wrapper.

* A token bucket per agent: `rate` calls per second sustained, `burst` at
  once. A call over it is refused with RESOURCE_EXHAUSTED saying how long to
  wait; the wait is also sent as the `retry-after-ms` trailing metadata key.
* A cap on Sync and Subscribe streams open at once per agent, so one agent
  cannot make the server keep (and deliver to) an unbounded number of streams.

Both are keyed by the authenticated agent id, so they are real limits under
mTLS; in development mode (ids from metadata) they are only advisory.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from mnemosync.kernel.errors import ResourceExhausted
from mnemosync.kernel.limits import Limits


class RateLimited(ResourceExhausted):
    """The agent made calls faster than its rate limit; `retry_after` is the wait in seconds."""

    def __init__(self, message: str, retry_after: float):
        super().__init__(message)
        self.retry_after = retry_after


@dataclass
class _Bucket:
    tokens: float
    stamp: float


class TokenBuckets:
    """One token bucket per key.

    Args:
        rate: Tokens added per second (0 disables the limit).
        burst: Bucket size: calls allowed at once after a quiet period.
        clock: Monotonic seconds (tests pass a fake one).
    """

    _PRUNE_AT = 10_000

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic):
        self.rate = rate
        self.burst = max(1, burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Takes one token; returns 0.0, or the seconds to wait when the bucket is empty."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) >= self._PRUNE_AT:
                    self._prune(now)
                bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate

    def _prune(self, now: float) -> None:
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]


class RequestGuard:
    """The per-agent rate limit and stream cap, as the servicer applies them.

    Args:
        rate: Calls per second per agent, sustained (0: no limit).
        burst: Calls per agent at once.
        max_streams: Sync/Subscribe streams open at once per agent (0: no cap).
        clock: Monotonic seconds.
    """

    def __init__(self, rate: float, burst: int, max_streams: int, clock: Callable[[], float] = time.monotonic):
        self.buckets = TokenBuckets(rate, burst, clock)
        self.max_streams = max_streams
        self._streams: dict[str, int] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_limits(cls, limits: Limits, clock: Callable[[], float] = time.monotonic) -> RequestGuard:
        """A guard configured by `mnemosync.kernel.limits.Limits`."""
        return cls(limits.rate_per_agent, limits.rate_burst, limits.max_streams_per_agent, clock)

    def admit(self, agent_id: str) -> None:
        """Counts one call against the agent's rate.

        Raises:
            RateLimited: over the rate; the message and `retry_after` say how long to wait.
        """
        wait = self.buckets.take(agent_id)
        if wait > 0:
            ms = max(1, math.ceil(wait * 1000))
            raise RateLimited(
                f"rate limit: agent {agent_id} may make {self.buckets.rate:g} calls per second "
                f"(bursts of {self.buckets.burst}); retry after {ms} ms",
                ms / 1000,
            )

    @contextmanager
    def stream(self, agent_id: str) -> Iterator[None]:
        """Holds one of the agent's stream slots while the block runs.

        Raises:
            ResourceExhausted: the agent already has `max_streams` streams open.
        """
        with self._lock:
            open_now = self._streams.get(agent_id, 0)
            if self.max_streams and open_now >= self.max_streams:
                raise ResourceExhausted(
                    f"agent {agent_id} already has {open_now} Sync/Subscribe streams open; the limit is "
                    f"{self.max_streams} per agent: close one (each agent process needs one Subscribe)"
                )
            self._streams[agent_id] = open_now + 1
        try:
            yield
        finally:
            with self._lock:
                left = self._streams[agent_id] - 1
                if left:
                    self._streams[agent_id] = left
                else:
                    del self._streams[agent_id]
