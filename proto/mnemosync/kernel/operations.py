"""Operations and their validation: the stateless half of the intake gate, run by both ends.

`validate` checks one operation's fields against the limits and fills in
defaults, producing the payload that goes into the changelog: first of all the
secret scan (`mnemosync.kernel.secrets_scan`) over every text field, then sizes,
formats and the trust-label quote rule (`principle-needs-quote`). The server
runs it on every request; the agent client runs it before sending or queueing
a write, so what it queues offline is what the server will accept. The stateful half (does the memory exist,
governance, exact duplicates, semantic conflicts) is the server's
`mnemosync.server.admission`, inside the write transaction.

Optional fields (trust, quote, event time, a resolution's choice) appear in the payload
only when set, so a payload survives the round trip through the wire's
`Operation` unchanged and hashes the same on every replica.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from mnemosync.kernel import event_time, links, origin, procedures, secrets_scan, source_refs
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.memory import DEFAULT_LAYER, LAYERS
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.one_line import CONTROLS
from mnemosync.kernel.text_fields import check_text

TRUST_LABELS = ("principle", "pattern", "inference")
"""Trust labels from the seeds: taught by a person > observed > the agent's own guess."""

DEFAULT_TYPE = "fact"
DEFAULT_IMPORTANCE = 0.5
DEFAULT_CONFIDENCE = 0.9
MAX_QUOTE_BYTES = 4_096
MAX_NOTE_BYTES = 1_024
SALT_BYTES = 16
SIGNATURE_BYTES = 64

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_SCOPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/@-]{0,127}$")
_TAG = re.compile(r"^[^\s,]+$")


@dataclass(frozen=True)
class OpRequest:
    """One operation as received, before validation."""

    op_id: str
    memory_id: str
    op: str
    base_version: int = 0
    fields: dict[str, Any] = field(default_factory=dict)
    embedding: list[float] | bytes | None = None
    """The vector as floats, or packed as little-endian float32 bytes (the wire's embedding_f32)."""
    salt: bytes = b""
    signature: bytes = b""


@dataclass(frozen=True)
class ValidOp:
    """A validated operation: the payload to log and the embedding bytes.

    `salt` and `signature` come from the agent's OperationSignature (empty when unsigned).
    """

    op_id: str
    memory_id: str
    op: str
    base_version: int
    payload: dict[str, Any]
    embedding: bytes | None
    salt: bytes = b""
    signature: bytes = b""


def _uuid(value: str, name: str) -> str:
    if isinstance(value, str) and secrets_scan.CANONICAL_UUID.fullmatch(value):  # already as str(UUID) writes it
        return value
    try:
        return str(uuid.UUID(value))
    except (ValueError, AttributeError, TypeError):
        raise InvalidArgument(f"{name} must be a UUID, got {value[:40]!r}") from None


def _unit(value: Any, name: str) -> float:
    if not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise InvalidArgument(f"{name} must be a number from 0 to 1, got {value!r}")
    return float(value)


def require_quote(trust: str, quote: str, name: str = "quote") -> None:
    """A principle must carry its quote.

    Raises:
        InvalidArgument: rule principle-needs-quote.
    """
    if trust == "principle" and not quote.strip():
        raise InvalidArgument(
            f"principle-needs-quote: a memory labelled trust='principle' must carry the exact words it "
            f"comes from in {name}; add the quote, or label it 'pattern' (observed) or 'inference'"
        )


def validate_name(value: str, name: str) -> str:
    """A type or relation: lower_snake_case, 1 to 32 characters."""
    if not _NAME.fullmatch(value or ""):
        raise InvalidArgument(
            f"{name} must be lower_snake_case, 1 to 32 characters, starting with a letter; "
            f"got {value[:40]!r}"
        )
    return value


def validate_scope(value: str, name: str = "scope") -> str:
    """A scope such as `user` or `project:mnemosync` (1 to 128 characters)."""
    if not _SCOPE.fullmatch(value or ""):
        raise InvalidArgument(
            f"{name} must be 1 to 128 characters of letters, digits and _.:/@- "
            f"(for example 'user' or 'project:myapp'); got {value[:40]!r}"
        )
    return value


def validate_scope_pattern(value: str, name: str = "scope") -> str:
    """A scope grant: a scope, a prefix ending in `*` (`project:*`), or `*` for every scope.

    The policy file and agent certificates grant scopes with the same patterns
    (see `mnemosync.server.governance.scope_granted`).
    """
    if value == "*":
        return value
    try:
        validate_scope(value[:-1] if value.endswith("*") else value, name)
    except InvalidArgument as exc:
        raise InvalidArgument(f"{exc} (a grant may also end in '*', as in 'project:*', or be '*')") from None
    return value


