"""A memory as every layer sees it: the row of the `memories` projection, and the governance layers.

The fold (`mnemosync.kernel.projections`) writes these rows; search, conflicts,
the server's store, the agent's cache and the MCP shim all read them as
`MemoryRow`. Layer names come from the wire contract's `Layer` enum, so the
proto is the one place they are defined.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.procedures import Procedure
from mnemosync.kernel.source_refs import Verification
from mnemosync.v1 import memory_pb2 as pb

if TYPE_CHECKING:
    from mnemosync.kernel.links import LinkRow
    from mnemosync.kernel.origin import Origin

LAYERS: dict[int, str] = {v.number: v.name.removeprefix("LAYER_").lower()
                          for v in pb.Layer.DESCRIPTOR.values if v.number}
"""Layer number to name: 1 constitutional, 2 legislative, 3 factual, 4 ephemeral."""

LAYER_NUMBERS: dict[str, int] = {name: number for number, name in LAYERS.items()}
"""Layer name to number."""

DEFAULT_LAYER = pb.LAYER_FACTUAL
"""Where an add that names no layer goes."""


MEMORY_COLUMNS = (
    "num, id, scope, type, layer, tags, content, importance, confidence, protected, "
    "author_agent, updated_by, version, created_at_ms, updated_at_ms, archived, "
    "embedding_model, content_hash, last_seq, trust, quote, authority, version_seq, event_time_ms, content_agent, "
    "content_authority"
)


@dataclass(frozen=True)
class MemoryRow:
    """One row of `memories`, with its links and open conflicts.

    `authority` is the authority of whoever changed the memory last (0 before
    authorities were recorded): the authority governance protects it at.
    `content_agent` and `content_authority` name who wrote the text it shows
    (content, quote, trust label), which a change of importance, tags or
    layer, or a hidden conflict revision, does not change ("" and 0 where
    not known: read them through `text_author` and `text_authority`);
    `version_seq` the seq of the entry that made
    the current version; `event_time_ms` when what it records happened (None:
    not recorded), apart from `created_at_ms`, when it was stored.
    """

    num: int
    id: str
    scope: str
    type: str
    layer: int
    tags: list[str]
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
    content_hash: str
    last_seq: int
    trust: str = ""
    quote: str = ""
    authority: int = 0
    version_seq: int = 0
    event_time_ms: int | None = None
    content_agent: str = ""
    content_authority: int = 0
    links: tuple[LinkRow, ...] = ()
    """`mnemosync.kernel.links.LinkRow`s: target, type, author, weight, reason."""
    open_conflicts: tuple[int, ...] = ()
    sources: tuple[dict[str, Any], ...] = ()
    """What it cites (`mnemosync.kernel.source_refs`): payload dicts, filled in by `source_projection.attach`."""
    verification: Verification | None = None
    """Its sources' last verification (None: no sources row)."""
    procedure: Procedure | None = None
    """Its steps, preconditions and postconditions (`mnemosync.kernel.procedures`; None: none), filled in by
    `procedures.attach`."""
    origin: Origin | None = None
    """Who wrote it and when where it was imported from (`mnemosync.kernel.origin`; None: written here), filled in
    by `origin.attach`."""


def text_author(m: MemoryRow) -> str:
    """Who wrote the text the memory shows (its last editor where not recorded)."""
    return m.content_agent or m.updated_by


def text_authority(m: MemoryRow) -> int:
    """The authority of whoever wrote the text the memory shows (the last editor's where not recorded; 0:
    never recorded)."""
    return m.content_authority or m.authority


def content_hash(content: str) -> str:
    """SHA-256 of the content's UTF-8 bytes, lower-case hex."""
    return hashlib.sha256(content.encode()).hexdigest()


def row_to_memory(row: Sequence[Any], links: Iterable[LinkRow] = ()) -> MemoryRow:
    """Builds a MemoryRow from a `SELECT MEMORY_COLUMNS` row."""
    values = list(row)
    values[5] = json.loads(values[5])
    values[9] = bool(values[9])
    values[15] = bool(values[15])
    return MemoryRow(*values, links=tuple(links))  # type: ignore[misc]  # mypy cannot count the columns in `row`
