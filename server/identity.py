"""Who is calling: the one place an RPC's agent identity is resolved.

In development mode (plain text on loopback) the agent id comes from the
`x-mnemosync-agent` call metadata. Request bodies never carry an agent id.
"""

from __future__ import annotations

import re

from server.errors import Unauthenticated

AGENT_METADATA_KEY = "x-mnemosync-agent"
_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


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
