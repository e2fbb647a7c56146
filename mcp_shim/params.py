"""Typed tool parameters: each alias is one input-schema property with its constraints and description.

Kept in one place so every tool names, limits and explains a parameter the
same way. The constraints mirror the server's intake rules (`mnemosync.kernel.operations`),
so a malformed argument is rejected by the schema, before any work, with a
message naming the field. No `from __future__ import annotations` here or in
the tool modules: `mnemosync.shim.tool_registry` evaluates these annotations to build the schemas.
"""

from typing import Annotated, Literal

from pydantic import Field

from mnemosync.kernel import event_time
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.shim.errors import ShimError

# Spelled out, not built from the kernel's tuples, so the type checker can read them; a test keeps them equal to
# `mnemosync.kernel.memory.LAYER_NUMBERS` and `mnemosync.kernel.links.EDGE_TYPES`.
Layer = Literal["constitutional", "legislative", "factual", "ephemeral"]
Mode = Literal["hybrid", "vector", "keyword"]
EdgeType = Annotated[Literal["semantic", "temporal", "causal", "entity", "hierarchical", "supersedes"], Field(
    description="Edge type: semantic, temporal, causal, entity, hierarchical or supersedes.")]

MemoryId = Annotated[str, Field(
    min_length=6, max_length=36,
    description="The memory's id: the full UUID, or its first 8 characters as core memories and lists show it.")]
BaseVersion = Annotated[int | None, Field(
    ge=1,
    description="The memory's version when you read it (from get, search or a list). Omit to use the version "
                "this session was shown. If another agent changed the memory since, nothing is silently "
                "overwritten: an update or forget is still kept, as a conflicting revision (conflict_id in the "
                "result; review with check_conflicts); any other change is refused (get it again, then retry).")]
Content = Annotated[str, Field(
    min_length=1, max_length=32768,
    description="One self-contained statement a future session can use without this conversation: what, "
                "and why (for example 'Deploys go through ops/deploy.sh because it runs the migrations "
                "first'). Never secrets or credentials.")]
TypeName = Annotated[str, Field(
    pattern=r"^[a-z][a-z0-9_]{0,31}$",
    description="Kind of memory, lower_snake_case. Common: decision, fix, solution, config, pattern, "
                "preference, pitfall, fact.")]
Tag = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\s,]+$")]
Tags = Annotated[list[Tag], Field(
    max_length=32, description="Short keywords without spaces (e.g. auth, deploy, postgres); matched exactly.")]
Steps = Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]] | None, Field(
    max_length=50, description="For type procedure: the steps, in order (a list of texts).")]
Conditions = Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]] | None, Field(
    max_length=50, description="For type procedure: conditions, in order.")]
Sources = Annotated[list[Annotated[str, Field(min_length=1, max_length=1000)]] | None, Field(
    max_length=20, description="What it is about, so later sessions can tell when it went stale: paths relative "
                               "to the project ('src/lib/api.ts', 'src/lib/api.ts:10-40' for lines, "
                               "'src/lib/api.ts#retryFetch' for a symbol), 'commit:<sha>', or a URL.")]
Importance = Annotated[float | None, Field(
    ge=0, le=1, description="0 to 1; how much it matters (default 0.5). Raises its rank in core memories.")]
Confidence = Annotated[float | None, Field(ge=0, le=1, description="0 to 1; how sure you are (default 0.9).")]
Trust = Annotated[Literal["principle", "pattern", "inference"] | None, Field(
    description="Trust label: principle (stated by the user; needs quote), pattern (observed repeatedly) or "
                "inference (your conclusion).")]
Quote = Annotated[str | None, Field(max_length=2000, description="The user's exact words a principle comes from.")]
EventTime = Annotated[str | None, Field(max_length=64, description=(
    "When what it records happened, if not now, as ISO 8601: 2025-03-08 or 2025-03-08T16:20 (UTC unless an offset "
    "such as +01:00 follows). For something said in a past conversation, that conversation's date."))]
Scope = Annotated[str, Field(
    pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$",
    description="A scope such as user (everything about the user, across projects) or project:<name>.")]
Scopes = Annotated[list[Scope] | None, Field(
    max_length=20,
    description="Only these scopes. Default: this session's project scope and user.")]
AllScopes = Annotated[bool, Field(description="Cover every scope this agent can read (ignores scopes).")]
Types = Annotated[list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,31}$")]] | None, Field(
    max_length=20, description="Only these types (e.g. decision, fix).")]
FilterTags = Annotated[list[Tag] | None, Field(max_length=20, description="Only memories carrying all these tags.")]
Limit = Annotated[int, Field(ge=1, le=50, description="Results per page.")]
Offset = Annotated[int, Field(ge=0, le=1000, description="Skip this many (use next_offset from the previous page).")]
Time = Annotated[str | None, Field(
    max_length=40,
    description="ISO 8601 date or time, UTC unless it says otherwise (2026-08-01, 2026-08-01T14:30, "
                "2026-08-01T14:30+02:00).")]


def parse_time(value: str | None, name: str) -> int:
    """Milliseconds since the epoch for an ISO 8601 date or time (UTC when naive); 0 for None.

    Raises:
        ShimError: not a date or time.
    """
    if not value:
        return 0
    try:
        return event_time.parse(value, name)
    except InvalidArgument as exc:
        raise ShimError(str(exc)) from None
