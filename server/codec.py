"""Translation between protobuf messages and the store's plain types.

Used by the servicer (requests in, responses out) and by agent clients
(changelog entries in). An operation's fields map one to one onto the
changelog payload, so an entry received over the wire folds and hashes
exactly as it does on the server.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mnemosync.v1 import memory_pb2 as pb
from server.changelog import Entry
from server.intake import ModelInfo, OpRequest
from server.projections import MemoryRow, content_hash
from server.search import Filter, Hit

MODES = {pb.SEARCH_MODE_HYBRID: "hybrid", pb.SEARCH_MODE_VECTOR: "vector", pb.SEARCH_MODE_KEYWORD: "keyword"}
MODE_VALUES = {name: value for value, name in MODES.items()}


def operation_fields(op: pb.Operation) -> tuple[str, dict[str, Any], list[float] | None]:
    """(op name, fields, embedding) of an Operation; op name "" if none is set."""
    kind = op.WhichOneof("op") or ""
    fields: dict[str, Any] = {}
    embedding = None
    if kind == "add":
        a = op.add
        fields = {
            "scope": a.scope, "type": a.type, "layer": a.layer, "tags": list(a.tags),
            "content": a.content, "protected": a.protected,
        }
        for key in ("importance", "confidence"):
            if a.HasField(key):
                fields[key] = getattr(a, key)
        embedding = list(a.embedding) or None
    elif kind == "update":
        u = op.update
        for key in ("content", "type", "importance", "confidence", "protected"):
            if u.HasField(key):
                fields[key] = getattr(u, key)
        if u.replace_tags:
            fields["tags"] = list(u.tags)
        embedding = list(u.embedding) or None
    elif kind == "forget":
        fields = {"reason": op.forget.reason}
    elif kind in ("link", "unlink"):
        link = getattr(op, kind)
        fields = {"target_id": link.target_id, "relation": link.relation}
    elif kind == "set_layer":
        fields = {"layer": op.set_layer.layer}
    return kind, fields, embedding


def operation_from_fields(
    kind: str, memory_id: str, op_id: str, base_version: int, fields: dict[str, Any],
    embedding: list[float] | bytes | None,
) -> pb.Operation:
    """Builds an Operation from op name and fields (the inverse of operation_fields)."""
    if isinstance(embedding, bytes):
        embedding = np.frombuffer(embedding, dtype="<f4").tolist()
    op = pb.Operation(op_id=op_id, memory_id=memory_id, base_version=base_version)
    if kind == "add":
        op.add.CopyFrom(pb.AddOp(embedding=embedding or [], **fields))
    elif kind == "update":
        update = pb.UpdateOp(embedding=embedding or [])
        for key in ("content", "type", "importance", "confidence", "protected"):
            if key in fields:
                setattr(update, key, fields[key])
        if "tags" in fields:
            update.replace_tags = True
            update.tags.extend(fields["tags"])
        op.update.CopyFrom(update)
    elif kind == "forget":
        op.forget.CopyFrom(pb.ForgetOp(**fields))
    elif kind == "restore":
        op.restore.CopyFrom(pb.RestoreOp())
    elif kind in ("link", "unlink"):
        getattr(op, kind).CopyFrom(pb.LinkOp(**fields) if kind == "link" else pb.UnlinkOp(**fields))
    elif kind == "set_layer":
        op.set_layer.CopyFrom(pb.SetLayerOp(**fields))
    else:
        raise ValueError(f"unknown operation {kind!r}")
    return op


def op_request(op: pb.Operation) -> OpRequest:
    """An incoming Operation as the store's OpRequest."""
    kind, fields, embedding = operation_fields(op)
    return OpRequest(op.op_id, op.memory_id, kind, op.base_version, fields, embedding)


def model_info(model: pb.EmbeddingModel) -> ModelInfo | None:
    """The request's model, or None if the message is empty."""
    if not model.sha256 and not model.dimensions:
        return None
    return ModelInfo(model.name, model.dimensions, model.sha256.lower())


def model_proto(model: ModelInfo | None) -> pb.EmbeddingModel | None:
    """The wire form of a model (None stays None)."""
    if model is None:
        return None
    return pb.EmbeddingModel(name=model.name, dimensions=model.dimensions, sha256=model.sha256)


