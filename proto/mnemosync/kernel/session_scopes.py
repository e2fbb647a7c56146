"""The scopes a session reads by default: its own and `user`.

A session (an MCP shim's, or the prompt hook's for one prompt) has one home scope, its project's or `user`, and
reads that and the user's cross-project memory. It lives in the kernel so the agent's dashboard can judge a search
as the prompt hook of a session in a given scope would (`mnemosync.agent.dashboard.views_search`), and it imports
nothing, so the shim's settings read it without loading NumPy.
"""

from __future__ import annotations

USER_SCOPE = "user"
"""The user's cross-project scope, every session's second home, and the home of a session without a project."""


def home_scopes(scope: str) -> tuple[str, ...]:
    """The scopes a session whose scope is `scope` reads by default: its own scope and `user`."""
    return (scope,) if scope == USER_SCOPE else (scope, USER_SCOPE)