def validate_layer(value: int, name: str = "layer", *, default: int | None = None) -> int:
    """A governance layer number 1 to 4 (0 means the default, when one is given)."""
    if value == 0 and default is not None:
        return default
    if value not in LAYERS:
        raise InvalidArgument(f"{name} must be one of 1 to 4 ({', '.join(LAYERS.values())}), got {value}")
    return value


def validate_tags(tags: list[str], limits: Limits, name: str = "tags") -> list[str]:
    """Tags: at most `max_tags`, each without white space or commas, lower-cased."""
    if len(tags) > limits.max_tags:
        raise InvalidArgument(f"{name} has {len(tags)} tags; the limit is {limits.max_tags}")
    cleaned = []
    for tag in tags:
        if not tag or len(tag) > limits.max_tag_chars or not _TAG.fullmatch(tag) or CONTROLS.search(tag):
            raise InvalidArgument(
                f"each of {name} must be 1 to {limits.max_tag_chars} characters without spaces "
                f"or commas; got {tag[:40]!r}"
            )
        check_text(tag, name, limits.max_tag_chars * 4)
        cleaned.append(tag.lower())
    return sorted(set(cleaned))


# Bounds on a vector's Euclidean length: wide enough for any embedding model, narrow
# enough that cosine arithmetic in float32 can neither overflow nor divide by ~0.
MIN_VECTOR_LENGTH = 1e-6
MAX_VECTOR_LENGTH = 1e6


def embedding_bytes(values: list[float] | bytes | None, model: ModelInfo | None, name: str) -> bytes:
    """Checks a vector (floats, or already packed little-endian float32 bytes) against the model and packs it as
    little-endian float32."""
    if not values:
        raise InvalidArgument(f"{name} is required")
    if model is None:
        raise InvalidArgument("embedding_model is required with an embedding")
    if isinstance(values, bytes | bytearray):
        if len(values) % 4:
            raise InvalidArgument(f"{name}_f32 has {len(values)} bytes, not a multiple of 4 (float32 values)")
        array = np.frombuffer(values, dtype="<f4")
    else:
        array = np.asarray(values, dtype="<f4")
    if len(array) != model.dimensions:
        raise InvalidArgument(
            f"{name} has {len(array)} dimensions; the model {model.describe()} has {model.dimensions}"
        )
    # One pass in float64, where no float32 square overflows or vanishes: the sum of squares is finite exactly when
    # every value is, and 0 exactly when every value is 0 (np.add.reduce: np.sum's own pairwise sum, unwrapped).
    wide = array.astype(np.float64)
    squares = float(np.add.reduce(wide * wide))
    if not math.isfinite(squares):
        raise InvalidArgument(f"{name} contains NaN or infinite values")
    if not squares:
        raise InvalidArgument(f"{name} is all zeros")
    length = math.sqrt(squares)
    if not MIN_VECTOR_LENGTH <= length <= MAX_VECTOR_LENGTH:
        raise InvalidArgument(
            f"{name} has length {length:.3g}; vectors must have a length from {MIN_VECTOR_LENGTH:g} to "
            f"{MAX_VECTOR_LENGTH:g} (embedding models give unit-length or moderate vectors)"
        )
    return bytes(values) if isinstance(values, bytes | bytearray) else array.tobytes()


def _trust(value: Any, name: str = "trust") -> str:
    if value not in ("", *TRUST_LABELS):
        raise InvalidArgument(f"{name} must be one of {', '.join(TRUST_LABELS)} (or empty), got {str(value)[:40]!r}")
    return cast(str, value)


