"""Tools about the memory system itself: stats, agent_sync, check_conflicts, resolve_conflict.

check_conflicts and resolve_conflict are the MCP face of the server's conflict
calls (the conflict review CLI, `mnemosync conflicts`, is the other): both go
through `AgentClient.conflicts` / `AgentClient.resolve_conflict`.
"""

from typing import Annotated

from pydantic import Field

from mnemosync.agent.errors import ServerUnavailable
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.wording import counted, plural
from mnemosync.shim.errors import ShimError
from mnemosync.shim.params import MemoryId, Offset
from mnemosync.shim.results import AgentLag, ConflictsOut, RefusedWrite, ResolveOut, StatsOut, SyncOut, conflict_out
from mnemosync.shim.session import Session
from mnemosync.shim.tool_registry import ToolAnnotations, ToolResult

MAX_CONFLICTS = 1000

STATS = """Show the state of shared memory: whether the server is reachable, this agent's changelog \
position and lag, writes waiting in the outbox (or refused when sent), counts of memories in the local \
cache by layer, scope and type, and the server's totals for this agent's scopes with its acknowledged \
position (an admin sees every scope and every agent). Use it when results look stale or incomplete, or to \
check that writes went through."""

SYNC = """Catch up with the shared memory now (agent_sync): send writes queued while offline, then apply \
every change other agents made since this agent's position. The shim already does this at start and keeps \
the cache live, so call it only after an outage or when told that changes are missing. Returns how many \
entries were applied, the position reached, and queued writes sent or refused."""

CHECK = """List conflicts that need review, oldest first: two agents changed the same memory from the \
same version (kind write), or a new memory is a near duplicate or contradiction of another agent's (kind \
semantic, with the other memory and the similarity). Each shows the memory, its current version, every \
revision with its author, authority and content, and which revision the memory shows now.

Call it when a write result carries a conflict_id, when a memory lists open_conflicts, when the session \
start says conflicts are open, or when the user asks. Then {resolve}."""
RESOLVE_HERE = "resolve what you can with resolve_conflict"
RESOLVE_ELSEWHERE = ("tell the user what the revisions say: resolving is theirs, with `mnemosync conflicts resolve ID` "
                     "or the dashboard")

RESOLVE = """Resolve an open conflict, recorded in the shared changelog and replicated to every agent. \
Give exactly one of: keep_revision (the revision number to keep, from check_conflicts), merged_content \
(new content that reconciles the revisions), or keep_both=true (semantic conflicts: the two memories are \
not duplicates, keep both). Add a short note saying why.

Resolve only when the right answer is clear from the revisions or the conversation; otherwise ask the \
user. Returns the memory's new version. Refused if the memory changed since you looked (look again) or \
if governance requires a higher authority (ask the user)."""


