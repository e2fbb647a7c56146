"""The errors only the agent client meets, in the kernel's one hierarchy (`mnemosync.kernel.errors`).

A refusal from the server is the kernel's error of its status (`remote.py` maps
every `grpc.RpcError` once, streams included: NOT_FOUND to `NotFound`, ABORTED
to `StaleVersion`, …), and the client's own check of a write raises the same
error the server would. What is defined here has no counterpart on the server:
the server unreachable, a call ended with a status no kernel error stands for,
a rewritten or tampered history, TLS, and the local cache and outbox files
(the cache and outbox turn SQLite failures into `StorageError`). Each carries a
`code` (a gRPC status name), so the MCP shim and the CLI map it with the
kernel's errors, once, at their own edges.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from sqlite_utils.utils import sqlite3

from mnemosync.kernel.errors import CodedError, MnemosyncError

_F = TypeVar("_F", bound=Callable[..., Any])


class ClientError(CodedError):
    """Base class of the errors only the agent client raises (catch `CodedError` for every typed error)."""

    code = "UNKNOWN"


class ServerUnavailable(ClientError):
    """The server cannot be reached (down, unreachable, or too slow to answer)."""

    code = "UNAVAILABLE"


class CallFailed(MnemosyncError):
    """The server ended a call with a status no kernel error stands for (CANCELLED for a stream cancelled,
    INTERNAL, UNKNOWN, …); `code` is that status's name, the message the server's, unchanged."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


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
