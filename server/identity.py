"""Who is calling: the one place an RPC's caller is resolved.

The servicer asks its `IdentityResolver` for a `Caller` on every RPC and
passes it down; nothing else looks at metadata or certificates, and request
bodies never carry an agent id.

`MetadataIdentity` is development mode (plain text on loopback): the agent id
comes from the `x-mnemosync-agent` call metadata, and authority and scopes
from the server's agent policy when one is configured.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from server.errors import Unauthenticated

AGENT_METADATA_KEY = "x-mnemosync-agent"
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")

HUMAN_AUTHORITY = 1
AUTOMATED_AUTHORITY = 6


@dataclass(frozen=True)
class Caller:
    """The authenticated agent behind one RPC.

    Attributes:
        agent_id: Stable id, recorded as the author of its writes.
        authority: 1 (human) to 6 (automated extractor); lower is stronger.
        scopes: Scopes it may read and write; None means every scope.
        admin: May perform admin operations (resolving for others, redaction).
    """

    agent_id: str
    authority: int = 3
    scopes: tuple[str, ...] | None = None
    admin: bool = False


class IdentityResolver(Protocol):
    """Turns a gRPC call context into a Caller (or raises Unauthenticated)."""

    def __call__(self, context) -> Caller: ...


def validate_agent_id(agent_id: str) -> str:
    """Checks an agent id: 1 to 64 characters of letters, digits and `_.@-`."""
    if not _AGENT_ID.match(agent_id or ""):
        raise Unauthenticated(
            f"agent id must be 1 to 64 characters of letters, digits and _.@-; got {agent_id[:70]!r}"
        )
    return agent_id


def agent_from_metadata(metadata) -> str:
    """The agent id from call metadata (development mode).

    Raises:
        Unauthenticated: no or malformed `x-mnemosync-agent`.
    """
    for key, value in metadata or ():
        if key == AGENT_METADATA_KEY:
            return validate_agent_id(value)
    raise Unauthenticated(
        f"no agent identity: send the {AGENT_METADATA_KEY} metadata key "
        "(the agent client does this from --agent-id / MNEMOSYNC_AGENT_ID)"
    )


@dataclass(frozen=True)
class MetadataIdentity:
    """Development-mode resolver: agent id from metadata.

    Args:
        policy: Optional lookup from agent id to its Caller (authority, scopes);
            agents it does not know get `Caller(agent_id)` defaults.
    """

    policy: Callable[[str], Caller | None] | None = None

    def __call__(self, context) -> Caller:
        agent_id = agent_from_metadata(context.invocation_metadata())
        known = self.policy(agent_id) if self.policy else None
        return known or Caller(agent_id)
