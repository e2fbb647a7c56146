"""Typed errors of the shared core and the server. Each carries the gRPC status name it maps to.

The core and the server raise these; each edge translates them once: the gRPC
servicer into `context.abort(code, message)` (`mnemosync.server.service`), the `mnemosync`
command into an exit code (`mnemosync.cli`). The agent client has its own family
(`mnemosync.agent.errors`); both derive from `CodedError`, so an edge maps either
by its `code`. Messages are written for the person or model that sent the
request: they name the field, the limit and what to do instead.
"""


class CodedError(Exception):
    """Base of every typed mnemosync error; `code` is the gRPC status name it stands for."""

    code = "UNKNOWN"


class MnemosyncError(CodedError):
    """Base class of the core's and the server's errors: a request refused, with nothing written."""

    code = "INTERNAL"


class InvalidArgument(MnemosyncError):
    """A field is malformed, missing or over a limit."""

    code = "INVALID_ARGUMENT"


class NotFound(MnemosyncError):
    """The named memory (or link) does not exist."""

    code = "NOT_FOUND"


class AlreadyExists(MnemosyncError):
    """The memory id, or the op_id for a different operation, is already taken."""

    code = "ALREADY_EXISTS"


class FailedPrecondition(MnemosyncError):
    """The request is well formed but the store's state does not allow it
    (another embedding model, restoring a memory that is not archived, …)."""

    code = "FAILED_PRECONDITION"


class StaleVersion(MnemosyncError):
    """A restore, set_layer or resolve_conflict was made from a version that is no
    longer current (stale updates and forgets are recorded as conflicts instead)."""

    code = "ABORTED"

    def __init__(self, memory_id: str, base_version: int, current_version: int):
        self.memory_id = memory_id
        self.base_version = base_version
        self.current_version = current_version
        super().__init__(
            f"memory {memory_id} is at version {current_version}, but this write was "
            f"made from version {base_version}; read it again (Get) and retry with "
            f"base_version={current_version}"
        )


class OutOfRange(MnemosyncError):
    """An offset beyond the changelog head."""

    code = "OUT_OF_RANGE"


class ResourceExhausted(MnemosyncError):
    """A batch, stream count or rate over its configured limit."""

    code = "RESOURCE_EXHAUSTED"


class PermissionDenied(MnemosyncError):
    """The caller's authority, scopes or certificate do not allow this.

    The message starts with the governance rule that refused it (for example
    `layer-1-human-only: ...`) and says what to do instead.
    """

    code = "PERMISSION_DENIED"


class Unauthenticated(MnemosyncError):
    """The call carries no usable agent identity."""

    code = "UNAUTHENTICATED"


class StorageUnavailable(MnemosyncError):
    """SQLite cannot be used as required (no extension loading, no sqlite-vec)."""

    code = "UNAVAILABLE"


class StoreClosed(MnemosyncError):
    """The store is shutting down and takes no more writes."""

    code = "UNAVAILABLE"


class SchemaTooNew(FailedPrecondition):
    """A database was written by a newer mnemosync: its schema version is past the steps this one knows."""

    def __init__(self, path: str, found: int, known: int):
        self.found = found
        self.known = known
        super().__init__(f"the database {path} has schema version {found}, but this mnemosync knows versions up "
                         f"to {known}; upgrade mnemosync to open it")


class ModelUnusable(FailedPrecondition):
    """An embedding model file is missing or is not a readable GGUF embedding model (the message says what to do)."""


class SettingsError(InvalidArgument):
    """A setting from a flag, a `MNEMOSYNC_*` variable or the settings file is unknown or of the wrong kind."""


class ChainBroken(MnemosyncError):
    """`mnemosync verify` found an entry that was changed, removed, reordered or blanked without a redaction."""

    code = "DATA_LOSS"
