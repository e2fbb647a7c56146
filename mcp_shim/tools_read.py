"""Tools that find memories: search, keyword_search, list_recent, list_topics, get_timeline.

search and keyword_search ask the server (hybrid vector + BM25 with the score
parts) and fall back to the local cache offline. The lists read the local
cache, which the live update stream keeps current, so they cost no round trip.
Every list is paged: a full page carries `next_offset`.
"""

import time
from typing import Annotated

from pydantic import Field

from mnemosync.kernel import recall_decision
from mnemosync.shim.params import (
    AllScopes,
    FilterTags,
    Layer,
    Limit,
    Mode,
    Offset,
    Scopes,
    Time,
    Types,
    parse_time,
)
from mnemosync.shim.results import (
    Cluster,
    Event,
    ListOut,
    SearchOut,
    TimelineOut,
    Topic,
    TopicsOut,
    found_out,
    hit_out,
    iso,
    memory_out,
)
from mnemosync.shim.session import Session
from mnemosync.shim.tool_registry import ToolAnnotations, ToolResult

SERVER_MAX_RESULTS = 100

SEARCH = """Search the shared long-term memory by meaning and keywords. Call it before starting a task, \
before guessing why something is the way it is, and before asking the user something they may have told \
another session: past decisions, fixes, configuration, conventions, preferences.

Write the query as a natural question or description ('how are login tokens signed?'); paraphrases match. \
Default scopes: this session's project and user (all_scopes for everything). Filters narrow by type, tags, \
layer, author and creation time.

Returns results best first: id, version, text (long ones cut; get has the whole text), the author of the \
text and its authority, and relevance, the estimated chance (0-1) that it answers the query. Results below \
min_relevance are left out (limit is a maximum; dropped counts them). details=true adds scope, type, layer, \
tags, times and the score parts; with neighbours=N, each result's linked memories. next_offset pages on. \
offline=true means the server was unreachable and the results come from this agent's cache."""

KEYWORD = """Search by exact words only (BM25 over content and tags): for identifiers, file names, error \
codes, command names, version strings, where meaning-based search is too loose. Same result shape as \
search, without relevance (exact words measure no meaning)."""

RECENT = """List memories created in the last N hours (default 24), newest first: what this and other \
agents recorded recently. Use it at the start of a session to catch up, or to find something just added. \
Reads the local cache (kept live), so it is instant; paged with next_offset."""

TOPICS = """List what the memory is about: tags with how many live memories carry each (most used first, \
paged), the memory types with counts, and the largest topic clusters (memories close in meaning, labelled by \
their common tags, with an example id). Use it to get an overview before searching, or to pick the tags \
for a search filter or a new memory."""

TIMELINE = """List memories created, changed or forgotten between two times, oldest first (default: the \
last 7 days): what happened when, and who did it. Each memory shows its creation and its latest change. \
Reads the local cache; paged with next_offset."""


def _filter_kwargs(session: Session, scopes, all_scopes, types, tags) -> dict:
    return {"scopes": session.scopes_for(scopes, all_scopes), "types": tuple(types or ()), "tags": tuple(tags or ())}


