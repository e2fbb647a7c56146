"""The MCP server object: instructions, lifespan (boot sync), tools and the core-memories resource.

`build_server` wires one `Session` (one AgentClient) into an `MCPServer`.
The lifespan runs before the first request is served: it sends queued
writes, catches the cache up (agent_sync) and starts live updates, so the
first tool call already sees other agents' memories. It closes the client
when the session ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version

import anyio.to_thread
from mcp.server.mcpserver import MCPServer

from mcp_shim import core_memories, tools_admin, tools_lifecycle, tools_memory, tools_read
from mcp_shim.session import Session

CORE_URI = "memory://core"
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


def build_server(session: Session, *, core_budget_tokens: int = core_memories.DEFAULT_BUDGET_TOKENS) -> MCPServer:
    """An MCPServer exposing `session` (not yet booted; its lifespan boots it).

    Args:
        session: The session (agent client and scope) to serve.
        core_budget_tokens: Token budget of the `memory://core` resource.
    """

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[Session]:
        await anyio.to_thread.run_sync(session.boot)
        try:
            yield session
        finally:
            await anyio.to_thread.run_sync(session.close)

    mcp = MCPServer(
        "mnemosync", title="mnemosync shared memory", version=__version__, instructions=instructions(session),
        lifespan=lifespan, log_level="WARNING",
    )
    tools_memory.register(mcp, session)
    tools_read.register(mcp, session)
    tools_admin.register(mcp, session)
    tools_lifecycle.register(mcp, session)

    @mcp.resource(CORE_URI, name="core-memories", title="Core memories", mime_type="text/markdown",
                  description=f"The most important memories of {' and '.join(session.home_scopes)} (grouped by "
                              "type; ranked by layer, importance and recency) within a token budget. Read it at "
                              "the start of a session.")
    def core_resource() -> str:
        built = core_memories.build(session.client.local, session.home_scopes, budget_tokens=core_budget_tokens)
        note = session.cache_note()
        return built.markdown + (f"\n\n({note})" if note else "")

    return mcp
