"""Reading conflicts for an agent: from the server, or from the local cache when it is unreachable.

The cache folds the same conflict projection as the server (`mnemosync.kernel.conflict_projection`),
so offline answers are the server's as of this agent's offset, and say so.
The conflict review CLI (`mnemosync conflicts`) and the MCP shim's
check_conflicts / resolve_conflict tools read through here (via `AgentClient`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.remote import Remote
from mnemosync.kernel import secrets_scan
from mnemosync.kernel.conflict_projection import Conflict, Revision
from mnemosync.kernel.errors import NotFound
from mnemosync.kernel.one_line import one_line


@dataclass(frozen=True)
class ConflictView:
    """A conflict as an agent sees it.

    A resolved conflict is shown as its memory is now (`as_resolved`): the kept revision is the visible one,
    and after a merge none is, the memory holding the merged text (`memory_content`).

    Attributes:
        conflict: The conflict with its revisions.
        memory_version: Its memory's current version (the base a resolution is made from).
        offline: True when it comes from the local cache (the server was unreachable).
        memory_content: What the memory says now, for a conflict resolved by a merge ("" otherwise, or when this
            agent's cache does not hold it).
    """

    conflict: Conflict
    memory_version: int
    offline: bool = False
    memory_content: str = ""


@dataclass(frozen=True)
class ConflictList:
    """Conflicts, and whether they come from the local cache. Iterating yields the ConflictViews."""

    conflicts: list[ConflictView]
    offline: bool = False
    note: str = ""

    def __iter__(self) -> Iterator[ConflictView]:
        return iter(self.conflicts)

    def __len__(self) -> int:
        return len(self.conflicts)


def _masked(r: Revision) -> Revision:
    return replace(r, embedding=None, state={**r.state, "content": secrets_scan.mask(r.state["content"]),
                                             "quote": secrets_scan.mask(r.state["quote"])})


def _for_reading(c: Conflict) -> Conflict:
    """A cached conflict as the server would show it: revision vectors (kept for folding) dropped, and
    secrets in revision and base texts masked (`server.secrets_scan.mask`)."""
    return replace(c, revisions=tuple(_masked(r) for r in c.revisions), base=_masked(c.base) if c.base else None)


def as_resolved(c: Conflict) -> Conflict:
    """A conflict as its memory shows it. The projection keeps the revision that was visible while the conflict
    was open; once resolved, the memory shows the kept revision (keep), both memories (keep all) or the merged
    text, which is no revision: so the kept revision is marked visible, or none is."""
    if not c.resolved:
        return c
    shown = c.kept_revision if c.resolution == "keep" else 0
    return replace(c, visible_revision=shown, revisions=tuple(replace(r, visible=r.revision == shown)
                                                              for r in c.revisions))


def _view(c: Conflict, version: int, cache: Cache, remote: Remote | None = None) -> ConflictView:
    """The view of `c`; for a merge, the memory's text is read from the server (`remote`), else the cache."""
    c = as_resolved(c)
    merged = ""
    if c.resolved and c.resolution == "merged":
        memory = None
        if remote is not None:
            try:
                memory = remote.get(c.memory_id)
            except (ServerUnavailable, NotFound):
                memory = None
        memory = memory or cache.get(c.memory_id)
        merged = secrets_scan.mask(memory.content) if memory is not None else ""
    return ConflictView(c, version, remote is None, merged)


SIDE_CHARS = 80
"""Most characters of one side's text in a one-line summary of a conflict (`sides`)."""


def _side(r: Revision, limit: int) -> str:
    state = r.state or {}
    text = one_line(secrets_scan.mask(str(state.get("content") or "")), limit, fold=True)
    return f"{r.agent_id}: «{text}»{' (forgotten)' if state.get('archived') else ''}"


def sides(c: Conflict, limit: int = SIDE_CHARS) -> str:
    """The conflict's revisions side by side on one line, the first to arrive first: `bob: «…» vs alice: «…»`
    (secrets masked). When their texts agree, the line says which other fields differ."""
    line = " vs ".join(_side(r, limit) for r in c.revisions)
    if len({str((r.state or {}).get("content")) for r in c.revisions}) == 1:
        differ = sorted({k for r in c.revisions for k in r.state if k not in _WHO
                         and any(o.state.get(k) != r.state.get(k) for o in c.revisions)})
        line += f" (same text; they differ in {', '.join(differ) or 'who wrote them'})"
    return line


_WHO = ("authority", "content_agent", "content_authority")


def summary(c: Conflict) -> str:
    """One line naming a conflict and its sides: `open conflict #32: bob: «…» vs alice: «…»`."""
    return f"{'resolved' if c.resolved else 'open'} conflict #{c.id}: {sides(c)}"


def _offline_note(cache: Cache) -> str:
    return f"server unreachable: conflicts come from this agent's local cache (synced to seq {cache.offset})"


def _version(cache: Cache, memory_id: str) -> int:
    memory = cache.get(memory_id)
    return memory.version if memory else 0


def list_conflicts(remote: Remote, cache: Cache, *, include_resolved: bool = False, memory_id: str = "",
                   limit: int = 100) -> ConflictList:
    """ListConflicts on the server; the cache's conflicts when it is unreachable.

    Raises:
        MnemosyncError: the server refused (for example a bad limit).
    """
    try:
        listed = remote.list_conflicts(include_resolved=include_resolved, memory_id=memory_id, limit=limit)
    except ServerUnavailable:
        return cached_conflicts(cache, include_resolved=include_resolved, memory_id=memory_id, limit=limit)
    return ConflictList([_view(conflict, version, cache, remote) for conflict, version in listed])


def cached_conflicts(cache: Cache, *, include_resolved: bool = False, memory_id: str = "",
                     limit: int = 100) -> ConflictList:
    """The cache's conflicts, as the server would list them, marked offline (for an agent that knows the server
    is unreachable, without asking it again)."""
    found = cache.conflicts(include_resolved=include_resolved, memory_id=memory_id, limit=limit or 100)
    return ConflictList([_view(_for_reading(c), _version(cache, c.memory_id), cache) for c in found],
                        True, _offline_note(cache))


def get_conflict(remote: Remote, cache: Cache, conflict_id: int) -> ConflictView:
    """GetConflict on the server; the cache's copy when it is unreachable.

    Raises:
        NotFound: no such conflict (offline: not in the cache either).
        MnemosyncError: the server refused (for example a scope not granted).
    """
    try:
        conflict, version = remote.get_conflict(conflict_id)
    except ServerUnavailable:
        found = cache.conflict(conflict_id)
        if found is None:
            raise NotFound(f"no conflict with id {conflict_id} in the local cache "
                           "(the server is unreachable)") from None
        return _view(_for_reading(found), _version(cache, found.memory_id), cache)
    return _view(conflict, version, cache, remote)
