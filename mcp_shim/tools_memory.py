"""Tools that read one memory or change memories: add_memory, get, update, forget, restore,
link_memories, set_governance_layer.

Every write goes through the agent client: to the server when it answers, to
the durable outbox when it does not (the result then says `pending` and
`offline`). Ids may be given as unique prefixes; they are resolved against the
local cache first.
"""

from typing import Annotated

from pydantic import Field

from mnemosync.agent.shown import Base
from mnemosync.agent.source_tree import source_notes
from mnemosync.agent.write_path import recorded_sources
from mnemosync.shim.params import (
    BaseVersion,
    Conditions,
    Confidence,
    Content,
    EdgeType,
    EventTime,
    Importance,
    Layer,
    MemoryId,
    Quote,
    Scope,
    Sources,
    Steps,
    Tags,
    Trust,
    TypeName,
)
from mnemosync.shim.results import GetOut, WriteOut, conflict_note, memory_out
from mnemosync.shim.session import Session
from mnemosync.shim.tool_registry import ToolAnnotations, ToolResult

ADD = """Store a new long-term memory shared with every agent working with this user (other sessions \
and machines read it too).

Call it when you learn something a future session would need and could not cheaply rediscover: a decision \
and its reason, the fix for a non-obvious problem, a configuration fact, a user preference, a pitfall. One \
self-contained statement per memory. Search first when it may already exist; if it does, update it instead \
of adding a duplicate. Never store secrets, credentials or transient state.

Defaults: scope = this session's project scope, layer factual (legislative for decisions and corrections \
that must not decay; constitutional only for rules the user sets; ephemeral for short-lived notes).

Trust labels (optional): principle (a rule the user stated; give their exact words as quote), pattern \
(seen repeatedly), inference (your conclusion; cannot create causal links).

Returns id and version (the base_version for later update/forget), seq in the shared changelog, or \
pending=true when the server is unreachable and the write waits in the outbox (sent automatically). \
conflict_id means it looks like a duplicate or contradiction of another agent's memory (check_conflicts)."""

GET = """Read one memory in full by id (or its 8-character prefix): content, version, scope, type, layer, \
tags, author and last editor, times, links, forgotten state.

Call it before update/forget to get the current version, or to read a memory that search or a list showed \
truncated. Offline it answers from this agent's cache."""

UPDATE = """Change an existing memory: its content, type, tags, importance, confidence or protection. Only \
the fields you pass change; tags, when given, replace the old list.

Use it when a memory is outdated or incomplete, instead of adding a contradicting one. It is made from \
the version this session was shown (or base_version); if another agent changed it since, nothing is lost: \
the write is kept as a conflicting revision (result conflict_id; review with check_conflicts). Returns the \
new version."""

FORGET = """Forget (archive) a memory that is wrong or no longer useful. It disappears from search and \
lists but can be brought back {restored}; nothing is deleted.

Governance refuses this for protected memories, constitutional and legislative ones, and memories written \
by a higher authority: for those, add a correcting memory or ask the user. Give a short reason."""

RESTORE = """Bring back a forgotten memory (undo forget): it shows in search and lists again. Use it when \
a memory was forgotten by mistake or turned out to be still true; get shows whether a memory is forgotten. \
Returns the new version."""

LINK = """Link two memories with a typed edge, or remove that link with remove=true. Types: semantic \
(about the same thing; default), temporal (next to each other in time), causal (source is a cause of or \
reason for target; refused when either end is trust=inference), entity (source concerns the entity target \
is about), hierarchical (source is part of target), supersedes (source replaces target). Optional weight \
(0 to 1, how strong; default 1) and reason (why they are linked); linking again sets them.

Links show in get, traverse and get_causal_chain and help the next reader follow context; they do not \
change either memory's content."""

SET_LAYER = """Move a memory to another governance layer: constitutional (rules only the user may set; \
the server refuses it from agents), legislative (decisions and corrections; never decays or is archived \
automatically), factual (the default; decays when unused), ephemeral (short-lived notes; decays fast).

Use it to promote a fact that turned into a standing decision, or to demote a note. Returns the new version."""


