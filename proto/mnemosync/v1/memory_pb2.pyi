from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Layer(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAYER_UNSPECIFIED: _ClassVar[Layer]
    LAYER_CONSTITUTIONAL: _ClassVar[Layer]
    LAYER_LEGISLATIVE: _ClassVar[Layer]
    LAYER_FACTUAL: _ClassVar[Layer]
    LAYER_EPHEMERAL: _ClassVar[Layer]

class SearchMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEARCH_MODE_HYBRID: _ClassVar[SearchMode]
    SEARCH_MODE_VECTOR: _ClassVar[SearchMode]
    SEARCH_MODE_KEYWORD: _ClassVar[SearchMode]

class UseKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    USE_KIND_UNSPECIFIED: _ClassVar[UseKind]
    USE_KIND_USED: _ClassVar[UseKind]
    USE_KIND_RECALL: _ClassVar[UseKind]

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    DIRECTION_OUT: _ClassVar[Direction]
    DIRECTION_IN: _ClassVar[Direction]
    DIRECTION_BOTH: _ClassVar[Direction]
LAYER_UNSPECIFIED: Layer
LAYER_CONSTITUTIONAL: Layer
LAYER_LEGISLATIVE: Layer
LAYER_FACTUAL: Layer
LAYER_EPHEMERAL: Layer
SEARCH_MODE_HYBRID: SearchMode
SEARCH_MODE_VECTOR: SearchMode
SEARCH_MODE_KEYWORD: SearchMode
USE_KIND_UNSPECIFIED: UseKind
USE_KIND_USED: UseKind
USE_KIND_RECALL: UseKind
DIRECTION_UNSPECIFIED: Direction
DIRECTION_OUT: Direction
DIRECTION_IN: Direction
DIRECTION_BOTH: Direction

class EmbeddingModel(_message.Message):
    __slots__ = ("name", "dimensions", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    dimensions: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., dimensions: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class Link(_message.Message):
    __slots__ = ("target_id", "relation", "author_agent", "weight", "reason")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_AGENT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    relation: str
    author_agent: str
    weight: float
    reason: str
    def __init__(self, target_id: _Optional[str] = ..., relation: _Optional[str] = ..., author_agent: _Optional[str] = ..., weight: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class Memory(_message.Message):
    __slots__ = ("id", "scope", "type", "layer", "tags", "content", "importance", "confidence", "protected", "author_agent", "updated_by", "version", "created_at_ms", "updated_at_ms", "archived", "embedding_model", "links", "last_seq", "trust", "quote", "authority", "open_conflicts", "event_time_ms", "content_agent", "content_authority", "sources", "verification", "steps", "preconditions", "postconditions", "origin")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_AGENT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    LINKS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQ_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    OPEN_CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_AGENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    POSTCONDITIONS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    type: str
    layer: Layer
    tags: _containers.RepeatedScalarFieldContainer[str]
    content: str
    importance: float
    confidence: float
    protected: bool
    author_agent: str
    updated_by: str
    version: int
    created_at_ms: int
    updated_at_ms: int
    archived: bool
    embedding_model: str
    links: _containers.RepeatedCompositeFieldContainer[Link]
    last_seq: int
    trust: str
    quote: str
    authority: int
    open_conflicts: _containers.RepeatedScalarFieldContainer[int]
    event_time_ms: int
    content_agent: str
    content_authority: int
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    verification: Verification
    steps: _containers.RepeatedScalarFieldContainer[str]
    preconditions: _containers.RepeatedScalarFieldContainer[str]
    postconditions: _containers.RepeatedScalarFieldContainer[str]
    origin: Origin
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., type: _Optional[str] = ..., layer: _Optional[_Union[Layer, str]] = ..., tags: _Optional[_Iterable[str]] = ..., content: _Optional[str] = ..., importance: _Optional[float] = ..., confidence: _Optional[float] = ..., protected: _Optional[bool] = ..., author_agent: _Optional[str] = ..., updated_by: _Optional[str] = ..., version: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., updated_at_ms: _Optional[int] = ..., archived: _Optional[bool] = ..., embedding_model: _Optional[str] = ..., links: _Optional[_Iterable[_Union[Link, _Mapping]]] = ..., last_seq: _Optional[int] = ..., trust: _Optional[str] = ..., quote: _Optional[str] = ..., authority: _Optional[int] = ..., open_conflicts: _Optional[_Iterable[int]] = ..., event_time_ms: _Optional[int] = ..., content_agent: _Optional[str] = ..., content_authority: _Optional[int] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., verification: _Optional[_Union[Verification, _Mapping]] = ..., steps: _Optional[_Iterable[str]] = ..., preconditions: _Optional[_Iterable[str]] = ..., postconditions: _Optional[_Iterable[str]] = ..., origin: _Optional[_Union[Origin, _Mapping]] = ...) -> None: ...

class Origin(_message.Message):
    __slots__ = ("author_agent", "created_at_ms", "updated_by", "updated_at_ms")
    AUTHOR_AGENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    author_agent: str
    created_at_ms: int
    updated_by: str
    updated_at_ms: int
    def __init__(self, author_agent: _Optional[str] = ..., created_at_ms: _Optional[int] = ..., updated_by: _Optional[str] = ..., updated_at_ms: _Optional[int] = ...) -> None: ...

class AddOp(_message.Message):
    __slots__ = ("scope", "type", "layer", "tags", "content", "embedding", "importance", "confidence", "protected", "trust", "quote", "event_time_ms", "embedding_f32", "sources", "steps", "preconditions", "postconditions", "origin")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_F32_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    POSTCONDITIONS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    scope: str
    type: str
    layer: Layer
    tags: _containers.RepeatedScalarFieldContainer[str]
    content: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    importance: float
    confidence: float
    protected: bool
    trust: str
    quote: str
    event_time_ms: int
    embedding_f32: bytes
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    steps: _containers.RepeatedScalarFieldContainer[str]
    preconditions: _containers.RepeatedScalarFieldContainer[str]
    postconditions: _containers.RepeatedScalarFieldContainer[str]
    origin: Origin
    def __init__(self, scope: _Optional[str] = ..., type: _Optional[str] = ..., layer: _Optional[_Union[Layer, str]] = ..., tags: _Optional[_Iterable[str]] = ..., content: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ..., importance: _Optional[float] = ..., confidence: _Optional[float] = ..., protected: _Optional[bool] = ..., trust: _Optional[str] = ..., quote: _Optional[str] = ..., event_time_ms: _Optional[int] = ..., embedding_f32: _Optional[bytes] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., steps: _Optional[_Iterable[str]] = ..., preconditions: _Optional[_Iterable[str]] = ..., postconditions: _Optional[_Iterable[str]] = ..., origin: _Optional[_Union[Origin, _Mapping]] = ...) -> None: ...

class UpdateOp(_message.Message):
    __slots__ = ("content", "embedding", "type", "replace_tags", "tags", "importance", "confidence", "protected", "trust", "quote", "event_time_ms", "embedding_f32", "replace_sources", "sources", "replace_procedure", "steps", "preconditions", "postconditions")
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_TAGS_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_F32_FIELD_NUMBER: _ClassVar[int]
    REPLACE_SOURCES_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_PROCEDURE_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    PRECONDITIONS_FIELD_NUMBER: _ClassVar[int]
    POSTCONDITIONS_FIELD_NUMBER: _ClassVar[int]
    content: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    type: str
    replace_tags: bool
    tags: _containers.RepeatedScalarFieldContainer[str]
    importance: float
    confidence: float
    protected: bool
    trust: str
    quote: str
    event_time_ms: int
    embedding_f32: bytes
    replace_sources: bool
    sources: _containers.RepeatedCompositeFieldContainer[Source]
    replace_procedure: bool
    steps: _containers.RepeatedScalarFieldContainer[str]
    preconditions: _containers.RepeatedScalarFieldContainer[str]
    postconditions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, content: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ..., type: _Optional[str] = ..., replace_tags: _Optional[bool] = ..., tags: _Optional[_Iterable[str]] = ..., importance: _Optional[float] = ..., confidence: _Optional[float] = ..., protected: _Optional[bool] = ..., trust: _Optional[str] = ..., quote: _Optional[str] = ..., event_time_ms: _Optional[int] = ..., embedding_f32: _Optional[bytes] = ..., replace_sources: _Optional[bool] = ..., sources: _Optional[_Iterable[_Union[Source, _Mapping]]] = ..., replace_procedure: _Optional[bool] = ..., steps: _Optional[_Iterable[str]] = ..., preconditions: _Optional[_Iterable[str]] = ..., postconditions: _Optional[_Iterable[str]] = ...) -> None: ...

class ForgetOp(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RestoreOp(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LinkOp(_message.Message):
    __slots__ = ("target_id", "relation", "weight", "reason")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    relation: str
    weight: float
    reason: str
    def __init__(self, target_id: _Optional[str] = ..., relation: _Optional[str] = ..., weight: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class UnlinkOp(_message.Message):
    __slots__ = ("target_id", "relation")
    TARGET_ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    target_id: str
    relation: str
    def __init__(self, target_id: _Optional[str] = ..., relation: _Optional[str] = ...) -> None: ...

class SetLayerOp(_message.Message):
    __slots__ = ("layer",)
    LAYER_FIELD_NUMBER: _ClassVar[int]
    layer: Layer
    def __init__(self, layer: _Optional[_Union[Layer, str]] = ...) -> None: ...

class RedactOp(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class DecayOp(_message.Message):
    __slots__ = ("as_of_ms", "strength", "stability_days", "level", "uses", "last_used_ms", "stale", "use_days")
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    STABILITY_DAYS_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    USES_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_MS_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    USE_DAYS_FIELD_NUMBER: _ClassVar[int]
    as_of_ms: int
    strength: float
    stability_days: float
    level: int
    uses: int
    last_used_ms: int
    stale: bool
    use_days: int
    def __init__(self, as_of_ms: _Optional[int] = ..., strength: _Optional[float] = ..., stability_days: _Optional[float] = ..., level: _Optional[int] = ..., uses: _Optional[int] = ..., last_used_ms: _Optional[int] = ..., stale: _Optional[bool] = ..., use_days: _Optional[int] = ...) -> None: ...

class ArchiveOp(_message.Message):
    __slots__ = ("as_of_ms", "strength", "effective_importance", "reason")
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    STRENGTH_FIELD_NUMBER: _ClassVar[int]
    EFFECTIVE_IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    as_of_ms: int
    strength: float
    effective_importance: float
    reason: str
    def __init__(self, as_of_ms: _Optional[int] = ..., strength: _Optional[float] = ..., effective_importance: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class OperationSignature(_message.Message):
    __slots__ = ("salt", "signature")
    SALT_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    salt: bytes
    signature: bytes
    def __init__(self, salt: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class ResolveConflictOp(_message.Message):
    __slots__ = ("conflict_id", "keep_revision", "merged_content", "embedding", "keep_all", "note", "embedding_f32")
    CONFLICT_ID_FIELD_NUMBER: _ClassVar[int]
    KEEP_REVISION_FIELD_NUMBER: _ClassVar[int]
    MERGED_CONTENT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    KEEP_ALL_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_F32_FIELD_NUMBER: _ClassVar[int]
    conflict_id: int
    keep_revision: int
    merged_content: str
    embedding: _containers.RepeatedScalarFieldContainer[float]
    keep_all: bool
    note: str
    embedding_f32: bytes
    def __init__(self, conflict_id: _Optional[int] = ..., keep_revision: _Optional[int] = ..., merged_content: _Optional[str] = ..., embedding: _Optional[_Iterable[float]] = ..., keep_all: _Optional[bool] = ..., note: _Optional[str] = ..., embedding_f32: _Optional[bytes] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("op_id", "memory_id", "base_version", "add", "update", "forget", "restore", "link", "unlink", "set_layer", "resolve_conflict", "redact", "decay", "archive", "verify", "signature")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    ADD_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    LINK_FIELD_NUMBER: _ClassVar[int]
    UNLINK_FIELD_NUMBER: _ClassVar[int]
    SET_LAYER_FIELD_NUMBER: _ClassVar[int]
    RESOLVE_CONFLICT_FIELD_NUMBER: _ClassVar[int]
    REDACT_FIELD_NUMBER: _ClassVar[int]
    DECAY_FIELD_NUMBER: _ClassVar[int]
    ARCHIVE_FIELD_NUMBER: _ClassVar[int]
    VERIFY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    memory_id: str
    base_version: int
    add: AddOp
    update: UpdateOp
    forget: ForgetOp
    restore: RestoreOp
    link: LinkOp
    unlink: UnlinkOp
    set_layer: SetLayerOp
    resolve_conflict: ResolveConflictOp
    redact: RedactOp
    decay: DecayOp
    archive: ArchiveOp
    verify: VerifyOp
    signature: OperationSignature
    def __init__(self, op_id: _Optional[str] = ..., memory_id: _Optional[str] = ..., base_version: _Optional[int] = ..., add: _Optional[_Union[AddOp, _Mapping]] = ..., update: _Optional[_Union[UpdateOp, _Mapping]] = ..., forget: _Optional[_Union[ForgetOp, _Mapping]] = ..., restore: _Optional[_Union[RestoreOp, _Mapping]] = ..., link: _Optional[_Union[LinkOp, _Mapping]] = ..., unlink: _Optional[_Union[UnlinkOp, _Mapping]] = ..., set_layer: _Optional[_Union[SetLayerOp, _Mapping]] = ..., resolve_conflict: _Optional[_Union[ResolveConflictOp, _Mapping]] = ..., redact: _Optional[_Union[RedactOp, _Mapping]] = ..., decay: _Optional[_Union[DecayOp, _Mapping]] = ..., archive: _Optional[_Union[ArchiveOp, _Mapping]] = ..., verify: _Optional[_Union[VerifyOp, _Mapping]] = ..., signature: _Optional[_Union[OperationSignature, _Mapping]] = ...) -> None: ...

class ConflictMark(_message.Message):
    __slots__ = ("conflict_id", "kind", "other_memory_id", "similarity", "replaces_revision")
    CONFLICT_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    OTHER_MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    REPLACES_REVISION_FIELD_NUMBER: _ClassVar[int]
    conflict_id: int
    kind: str
    other_memory_id: str
    similarity: float
    replaces_revision: int
    def __init__(self, conflict_id: _Optional[int] = ..., kind: _Optional[str] = ..., other_memory_id: _Optional[str] = ..., similarity: _Optional[float] = ..., replaces_revision: _Optional[int] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("log_id", "size", "root_hash", "time_ms", "key", "signature")
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    log_id: str
    size: int
    root_hash: str
    time_ms: int
    key: str
    signature: bytes
    def __init__(self, log_id: _Optional[str] = ..., size: _Optional[int] = ..., root_hash: _Optional[str] = ..., time_ms: _Optional[int] = ..., key: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class AttestedEntry(_message.Message):
    __slots__ = ("entry", "checkpoint", "inclusion_path")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    INCLUSION_PATH_FIELD_NUMBER: _ClassVar[int]
    entry: ChangelogEntry
    checkpoint: Checkpoint
    inclusion_path: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, entry: _Optional[_Union[ChangelogEntry, _Mapping]] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., inclusion_path: _Optional[_Iterable[bytes]] = ...) -> None: ...

class BlankedEntry(_message.Message):
    __slots__ = ("seq", "payload_sha256", "embedding_dropped")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SHA256_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DROPPED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    payload_sha256: str
    embedding_dropped: bool
    def __init__(self, seq: _Optional[int] = ..., payload_sha256: _Optional[str] = ..., embedding_dropped: _Optional[bool] = ...) -> None: ...

class ChangelogEntry(_message.Message):
    __slots__ = ("seq", "op_id", "agent_id", "memory_id", "op", "base_version", "version", "operation", "server_time_ms", "prev_hash", "hash", "embedding_model", "authority", "conflict", "withheld", "payload_commit", "payload_salt", "embedding_sha256", "redacted_by", "signature", "signer_key", "blanked", "checkpoint", "redaction", "elided")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    PREV_HASH_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_COMMIT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_SALT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_SHA256_FIELD_NUMBER: _ClassVar[int]
    REDACTED_BY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SIGNER_KEY_FIELD_NUMBER: _ClassVar[int]
    BLANKED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REDACTION_FIELD_NUMBER: _ClassVar[int]
    ELIDED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    op_id: str
    agent_id: str
    memory_id: str
    op: str
    base_version: int
    version: int
    operation: Operation
    server_time_ms: int
    prev_hash: str
    hash: str
    embedding_model: str
    authority: int
    conflict: ConflictMark
    withheld: bool
    payload_commit: str
    payload_salt: str
    embedding_sha256: str
    redacted_by: int
    signature: bytes
    signer_key: str
    blanked: _containers.RepeatedCompositeFieldContainer[BlankedEntry]
    checkpoint: Checkpoint
    redaction: AttestedEntry
    elided: bool
    def __init__(self, seq: _Optional[int] = ..., op_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., memory_id: _Optional[str] = ..., op: _Optional[str] = ..., base_version: _Optional[int] = ..., version: _Optional[int] = ..., operation: _Optional[_Union[Operation, _Mapping]] = ..., server_time_ms: _Optional[int] = ..., prev_hash: _Optional[str] = ..., hash: _Optional[str] = ..., embedding_model: _Optional[str] = ..., authority: _Optional[int] = ..., conflict: _Optional[_Union[ConflictMark, _Mapping]] = ..., withheld: _Optional[bool] = ..., payload_commit: _Optional[str] = ..., payload_salt: _Optional[str] = ..., embedding_sha256: _Optional[str] = ..., redacted_by: _Optional[int] = ..., signature: _Optional[bytes] = ..., signer_key: _Optional[str] = ..., blanked: _Optional[_Iterable[_Union[BlankedEntry, _Mapping]]] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., redaction: _Optional[_Union[AttestedEntry, _Mapping]] = ..., elided: _Optional[bool] = ...) -> None: ...

class AppendRequest(_message.Message):
    __slots__ = ("operations", "embedding_model", "return_entries")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    RETURN_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    embedding_model: EmbeddingModel
    return_entries: bool
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., embedding_model: _Optional[_Union[EmbeddingModel, _Mapping]] = ..., return_entries: _Optional[bool] = ...) -> None: ...

class OpResult(_message.Message):
    __slots__ = ("op_id", "memory_id", "seq", "version", "replayed", "conflict_id", "deduplicated")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    CONFLICT_ID_FIELD_NUMBER: _ClassVar[int]
    DEDUPLICATED_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    memory_id: str
    seq: int
    version: int
    replayed: bool
    conflict_id: int
    deduplicated: bool
    def __init__(self, op_id: _Optional[str] = ..., memory_id: _Optional[str] = ..., seq: _Optional[int] = ..., version: _Optional[int] = ..., replayed: _Optional[bool] = ..., conflict_id: _Optional[int] = ..., deduplicated: _Optional[bool] = ...) -> None: ...

class AppendResponse(_message.Message):
    __slots__ = ("results", "head_seq", "entries")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[OpResult]
    head_seq: int
    entries: _containers.RepeatedCompositeFieldContainer[ChangelogEntry]
    def __init__(self, results: _Optional[_Iterable[_Union[OpResult, _Mapping]]] = ..., head_seq: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[ChangelogEntry, _Mapping]]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("memory",)
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ...) -> None: ...

class SearchFilter(_message.Message):
    __slots__ = ("scopes", "types", "tags", "layers", "authors", "created_after_ms", "created_before_ms", "include_archived")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TYPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    AUTHORS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_BEFORE_MS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    types: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    layers: _containers.RepeatedScalarFieldContainer[Layer]
    authors: _containers.RepeatedScalarFieldContainer[str]
    created_after_ms: int
    created_before_ms: int
    include_archived: bool
    def __init__(self, scopes: _Optional[_Iterable[str]] = ..., types: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., layers: _Optional[_Iterable[_Union[Layer, str]]] = ..., authors: _Optional[_Iterable[str]] = ..., created_after_ms: _Optional[int] = ..., created_before_ms: _Optional[int] = ..., include_archived: _Optional[bool] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ("query", "query_vector", "embedding_model", "limit", "filter", "mode", "fusion_only", "neighbours")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUSION_ONLY_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_FIELD_NUMBER: _ClassVar[int]
    query: str
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    embedding_model: EmbeddingModel
    limit: int
    filter: SearchFilter
    mode: SearchMode
    fusion_only: bool
    neighbours: int
    def __init__(self, query: _Optional[str] = ..., query_vector: _Optional[_Iterable[float]] = ..., embedding_model: _Optional[_Union[EmbeddingModel, _Mapping]] = ..., limit: _Optional[int] = ..., filter: _Optional[_Union[SearchFilter, _Mapping]] = ..., mode: _Optional[_Union[SearchMode, str]] = ..., fusion_only: _Optional[bool] = ..., neighbours: _Optional[int] = ...) -> None: ...

class ScoreParts(_message.Message):
    __slots__ = ("vector_rank", "vector_distance", "keyword_rank", "bm25", "rrf", "final", "keyword_coverage", "vector_score", "keyword_score", "fused", "relevance", "activation", "confidence", "relevance_part", "activation_part", "confidence_part", "importance_part")
    VECTOR_RANK_FIELD_NUMBER: _ClassVar[int]
    VECTOR_DISTANCE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_RANK_FIELD_NUMBER: _ClassVar[int]
    BM25_FIELD_NUMBER: _ClassVar[int]
    RRF_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_COVERAGE_FIELD_NUMBER: _ClassVar[int]
    VECTOR_SCORE_FIELD_NUMBER: _ClassVar[int]
    KEYWORD_SCORE_FIELD_NUMBER: _ClassVar[int]
    FUSED_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_PART_FIELD_NUMBER: _ClassVar[int]
    ACTIVATION_PART_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_PART_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_PART_FIELD_NUMBER: _ClassVar[int]
    vector_rank: int
    vector_distance: float
    keyword_rank: int
    bm25: float
    rrf: float
    final: float
    keyword_coverage: float
    vector_score: float
    keyword_score: float
    fused: float
    relevance: float
    activation: float
    confidence: float
    relevance_part: float
    activation_part: float
    confidence_part: float
    importance_part: float
    def __init__(self, vector_rank: _Optional[int] = ..., vector_distance: _Optional[float] = ..., keyword_rank: _Optional[int] = ..., bm25: _Optional[float] = ..., rrf: _Optional[float] = ..., final: _Optional[float] = ..., keyword_coverage: _Optional[float] = ..., vector_score: _Optional[float] = ..., keyword_score: _Optional[float] = ..., fused: _Optional[float] = ..., relevance: _Optional[float] = ..., activation: _Optional[float] = ..., confidence: _Optional[float] = ..., relevance_part: _Optional[float] = ..., activation_part: _Optional[float] = ..., confidence_part: _Optional[float] = ..., importance_part: _Optional[float] = ...) -> None: ...

class SearchResult(_message.Message):
    __slots__ = ("memory", "score", "neighbours")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    NEIGHBOURS_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    score: ScoreParts
    neighbours: _containers.RepeatedCompositeFieldContainer[GraphStep]
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., score: _Optional[_Union[ScoreParts, _Mapping]] = ..., neighbours: _Optional[_Iterable[_Union[GraphStep, _Mapping]]] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SearchResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SearchResult, _Mapping]]] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("since_seq", "max_entries", "checkpoint_every", "packed_embeddings")
    SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_FIELD_NUMBER: _ClassVar[int]
    PACKED_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    since_seq: int
    max_entries: int
    checkpoint_every: int
    packed_embeddings: bool
    def __init__(self, since_seq: _Optional[int] = ..., max_entries: _Optional[int] = ..., checkpoint_every: _Optional[int] = ..., packed_embeddings: _Optional[bool] = ...) -> None: ...

class ChangelogBatch(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[ChangelogEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[ChangelogEntry, _Mapping]]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("since_seq", "packed_embeddings", "elide_own_entries")
    SINCE_SEQ_FIELD_NUMBER: _ClassVar[int]
    PACKED_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    ELIDE_OWN_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    since_seq: int
    packed_embeddings: bool
    elide_own_entries: bool
    def __init__(self, since_seq: _Optional[int] = ..., packed_embeddings: _Optional[bool] = ..., elide_own_entries: _Optional[bool] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("size", "consistency_from", "prove")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_FROM_FIELD_NUMBER: _ClassVar[int]
    PROVE_FIELD_NUMBER: _ClassVar[int]
    size: int
    consistency_from: int
    prove: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, size: _Optional[int] = ..., consistency_from: _Optional[int] = ..., prove: _Optional[_Iterable[int]] = ...) -> None: ...

class CheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "consistency_proof", "server_certificate", "proven")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CONSISTENCY_PROOF_FIELD_NUMBER: _ClassVar[int]
    SERVER_CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    PROVEN_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    consistency_proof: _containers.RepeatedScalarFieldContainer[bytes]
    server_certificate: bytes
    proven: _containers.RepeatedCompositeFieldContainer[AttestedEntry]
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., consistency_proof: _Optional[_Iterable[bytes]] = ..., server_certificate: _Optional[bytes] = ..., proven: _Optional[_Iterable[_Union[AttestedEntry, _Mapping]]] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("seq", "outbox", "sessions")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    outbox: OutboxReport
    sessions: int
    def __init__(self, seq: _Optional[int] = ..., outbox: _Optional[_Union[OutboxReport, _Mapping]] = ..., sessions: _Optional[int] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("acked_seq", "head_seq")
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    acked_seq: int
    head_seq: int
    def __init__(self, acked_seq: _Optional[int] = ..., head_seq: _Optional[int] = ...) -> None: ...

class ConflictRevision(_message.Message):
    __slots__ = ("revision", "memory_id", "agent_id", "authority", "seq", "base_version", "version", "visible", "content", "type", "tags", "importance", "confidence", "protected", "archived", "trust", "quote", "content_agent", "content_authority")
    REVISION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    BASE_VERSION_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    TRUST_FIELD_NUMBER: _ClassVar[int]
    QUOTE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_AGENT_FIELD_NUMBER: _ClassVar[int]
    CONTENT_AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    revision: int
    memory_id: str
    agent_id: str
    authority: int
    seq: int
    base_version: int
    version: int
    visible: bool
    content: str
    type: str
    tags: _containers.RepeatedScalarFieldContainer[str]
    importance: float
    confidence: float
    protected: bool
    archived: bool
    trust: str
    quote: str
    content_agent: str
    content_authority: int
    def __init__(self, revision: _Optional[int] = ..., memory_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., authority: _Optional[int] = ..., seq: _Optional[int] = ..., base_version: _Optional[int] = ..., version: _Optional[int] = ..., visible: _Optional[bool] = ..., content: _Optional[str] = ..., type: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., importance: _Optional[float] = ..., confidence: _Optional[float] = ..., protected: _Optional[bool] = ..., archived: _Optional[bool] = ..., trust: _Optional[str] = ..., quote: _Optional[str] = ..., content_agent: _Optional[str] = ..., content_authority: _Optional[int] = ...) -> None: ...

class Conflict(_message.Message):
    __slots__ = ("id", "kind", "memory_id", "other_memory_id", "similarity", "scope", "opened_by", "opened_at_ms", "visible_revision", "memory_version", "agents", "revisions", "resolved", "resolved_by", "resolved_at_ms", "resolved_seq", "resolution", "kept_revision", "note", "base")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OTHER_MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    OPENED_BY_FIELD_NUMBER: _ClassVar[int]
    OPENED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    VISIBLE_REVISION_FIELD_NUMBER: _ClassVar[int]
    MEMORY_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    REVISIONS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_BY_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_SEQ_FIELD_NUMBER: _ClassVar[int]
    RESOLUTION_FIELD_NUMBER: _ClassVar[int]
    KEPT_REVISION_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    id: int
    kind: str
    memory_id: str
    other_memory_id: str
    similarity: float
    scope: str
    opened_by: str
    opened_at_ms: int
    visible_revision: int
    memory_version: int
    agents: _containers.RepeatedScalarFieldContainer[str]
    revisions: _containers.RepeatedCompositeFieldContainer[ConflictRevision]
    resolved: bool
    resolved_by: str
    resolved_at_ms: int
    resolved_seq: int
    resolution: str
    kept_revision: int
    note: str
    base: ConflictRevision
    def __init__(self, id: _Optional[int] = ..., kind: _Optional[str] = ..., memory_id: _Optional[str] = ..., other_memory_id: _Optional[str] = ..., similarity: _Optional[float] = ..., scope: _Optional[str] = ..., opened_by: _Optional[str] = ..., opened_at_ms: _Optional[int] = ..., visible_revision: _Optional[int] = ..., memory_version: _Optional[int] = ..., agents: _Optional[_Iterable[str]] = ..., revisions: _Optional[_Iterable[_Union[ConflictRevision, _Mapping]]] = ..., resolved: _Optional[bool] = ..., resolved_by: _Optional[str] = ..., resolved_at_ms: _Optional[int] = ..., resolved_seq: _Optional[int] = ..., resolution: _Optional[str] = ..., kept_revision: _Optional[int] = ..., note: _Optional[str] = ..., base: _Optional[_Union[ConflictRevision, _Mapping]] = ...) -> None: ...

class ListConflictsRequest(_message.Message):
    __slots__ = ("include_resolved", "memory_id", "limit")
    INCLUDE_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    include_resolved: bool
    memory_id: str
    limit: int
    def __init__(self, include_resolved: _Optional[bool] = ..., memory_id: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListConflictsResponse(_message.Message):
    __slots__ = ("conflicts",)
    CONFLICTS_FIELD_NUMBER: _ClassVar[int]
    conflicts: _containers.RepeatedCompositeFieldContainer[Conflict]
    def __init__(self, conflicts: _Optional[_Iterable[_Union[Conflict, _Mapping]]] = ...) -> None: ...

class GetConflictRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class GetConflictResponse(_message.Message):
    __slots__ = ("conflict",)
    CONFLICT_FIELD_NUMBER: _ClassVar[int]
    conflict: Conflict
    def __init__(self, conflict: _Optional[_Union[Conflict, _Mapping]] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentOffset(_message.Message):
    __slots__ = ("agent_id", "acked_seq", "lag", "acked_at_ms")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    acked_seq: int
    lag: int
    acked_at_ms: int
    def __init__(self, agent_id: _Optional[str] = ..., acked_seq: _Optional[int] = ..., lag: _Optional[int] = ..., acked_at_ms: _Optional[int] = ...) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("head_seq", "live_memories", "archived_memories", "by_layer", "by_scope", "agents", "embedding_model", "data_bytes", "server_version", "server_time_ms", "read_store")
    class ByLayerEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ByScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIVE_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    BY_LAYER_FIELD_NUMBER: _ClassVar[int]
    BY_SCOPE_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    DATA_BYTES_FIELD_NUMBER: _ClassVar[int]
    SERVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    READ_STORE_FIELD_NUMBER: _ClassVar[int]
    head_seq: int
    live_memories: int
    archived_memories: int
    by_layer: _containers.ScalarMap[str, int]
    by_scope: _containers.ScalarMap[str, int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentOffset]
    embedding_model: EmbeddingModel
    data_bytes: int
    server_version: str
    server_time_ms: int
    read_store: ReadStoreStatus
    def __init__(self, head_seq: _Optional[int] = ..., live_memories: _Optional[int] = ..., archived_memories: _Optional[int] = ..., by_layer: _Optional[_Mapping[str, int]] = ..., by_scope: _Optional[_Mapping[str, int]] = ..., agents: _Optional[_Iterable[_Union[AgentOffset, _Mapping]]] = ..., embedding_model: _Optional[_Union[EmbeddingModel, _Mapping]] = ..., data_bytes: _Optional[int] = ..., server_version: _Optional[str] = ..., server_time_ms: _Optional[int] = ..., read_store: _Optional[_Union[ReadStoreStatus, _Mapping]] = ...) -> None: ...

class ReadStoreStatus(_message.Message):
    __slots__ = ("source", "reachable", "error", "replayed_seq", "primary_seq", "lag_entries", "lag_ms")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    REACHABLE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_SEQ_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAG_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    LAG_MS_FIELD_NUMBER: _ClassVar[int]
    source: str
    reachable: bool
    error: str
    replayed_seq: int
    primary_seq: int
    lag_entries: int
    lag_ms: int
    def __init__(self, source: _Optional[str] = ..., reachable: _Optional[bool] = ..., error: _Optional[str] = ..., replayed_seq: _Optional[int] = ..., primary_seq: _Optional[int] = ..., lag_entries: _Optional[int] = ..., lag_ms: _Optional[int] = ...) -> None: ...

class OutboxReport(_message.Message):
    __slots__ = ("pending", "failed", "oldest_pending_ms")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    OLDEST_PENDING_MS_FIELD_NUMBER: _ClassVar[int]
    pending: int
    failed: int
    oldest_pending_ms: int
    def __init__(self, pending: _Optional[int] = ..., failed: _Optional[int] = ..., oldest_pending_ms: _Optional[int] = ...) -> None: ...

class ListAgentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AgentStatus(_message.Message):
    __slots__ = ("agent_id", "authority", "scopes", "hidden_scopes", "admin", "acked_seq", "lag", "acked_at_ms", "last_seen_ms", "subscriptions", "outbox", "outbox_reported_at_ms", "sessions")
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AUTHORITY_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_SCOPES_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    ACKED_SEQ_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_MS_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIPTIONS_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_REPORTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    authority: int
    scopes: _containers.RepeatedScalarFieldContainer[str]
    hidden_scopes: int
    admin: bool
    acked_seq: int
    lag: int
    acked_at_ms: int
    last_seen_ms: int
    subscriptions: int
    outbox: OutboxReport
    outbox_reported_at_ms: int
    sessions: int
    def __init__(self, agent_id: _Optional[str] = ..., authority: _Optional[int] = ..., scopes: _Optional[_Iterable[str]] = ..., hidden_scopes: _Optional[int] = ..., admin: _Optional[bool] = ..., acked_seq: _Optional[int] = ..., lag: _Optional[int] = ..., acked_at_ms: _Optional[int] = ..., last_seen_ms: _Optional[int] = ..., subscriptions: _Optional[int] = ..., outbox: _Optional[_Union[OutboxReport, _Mapping]] = ..., outbox_reported_at_ms: _Optional[int] = ..., sessions: _Optional[int] = ...) -> None: ...

class ListAgentsResponse(_message.Message):
    __slots__ = ("agents", "head_seq", "caller", "hidden_agents")
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_AGENTS_FIELD_NUMBER: _ClassVar[int]
    agents: _containers.RepeatedCompositeFieldContainer[AgentStatus]
    head_seq: int
    caller: AgentStatus
    hidden_agents: int
    def __init__(self, agents: _Optional[_Iterable[_Union[AgentStatus, _Mapping]]] = ..., head_seq: _Optional[int] = ..., caller: _Optional[_Union[AgentStatus, _Mapping]] = ..., hidden_agents: _Optional[int] = ...) -> None: ...

class ListChangelogRequest(_message.Message):
    __slots__ = ("before_seq", "after_seq", "limit", "agent_id", "scope", "op", "memory_id")
    BEFORE_SEQ_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    before_seq: int
    after_seq: int
    limit: int
    agent_id: str
    scope: str
    op: str
    memory_id: str
    def __init__(self, before_seq: _Optional[int] = ..., after_seq: _Optional[int] = ..., limit: _Optional[int] = ..., agent_id: _Optional[str] = ..., scope: _Optional[str] = ..., op: _Optional[str] = ..., memory_id: _Optional[str] = ...) -> None: ...

class ChangelogRow(_message.Message):
    __slots__ = ("entry", "scope")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    entry: ChangelogEntry
    scope: str
    def __init__(self, entry: _Optional[_Union[ChangelogEntry, _Mapping]] = ..., scope: _Optional[str] = ...) -> None: ...

class ListChangelogResponse(_message.Message):
    __slots__ = ("rows", "head_seq")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[ChangelogRow]
    head_seq: int
    def __init__(self, rows: _Optional[_Iterable[_Union[ChangelogRow, _Mapping]]] = ..., head_seq: _Optional[int] = ...) -> None: ...

class ListMemoriesRequest(_message.Message):
    __slots__ = ("scopes", "type", "author_agent", "layer", "id_prefix", "include_archived", "limit", "offset")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    AUTHOR_AGENT_FIELD_NUMBER: _ClassVar[int]
    LAYER_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    type: str
    author_agent: str
    layer: Layer
    id_prefix: str
    include_archived: bool
    limit: int
    offset: int
    def __init__(self, scopes: _Optional[_Iterable[str]] = ..., type: _Optional[str] = ..., author_agent: _Optional[str] = ..., layer: _Optional[_Union[Layer, str]] = ..., id_prefix: _Optional[str] = ..., include_archived: _Optional[bool] = ..., limit: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class ListMemoriesResponse(_message.Message):
    __slots__ = ("memories", "total")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    total: int
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., total: _Optional[int] = ...) -> None: ...

class GetMemoryHistoryRequest(_message.Message):
    __slots__ = ("memory_id",)
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    def __init__(self, memory_id: _Optional[str] = ...) -> None: ...

class MemoryVersion(_message.Message):
    __slots__ = ("entry", "shown")
    ENTRY_FIELD_NUMBER: _ClassVar[int]
    SHOWN_FIELD_NUMBER: _ClassVar[int]
    entry: ChangelogEntry
    shown: ConflictRevision
    def __init__(self, entry: _Optional[_Union[ChangelogEntry, _Mapping]] = ..., shown: _Optional[_Union[ConflictRevision, _Mapping]] = ...) -> None: ...

class GetMemoryHistoryResponse(_message.Message):
    __slots__ = ("memory", "versions")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    VERSIONS_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    versions: _containers.RepeatedCompositeFieldContainer[MemoryVersion]
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., versions: _Optional[_Iterable[_Union[MemoryVersion, _Mapping]]] = ...) -> None: ...

class GetActivityRequest(_message.Message):
    __slots__ = ("minutes",)
    MINUTES_FIELD_NUMBER: _ClassVar[int]
    minutes: int
    def __init__(self, minutes: _Optional[int] = ...) -> None: ...

class ActivityBucket(_message.Message):
    __slots__ = ("start_ms", "writes", "searches")
    class WritesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    START_MS_FIELD_NUMBER: _ClassVar[int]
    WRITES_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    start_ms: int
    writes: _containers.ScalarMap[str, int]
    searches: int
    def __init__(self, start_ms: _Optional[int] = ..., writes: _Optional[_Mapping[str, int]] = ..., searches: _Optional[int] = ...) -> None: ...

class GetActivityResponse(_message.Message):
    __slots__ = ("buckets", "head_seq", "live_memories", "archived_memories", "by_layer", "by_scope", "counting_since_ms")
    class ByLayerEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ByScopeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    LIVE_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_MEMORIES_FIELD_NUMBER: _ClassVar[int]
    BY_LAYER_FIELD_NUMBER: _ClassVar[int]
    BY_SCOPE_FIELD_NUMBER: _ClassVar[int]
    COUNTING_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedCompositeFieldContainer[ActivityBucket]
    head_seq: int
    live_memories: int
    archived_memories: int
    by_layer: _containers.ScalarMap[str, int]
    by_scope: _containers.ScalarMap[str, int]
    counting_since_ms: int
    def __init__(self, buckets: _Optional[_Iterable[_Union[ActivityBucket, _Mapping]]] = ..., head_seq: _Optional[int] = ..., live_memories: _Optional[int] = ..., archived_memories: _Optional[int] = ..., by_layer: _Optional[_Mapping[str, int]] = ..., by_scope: _Optional[_Mapping[str, int]] = ..., counting_since_ms: _Optional[int] = ...) -> None: ...

class VerifyChainRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VerifyChainResponse(_message.Message):
    __slots__ = ("ok", "entries", "head_seq", "head_hash", "first_bad_seq", "problem", "signed", "redacted", "checked_at_ms")
    OK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    FIRST_BAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    SIGNED_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    CHECKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    entries: int
    head_seq: int
    head_hash: str
    first_bad_seq: int
    problem: str
    signed: int
    redacted: int
    checked_at_ms: int
    def __init__(self, ok: _Optional[bool] = ..., entries: _Optional[int] = ..., head_seq: _Optional[int] = ..., head_hash: _Optional[str] = ..., first_bad_seq: _Optional[int] = ..., problem: _Optional[str] = ..., signed: _Optional[int] = ..., redacted: _Optional[int] = ..., checked_at_ms: _Optional[int] = ...) -> None: ...

class RecordUseRequest(_message.Message):
    __slots__ = ("memory_ids", "kind")
    MEMORY_IDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    memory_ids: _containers.RepeatedScalarFieldContainer[str]
    kind: UseKind
    def __init__(self, memory_ids: _Optional[_Iterable[str]] = ..., kind: _Optional[_Union[UseKind, str]] = ...) -> None: ...

class RecordUseResponse(_message.Message):
    __slots__ = ("counted",)
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    counted: int
    def __init__(self, counted: _Optional[int] = ...) -> None: ...

class DecaySweepRequest(_message.Message):
    __slots__ = ("dry_run", "now_ms")
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    now_ms: int
    def __init__(self, dry_run: _Optional[bool] = ..., now_ms: _Optional[int] = ...) -> None: ...

class SweepDecision(_message.Message):
    __slots__ = ("memory_id", "op", "reason")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    op: str
    reason: str
    def __init__(self, memory_id: _Optional[str] = ..., op: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DecaySweepResponse(_message.Message):
    __slots__ = ("as_of_ms", "dry_run", "examined", "decayed", "archived", "entries_written", "head_seq", "decisions")
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXAMINED_FIELD_NUMBER: _ClassVar[int]
    DECAYED_FIELD_NUMBER: _ClassVar[int]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    as_of_ms: int
    dry_run: bool
    examined: int
    decayed: int
    archived: int
    entries_written: int
    head_seq: int
    decisions: _containers.RepeatedCompositeFieldContainer[SweepDecision]
    def __init__(self, as_of_ms: _Optional[int] = ..., dry_run: _Optional[bool] = ..., examined: _Optional[int] = ..., decayed: _Optional[int] = ..., archived: _Optional[int] = ..., entries_written: _Optional[int] = ..., head_seq: _Optional[int] = ..., decisions: _Optional[_Iterable[_Union[SweepDecision, _Mapping]]] = ...) -> None: ...

class TraverseRequest(_message.Message):
    __slots__ = ("memory_id", "edge_types", "direction", "depth", "limit", "include_archived")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPES_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    edge_types: _containers.RepeatedScalarFieldContainer[str]
    direction: Direction
    depth: int
    limit: int
    include_archived: bool
    def __init__(self, memory_id: _Optional[str] = ..., edge_types: _Optional[_Iterable[str]] = ..., direction: _Optional[_Union[Direction, str]] = ..., depth: _Optional[int] = ..., limit: _Optional[int] = ..., include_archived: _Optional[bool] = ...) -> None: ...

class CausalChainRequest(_message.Message):
    __slots__ = ("memory_id", "direction", "depth", "limit")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    direction: Direction
    depth: int
    limit: int
    def __init__(self, memory_id: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ..., depth: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class GraphStep(_message.Message):
    __slots__ = ("memory", "depth", "via_id", "relation", "weight", "reason", "direction")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    VIA_ID_FIELD_NUMBER: _ClassVar[int]
    RELATION_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    depth: int
    via_id: str
    relation: str
    weight: float
    reason: str
    direction: Direction
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., depth: _Optional[int] = ..., via_id: _Optional[str] = ..., relation: _Optional[str] = ..., weight: _Optional[float] = ..., reason: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ...) -> None: ...

class TraverseResponse(_message.Message):
    __slots__ = ("start", "steps", "truncated")
    START_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    start: Memory
    steps: _containers.RepeatedCompositeFieldContainer[GraphStep]
    truncated: bool
    def __init__(self, start: _Optional[_Union[Memory, _Mapping]] = ..., steps: _Optional[_Iterable[_Union[GraphStep, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class TimelineRequest(_message.Message):
    __slots__ = ("memory_id", "limit", "start_ms", "end_ms", "scopes", "tags", "include_archived")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    START_MS_FIELD_NUMBER: _ClassVar[int]
    END_MS_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    limit: int
    start_ms: int
    end_ms: int
    scopes: _containers.RepeatedScalarFieldContainer[str]
    tags: _containers.RepeatedScalarFieldContainer[str]
    include_archived: bool
    def __init__(self, memory_id: _Optional[str] = ..., limit: _Optional[int] = ..., start_ms: _Optional[int] = ..., end_ms: _Optional[int] = ..., scopes: _Optional[_Iterable[str]] = ..., tags: _Optional[_Iterable[str]] = ..., include_archived: _Optional[bool] = ...) -> None: ...

class TimelineResponse(_message.Message):
    __slots__ = ("memories", "anchor_index")
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_INDEX_FIELD_NUMBER: _ClassVar[int]
    memories: _containers.RepeatedCompositeFieldContainer[Memory]
    anchor_index: int
    def __init__(self, memories: _Optional[_Iterable[_Union[Memory, _Mapping]]] = ..., anchor_index: _Optional[int] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ("scopes", "limit", "novel_since_ms")
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    NOVEL_SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    scopes: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    novel_since_ms: int
    def __init__(self, scopes: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ..., novel_since_ms: _Optional[int] = ...) -> None: ...

class TopicCluster(_message.Message):
    __slots__ = ("id", "scope", "label", "size", "representative_id", "cohesion", "newest_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    REPRESENTATIVE_ID_FIELD_NUMBER: _ClassVar[int]
    COHESION_FIELD_NUMBER: _ClassVar[int]
    NEWEST_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    scope: str
    label: str
    size: int
    representative_id: str
    cohesion: float
    newest_ms: int
    def __init__(self, id: _Optional[str] = ..., scope: _Optional[str] = ..., label: _Optional[str] = ..., size: _Optional[int] = ..., representative_id: _Optional[str] = ..., cohesion: _Optional[float] = ..., newest_ms: _Optional[int] = ...) -> None: ...

class Novelty(_message.Message):
    __slots__ = ("memory_id", "topic_id", "surprise", "created_at_ms")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_ID_FIELD_NUMBER: _ClassVar[int]
    SURPRISE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    topic_id: str
    surprise: float
    created_at_ms: int
    def __init__(self, memory_id: _Optional[str] = ..., topic_id: _Optional[str] = ..., surprise: _Optional[float] = ..., created_at_ms: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics", "novel")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NOVEL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicCluster]
    novel: _containers.RepeatedCompositeFieldContainer[Novelty]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicCluster, _Mapping]]] = ..., novel: _Optional[_Iterable[_Union[Novelty, _Mapping]]] = ...) -> None: ...

class ConsolidateRequest(_message.Message):
    __slots__ = ("dry_run", "now_ms", "links_only")
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    LINKS_ONLY_FIELD_NUMBER: _ClassVar[int]
    dry_run: bool
    now_ms: int
    links_only: bool
    def __init__(self, dry_run: _Optional[bool] = ..., now_ms: _Optional[int] = ..., links_only: _Optional[bool] = ...) -> None: ...

class ConsolidationDecision(_message.Message):
    __slots__ = ("memory_id", "op", "reason")
    MEMORY_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    memory_id: str
    op: str
    reason: str
    def __init__(self, memory_id: _Optional[str] = ..., op: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ConsolidateResponse(_message.Message):
    __slots__ = ("as_of_ms", "dry_run", "examined", "linked", "merged", "pruned", "promoted", "entries_written", "head_seq", "decisions")
    AS_OF_MS_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    EXAMINED_FIELD_NUMBER: _ClassVar[int]
    LINKED_FIELD_NUMBER: _ClassVar[int]
    MERGED_FIELD_NUMBER: _ClassVar[int]
    PRUNED_FIELD_NUMBER: _ClassVar[int]
    PROMOTED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    as_of_ms: int
    dry_run: bool
    examined: int
    linked: int
    merged: int
    pruned: int
    promoted: int
    entries_written: int
    head_seq: int
    decisions: _containers.RepeatedCompositeFieldContainer[ConsolidationDecision]
    def __init__(self, as_of_ms: _Optional[int] = ..., dry_run: _Optional[bool] = ..., examined: _Optional[int] = ..., linked: _Optional[int] = ..., merged: _Optional[int] = ..., pruned: _Optional[int] = ..., promoted: _Optional[int] = ..., entries_written: _Optional[int] = ..., head_seq: _Optional[int] = ..., decisions: _Optional[_Iterable[_Union[ConsolidationDecision, _Mapping]]] = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ("path", "line_start", "line_end", "symbol", "commit", "url", "sha256")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_START_FIELD_NUMBER: _ClassVar[int]
    LINE_END_FIELD_NUMBER: _ClassVar[int]
    SYMBOL_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    path: str
    line_start: int
    line_end: int
    symbol: str
    commit: str
    url: str
    sha256: str
    def __init__(self, path: _Optional[str] = ..., line_start: _Optional[int] = ..., line_end: _Optional[int] = ..., symbol: _Optional[str] = ..., commit: _Optional[str] = ..., url: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class Verification(_message.Message):
    __slots__ = ("status", "paths", "checked_at_ms", "checked_by", "sources_at_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    CHECKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CHECKED_BY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    status: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    checked_at_ms: int
    checked_by: str
    sources_at_ms: int
    def __init__(self, status: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ..., checked_at_ms: _Optional[int] = ..., checked_by: _Optional[str] = ..., sources_at_ms: _Optional[int] = ...) -> None: ...

class VerifyOp(_message.Message):
    __slots__ = ("status", "paths")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PATHS_FIELD_NUMBER: _ClassVar[int]
    status: str
    paths: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, status: _Optional[str] = ..., paths: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphSearchRequest(_message.Message):
    __slots__ = ("query", "query_vector", "embedding_model", "scopes", "seeds", "alpha", "limit", "edge_types")
    QUERY_FIELD_NUMBER: _ClassVar[int]
    QUERY_VECTOR_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_MODEL_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    SEEDS_FIELD_NUMBER: _ClassVar[int]
    ALPHA_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPES_FIELD_NUMBER: _ClassVar[int]
    query: str
    query_vector: _containers.RepeatedScalarFieldContainer[float]
    embedding_model: EmbeddingModel
    scopes: _containers.RepeatedScalarFieldContainer[str]
    seeds: int
    alpha: float
    limit: int
    edge_types: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, query: _Optional[str] = ..., query_vector: _Optional[_Iterable[float]] = ..., embedding_model: _Optional[_Union[EmbeddingModel, _Mapping]] = ..., scopes: _Optional[_Iterable[str]] = ..., seeds: _Optional[int] = ..., alpha: _Optional[float] = ..., limit: _Optional[int] = ..., edge_types: _Optional[_Iterable[str]] = ...) -> None: ...

class GraphSearchResult(_message.Message):
    __slots__ = ("memory", "score", "path", "relations", "seed")
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RELATIONS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    memory: Memory
    score: float
    path: _containers.RepeatedScalarFieldContainer[str]
    relations: _containers.RepeatedScalarFieldContainer[str]
    seed: bool
    def __init__(self, memory: _Optional[_Union[Memory, _Mapping]] = ..., score: _Optional[float] = ..., path: _Optional[_Iterable[str]] = ..., relations: _Optional[_Iterable[str]] = ..., seed: _Optional[bool] = ...) -> None: ...

class GraphSearchResponse(_message.Message):
    __slots__ = ("results", "iterations")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[GraphSearchResult]
    iterations: int
    def __init__(self, results: _Optional[_Iterable[_Union[GraphSearchResult, _Mapping]]] = ..., iterations: _Optional[int] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("size", "offset")
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    size: int
    offset: int
    def __init__(self, size: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class SnapshotSection(_message.Message):
    __slots__ = ("scope_hash", "sha256", "scope", "length", "memories")
    SCOPE_HASH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    MEMORIES_FIELD_NUMBER: _ClassVar[int]
    scope_hash: str
    sha256: str
    scope: str
    length: int
    memories: int
    def __init__(self, scope_hash: _Optional[str] = ..., sha256: _Optional[str] = ..., scope: _Optional[str] = ..., length: _Optional[int] = ..., memories: _Optional[int] = ...) -> None: ...

class SnapshotManifest(_message.Message):
    __slots__ = ("log_id", "size", "root_hash", "last_hash", "last_entry_path", "frontier", "made_at_ms", "sections", "key", "signature")
    LOG_ID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ROOT_HASH_FIELD_NUMBER: _ClassVar[int]
    LAST_HASH_FIELD_NUMBER: _ClassVar[int]
    LAST_ENTRY_PATH_FIELD_NUMBER: _ClassVar[int]
    FRONTIER_FIELD_NUMBER: _ClassVar[int]
    MADE_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SECTIONS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    log_id: str
    size: int
    root_hash: str
    last_hash: str
    last_entry_path: _containers.RepeatedScalarFieldContainer[bytes]
    frontier: _containers.RepeatedScalarFieldContainer[bytes]
    made_at_ms: int
    sections: _containers.RepeatedCompositeFieldContainer[SnapshotSection]
    key: str
    signature: bytes
    def __init__(self, log_id: _Optional[str] = ..., size: _Optional[int] = ..., root_hash: _Optional[str] = ..., last_hash: _Optional[str] = ..., last_entry_path: _Optional[_Iterable[bytes]] = ..., frontier: _Optional[_Iterable[bytes]] = ..., made_at_ms: _Optional[int] = ..., sections: _Optional[_Iterable[_Union[SnapshotSection, _Mapping]]] = ..., key: _Optional[str] = ..., signature: _Optional[bytes] = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ("manifest", "offset", "data", "replica")
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    REPLICA_FIELD_NUMBER: _ClassVar[int]
    manifest: SnapshotManifest
    offset: int
    data: bytes
    replica: SnapshotReplica
    def __init__(self, manifest: _Optional[_Union[SnapshotManifest, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., replica: _Optional[_Union[SnapshotReplica, _Mapping]] = ...) -> None: ...

class SnapshotReplica(_message.Message):
    __slots__ = ("sha256", "length", "signature")
    SHA256_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    length: int
    signature: bytes
    def __init__(self, sha256: _Optional[str] = ..., length: _Optional[int] = ..., signature: _Optional[bytes] = ...) -> None: ...