def memory_proto(m: MemoryRow) -> pb.Memory:
    """The wire form of a memory."""
    return pb.Memory(
        id=m.id, scope=m.scope, type=m.type, layer=m.layer, tags=m.tags, content=m.content,
        importance=m.importance, confidence=m.confidence, protected=m.protected,
        author_agent=m.author_agent, updated_by=m.updated_by, version=m.version,
        created_at_ms=m.created_at_ms, updated_at_ms=m.updated_at_ms, archived=m.archived,
        embedding_model=m.embedding_model,
        links=[pb.Link(target_id=t, relation=r, author_agent=a) for t, r, a in m.links],
        last_seq=m.last_seq,
    )


def entry_proto(e: Entry) -> pb.ChangelogEntry:
    """The wire form of a changelog entry."""
    return pb.ChangelogEntry(
        seq=e.seq, op_id=e.op_id, agent_id=e.agent_id, memory_id=e.memory_id, op=e.op,
        base_version=e.base_version, version=e.version,
        operation=operation_from_fields(e.op, e.memory_id, e.op_id, e.base_version, e.payload, e.embedding),
        server_time_ms=e.server_time_ms, prev_hash=e.prev_hash, hash=e.hash,
        embedding_model=e.embedding_model,
    )


def entry_from_proto(msg: pb.ChangelogEntry) -> Entry:
    """A received entry as the store's Entry (its hash can be recomputed and compared)."""
    kind, fields, embedding = operation_fields(msg.operation)
    return Entry(
        seq=msg.seq, op_id=msg.op_id, agent_id=msg.agent_id, memory_id=msg.memory_id, op=msg.op,
        base_version=msg.base_version, version=msg.version, payload=fields,
        embedding=np.asarray(embedding, dtype="<f4").tobytes() if embedding else None,
        embedding_model=msg.embedding_model, server_time_ms=msg.server_time_ms,
        prev_hash=msg.prev_hash, hash=msg.hash,
    )


def search_filter(f: pb.SearchFilter) -> Filter:
    """The store's Filter from the wire form."""
    return Filter(
        scopes=tuple(f.scopes), types=tuple(f.types), tags=tuple(t.lower() for t in f.tags),
        layers=tuple(f.layers), authors=tuple(f.authors), created_after_ms=f.created_after_ms,
        created_before_ms=f.created_before_ms, include_archived=f.include_archived,
    )


def hit_proto(h: Hit) -> pb.SearchResult:
    """The wire form of a search hit."""
    return pb.SearchResult(
        memory=memory_proto(h.memory),
        score=pb.ScoreParts(
            vector_rank=h.vector_rank, vector_distance=h.vector_distance,
            keyword_rank=h.keyword_rank, bm25=h.bm25, rrf=h.rrf, final=h.final,
        ),
    )


def memory_row(m: pb.Memory) -> MemoryRow:
    """A received memory as the store's MemoryRow (num is 0: it is not a local row)."""
    return MemoryRow(
        num=0, id=m.id, scope=m.scope, type=m.type, layer=m.layer, tags=list(m.tags),
        content=m.content, importance=m.importance, confidence=m.confidence, protected=m.protected,
        author_agent=m.author_agent, updated_by=m.updated_by, version=m.version,
        created_at_ms=m.created_at_ms, updated_at_ms=m.updated_at_ms, archived=m.archived,
        embedding_model=m.embedding_model, content_hash=content_hash(m.content), last_seq=m.last_seq,
        links=tuple((link.target_id, link.relation, link.author_agent) for link in m.links),
    )


def filter_proto(f: Filter) -> pb.SearchFilter:
    """The wire form of a Filter."""
    return pb.SearchFilter(
        scopes=f.scopes, types=f.types, tags=f.tags, layers=f.layers, authors=f.authors,
        created_after_ms=f.created_after_ms, created_before_ms=f.created_before_ms,
        include_archived=f.include_archived,
    )


def hit(r: pb.SearchResult) -> Hit:
    """A received search result as a Hit."""
    s = r.score
    return Hit(memory=memory_row(r.memory), vector_rank=s.vector_rank, vector_distance=s.vector_distance,
               keyword_rank=s.keyword_rank, bm25=s.bm25, rrf=s.rrf, final=s.final)