def _write_out(session: Session, kind: str, result, *, scope: str | None = None, base: Base | None = None
               ) -> WriteOut:
    """The write's result; records what the write made as shown to this session (`Reader.wrote`)."""
    if kind not in ("link", "unlink"):
        session.wrote(result, f"MCP {kind}")
    conflict_id = result.conflict_id or None
    deduplicated = result.deduplicated or None
    out = WriteOut(id=result.memory_id, op=kind, version=result.version, seq=result.seq or None,
                   pending=True if result.pending else None, replayed=True if result.replayed else None,
                   scope=scope, conflict_id=conflict_id, deduplicated=deduplicated,
                   blind=True if base is not None and base.how == "blind" else None)
    if conflict_id:
        out.note = conflict_note(session.client, conflict_id, resolves="resolve_conflict" in session.tools)
    elif out.blind:
        out.note = (f"blind write: this session had not been shown {result.memory_id[:8]}, so it changed "
                    f"v{max(result.version - 1, 1)} unseen; get a memory before changing it")
    elif deduplicated:
        out.note = "a memory in this scope already says exactly this; nothing new was written (id is that memory)"
    if result.pending:
        waiting = session.client.local.queued()
        out.offline = True
        out.note = (f"server unreachable: the write is queued in this agent's outbox ({waiting} waiting) and is "
                    "sent automatically when the server is back; other agents see it only then")
    return out


