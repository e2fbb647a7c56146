"""Reads answered from this agent's own files: lists, topics, a timeline, counts, id prefixes, queued writes.

The cache is a live fold of the changelog (kept current by the client's
Subscribe stream), so these need no server round trip and answer the same
offline; writes still waiting in the outbox are shown in their pending state
where a caller asks for them. Every text leaves here with secrets masked
(`mnemosync.kernel.secrets_scan.mask`), as the server's reads do. The MCP shim's
list tools, its core memories and its id prefixes read through this object
(`AgentClient.local`); nothing outside `agent_client` touches the cache or the
outbox.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from mnemosync.agent.cache import Cache
from mnemosync.agent.outbox import Outbox
from mnemosync.kernel import lifecycle_state, listings, reflection, secrets_scan, topics
from mnemosync.kernel.conflict_projection import Conflict
from mnemosync.kernel.errors import InvalidArgument, NotFound
from mnemosync.kernel.listings import TimelineRow, TopicRow
from mnemosync.kernel.memory import MemoryRow

_ID_PREFIX = re.compile(r"^[0-9a-fA-F-]{6,36}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


class LocalReads:
    """The agent's local answers (see the module docstring). Thread-safe, as the files are.

    Args:
        cache: The agent's cache.
        outbox: The agent's outbox (its queued writes and their pending state).
    """

    def __init__(self, cache: Cache, outbox: Outbox):
        self._cache = cache
        self._outbox = outbox

    @property
    def offset(self) -> int:
        """The changelog seq the cache has applied."""
        return self._cache.offset

    def memory(self, memory_id: str) -> MemoryRow | None:
        """The memory as the cache has it (secrets masked), or None."""
        memory = self._cache.get(memory_id)
        return secrets_scan.masked(memory) if memory else None

    def recent(self, *, since_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
               tags: Sequence[str] = (), limit: int = 20, offset: int = 0) -> list[MemoryRow]:
        """Live memories created since `since_ms`, newest first (one page)."""
        rows = self._cache.read(listings.recent, since_ms=since_ms, scopes=scopes, types=types, tags=tags,
                                limit=limit, offset=offset)
        return [secrets_scan.masked(m) for m in rows]

    def tag_topics(self, *, scopes: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TopicRow]:
        """Tags of live memories, most used first (one page)."""
        return self._cache.read(listings.tag_topics, scopes=scopes, limit=limit, offset=offset)

    def topics(self, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0) -> topics.Topics:
        """Topic clusters of the live memories in `scopes` (all cached when empty), see `mnemosync.kernel.topics`."""
        return self._cache.read(topics.compute, scopes=scopes, limit=limit, novel_since_ms=novel_since_ms)

    def reflection(self, *, now_ms: int, scopes: Sequence[str] = ()) -> reflection.Reflection:
        """The reflection summary of the cache (`mnemosync.kernel.reflection`), secrets masked."""
        return self._cache.read(reflection.compute, now_ms=now_ms, scopes=scopes, mask=secrets_scan.mask)

    def type_topics(self, *, scopes: Sequence[str] = ()) -> list[TopicRow]:
        """Types of live memories, most used first."""
        return self._cache.read(listings.type_topics, scopes=scopes)

    def timeline(self, *, start_ms: int, end_ms: int, scopes: Sequence[str] = (), types: Sequence[str] = (),
                 tags: Sequence[str] = (), limit: int = 30, offset: int = 0) -> list[TimelineRow]:
        """Creations and last changes of memories between two times, oldest first (one page)."""
        rows = self._cache.read(listings.timeline, start_ms=start_ms, end_ms=end_ms, scopes=scopes, types=types,
                                tags=tags, limit=limit, offset=offset)
        return [r._replace(content=secrets_scan.mask(r.content)) for r in rows]

    def core_candidates(self, *, scopes: Sequence[str]) -> list[MemoryRow]:
        """Live memories of the scopes that can rank as core memories (`mnemosync.kernel.listings.candidates`)."""
        return [secrets_scan.masked(m) for m in self._cache.read(listings.candidates, scopes=scopes)]

    def usage(self, memory_ids: Sequence[str]) -> dict:
        """Memory id -> its use as the server's last sweep recorded it (`mnemosync.kernel.lifecycle.Usage`; unused ones
        are left out)."""
        return self._cache.read(lifecycle_state.usage_for, memory_ids=list(memory_ids))

    def conflict(self, conflict_id: int) -> Conflict | None:
        """A conflict as the cache has it (its id is the seq of the entry that opened it), or None."""
        return self._cache.conflict(conflict_id)

    def open_conflicts(self, *, limit: int = 1000) -> list[Conflict]:
        """The open conflicts the cache has, oldest first."""
        return self._cache.conflicts(limit=limit)

    def counts(self) -> dict:
        """Live and forgotten memories in the cache, live ones by layer, scope and type."""
        return self._cache.read(listings.counts)

    def resolve_id(self, text: str) -> str:
        """A full memory id from a full id or a unique prefix of at least 6 characters (queued memories too).

        Raises:
            InvalidArgument: the text is not an id, or the prefix starts several memory ids.
            NotFound: no memory id starts with it.
        """
        value = text.strip().lower()
        if _UUID.match(value):
            return value
        if not _ID_PREFIX.match(value):
            raise InvalidArgument(f"{text[:40]!r} is not a memory id: give the full id (a UUID) "
                               "or its first 8 characters, as searches, lists and the core memories show them")
        found = set(self._cache.read(listings.ids_starting_with, prefix=value))
        found |= {i for i in self._outbox.overlay_ids() if i.startswith(value)}
        found = found or self._outbox.redirected_ids(value)  # an id handed out that became another memory
        if len(found) == 1:
            return found.pop()
        if not found:
            raise NotFound(f"no memory id starts with {value!r} in this agent's cache; give the full "
                           "id, or find the memory with a search")
        raise InvalidArgument(f"{value!r} is the start of several memory ids "
                           f"({', '.join(sorted(found))}); give more characters")

    # -- writes waiting in the outbox ----------------------------------------------------------

    def queued(self) -> int:
        """Writes waiting in the outbox to be sent."""
        return self._outbox.counts()[0]

    def refused_writes(self) -> list[tuple[str, str, str]]:
        """(op, memory_id, error) of queued writes the server refused when they were sent, oldest first."""
        return [(op, memory_id, error) for _, op, memory_id, error in self._outbox.failed()]

    def pending_ids(self) -> set[str]:
        """Ids of memories shown in the state a queued write gives them."""
        return self._outbox.overlay_ids()

    def is_pending(self, memory_id: str) -> bool:
        """True when a queued write changes this memory (its state is the pending one)."""
        return self._outbox.overlay_get(memory_id) is not None

    def pending_adds(self, *, since_ms: int, scopes: Sequence[str] = ()) -> list[MemoryRow]:
        """New memories still waiting in the outbox (not in the cache yet), created since `since_ms`."""
        found = []
        for memory_id in self._outbox.overlay_ids():
            memory = self._outbox.overlay_get(memory_id)
            if memory is None or memory.archived or self._cache.get(memory_id) is not None:
                continue
            if memory.created_at_ms >= since_ms and (not scopes or memory.scope in scopes):
                found.append(secrets_scan.masked(memory))
        return found