def _scan_text_fields(op: OpRequest, limits: Limits) -> None:
    """The secret scan over every text the operation carries: ids, scope, type, tags (as sent, before they are
    lower-cased), relation, content, quote, reasons, notes, whatever the operation is, and the tags joined and
    the content joined to the quote (a key cut in two pieces). It runs before any other
    check, so no later message can echo a secret back. A text longer than any field may be is left to the size
    checks that follow (their messages never echo it), so an oversized request costs no scan.

    Raises:
        InvalidArgument: rule intake-no-secrets, naming the field.
    """
    texts = [("op_id", op.op_id), ("memory_id", op.memory_id)]
    for name, value in op.fields.items():
        texts += [(name, v) for v in (value if isinstance(value, (list, tuple)) else (value,)) if isinstance(v, str)]
        if name == "sources" and isinstance(value, (list, tuple)):
            texts += [(f"sources[{i}].{k}", v) for i, s in enumerate(value) if isinstance(s, dict)
                      for k, v in s.items() if isinstance(v, str)]
    for name, text in texts:
        if len(text) <= limits.max_content_bytes:
            secrets_scan.check(text, name)
    tags, content, quote = op.fields.get("tags"), op.fields.get("content"), op.fields.get("quote")
    if isinstance(tags, (list, tuple)) and len(tags) > 1 and all(isinstance(t, str) for t in tags):
        joined = "".join(tags)  # a key cut in two tags
        if len(joined) <= limits.max_content_bytes:
            secrets_scan.check(joined, "tags (together)")
    if isinstance(content, str) and isinstance(quote, str) and content and quote:
        joined = content + "\n" + quote  # a key begun in the content and ended in the quote (words between too)
        if len(joined) <= limits.max_content_bytes:
            secrets_scan.check(joined, "content and quote (together)")


def _trust_fields(f: dict[str, Any], payload: dict[str, Any], *, only_given: bool) -> None:
    for key, limit in (("trust", None), ("quote", MAX_QUOTE_BYTES)):
        if key not in f or (not only_given and not f[key]):
            continue
        value = _trust(f[key]) if limit is None else check_text(f[key], key, limit, allow_empty=True)
        payload[key] = value


def _resolution(f: dict[str, Any], limits: Limits, model: ModelInfo | None,
                embedding: list[float] | bytes | None) -> tuple[dict[str, Any], bytes | None]:
    conflict_id = f.get("conflict_id", 0)
    if isinstance(conflict_id, bool) or not isinstance(conflict_id, int) or conflict_id < 1:
        raise InvalidArgument(f"conflict_id must be a conflict id (>= 1), got {conflict_id!r}")
    payload: dict[str, Any] = {"conflict_id": conflict_id}
    keep = f.get("keep_revision") or 0
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise InvalidArgument(f"keep_revision must be a revision number (>= 1), got {keep!r}")
    merged = f.get("merged_content")
    keep_all = bool(f.get("keep_all"))
    if (keep > 0) + (merged is not None) + keep_all != 1:
        raise InvalidArgument("resolve_conflict needs exactly one of keep_revision, merged_content and keep_all")
    vector = None
    if keep:
        payload["keep_revision"] = keep
    elif merged is not None:
        payload["merged_content"] = check_text(merged, "merged_content", limits.max_content_bytes)
        vector = embedding_bytes(embedding, model, "embedding")
    else:
        payload["keep_all"] = True
    if vector is None and embedding:
        raise InvalidArgument("embedding is only accepted together with merged_content")
    if f.get("note"):
        payload["note"] = check_text(f["note"], "note", MAX_NOTE_BYTES)
    return payload, vector


