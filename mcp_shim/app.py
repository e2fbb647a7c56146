"""The MCP server object: instructions, lifespan (boot sync), tools and the core-memories resource.

`build_server` wires one `Session` (one AgentClient) into an MCP server of the shim's own
(`mnemosync.shim.protocol`: the agent that serves every session never loads the MCP SDK).
The lifespan runs before the first request is served: it sends queued
writes, catches the cache up (agent_sync) and starts live updates, so the
first tool call already sees other agents' memories; then it starts
answering Claude Code's prompt hook on the local socket (`local_service`)
and, when enabled, the live channel (`mnemosync.shim.channel`). It closes all of
them when the session ends.

Tool sets: `compact` (the default: `COMPACT_TOOLS`, what a session needs
every day) or `all` (`ALL_TOOLS`). A smaller list costs fewer tokens in
every request of the session; `ops/bench/bench_tools.py` measures both.
Every text the model reads (descriptions, notes, errors) is worded for the
set in use (`Session.tools`): the compact set's send the user to the command
line for what it leaves out (restoring, resolving conflicts).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

import anyio
import anyio.to_thread

from mnemosync.kernel import event_time, reflection
from mnemosync.shim import core_memories, tools_admin, tools_graph, tools_lifecycle, tools_memory, tools_read
from mnemosync.shim.config import ALL_TOOLS, TOOL_SETS, tool_names
from mnemosync.shim.protocol import McpServer
from mnemosync.shim.session import Session

CORE_URI = "memory://core"
REFLECTION_URI = "memory://reflection"
try:
    __version__ = version("mnemosync")
except PackageNotFoundError:  # running from a checkout without installing
    __version__ = "0"
INSTRUCTIONS_LIMIT = 2048

INSTRUCTIONS = """mnemosync is long-term memory shared by every agent working with this user: other Claude Code \
sessions, on this machine or others. What you store persists after this session, and other agents read it.

- Before a task, and before guessing or asking the user about past decisions, conventions, known fixes, \
configuration or preferences, call search with a natural question.
- When you learn something durable a later session would need (a decision and its reason, a non-obvious \
fix, a configuration fact, a user preference, a pitfall), call add_memory with one self-contained \
statement. Not secrets, not transient state, not what the code already says plainly.
- If a memory is wrong or outdated, update it (base_version from get/search) or forget it; do not add a \
contradicting duplicate. A result with conflict_id means another agent changed or said the same thing: \
review it with check_conflicts.
- Results may carry news (what other agents wrote since your last call) and offline=true (the server is \
unreachable: reads come from this agent's cache, writes wait in the outbox and are sent later).
- This session writes to scope {scope} by default and reads {home} unless you pass scopes or all_scopes.
- Layers: constitutional (rules only the user sets), legislative (decisions, corrections; do not decay), \
factual (default), ephemeral (short-lived).
- The resource {core_uri} lists the most important memories of this scope."""


def instructions(session: Session) -> str:
    """The server instructions for this session (under Claude Code's 2 KB cut)."""
    text = INSTRUCTIONS.format(scope=session.scope, home=" and ".join(session.home_scopes), core_uri=CORE_URI)
    return text if len(text.encode()) <= INSTRUCTIONS_LIMIT else text.encode()[:INSTRUCTIONS_LIMIT].decode(
        errors="ignore")


def build_server(session: Session, *, core_budget_tokens: int = core_memories.DEFAULT_BUDGET_TOKENS,
                 tools: str = "compact", channel=None, local_service=None, hosted: bool = False) -> McpServer:
    """An MCP server exposing `session` (not yet booted; its lifespan boots it, unless `hosted`).

    Args:
        session: The session (agent client and scope) to serve.
        core_budget_tokens: Token budget of the `memory://core` resource.
        tools: "compact" (`COMPACT_TOOLS`) or "all".
        channel: A `mnemosync.shim.channel.ChannelNews` to push live news through, or None.
        local_service: A `mnemosync.shim.local_service.LocalService` to answer the prompt hook on, or None.
        hosted: The session is one of the local agent's (`mnemosync.shim.agent_sessions`): the agent boots and
            closes the shared client, the lifespan only stops the session's news when it ends.
    """

    @asynccontextmanager
    async def lifespan(_server: McpServer) -> AsyncIterator[Session]:
        if not hosted:
            await anyio.to_thread.run_sync(session.boot)
            if local_service is not None:
                from mnemosync.shim.hook_answers import HookAnswers

                local_service.start(HookAnswers(session.client, scope=session.scope, lock=session.lock))
        try:
            async with anyio.create_task_group() as tasks:
                if channel is not None:
                    session.client.on_news(channel.record)
                    tasks.start_soon(channel.run)
                try:
                    yield session
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            if channel is not None:
                session.client.off_news(channel.record)
            if hosted:
                session.detach()
            else:
                if local_service is not None:
                    await anyio.to_thread.run_sync(local_service.stop)
                await anyio.to_thread.run_sync(session.close)

    mcp = McpServer(
        "mnemosync", title="mnemosync shared memory", version=__version__, instructions=instructions(session),
        lifespan=lifespan, experimental={"claude/channel": {}} if channel is not None else None,
    )
    if channel is not None:
        channel.peer = mcp
    if tools not in TOOL_SETS:
        raise ValueError(f"tools must be one of {', '.join(TOOL_SETS)}, got {tools!r}")
    session.tools = tool_names(tools)
    tools_memory.register(mcp, session)
    tools_read.register(mcp, session)
    tools_admin.register(mcp, session)
    tools_lifecycle.register(mcp, session)
    tools_graph.register(mcp, session)
    for name in ALL_TOOLS:
        if name not in session.tools:
            mcp.tools.remove(name)

    @mcp.resource(CORE_URI, name="core-memories", title="Core memories", mime_type="text/markdown",
                  description=f"The most important memories of {' and '.join(session.home_scopes)} (grouped by "
                              "type; ranked by layer, authority, importance and use) within a token budget. Read it at "
                              "the start of a session.")
    def core_resource() -> str:
        built = core_memories.build(session.client.local, session.home_scopes, budget_tokens=core_budget_tokens)
        session.saw(dict(built.versions), CORE_URI)
        note = session.cache_note()
        return built.markdown + (f"\n\n({note})" if note else "")

    @mcp.resource(REFLECTION_URI, name="reflection", title="Reflection summary", mime_type="text/markdown",
                  description=f"REFLECTION.md for {' and '.join(session.home_scopes)}: themes (topic clusters), the "
                              "most used memories, recent insights (the most surprising new memories) and what "
                              "consolidation has done. Read it to get the lie of the land.")
    def reflection_resource() -> str:
        r = session.client.local.reflection(now_ms=int(time.time() * 1000), scopes=session.home_scopes)
        note = session.cache_note()
        return reflection.markdown(r, event_time.text) + (f"\n({note})\n" if note else "")

    return mcp
