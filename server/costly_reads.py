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
* Fair shares: a freed slot goes to the waiting agent with the fewest costly
  reads running, then to the one that has used the least time running them
  while the server was busy, not to whichever call queued first. An agent
  that was idle comes back `CREDIT_SECONDS` below the least share of the busy
  ones, so an agent that searches now and then (a person, the prompt hook's
  recall) goes ahead of a flood, while flooding agents share the rest by
  time: a GraphSearch costs its agent twenty Searches' worth (issue 37, item
  6). And so that it does not wait for the flood's call that is running
  either (a GraphSearch takes a second where a Search takes 15 ms), the only
  costly call an agent has in flight may run in a `RESERVE` slot beyond the
  bound when the others are full: an agent with calls queued back to back
  never qualifies, so a flood gets at most the bound, and the server runs at
  most the bound plus one.
* ListTopics is computed once per changelog head, scopes and novelty time for
  the largest limit and sliced for each request (`TopicCache`), so asking with
  another limit costs nothing.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections import OrderedDict, deque
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
RESERVE = 1
"""Slots beyond the server-wide bound that only a call that is its agent's only costly call in flight may run in,
when the others are full: an occasional searcher does not wait for the flood's call that is running."""
CREDIT_SECONDS = 1.0
"""How far below the least share of the waiting agents (else the running ones) an agent that was idle comes back:
enough for a few searches to go first, too little for an agent to bank turns by pausing."""


def total_slots(limits: Limits) -> int:
    """How many costly reads run at once server-wide."""
    return limits.costly_reads_total or max(1, (os.cpu_count() or 2) // 2)


class CostlyReads:
    """The per-agent and server-wide bounds of the costly reads (see the module docstring); lives on one event loop.

    Args:
        per_agent: Costly calls one agent may have in flight (0: no per-agent bound).
        total: Costly calls running at once server-wide.
    """

    def __init__(self, per_agent: int, total: int, clock: Callable[[], float] = time.monotonic):
        self.per_agent = per_agent
        self.total = max(1, total)
        self._clock = clock
        self._in_flight: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._free = self.total
        self._reserve_free = RESERVE
        self._waiting: dict[str, deque[tuple[int, asyncio.Future[bool]]]] = {}
        self._arrivals = 0
        self._used: dict[str, float] = {}
        """Seconds of costly reads each agent has run while the server was busy (its share so far)."""

    @classmethod
    def from_limits(cls, limits: Limits) -> CostlyReads:
        return cls(limits.costly_reads_per_agent, total_slots(limits))

    def in_flight(self, agent_id: str) -> int:
        """The agent's costly calls admitted and not yet finished (waiting or running)."""
        return self._in_flight.get(agent_id, 0)

    @asynccontextmanager
    async def slot(self, agent_id: str, method: str) -> AsyncIterator[None]:
        """Holds one of the agent's slots and, once it is the agent's turn, one of the server's, for one costly call.

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
            reserve = await self._acquire(agent_id)
            started = self._clock()
            try:
                yield
            finally:
                self._used[agent_id] = self._used.get(agent_id, 0.0) + self._clock() - started
                self._release(agent_id, reserve)
        finally:
            left = self._in_flight[agent_id] - 1
            if left:
                self._in_flight[agent_id] = left
            else:
                del self._in_flight[agent_id]

    def _active(self, agent_id: str) -> bool:
        return agent_id in self._running or agent_id in self._waiting

    def _alone(self, agent_id: str) -> bool:
        """Whether this is the agent's only costly call in flight (what may run in the reserve)."""
        return self._in_flight.get(agent_id, 0) == 1 and agent_id not in self._running

    async def _acquire(self, agent_id: str) -> bool:
        """Waits for the agent's turn; returns whether it runs in the reserve."""
        if not self._active(agent_id):  # back from idle: no banked share, but a little credit (see CREDIT_SECONDS)
            shares = [self._used.get(a, 0.0) for a in self._waiting or self._running]  # those it competes with
            self._used[agent_id] = max(self._used.get(agent_id, 0.0), min(shares, default=0.0) - CREDIT_SECONDS)
        if (self._free and not self._waiting) or (not self._free and self._reserve_free and self._alone(agent_id)):
            return self._take(agent_id)
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._arrivals += 1
        self._waiting.setdefault(agent_id, deque()).append((self._arrivals, turn))
        try:
            return await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # its turn came as it was cancelled: pass the slot on
                self._release(agent_id, turn.result())
            else:
                queue = self._waiting.get(agent_id)
                if queue is not None:
                    kept = deque(item for item in queue if item[1] is not turn)
                    if kept:
                        self._waiting[agent_id] = kept
                    else:
                        del self._waiting[agent_id]
            raise

    def _take(self, agent_id: str) -> bool:
        """Counts a slot taken by the agent: a regular one when free, else the reserve; returns which."""
        reserve = not self._free
        if reserve:
            self._reserve_free -= 1
        else:
            self._free -= 1
        self._running[agent_id] = self._running.get(agent_id, 0) + 1
        return reserve

    def _release(self, agent_id: str, reserve: bool) -> None:
        left = self._running[agent_id] - 1
        if left:
            self._running[agent_id] = left
        else:
            del self._running[agent_id]
        if reserve:
            self._reserve_free += 1
        else:
            self._free += 1
        while self._waiting:  # fair shares: fewest running, then the least time used, then arrival
            candidates = list(self._waiting) if self._free else [a for a in self._waiting if self._alone(a)]
            if not candidates or not (self._free or self._reserve_free):
                break
            agent = min(candidates, key=lambda a: (self._running.get(a, 0), self._used.get(a, 0.0),
                                                   self._waiting[a][0][0]))
            queue = self._waiting[agent]
            _, turn = queue.popleft()
            if not queue:
                del self._waiting[agent]
            if not turn.done():
                turn.set_result(self._take(agent))
        if not self._running and not self._waiting:
            self._used.clear()  # idle: everyone starts equal again


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