def register(mcp, session: Session) -> None:
    """Adds the memory tools to `mcp`, bound to `session`."""
    client = session.client
    write = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                            open_world_hint=False)

    @mcp.tool(name="add_memory", title="Add a memory", description=ADD, annotations=write)
    def add_memory(
        content: Content,
        type: TypeName = "fact",
        tags: Tags = [],  # noqa: B006 - pydantic copies defaults
        layer: Annotated[Layer | None, Field(description="Governance layer; default factual.")] = None,
        scope: Annotated[Scope | None, Field(description="Default: this session's scope. Use user for facts "
                                                         "about the user that hold in every project.")] = None,
        importance: Importance = None,
        confidence: Confidence = None,
        protected: Annotated[bool, Field(description="Protect from being forgotten by agents.")] = False,
        trust: Trust = None,
        quote: Quote = None,
        event_time: EventTime = None,
        steps: Steps = None,
        preconditions: Conditions = None,
        postconditions: Conditions = None,
        sources: Sources = None,
    ) -> Annotated[ToolResult, WriteOut]:
        def produce():
            chosen = scope or session.scope
            labels = {k: v for k, v in (("trust", trust), ("quote", quote)) if v is not None}
            result = client.add(content, scope=chosen, type=type, tags=tags, layer=layer, importance=importance,
                                confidence=confidence, protected=protected, event_time=event_time,
                                steps=steps or (), preconditions=preconditions or (),
                                postconditions=postconditions or (), sources=sources or (),
                                root=session.project_dir, **labels)
            out = _write_out(session, "add", result, scope=chosen)
            if sources:
                notes = source_notes(recorded_sources(sources, session.project_dir), session.project_dir)
                out.note = "; ".join(filter(None, [out.note, *(f"source {n}" for n in notes)])) or None
            return out

        return session.run(produce, embed=content)

    @mcp.tool(name="get", title="Get a memory", description=GET,
              annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def get(id: MemoryId) -> Annotated[ToolResult, GetOut]:
        def produce():
            memory_id = session.resolve(id)
            memory = client.get(memory_id)
            pending = client.local.is_pending(memory_id)
            out = GetOut(memory=memory_out(memory, content_limit=None, pending=pending))
            if not client.online and not pending:
                out.offline, out.note = True, session.cache_note()
            return out

        return session.run(produce)

    @mcp.tool(name="update", title="Update a memory", description=UPDATE, annotations=write)
    def update(
        id: MemoryId,
        base_version: BaseVersion = None,
        content: Annotated[Content | None, Field(description="The new full content (replaces the old).")] = None,
        type: Annotated[TypeName | None, Field(description="New type.")] = None,
        tags: Annotated[Tags | None, Field(description="New tags (replace the old list).")] = None,
        importance: Importance = None,
        confidence: Confidence = None,
        protected: Annotated[bool | None, Field(description="Set or clear protection.")] = None,
        trust: Trust = None,
        quote: Quote = None,
        event_time: EventTime = None,
        steps: Annotated[Steps, Field(description="New steps (replace the old list).")] = None,
        preconditions: Annotated[Conditions, Field(description="New preconditions (replace the old list).")] = None,
        postconditions: Annotated[Conditions, Field(description="New postconditions (replace the old list).")] = None,
    ) -> Annotated[ToolResult, WriteOut]:
        def produce():
            labels = {k: v for k, v in (("trust", trust), ("quote", quote)) if v is not None}
            memory_id = session.resolve(id)
            base = session.reader.base(memory_id, base_version)
            result = client.update(memory_id, base_version=base.version, content=content, type=type,
                                   tags=tags, importance=importance, confidence=confidence, protected=protected,
                                   event_time=event_time, steps=steps, preconditions=preconditions,
                                   postconditions=postconditions, root=session.project_dir, **labels)
            return _write_out(session, "update", result, base=base)

        return session.run(produce, embed=content)

    restored = "with restore" if "restore" in session.tools else "(the user runs `mnemosync restore ID`)"

    @mcp.tool(name="forget", title="Forget a memory", description=FORGET.format(restored=restored),
              annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False,
                                          open_world_hint=False))
    def forget(
        id: MemoryId,
        reason: Annotated[str, Field(max_length=1024, description="Why it is forgotten (kept in the log).")] = "",
        base_version: BaseVersion = None,
    ) -> Annotated[ToolResult, WriteOut]:
        def produce():
            memory_id = session.resolve(id)
            base = session.reader.base(memory_id, base_version)
            result = client.forget(memory_id, base_version=base.version, reason=reason)
            return _write_out(session, "forget", result, base=base)

        return session.run(produce)

    @mcp.tool(name="restore", title="Restore a forgotten memory", description=RESTORE, annotations=write)
    def restore(id: MemoryId, base_version: BaseVersion = None) -> Annotated[ToolResult, WriteOut]:
        def produce():
            memory_id = session.resolve(id)
            base = session.reader.base(memory_id, base_version)
            return _write_out(session, "restore", client.restore(memory_id, base_version=base.version), base=base)

        return session.run(produce)

    @mcp.tool(name="link_memories", title="Link two memories", description=LINK, annotations=write)
    def link_memories(
        source_id: Annotated[str, Field(min_length=6, max_length=36, description="The memory the link starts at.")],
        target_id: Annotated[str, Field(min_length=6, max_length=36, description="The memory it points to.")],
        relation: EdgeType = "semantic",
        weight: Annotated[float, Field(ge=0, le=1, description="How strong, above 0 to 1 (0: unset, read as 1).")
                          ] = 0.0,
        reason: Annotated[str, Field(max_length=512, description="Why the two are linked.")] = "",
        remove: Annotated[bool, Field(description="Remove this link instead of adding it.")] = False,
    ) -> Annotated[ToolResult, WriteOut]:
        def produce():
            source, target = session.resolve(source_id), session.resolve(target_id)
            if remove:
                return _write_out(session, "unlink", client.unlink(source, target, relation))
            return _write_out(session, "link", client.link(source, target, relation, weight=weight or None,
                                                           reason=reason))

        return session.run(produce)

    @mcp.tool(name="set_governance_layer", title="Change a memory's governance layer", description=SET_LAYER,
              annotations=write)
    def set_governance_layer(
        id: MemoryId,
        layer: Annotated[Layer, Field(description="The new layer.")],
        base_version: BaseVersion = None,
    ) -> Annotated[ToolResult, WriteOut]:
        def produce():
            memory_id = session.resolve(id)
            base = session.reader.base(memory_id, base_version)
            result = client.set_layer(memory_id, layer, base_version=base.version)
            return _write_out(session, "set_layer", result, base=base)

        return session.run(produce)
