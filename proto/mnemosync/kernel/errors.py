"""The one hierarchy of mnemosync's typed errors. Each carries the gRPC status name it maps to.

The core and the server raise these, and so does the agent: a refusal from the
server arrives there as the class of its status (`mnemosync.agent.remote`
maps each status once: NOT_FOUND to `NotFound`, ABORTED to `StaleVersion`, …),
and the agent's own check of a write raises what the server would. Errors only
the agent can meet (the server unreachable, a rewritten history, TLS, its local
files) derive from `CodedError` in `mnemosync.agent.errors`; no error name is
defined twice. Each edge translates them once, by `code`: the gRPC servicer
into `context.abort(code, message)` (`mnemosync.server.service`), a command into
an exit code (`mnemosync.kernel.command_line`), the MCP shim into a tool error
(`mnemosync.shim.errors`). Messages are written for the person or model that
sent the request: they name the field, the limit and what to do instead.
"""


class CodedError(Exception):
    """Base of every typed mnemosync error; `code` is the gRPC status name it stands for."""

    code = "UNKNOWN"


class MnemosyncError(CodedError):
    """A request refused, with nothing written: by the core, the server, or the agent's check of what the server
    would refuse."""

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

    def __init__(self, memory_id: str = "", base_version: int = 0, current_version: int = 0, *,
                 message: str = ""):
        """The store names the memory and both versions; the agent, receiving the refusal, has only the
        server's `message` (then the fields are empty)."""
        self.memory_id = memory_id
        self.base_version = base_version
        self.current_version = current_version
        super().__init__(message or (
            f"memory {memory_id} is at version {current_version}, but this write was "
            f"made from version {base_version}; read it again (Get) and retry with "
            f"base_version={current_version}"
        ))


class OutOfRange(MnemosyncError):
    """An offset beyond the changelog head."""

    code = "OUT_OF_RANGE"


class ResourceExhausted(MnemosyncError):
    """A batch, stream count or rate over its configured limit.

    `retry_after` (seconds) is set when waiting helps (the rate limit; the server sends it as trailing metadata).
    """

    code = "RESOURCE_EXHAUSTED"

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


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
    """The embedding model is missing, unreadable or cannot be built.

    The message always says what to do next (build the model, point `MNEMOSYNC_EMBED_MODEL` elsewhere, install
    the weights package), because it is shown to users as is.
    """


class SettingsError(InvalidArgument):
    """A setting from a flag, a `MNEMOSYNC_*` variable or the settings file is unknown or of the wrong kind."""


class ChainBroken(MnemosyncError):
    """`mnemosync verify` found an entry that was changed, removed, reordered or blanked without a redaction."""

    code = "DATA_LOSS"