def validate(op: OpRequest, limits: Limits, model: ModelInfo | None) -> ValidOp:
    """Checks one operation's fields and returns its payload with defaults filled in.

    Raises:
        InvalidArgument: naming the field and the limit it broke.
    """
    _scan_text_fields(op, limits)
    op_id = _uuid(op.op_id, "op_id")
    memory_id = _uuid(op.memory_id, "memory_id")
    f = op.fields
    embedding = None
    if op.op == "add":
        payload: dict[str, Any] = {
            "scope": validate_scope(f.get("scope", "")),
            "type": validate_name(f.get("type") or DEFAULT_TYPE, "type"),
            "layer": validate_layer(f.get("layer", 0), default=DEFAULT_LAYER),
            "tags": validate_tags(list(f.get("tags", [])), limits),
            "content": check_text(f.get("content", ""), "content", limits.max_content_bytes),
            "importance": _unit(f.get("importance", DEFAULT_IMPORTANCE), "importance"),
            "confidence": _unit(f.get("confidence", DEFAULT_CONFIDENCE), "confidence"),
            "protected": bool(f.get("protected", False)),
        }
        _trust_fields(f, payload, only_given=False)
        require_quote(payload.get("trust", ""), payload.get("quote", ""))
        if f.get("event_time_ms") is not None:
            payload["event_time_ms"] = event_time.validate(f["event_time_ms"])
        if f.get("sources"):
            payload["sources"] = source_refs.validate_sources(f["sources"])
        for name in procedures.FIELDS:
            if f.get(name):
                payload[name] = procedures.validate(f[name], name)
        if f.get("origin"):
            payload["origin"] = origin.validate(f["origin"])
        embedding = embedding_bytes(op.embedding, model, "embedding")
    elif op.op == "update":
        payload = {}
        if "content" in f:
            payload["content"] = check_text(f["content"], "content", limits.max_content_bytes)
            embedding = embedding_bytes(op.embedding, model, "embedding")
        elif op.embedding:
            raise InvalidArgument("embedding is only accepted together with new content")
        if "type" in f:
            payload["type"] = validate_name(f["type"], "type")
        if "tags" in f:
            payload["tags"] = validate_tags(list(f["tags"]), limits)
        _trust_fields(f, payload, only_given=True)
        for key in ("importance", "confidence"):
            if key in f:
                payload[key] = _unit(f[key], key)
        if "protected" in f:
            payload["protected"] = bool(f["protected"])
        if f.get("event_time_ms") is not None:
            payload["event_time_ms"] = event_time.validate(f["event_time_ms"])
        if "sources" in f:
            payload["sources"] = source_refs.validate_sources(f["sources"])
        if any(name in f for name in procedures.FIELDS):  # replaced together: the ones not named become empty
            for name in procedures.FIELDS:
                payload[name] = procedures.validate(f.get(name) or [], name)
        if not payload:
            raise InvalidArgument(
                "update changes nothing: set content, type, tags, importance, confidence, protected, trust, "
                "quote, event_time_ms, sources or steps, preconditions and postconditions"
            )
    elif op.op == "forget":
        payload = {"reason": check_text(f.get("reason", ""), "reason", 1024, allow_empty=True)}
    elif op.op == "restore":
        payload = {}
    elif op.op in ("link", "unlink"):
        target = _uuid(f.get("target_id", ""), "target_id")
        if target == memory_id:
            raise InvalidArgument("target_id must differ from memory_id (a memory cannot link to itself)")
        payload = {"target_id": target, **links.link_payload(f, unlink=op.op == "unlink")}
        if "reason" in payload:
            check_text(payload["reason"], "reason", links.MAX_REASON_BYTES)
    elif op.op == "set_layer":
        payload = {"layer": validate_layer(f.get("layer", 0))}
    elif op.op == "resolve_conflict":
        payload, embedding = _resolution(f, limits, model, op.embedding)
    elif op.op == "redact":
        payload = {"reason": check_text(f.get("reason", ""), "reason", MAX_NOTE_BYTES)}
    elif op.op == "verify":
        status = f.get("status", "")
        if status not in source_refs.STATUSES:
            raise InvalidArgument(f"status must be one of {', '.join(source_refs.STATUSES)}, got {str(status)[:40]!r}")
        paths = list(f.get("paths", []))
        if len(paths) > source_refs.MAX_SOURCES:
            raise InvalidArgument(f"paths has {len(paths)} paths; the limit is {source_refs.MAX_SOURCES}")
        payload = {"status": status}
        if paths:
            payload["paths"] = [source_refs.validate_path(p, f"paths[{i}]") for i, p in enumerate(paths)]
    elif op.op in ("decay", "archive"):
        raise InvalidArgument(f"{op.op} is written by the server's lifecycle sweep only (agent mnemosync:system); "
                              "agents report uses with RecordUse, and forget to archive")
    else:
        raise InvalidArgument(
            "operation must set exactly one of add, update, forget, restore, link, unlink, set_layer, "
            "resolve_conflict, redact, verify"
        )
    if op.signature or op.salt:
        if len(op.salt) != SALT_BYTES:
            raise InvalidArgument(f"signature.salt must be {SALT_BYTES} bytes, got {len(op.salt)}")
        if len(op.signature) != SIGNATURE_BYTES:
            raise InvalidArgument(f"signature.signature must be {SIGNATURE_BYTES} bytes, got {len(op.signature)}")
    needs_base = op.op in ("update", "forget", "restore", "set_layer", "resolve_conflict", "redact", "verify")
    if needs_base and op.base_version < 1:
        raise InvalidArgument(
            f"base_version is required for {op.op}: the version of the memory you last read (>= 1)"
        )
    if not needs_base and op.base_version != 0:
        raise InvalidArgument(f"base_version must be 0 for {op.op}")
    return ValidOp(op_id, memory_id, op.op, op.base_version, payload, embedding, op.salt, op.signature)
