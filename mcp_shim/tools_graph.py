"""Tools that follow the memory graph: traverse, get_causal_chain, get_event_timeline, graph_search.

Each asks the server and answers from this agent's cache when it is
unreachable (`offline=true`); both run the same query (`mnemosync.kernel.graph`),
so the answers agree. Memories in scopes the agent may not read never appear.
The timeline is named get_event_timeline because get_timeline already lists
changes (created, changed, forgotten) by when they were made; this one orders
memories by when what they record happened.
"""

from typing import Annotated, Literal

from pydantic import Field

from mnemosync.kernel import graph, graph_rank
from mnemosync.shim.params import AllScopes, EdgeType, FilterTags, MemoryId, Scopes, Time, parse_time
from mnemosync.shim.results import EventTimelineOut, GraphSearchOut, WalkOut, memory_out, ranked_out, step_out
from mnemosync.shim.session import Session
from mnemosync.shim.tool_registry import ToolAnnotations, ToolResult

TRAVERSE = """Follow links from one memory to the memories around it: up to depth links away (1 to 6, \
default 2), along the edge types you name (default all: semantic, temporal, causal, entity, hierarchical, \
supersedes), out (the links it makes), in (links made to it) or both. Use it to gather the context of a \
decision, a procedure's parts, or what an incident touched. Returns the memories nearest first, each with \
the link that reached it (via_id, relation, link_weight, link_reason, direction)."""

CAUSAL = """Trace causes and effects of a memory along causal links: direction in (what caused it), out \
(what it caused) or both (default), up to depth links away (default 3). Use it for 'why did this happen' \
and 'what did this lead to'. Returns causes first, then effects, nearest first."""

EVENT_TIMELINE = """List memories in the order of when what they record happened (their event time; the \
time they were stored when they have none), oldest first: around one memory (memory_id: limit before and \
limit after it) or in a window (start/end, scopes, tags). Use it to reconstruct what happened in what order."""

GRAPH_SEARCH = """Find the memories connected to a question through links, not only those that match its words: \
the best search hits (seeds, default 5) start a random walk along links (Personalized PageRank, restart \
probability alpha, default 0.15) and the memories it visits most are returned, best first, each with its score \
and the path of links from a seed that reached it. Use it to gather what surrounds a decision or incident."""

Direction = Literal["out", "in", "both"]
Depth = Annotated[int, Field(ge=1, le=graph.MAX_DEPTH, description=f"Links away, 1 to {graph.MAX_DEPTH}.")]
WalkLimit = Annotated[int, Field(ge=1, le=graph.MAX_LIMIT, description="Memories at most.")]


def register(mcp, session: Session) -> None:
    """Adds the graph tools to `mcp`, bound to `session`."""
    client = session.client
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    def walk_out(walk) -> WalkOut:
        out = WalkOut(start=memory_out(walk.start), steps=[step_out(s) for s in walk.steps],
                      truncated=True if walk.truncated else None)
        out.note = session.cache_note() if not client.online else None
        out.offline = True if out.note else None
        return out

    @mcp.tool(name="traverse", title="Walk the memory graph", description=TRAVERSE, annotations=read)
    def traverse(
        id: MemoryId,
        edge_types: Annotated[list[EdgeType] | None, Field(max_length=6, description="Only these edge types.")
                              ] = None,
        direction: Annotated[Direction, Field(description="out, in or both.")] = "out",
        depth: Depth = graph.DEFAULT_DEPTH,
        limit: WalkLimit = 50,
        include_forgotten: Annotated[bool, Field(description="Also walk to forgotten memories.")] = False,
    ) -> Annotated[ToolResult, WalkOut]:
        def produce():
            return walk_out(client.traverse(session.resolve(id), edge_types=edge_types or (), direction=direction,
                                            depth=depth, limit=limit, include_archived=include_forgotten))

        return session.run(produce)

    @mcp.tool(name="get_causal_chain", title="Causes and effects of a memory", description=CAUSAL,
              annotations=read)
    def get_causal_chain(
        id: MemoryId,
        direction: Annotated[Direction, Field(description="in (causes), out (effects) or both.")] = "both",
        depth: Depth = graph.DEFAULT_CAUSAL_DEPTH,
        limit: WalkLimit = 50,
    ) -> Annotated[ToolResult, WalkOut]:
        def produce():
            return walk_out(client.causal_chain(session.resolve(id), direction=direction, depth=depth, limit=limit))

        return session.run(produce)

    @mcp.tool(name="get_event_timeline", title="Memories in the order things happened", description=EVENT_TIMELINE,
              annotations=read)
    def get_event_timeline(
        memory_id: Annotated[str | None, Field(min_length=6, max_length=36, description=(
            "Around this memory (id or unique prefix)."))] = None,
        limit: Annotated[int, Field(ge=1, le=graph.MAX_AROUND, description=(
            "Around a memory: how many before and after it; else memories at most."))] = 10,
        start: Annotated[Time, Field(description="From this time (ISO 8601).")] = None,
        end: Annotated[Time, Field(description="Until this time (ISO 8601).")] = None,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
        tags: FilterTags = None,
    ) -> Annotated[ToolResult, EventTimelineOut]:
        def produce():
            found = client.timeline(memory_id=session.resolve(memory_id) if memory_id else "", limit=limit,
                                    start_ms=parse_time(start, "start") if start else None,
                                    end_ms=parse_time(end, "end") if end else None,
                                    scopes=session.scopes_for(scopes, all_scopes), tags=tuple(tags or ()))
            out = EventTimelineOut(memories=[memory_out(m) for m in found.memories],
                                   anchor_index=found.anchor_index if found.anchor_index >= 0 else None)
            out.note = session.cache_note() if not client.online else None
            out.offline = True if out.note else None
            return out

        return session.run(produce)

    @mcp.tool(name="graph_search", title="Search the memory graph from a question", description=GRAPH_SEARCH,
              annotations=read)
    def graph_search(
        query: Annotated[str, Field(min_length=1, max_length=2000, description="A natural question.")],
        seeds: Annotated[int, Field(ge=1, le=graph_rank.MAX_SEEDS, description="Search hits that start the walk."
                                    )] = graph_rank.DEFAULT_SEEDS,
        alpha: Annotated[float, Field(gt=0, lt=1, description="Restart probability.")] = graph_rank.DEFAULT_ALPHA,
        limit: Annotated[int, Field(ge=1, le=graph_rank.MAX_LIMIT, description="Results at most.")] = 10,
        edge_types: Annotated[list[EdgeType] | None, Field(max_length=6, description="Only these edge types.")
                              ] = None,
        scopes: Scopes = None,
        all_scopes: AllScopes = False,
    ) -> Annotated[ToolResult, GraphSearchOut]:
        def produce():
            found = client.graph_search(query, seeds=seeds, alpha=alpha, limit=limit,
                                        scopes=session.scopes_for(scopes, all_scopes), edge_types=edge_types or ())
            out = GraphSearchOut(results=[ranked_out(r) for r in found.results])
            out.note = session.cache_note() if not client.online else None
            out.offline = True if out.note else None
            return out

        return session.run(produce)
