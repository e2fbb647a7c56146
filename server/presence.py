"""Who calls the server and how often, since it started: the presence half of the operator's view.

An agent's offset is durable (the store's `agent_offsets`); whether it is
connected now, when it last called, which grant it called with and what it
last said about its outbox are not worth a write per call, so they are kept
here, in memory, by the servicer: every call passes through `called`, every
Subscribe stream through `subscribed`, and an Ack that carries an outbox report
through `report_outbox`. Calls are also counted per minute and method (the
dashboard's search rate). A restarted server starts empty and says since when
(`started_ms`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from mnemosync.kernel.outcomes import AgentOffset
from mnemosync.kernel.overview import AgentStatus, AgentsView, OutboxReport
from mnemosync.server.governance import scope_granted
from mnemosync.server.identity import Caller

MINUTE_MS = 60_000
KEEP_MINUTES = 24 * 60


@dataclass
class _Seen:
    caller: Caller
    last_seen_ms: int
    subscriptions: int = 0
    outbox: OutboxReport | None = None
    outbox_reported_at_ms: int = 0
    sessions: int | None = None


class Presence:
    """Agents' presence and per-minute call counts, in memory. Thread-safe.

    Args:
        now_ms: The server's wall clock (`mnemosync.server.clock.Clock.now_ms`).
    """

    def __init__(self, now_ms: Callable[[], int]):
        self.now_ms = now_ms
        self.started_ms = now_ms()
        self._seen: dict[str, _Seen] = {}
        self._minutes: dict[int, Counter] = {}
        self._lock = threading.Lock()

    def called(self, caller: Caller, method: str) -> None:
        """Records one call: the agent is present now, with this grant, and `method` counts in this minute."""
        now = self.now_ms()
        minute = now - now % MINUTE_MS
        with self._lock:
            seen = self._seen.get(caller.agent_id)
            if seen is None:
                self._seen[caller.agent_id] = _Seen(caller, now)
            else:
                seen.caller, seen.last_seen_ms = caller, now
            counts = self._minutes.get(minute)
            if counts is None:
                counts = self._minutes[minute] = Counter()
                for old in [m for m in self._minutes if m <= minute - KEEP_MINUTES * MINUTE_MS]:
                    del self._minutes[old]
            counts[method] += 1

    @contextmanager
    def subscribed(self, caller: Caller) -> Iterator[None]:
        """Counts the agent as connected while the block (its Subscribe stream) runs."""
        with self._lock:
            seen = self._seen.setdefault(caller.agent_id, _Seen(caller, self.now_ms()))
            seen.subscriptions += 1
        try:
            yield
        finally:
            with self._lock:
                seen.subscriptions -= 1
                seen.last_seen_ms = self.now_ms()  # it was there until now

    def report_outbox(self, caller: Caller, report: OutboxReport) -> None:
        """Keeps what the agent said about its outbox."""
        now = self.now_ms()
        with self._lock:
            seen = self._seen.setdefault(caller.agent_id, _Seen(caller, now))
            seen.outbox, seen.outbox_reported_at_ms = report, now

    def report_sessions(self, caller: Caller, sessions: int) -> None:
        """Keeps how many MCP sessions the agent's local process said it serves."""
        now = self.now_ms()
        with self._lock:
            self._seen.setdefault(caller.agent_id, _Seen(caller, now)).sessions = sessions

    def calls_per_minute(self, method: str, since_ms: int) -> dict[int, int]:
        """Calls of `method` per minute start (server time) from the minute holding `since_ms` on."""
        first = since_ms - since_ms % MINUTE_MS
        with self._lock:
            return {minute: counts[method] for minute, counts in self._minutes.items()
                    if minute >= first and counts[method]}

    def view(self, offsets: list[AgentOffset], head_seq: int, viewer: Caller) -> AgentsView:
        """Every agent with an offset or seen since the start, as far as `viewer` may see them.

        An admin sees every agent. Any other viewer (as `Stats` limits it to its own scopes) sees
        itself and the agents seen since the start that hold a scope it may see (`visible_scopes`),
        never agents it shares nothing with, and of the others it sees only their grant as far as it
        holds it and whether they are connected: their offsets, lag and outbox are an admin's to see.
        """
        by_id = {o.agent_id: o for o in offsets}
        with self._lock:
            seen = {agent_id: replace(s) for agent_id, s in self._seen.items()}

        def shown(agent_id: str) -> bool:
            other = seen.get(agent_id)
            return (viewer.admin or agent_id == viewer.agent_id
                    or (other is not None and bool(visible_scopes(other.caller, viewer)[0])))

        everyone = sorted(by_id.keys() | seen.keys())
        agents = [self._status(agent_id, by_id.get(agent_id), seen.get(agent_id), head_seq, viewer)
                  for agent_id in everyone if shown(agent_id)]
        me = self._status(viewer.agent_id, by_id.get(viewer.agent_id), _Seen(viewer, self.now_ms()), head_seq,
                          viewer)
        return AgentsView(agents, head_seq, me, hidden=len(everyone) - len(agents))

    @staticmethod
    def _status(agent_id: str, offset: AgentOffset | None, seen: _Seen | None, head_seq: int,
                viewer: Caller) -> AgentStatus:
        status = AgentStatus(agent_id)
        private = not viewer.admin and agent_id != viewer.agent_id
        if private:  # another agent's progress and outbox: an admin's to see (SECURITY.md, Threat model)
            offset = None
        if offset is not None:
            status = replace(status, acked_seq=offset.acked_seq, lag=head_seq - offset.acked_seq,
                             acked_at_ms=offset.acked_at_ms)
        elif not private:
            status = replace(status, lag=head_seq)
        if seen is not None:
            shown, hidden = visible_scopes(seen.caller, viewer)
            status = replace(status, authority=seen.caller.authority, scopes=shown, hidden_scopes=hidden,
                             admin=seen.caller.admin, last_seen_ms=seen.last_seen_ms,
                             subscriptions=seen.subscriptions, outbox=None if private else seen.outbox,
                             outbox_reported_at_ms=0 if private else seen.outbox_reported_at_ms,
                             sessions=None if private else seen.sessions)
        return status


def visible_scopes(agent: Caller, viewer: Caller) -> tuple[tuple[str, ...], int]:
    """The agent's scope patterns `viewer` may see, and how many it may not.

    A viewer sees a pattern it holds itself, or a plain scope its grant covers;
    a viewer granted every scope sees them all. Every scope is shown as `*`.
    """
    patterns = ("*",) if agent.scopes is None else agent.scopes
    if viewer.scopes is None:
        return patterns, 0
    shown = tuple(p for p in patterns if p in viewer.scopes or (not p.endswith("*") and scope_granted(viewer, p)))
    return shown, len(patterns) - len(shown)
