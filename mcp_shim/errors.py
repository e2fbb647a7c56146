"""The shim's one error boundary: typed errors (`mnemosync.kernel.errors`, and the agent's own in
`mnemosync.agent.errors`) become tool errors the model can act on.

Every message keeps the server's own words and adds what to do differently,
because a model that reads `isError` tends to retry: an unchanged retry of a
refused write never helps. Mapping goes by the error's `code` (the gRPC status
name) so error classes added to the hierarchy later map too.
"""

from __future__ import annotations

from collections.abc import Collection

from mnemosync.kernel.errors import CodedError, MnemosyncError, ModelUnusable, ResourceExhausted

_ADVICE = {
    "ABORTED": "Another agent changed this memory first: call get for its current content and version, "
               "reconcile, then retry with that version as base_version.",
    "NOT_FOUND": "Check the id: {listings} memory ids, check_conflicts conflict ids.",
    "INVALID_ARGUMENT": "Fix the argument named above and call again.",
    "FAILED_PRECONDITION": "The memory's current state does not allow this as asked; change the request as "
                           "the message says rather than repeating it.",
    "PERMISSION_DENIED": "Governance does not allow this agent to do it; do not retry. Ask the user, or record "
                         "your point as a new memory instead.",
    "UNAUTHENTICATED": "The server does not accept this agent's identity; the user must fix the mnemosync "
                       "configuration (agent id or certificate). Do not retry.",
    "RESOURCE_EXHAUSTED": "Send fewer or smaller requests.",
    "DATA_LOSS": "The server's history no longer matches this agent's cache; tell the user, an operator must "
                 "check the server (mnemosync verify). Reads still work from the cache.",
    "INTERNAL": "Tell the user; the local cache may need attention.",
}


class ShimError(Exception):
    """An argument the shim itself cannot use (for example an id prefix matching two memories)."""


def explain(exc: BaseException, tools: Collection[str] = ("search", "list_recent")) -> str:
    """The tool-error text for an exception raised by the agent client or the shim: a refusal
    (`MnemosyncError`) leads with "refused", anything else with "could not do this"; its advice names only
    `tools`, the session's."""
    if isinstance(exc, ShimError):
        return str(exc)
    if isinstance(exc, ModelUnusable):
        return f"The embedding model is not usable: {exc}"
    code = exc.code if isinstance(exc, CodedError) else type(exc).__name__
    listings = [name for name in ("search", "list_recent") if name in tools]
    advice = _ADVICE.get(code, "").format(listings=" and ".join(listings) + (" show" if len(listings) > 1 else
                                                                             " shows"))
    retry_after = exc.retry_after if isinstance(exc, ResourceExhausted) else None
    if code == "RESOURCE_EXHAUSTED" and retry_after:
        advice = f"Wait {retry_after:g} seconds before trying again. {advice}"
    message = str(exc).rstrip(".")
    lead = "mnemosync refused this" if isinstance(exc, MnemosyncError) else "mnemosync could not do this"
    return f"{lead} ({code}): {message}. {advice}".strip()
