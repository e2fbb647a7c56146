"""Typed errors of the agent client: the only exceptions its public calls raise.

`remote.py` translates every `grpc.RpcError` into one of these, once, streams
included; the cache and outbox turn SQLite failures into `StorageError`, the
embedder turns llama.cpp's into `ModelError`, and the client's own check of a
write (the server's validation, run locally) raises the same refusal the
server would. Each carries a `code` (the gRPC status name) so the MCP shim and
the CLI can map it once more at their own edges; `ClientError` shares its base,
`CodedError`, with the core's errors for that reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from sqlite_utils.utils import sqlite3

from mnemosync.kernel.errors import CodedError, MnemosyncError

_F = TypeVar("_F", bound=Callable)


class ClientError(CodedError):
    """Base class of agent-client errors."""

    code = "UNKNOWN"


class ServerUnavailable(ClientError):
    """The server cannot be reached (down, unreachable, or too slow to answer)."""

    code = "UNAVAILABLE"


class Refused(ClientError):
    """The server refused the request; the message is the server's, unchanged."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


class StaleVersion(Refused):
    """Another agent changed the memory since the version this restore, set_layer or
    resolution was made from (stale updates and forgets become conflicts instead)."""


class NotFound(Refused):
    """No such memory."""


class InvalidInput(Refused):
    """A field is malformed or over a limit (the message names which)."""


class FailedPrecondition(Refused):
    """The request cannot apply in the current state (another embedding model, a
    memory already forgotten, …)."""


class HistoryMismatch(ClientError):
    """The server's changelog no longer contains what this agent already saw.

    The server was rolled back (restored from an older backup) or its history
    was rewritten. The cache is left as it was; an operator must look.
    """

    code = "DATA_LOSS"


class TamperDetected(HistoryMismatch):
    """The server sent something that does not verify: an entry passed off as blanked by a redaction that
    did not blank it, entries that are not the ones its signed checkpoint covers, a checkpoint not signed by
    its key, or a log that does not extend the checkpoint this agent accepted. Nothing of it is applied."""


class TlsError(ClientError):
    """The secure connection cannot be set up: a certificate is missing, expired,
    from another CA, revoked, or not valid for the server's name. The message
    says which and what to do. Unlike ServerUnavailable this is not "offline":
    retrying will not help until the certificates are fixed."""

    code = "UNAUTHENTICATED"


class StorageError(ClientError):
    """The local cache or outbox file cannot be opened or used (the message names the file)."""

    code = "INTERNAL"


class CacheError(StorageError):
    """The local cache cannot be opened or used (a corrupt cache is moved aside and rebuilt)."""


class ModelError(ClientError):
    """The embedding model is missing, unreadable or cannot be built.

    The message always says what to do next (build the model, point
    ``MNEMOSYNC_EMBED_MODEL`` elsewhere, install the weights package), because
    it is shown to users as is.
    """

    code = "FAILED_PRECONDITION"


class Unauthenticated(Refused):
    """The server does not accept this agent's identity (for example a revoked certificate)."""


class PermissionDenied(Refused):
    """The agent's authority, scopes or certificate do not allow this (the message
    starts with the governance rule's name, for example `scope-not-granted: ...`)."""


class ResourceExhausted(Refused):
    """A batch, the agent's open streams or its call rate is over a server limit.

    `retry_after` (seconds) is set when waiting helps (the rate limit).
    """

    def __init__(self, code: str, message: str, retry_after: float | None = None):
        super().__init__(code, message)
        self.retry_after = retry_after


REFUSALS = {
    "ABORTED": StaleVersion,
    "NOT_FOUND": NotFound,
    "INVALID_ARGUMENT": InvalidInput,
    "FAILED_PRECONDITION": FailedPrecondition,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
}


def refused(code: str, message: str) -> Refused:
    """The typed refusal for a status name."""
    return REFUSALS.get(code, Refused)(code, message)


def local_storage(method: _F) -> _F:
    """For methods of the agent's local files (`Cache`, `Outbox`): runs them under the object's lock and turns a
    SQLite or core storage failure into `StorageError` naming the file, so callers see only this family."""

    @functools.wraps(method)
    def guarded(self, *args, **kwargs):
        with self._lock:
            try:
                return method(self, *args, **kwargs)
            except (sqlite3.Error, MnemosyncError) as exc:
                raise StorageError(f"the local file {self.path} cannot be used: {exc}") from exc

    return guarded  # type: ignore[return-value]
