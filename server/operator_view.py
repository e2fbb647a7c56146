"""The operator's view over the server database: the changelog as rows with scopes, a memory's history, a page of
memories, activity.

The store (`mnemosync.server.ledger.Ledger`) calls these with one of its
reader connections; the servicer adds what only it knows (presence, search
counts, `mnemosync.server.presence`). Every function takes the viewer's `Caller` and
answers within its scopes only, as search does (`governance.search_scopes`):
entries of other scopes are left out, not withheld, because this is a view,
not replication. Texts are masked on the way out (`overview.for_reading`), and
a link entry's target in a scope the viewer may not read is emptied with its
reason (`mnemosync.server.link_visibility`).
The SQL is where its tables are owned: `mnemosync.server.changelog`,
`mnemosync.kernel.revisions`, `mnemosync.kernel.listings`.
"""

from __future__ import annotations

import re

from mnemosync.kernel import listings, projections, revisions
from mnemosync.kernel.conflict_projection import Revision
from mnemosync.kernel.errors import InvalidArgument, NotFound
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.overview import Activity, ActivityBucket, ChangelogRow, MemoryHistory, MemoryVersion, for_reading
from mnemosync.server import changelog, governance, link_visibility
from mnemosync.server.identity import Caller

MAX_ROWS = 1000
MAX_HISTORY = 1000
MAX_MEMORIES = 200
"""Memories a ListMemories page holds at most."""
MAX_MEMORY_OFFSET = 100_000
MAX_NAME_CHARS = 128
MAX_MINUTES = 1440
MINUTE_MS = 60_000
_OP_NAME = re.compile(r"[a-z_]{1,32}")
_ID_PREFIX = re.compile(r"[0-9a-f-]{0,36}")