def register(mcp, session: Session) -> None:
    """Adds the search and list tools to `mcp`, bound to `session`."""
    client = session.client
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def run_search(query, *, limit, offset, mode, filters, details=False, floor=None, **more) -> SearchOut:
        wanted = min(offset + limit + 1, SERVER_MAX_RESULTS)
        outcome = client.search(query, limit=wanted, mode=mode, **filters, **more)
        pending = client.local.pending_ids()
        scored = list(zip(outcome.hits, recall_decision.relevance(query, outcome.hits, mode=mode), strict=True))
        floor = recall_decision.shipped().min_relevance if floor is None else floor
        kept = [(h, r) for h, r in scored if r is None or r >= floor]  # the hits are best first: a weak tail
        page = kept[offset:offset + limit]
        detailed = details or more.get("neighbours")
        out = SearchOut(results=[hit_out(h, pending_ids=pending, relevance=r) if detailed
                                 else found_out(h, r, pending_ids=pending) for h, r in page],
                        dropped=len(scored) - len(kept) or None,
                        next_offset=offset + limit if len(kept) > offset + limit else None)
        if outcome.offline:
            out.offline, out.note = True, outcome.note
        return out

    @mcp.tool(name="search", title="Search memories", description=SEARCH, annotations=read)
    def search(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="What you want to know.")],
        limit: Limit = 10,
        offset: Offset = 0,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
        types: Types = None,
        tags: FilterTags = None,
        layers: Annotated[list[Layer] | None, Field(max_length=4, description="Only these layers.")] = None,
        authors: Annotated[list[Annotated[str, Field(max_length=128)]] | None, Field(
            max_length=20, description="Only memories created by these agent ids.")] = None,
        since: Annotated[Time, Field(description="Only memories created at or after this time (ISO 8601).")] = None,
        until: Annotated[Time, Field(description="Only memories created before this time (ISO 8601).")] = None,
        include_forgotten: Annotated[bool, Field(description="Also return forgotten memories.")] = False,
        mode: Annotated[Mode, Field(description="hybrid (meaning + words, best in general), vector (meaning "
                                                "only) or keyword (exact words only).")] = "hybrid",
        neighbours: Annotated[int, Field(ge=0, le=10, description=(
            "Attach up to this many linked memories to each result (either way, strongest link first).")
        )] = 0,
        details: Annotated[bool, Field(description="Return every field of each memory and its score parts, not just "
                                                   "id, version, text, author, authority and relevance.")] = False,
        min_relevance: Annotated[float | None, Field(ge=0, le=1, description=(
            "Leave out results less likely than this to answer the query (default: the shipped floor; 0 keeps "
            "every result)."))] = None,
    ) -> Annotated[ToolResult, SearchOut]:
        def produce():
            return run_search(query, limit=limit, offset=offset, mode=mode, details=details, floor=min_relevance,
                              filters=_filter_kwargs(session, scopes, all_scopes, types, tags),
                              layers=tuple(layers or ()), authors=tuple(authors or ()),
                              created_after_ms=parse_time(since, "since"),
                              created_before_ms=parse_time(until, "until"), include_archived=include_forgotten,
                              neighbours=neighbours)

        return session.run(produce, embed=query if mode != "keyword" else None)

    @mcp.tool(name="keyword_search", title="Search memories by exact words", description=KEYWORD,
              annotations=read)
    def keyword_search(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="The words to match.")],
        limit: Limit = 10,
        offset: Offset = 0,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
        types: Types = None,
        tags: FilterTags = None,
    ) -> Annotated[ToolResult, SearchOut]:
        def produce():
            return run_search(query, limit=limit, offset=offset, mode="keyword",
                              filters=_filter_kwargs(session, scopes, all_scopes, types, tags))

        return session.run(produce)

    @mcp.tool(name="list_recent", title="List recent memories", description=RECENT, annotations=read)
    def list_recent(
        hours: Annotated[float, Field(gt=0, le=24 * 366, description="How far back to look, in hours.")] = 24,
        limit: Limit = 20,
        offset: Offset = 0,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
        types: Types = None,
        tags: FilterTags = None,
    ) -> Annotated[ToolResult, ListOut]:
        def produce():
            since_ms = int((time.time() - hours * 3600) * 1000)
            filters = _filter_kwargs(session, scopes, all_scopes, types, tags)
            rows = client.local.recent(since_ms=since_ms, limit=limit + 1, offset=offset, **filters)
            memories = [memory_out(m) for m in rows[:limit]]
            if offset == 0:
                pending = client.local.pending_adds(since_ms=since_ms, scopes=filters["scopes"])
                memories = [memory_out(m, pending=True) for m in pending] + memories
            out = ListOut(memories=memories, next_offset=offset + limit if len(rows) > limit else None)
            out.note = session.cache_note()
            out.offline = True if out.note else None
            return out

        return session.run(produce)

    @mcp.tool(name="list_topics", title="List tags and types", description=TOPICS, annotations=read)
    def list_topics(
        limit: Annotated[int, Field(ge=1, le=200, description="Tags per page.")] = 30,
        offset: Offset = 0,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
    ) -> Annotated[ToolResult, TopicsOut]:
        def produce():
            chosen = session.scopes_for(scopes, all_scopes)
            tags = client.local.tag_topics(scopes=chosen, limit=limit + 1, offset=offset)
            types = client.local.type_topics(scopes=chosen)
            clusters = client.list_topics(scopes=chosen, limit=10).topics if offset == 0 else []
            out = TopicsOut(tags=[Topic(name=t.name, count=t.count, last_used=iso(t.last_ms)) for t in tags[:limit]],
                            clusters=[Cluster(id=c.id, scope=c.scope, label=c.label, size=c.size,
                                              example=c.representative_id) for c in clusters],
                            types=[Topic(name=t.name, count=t.count, last_used=iso(t.last_ms)) for t in types],
                            next_offset=offset + limit if len(tags) > limit else None)
            out.note = session.cache_note()
            out.offline = True if out.note else None
            return out

        return session.run(produce)

    @mcp.tool(name="get_timeline", title="Timeline of memory changes", description=TIMELINE, annotations=read)
    def get_timeline(
        start: Annotated[Time, Field(description="From this time (ISO 8601); default 7 days ago.")] = None,
        end: Annotated[Time, Field(description="Until this time (ISO 8601); default now.")] = None,
        limit: Annotated[int, Field(ge=1, le=100, description="Events per page.")] = 30,
        offset: Offset = 0,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
        types: Types = None,
        tags: FilterTags = None,
    ) -> Annotated[ToolResult, TimelineOut]:
        def produce():
            now_ms = int(time.time() * 1000)
            start_ms = parse_time(start, "start") if start else now_ms - 7 * 86_400_000
            end_ms = parse_time(end, "end") if end else now_ms + 1
            filters = _filter_kwargs(session, scopes, all_scopes, types, tags)
            rows = client.local.timeline(start_ms=start_ms, end_ms=end_ms, limit=limit + 1, offset=offset,
                                  **filters)
            events = [Event(time=iso(r.at_ms), event=r.event, memory_id=r.memory_id, by=r.by, version=r.version,
                            scope=r.scope, type=r.type, content=_snippet(r.content)) for r in rows[:limit]]
            out = TimelineOut(events=events, next_offset=offset + limit if len(rows) > limit else None)
            out.note = session.cache_note()
            out.offline = True if out.note else None
            return out

        return session.run(produce)


def _snippet(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"
