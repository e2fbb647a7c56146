"""Costly reads: the calls that cost the server the most CPU, bounded per agent and server-wide, and the topics cache.

A search with limit 100 and neighbours, a deep graph walk, a timeline or the
topic clusters each cost milliseconds to seconds of CPU, where an Append costs
a fraction of one. With no bound, 32 clients searching at once made a single
Append wait 2.8 s (issue 33). So:

* Per agent, at most `Limits.costly_reads_per_agent` such calls are in flight
  at once; one more is refused at once with RESOURCE_EXHAUSTED naming the
  limit (and the `retry-after-ms` trailer), before it costs anything.
* Server-wide, at most `Limits.costly_reads_total` of them run at once (0:
  half the CPUs, at least one); the others wait on the event loop, holding no
  worker thread, so writes and cheap reads always find a thread and a core.
* ListTopics is computed once per changelog head, scopes and novelty time for
  the largest limit and sliced for each request (`TopicCache`), so asking with
  another limit costs nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace

from mnemosync.kernel import topics as topics_module
from mnemosync.kernel.limits import Limits
from mnemosync.server.ratelimit import RateLimited

COSTLY = frozenset({"Search", "GraphSearch", "Traverse", "GetCausalChain", "GetTimeline", "ListTopics"})
"""The RPCs bounded here."""

RETRY_AFTER_SECONDS = 0.1
"""What a refusal asks the agent to wait: about one costly call's time."""


def total_slots(limits: Limits) -> int:
    """How many costly reads run at once server-wide."""
    return limits.costly_reads_total or max(1, (os.cpu_count() or 2) // 2)


class CostlyReads:
    """The per-agent and server-wide bounds of the costly reads (see the module docstring); lives on one event loop.

    Args:
        per_agent: Costly calls one agent may have in flight (0: no per-agent bound).
        total: Costly calls running at once server-wide.
    """

    def __init__(self, per_agent: int, total: int):
        self.per_agent = per_agent
        self.total = max(1, total)
        self._in_flight: dict[str, int] = {}
        self._running: asyncio.Semaphore | None = None

    @classmethod
    def from_limits(cls, limits: Limits) -> CostlyReads:
        return cls(limits.costly_reads_per_agent, total_slots(limits))

    def in_flight(self, agent_id: str) -> int:
        """The agent's costly calls admitted and not yet finished (waiting or running)."""
        return self._in_flight.get(agent_id, 0)

    @asynccontextmanager
    async def slot(self, agent_id: str, method: str) -> AsyncIterator[None]:
        """Holds one of the agent's slots and, once one is free, one of the server's, for one costly call.

        Raises:
            RateLimited: the agent already has `per_agent` costly calls in flight.
        """
        held = self._in_flight.get(agent_id, 0)
        if self.per_agent and held >= self.per_agent:
            raise RateLimited(f"agent {agent_id} already has {held} costly reads (searches, walks, timelines, "
                              f"topics) in flight, the limit per agent (costly_reads_per_agent in "
                              f"[server.limits]); {method} was not run: wait for one to finish", RETRY_AFTER_SECONDS)
        self._in_flight[agent_id] = held + 1
        try:
            if self._running is None:
                self._running = asyncio.Semaphore(self.total)
            async with self._running:
                yield
        finally:
            left = self._in_flight[agent_id] - 1
            if left:
                self._in_flight[agent_id] = left
            else:
                del self._in_flight[agent_id]


class TopicCache:
    """The topics of the last few (head, scopes, novelty time) asked, each computed once for the largest limit."""

    SIZE = 8

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple, topics_module.Topics] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, head: int, scopes: tuple[str, ...], limit: int, novel_since_ms: int,
            compute: Callable[[int], topics_module.Topics]) -> topics_module.Topics:
        """The topics for `limit`, from the cache or from `compute(MAX_LIMIT)` (which the cache then keeps)."""
        key = (head, scopes, novel_since_ms)
        with self._lock:
            found = self._kept.get(key)
            if found is not None:
                self._kept.move_to_end(key)
        if found is None:
            found = compute(topics_module.MAX_LIMIT)
            with self._lock:
                self._kept[key] = found
                while len(self._kept) > self.SIZE:
                    self._kept.popitem(last=False)
        return replace(found, topics=found.topics[:limit])