def _scopes(conn, caller: Caller | None, wanted: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The concrete scopes the caller may read (None: no restriction).

    Raises:
        PermissionDenied: `wanted` names a scope the caller is not granted.
    """
    if caller is None:
        return wanted or None
    return governance.search_scopes(caller, wanted, lambda: [
        s for (s,) in conn.execute("SELECT DISTINCT scope FROM memories ORDER BY scope")])


def _scope_of(conn):
    """A memory's scope by id (None: no such memory), each looked up once."""
    known: dict[str, str | None] = {}

    def scope_of(memory_id: str) -> str | None:
        if memory_id not in known:
            row = conn.execute("SELECT scope FROM memories WHERE id = ?", (memory_id,)).fetchone()
            known[memory_id] = row[0] if row else None
        return known[memory_id]

    return scope_of


def changelog_page(conn, caller: Caller | None, *, before_seq: int = 0, after_seq: int = 0, limit: int = 0,
                   agent_id: str = "", scope: str = "", op: str = "", memory_id: str = "") -> list[ChangelogRow]:
    """Changelog rows newest first, filtered, in the caller's scopes (see ListChangelog in memory.proto).

    Raises:
        InvalidArgument: a negative seq, a limit out of range, or an operation name that cannot be one.
        PermissionDenied: `scope` is not granted to the caller.
    """
    limit = limit or 50
    if not 1 <= limit <= MAX_ROWS:
        raise InvalidArgument(f"limit must be 1 to {MAX_ROWS}, got {limit}")
    for name, value in (("before_seq", before_seq), ("after_seq", after_seq)):
        if value < 0:
            raise InvalidArgument(f"{name} must be >= 0, got {value}")
    if op and not _OP_NAME.fullmatch(op):
        raise InvalidArgument(f"op must be an operation name such as 'add' or 'update', got {op!r}")
    scopes = _scopes(conn, caller, (scope,) if scope else ())
    found = changelog.rows_with_scope(conn, scopes=scopes, before_seq=before_seq, after_seq=after_seq, limit=limit,
                                      agent_id=agent_id, op=op, memory_id=memory_id)
    scope_of = _scope_of(conn)
    return [ChangelogRow(for_reading(link_visibility.readable_target(entry, caller, scope_of)), entry_scope)
            for entry, entry_scope in found]


def history(conn, memory_id: str, caller: Caller | None) -> MemoryHistory:
    """The memory now and its newest `MAX_HISTORY` entries oldest first, each with the state it showed after.

    Raises:
        NotFound: it never existed.
        PermissionDenied: it is in a scope the caller is not granted.
    """
    memory = projections.get_memory(conn, memory_id)
    if memory is None:
        raise NotFound(f"no memory with id {memory_id}")
    if caller is not None:
        governance.require_scope(caller, memory.scope, "read memories")
    states = revisions.versions(conn, memory)
    scope_of = _scope_of(conn)
    found = changelog.rows_with_scope(conn, scopes=None, memory_id=memory_id, limit=MAX_HISTORY)
    steps = []
    for entry, _ in reversed(found):
        state, by, seq = states.get(entry.version) or states[memory.version]
        shown = Revision(revision=0, memory_id=memory_id, agent_id=by, authority=state.get("authority", 0), seq=seq,
                         base_version=0, version=entry.version, state=state, visible=True)
        steps.append(MemoryVersion(for_reading(link_visibility.readable_target(entry, caller, scope_of)), shown))
    return MemoryHistory(link_visibility.readable_links(memory, caller, scope_of), steps)


def memories(conn, caller: Caller | None, *, scopes: tuple[str, ...] = (), type: str = "", author_agent: str = "",
             layer: int = 0, id_prefix: str = "", include_archived: bool = False, limit: int = 0,
             offset: int = 0) -> tuple[list[MemoryRow], int]:
    """A page of the memories in the caller's scopes, newest first, filtered, and how many match in all (see
    ListMemories in memory.proto).

    Raises:
        InvalidArgument: a limit, offset or layer out of range, a type or author too long, or an id prefix that
            cannot start an id.
        PermissionDenied: a named scope is not granted to the caller.
    """
    limit = limit or 50
    if not 1 <= limit <= MAX_MEMORIES:
        raise InvalidArgument(f"limit must be 1 to {MAX_MEMORIES}, got {limit}")
    if not 0 <= offset <= MAX_MEMORY_OFFSET:
        raise InvalidArgument(f"offset must be 0 to {MAX_MEMORY_OFFSET}, got {offset}")
    if not 0 <= layer <= 4:
        raise InvalidArgument(f"layer must be 1 to 4 (0: any), got {layer}")
    for name, value in (("type", type), ("author_agent", author_agent)):
        if len(value) > MAX_NAME_CHARS:
            raise InvalidArgument(f"{name} is {len(value)} characters; the limit is {MAX_NAME_CHARS}")
    if not _ID_PREFIX.fullmatch(id_prefix):
        raise InvalidArgument(f"id_prefix must be lower-case hex digits and dashes, at most 36, got {id_prefix[:40]!r}")
    granted = _scopes(conn, caller, scopes)
    if granted is not None and not granted:
        return [], 0
    return listings.memories_page(conn, scopes=granted or (), type=type, author_agent=author_agent, layer=layer,
                                  id_prefix=id_prefix, include_archived=include_archived, limit=limit, offset=offset)


def activity(conn, caller: Caller | None, *, now_ms: int, minutes: int = 0) -> Activity:
    """Writes per minute and operation over the last `minutes` (default 60), and memory counts, in the caller's
    scopes; `searches` and `counting_since_ms` are left for the servicer, which counts calls.

    Raises:
        InvalidArgument: minutes out of range.
    """
    minutes = minutes or 60
    if not 1 <= minutes <= MAX_MINUTES:
        raise InvalidArgument(f"minutes must be 1 to {MAX_MINUTES}, got {minutes}")
    scopes = _scopes(conn, caller)
    first_minute = now_ms - now_ms % MINUTE_MS - (minutes - 1) * MINUTE_MS
    writes = changelog.writes_per_minute(conn, changelog.first_seq_at(conn, first_minute), scopes, MINUTE_MS)
    buckets = [ActivityBucket(start, writes.get(start, {}))
               for start in range(first_minute, first_minute + minutes * MINUTE_MS, MINUTE_MS)]
    counted = listings.counts(conn, scopes)
    return Activity(buckets=buckets, head_seq=changelog.head(conn)[0], live_memories=counted["live"],
                    archived_memories=counted["forgotten"], by_layer=counted["by_layer"],
                    by_scope=counted["by_scope"], counting_since_ms=0)