def register(mcp, session: Session) -> None:
    """Adds the system tools to `mcp`, bound to `session`."""
    client = session.client
    read = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @mcp.tool(name="stats", title="Memory system status", description=STATS, annotations=read)
    def stats() -> Annotated[ToolResult, StatsOut]:
        def produce():
            status = client.status()
            out = StatsOut(agent_id=status.agent_id, server=status.server, online=status.online, scope=session.scope,
                           offset=status.offset, head=status.head, outbox_pending=status.pending,
                           outbox_refused=status.failed, cache=client.local.counts())
            if status.online:
                try:
                    server = client.server_stats()
                    out.server_stats = {
                        "live": server.live_memories, "forgotten": server.archived_memories,
                        "by_layer": server.by_layer, "by_scope": server.by_scope,
                        "model": server.embedding_model.name if server.embedding_model else "",
                        "data_bytes": server.data_bytes, "version": server.server_version,
                    }
                    out.agents = [AgentLag(agent_id=a.agent_id, acked_seq=a.acked_seq, lag=a.lag)
                                  for a in server.agents][:50]
                except CodedError as exc:
                    out.note = f"server totals unavailable: {exc}"
            else:
                out.offline, out.note = True, session.cache_note()
            if status.failed:
                out.note = ((out.note + "; ") if out.note else "") + (
                    f"{counted(status.failed, 'queued write')} {plural(status.failed, 'was', 'were')} refused by the "
                    "server when sent (agent_sync lists them)")
            return out

        return session.run(produce)

    @mcp.tool(name="agent_sync", title="Catch up with shared memory", description=SYNC,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=False))
    def agent_sync() -> Annotated[ToolResult, SyncOut]:
        def produce():
            refused_before = len(client.local.refused_writes())
            try:
                sent, _ = client.flush()
                summary = client.sync()
            except ServerUnavailable as exc:
                pending = client.local.queued()
                return SyncOut(applied=0, offset=client.local.offset, head=client.local.offset, sent=0,
                               still_queued=pending or None, offline=True,
                               note=f"{exc}; answers come from the local cache until it is back")
            refused = [RefusedWrite(op=op, memory_id=memory_id, error=error)
                       for op, memory_id, error in client.local.refused_writes()[refused_before:]]
            return SyncOut(applied=summary.applied, offset=summary.offset, head=summary.head, sent=sent,
                           refused=refused or None, still_queued=client.local.queued() or None,
                           conflicts_waiting=summary.conflicts_waiting or None)

        return session.run(produce)

    resolve = RESOLVE_HERE if "resolve_conflict" in session.tools else RESOLVE_ELSEWHERE

    @mcp.tool(name="check_conflicts", title="List conflicts", description=CHECK.format(resolve=resolve),
              annotations=read)
    def check_conflicts(
        memory_id: Annotated[MemoryId | None, Field(description="Only conflicts about this memory.")] = None,
        include_resolved: Annotated[bool, Field(description="Also list resolved conflicts.")] = False,
        limit: Annotated[int, Field(ge=1, le=50, description="Conflicts per page.")] = 10,
        offset: Offset = 0,
    ) -> Annotated[ToolResult, ConflictsOut]:
        def produce():
            found = client.conflicts(include_resolved=include_resolved,
                                     memory_id=session.resolve(memory_id) if memory_id else "",
                                     limit=min(offset + limit + 1, MAX_CONFLICTS))
            views = list(found)
            out = ConflictsOut(conflicts=[conflict_out(v) for v in views[offset:offset + limit]],
                               next_offset=offset + limit if len(views) > offset + limit else None)
            if found.offline:
                out.offline, out.note = True, found.note
            return out

        return session.run(produce)

    @mcp.tool(name="resolve_conflict", title="Resolve a conflict", description=RESOLVE,
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                          open_world_hint=False))
    def resolve_conflict(
        conflict_id: Annotated[int, Field(ge=1, description="The conflict's id, from check_conflicts.")],
        keep_revision: Annotated[int | None, Field(ge=1, description="The revision to keep.")] = None,
        merged_content: Annotated[str | None, Field(
            min_length=1, max_length=32768, description="Content that reconciles the revisions.")] = None,
        keep_both: Annotated[bool, Field(description="Semantic conflicts: not duplicates, keep both.")] = False,
        note: Annotated[str, Field(max_length=1024, description="Why this resolution (kept in the log).")] = "",
    ) -> Annotated[ToolResult, ResolveOut]:
        def produce():
            if sum((keep_revision is not None, merged_content is not None, keep_both)) != 1:
                raise ShimError("Give exactly one of keep_revision (a revision number from check_conflicts), "
                                "merged_content (text reconciling the revisions) or keep_both=true.")
            result = client.resolve_conflict(conflict_id, keep=keep_revision, merged_content=merged_content,
                                             keep_all=keep_both, note=note)
            out = ResolveOut(conflict_id=conflict_id, memory_id=result.memory_id, version=result.version,
                             seq=result.seq or None, pending=True if result.pending else None)
            if result.pending:
                out.offline = True
                out.note = ("server unreachable: the resolution is queued in this agent's outbox and is sent "
                            "automatically when the server is back")
            return out

        return session.run(produce)
