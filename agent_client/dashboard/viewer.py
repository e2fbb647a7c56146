"""What the dashboard reads and writes, through the one `AgentClient` it runs as.

Every call is one the CLI or an agent makes (Stats, ListConflicts,
GetConflict, Search, Append for a resolution) or one of the operator's view
(ListAgents, ListChangelog, GetMemoryHistory, ListMemories, GetActivity, VerifyChain), made
with the dashboard's identity; nothing is read from anywhere else. Errors are
the agent client's typed errors (`mnemosync.agent.errors`); the web edge turns
them into pages (`mnemosync.agent.dashboard.pages`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from mnemosync.agent.client import AgentClient, SearchOutcome, WriteResult
from mnemosync.agent.conflicts import ConflictList, ConflictView
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.outcomes import Stats
from mnemosync.kernel.overview import Activity, AgentStatus, AgentsView, ChainCheck, ChangelogRow, MemoryHistory

_T = TypeVar("_T")

IDENTITY_SECONDS = 10.0
CHAIN_SECONDS = 30.0


class _Cached:
    """A value recomputed at most once per `seconds`."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._value = None
        self._at = float("-inf")
        self._lock = threading.Lock()

    def get(self, compute: Callable[[], _T]) -> _T:
        with self._lock:
            if time.monotonic() - self._at >= self.seconds:
                self._value, self._at = compute(), time.monotonic()
            return self._value


class Viewer:
    """The dashboard's view of the server, as the identity of `client`.

    Args:
        client: The dashboard's agent client (started without live updates).
    """

    def __init__(self, client: AgentClient):
        self.client = client
        self.remote = client.remote
        self._identity = _Cached(IDENTITY_SECONDS)
        self._chain = _Cached(CHAIN_SECONDS)

    def identity(self) -> AgentStatus:
        """The dashboard's own identity as the server sees it (authority, scopes, admin)."""
        return self._identity.get(lambda: self.remote.list_agents().caller)

    def agents(self) -> AgentsView:
        """Every agent with its lag, presence and outbox."""
        return self.remote.list_agents()

    def stats(self) -> Stats:
        """Server-wide figures (only its head, version, model and size are shown: its counts are not per scope)."""
        return self.remote.stats()

    def changelog(self, **filters) -> tuple[list[ChangelogRow], int]:
        """Changelog rows newest first and the head (see `Remote.list_changelog`)."""
        return self.remote.list_changelog(**filters)

    def history(self, memory_id: str) -> MemoryHistory:
        """A memory and every version of it."""
        return self.remote.memory_history(memory_id)

    def memories(self, **filters) -> tuple[list[MemoryRow], int]:
        """A page of memories newest first, filtered, and how many match (see `Remote.list_memories`)."""
        return self.remote.list_memories(**filters)

    def activity(self, minutes: int) -> Activity:
        """Writes and searches per minute and memory counts."""
        return self.remote.activity(minutes)

    def chain(self) -> ChainCheck:
        """The chain's verification state (a walk at most every `CHAIN_SECONDS`)."""
        return self._chain.get(self.remote.verify_chain)

    def conflicts(self, include_resolved: bool) -> ConflictList:
        """Conflicts in the dashboard's scopes (open ones first)."""
        return self.client.conflicts(include_resolved=include_resolved, limit=200)

    def conflict(self, conflict_id: int) -> ConflictView:
        """One conflict with its revisions."""
        return self.client.conflict(conflict_id)

    def resolve(self, conflict_id: int, *, base_version: int, note: str, keep: int | None = None,
                merged_content: str | None = None, keep_all: bool = False) -> WriteResult:
        """Resolves a conflict exactly as `mnemosync conflicts resolve` does (`AgentClient.resolve_conflict`), from
        the version the page showed, and only while the server answers (never queued in the dashboard's outbox).

        Raises:
            ServerUnavailable: the server cannot be reached; nothing was resolved.
            StaleVersion: the memory changed since the page was shown.
            MnemosyncError: the server's refusal (already resolved, a rule, a bad revision).
        """
        if self.conflict(conflict_id).offline:
            raise ServerUnavailable("the server is unreachable, so nothing was resolved; try again when it is back")
        return self.client.resolve_conflict(conflict_id, keep=keep, merged_content=merged_content,
                                            keep_all=keep_all, note=note, base_version=base_version)

    def search(self, query: str, *, mode: str, limit: int, scopes: tuple[str, ...]) -> SearchOutcome:
        """The server's search with its score parts (the local cache's, saying so, when it is unreachable)."""
        return self.client.search(query, mode=mode, limit=limit, scopes=scopes)
