"""Translation between protobuf messages and the core's plain types, in both directions.

The servicer decodes requests and encodes responses with it; the agent's
remote (`mnemosync.agent.remote`) encodes requests and decodes responses, so
neither side's callers ever see a protobuf message. An operation's fields map
one to one onto the changelog payload, so an entry received over the wire
folds and hashes exactly as it does on the server.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any, cast

import numpy as np

from mnemosync.kernel import lifecycle_state, procedures, secrets_scan
from mnemosync.kernel.checkpoint import Attested, Checkpoint
from mnemosync.kernel.conflict_projection import Conflict, Revision
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.entry import BlankedEntry, Entry
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.graph import Step, Timeline, Walk
from mnemosync.kernel.graph_rank import GraphRank, Ranked
from mnemosync.kernel.lifecycle import Decision, SweepReport
from mnemosync.kernel.links import DEFAULT_WEIGHT, LinkRow
from mnemosync.kernel.memory import MemoryRow, content_hash
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest, ValidOp
from mnemosync.kernel.origin import Origin
from mnemosync.kernel.outcomes import AgentOffset, OpResult, ReadStoreStatus, Stats
from mnemosync.kernel.search import Filter, Hit
from mnemosync.kernel.source_refs import Verification
from mnemosync.kernel.topics import Surprise, Topic, Topics
from mnemosync.v1 import memory_pb2 as pb

MODES = {pb.SEARCH_MODE_HYBRID: "hybrid", pb.SEARCH_MODE_VECTOR: "vector", pb.SEARCH_MODE_KEYWORD: "keyword"}
MODE_VALUES = {name: value for value, name in MODES.items()}
USE_KINDS = {pb.USE_KIND_UNSPECIFIED: "used", pb.USE_KIND_USED: "used", pb.USE_KIND_RECALL: "recall"}
"""RecordUse's kinds, as `mnemosync.server.usage_stats.KINDS` names them."""
USE_KIND_VALUES = {"used": pb.USE_KIND_USED, "recall": pb.USE_KIND_RECALL}
COGNITIVE_PARTS = ("relevance", "activation", "confidence", "relevance_part", "activation_part", "confidence_part",
                   "importance_part")
"""The re-ranking's score parts, named alike in `Hit` and `ScoreParts`."""
_UPDATE_FIELDS = ("content", "type", "importance", "confidence", "protected", "trust", "quote", "event_time_ms")


def _embedding(message: pb.AddOp | pb.UpdateOp | pb.ResolveConflictOp) -> list[float] | bytes | None:
    """An op message's embedding: packed bytes from embedding_f32, floats from embedding, or None."""
    if message.embedding_f32:
        if message.embedding:
            raise InvalidArgument("set embedding or embedding_f32, not both")
        return message.embedding_f32
    return list(message.embedding) or None


_SOURCE_KEYS = ("path", "line_start", "line_end", "symbol", "commit", "url", "sha256")


def source_dict(s: pb.Source) -> dict[str, Any]:
    """A Source as the payload holds it: only the keys that are set."""
    return {k: getattr(s, k) for k in _SOURCE_KEYS if getattr(s, k)}


def source_proto(s: dict[str, Any]) -> pb.Source:
    """The wire form of a payload source."""
    return pb.Source(**{k: s[k] for k in _SOURCE_KEYS if k in s})


def verification_proto(v: Verification | None) -> pb.Verification | None:
    """The wire form of a verification (None stays None)."""
    if v is None:
        return None
    return pb.Verification(status=v.status, paths=v.paths, checked_at_ms=v.checked_at_ms, checked_by=v.checked_by,
                           sources_at_ms=v.sources_at_ms)


def operation_fields(op: pb.Operation) -> tuple[str, dict[str, Any], list[float] | bytes | None]:
    """(op name, fields, embedding) of an Operation; op name "" if none is set.

    Raises:
        InvalidArgument: an operation sets both embedding and embedding_f32.
    """
    kind = op.WhichOneof("op") or ""
    fields: dict[str, Any] = {}
    embedding = None
    if kind == "add":
        a = op.add
        fields = {
            "scope": a.scope, "type": a.type, "layer": a.layer, "tags": list(a.tags),
            "content": a.content, "protected": a.protected,
        }
        for key in ("importance", "confidence", "event_time_ms"):
            if a.HasField(key):
                fields[key] = getattr(a, key)
        for key in ("trust", "quote"):
            if getattr(a, key):
                fields[key] = getattr(a, key)
        if a.sources:
            fields["sources"] = [source_dict(x) for x in a.sources]
        for name in procedures.FIELDS:
            if getattr(a, name):
                fields[name] = list(getattr(a, name))
        if a.HasField("origin"):
            fields["origin"] = {k: v for k, v in (("author_agent", a.origin.author_agent),
                                                  ("created_at_ms", a.origin.created_at_ms),
                                                  ("updated_by", a.origin.updated_by),
                                                  ("updated_at_ms", a.origin.updated_at_ms)) if v}
        embedding = _embedding(a)
    elif kind == "update":
        u = op.update
        for key in _UPDATE_FIELDS:
            if u.HasField(key):
                fields[key] = getattr(u, key)
        if u.replace_tags:
            fields["tags"] = list(u.tags)
        if u.replace_sources:
            fields["sources"] = [source_dict(x) for x in u.sources]
        if u.replace_procedure:
            fields.update({name: list(getattr(u, name)) for name in procedures.FIELDS})
        embedding = _embedding(u)
    elif kind == "forget":
        fields = {"reason": op.forget.reason}
    elif kind in ("link", "unlink"):
        link = getattr(op, kind)
        fields = {"target_id": link.target_id, "relation": link.relation}
        if kind == "link":
            fields.update({k: v for k, v in (("weight", link.weight), ("reason", link.reason)) if v})
    elif kind == "set_layer":
        fields = {"layer": op.set_layer.layer}
    elif kind == "resolve_conflict":
        r = op.resolve_conflict
        fields = {"conflict_id": r.conflict_id}
        if r.keep_revision:
            fields["keep_revision"] = r.keep_revision
        if r.HasField("merged_content"):
            fields["merged_content"] = r.merged_content
        if r.keep_all:
            fields["keep_all"] = True
        if r.note:
            fields["note"] = r.note
        embedding = _embedding(r)
    elif kind == "redact":
        fields = {"reason": op.redact.reason}
    elif kind == "decay":
        fields = {name: getattr(op.decay, name) for name in lifecycle_state.DECAY_FIELDS}
    elif kind == "archive":
        ar = op.archive
        fields = {"as_of_ms": ar.as_of_ms, "strength": ar.strength, "effective_importance": ar.effective_importance,
                  "reason": ar.reason}
    elif kind == "verify":
        fields = {"status": op.verify.status}
        if op.verify.paths:
            fields["paths"] = list(op.verify.paths)
    return kind, fields, embedding


def operation_from_fields(
    kind: str, memory_id: str, op_id: str, base_version: int, fields: dict[str, Any],
    embedding: list[float] | bytes | None, packed: bool = False,
) -> pb.Operation:
    """Builds an Operation from op name and fields (the inverse of operation_fields); with `packed` the embedding
    goes into embedding_f32 (packed little-endian float32), else into the repeated float embedding."""
    vector: dict[str, Any] = {}
    if embedding is not None and len(embedding):
        if packed:
            vector["embedding_f32"] = embedding if isinstance(embedding, bytes) else \
                np.asarray(embedding, dtype="<f4").tobytes()
        else:
            vector["embedding"] = np.frombuffer(embedding, dtype="<f4").tolist() if isinstance(embedding, bytes) \
                else embedding
    op = pb.Operation(op_id=op_id, memory_id=memory_id, base_version=base_version)
    if kind == "add":
        sources = [source_proto(x) for x in fields.get("sources", ())]
        found = fields.get("origin")
        op.add.CopyFrom(pb.AddOp(**vector, **{k: v for k, v in fields.items() if k not in ("sources", "origin")},
                                 sources=sources, origin=pb.Origin(**found) if found else None))
    elif kind == "update":
        update = pb.UpdateOp(**vector)
        for key in _UPDATE_FIELDS:
            if key in fields:
                setattr(update, key, fields[key])
        if "tags" in fields:
            update.replace_tags = True
            update.tags.extend(fields["tags"])
        if "sources" in fields:
            update.replace_sources = True
            update.sources.extend(source_proto(x) for x in fields["sources"])
        if any(name in fields for name in procedures.FIELDS):
            update.replace_procedure = True
            for name in procedures.FIELDS:
                getattr(update, name).extend(fields.get(name) or ())
        op.update.CopyFrom(update)
    elif kind == "forget":
        op.forget.CopyFrom(pb.ForgetOp(**fields))
    elif kind == "restore":
        op.restore.CopyFrom(pb.RestoreOp())
    elif kind in ("link", "unlink"):
        getattr(op, kind).CopyFrom(pb.LinkOp(**fields) if kind == "link" else pb.UnlinkOp(**fields))
    elif kind == "set_layer":
        op.set_layer.CopyFrom(pb.SetLayerOp(**fields))
    elif kind == "resolve_conflict":
        op.resolve_conflict.CopyFrom(pb.ResolveConflictOp(**vector, **fields))
    elif kind == "redact":
        op.redact.CopyFrom(pb.RedactOp(**fields))
    elif kind == "decay":
        op.decay.CopyFrom(pb.DecayOp(**fields))
    elif kind == "archive":
        op.archive.CopyFrom(pb.ArchiveOp(**fields))
    elif kind == "verify":
        op.verify.CopyFrom(pb.VerifyOp(**fields))
    else:
        raise ValueError(f"unknown operation {kind!r}")
    return op


def operation_proto(op: ValidOp, packed: bool = True) -> pb.Operation:
    """The wire form of a validated (and possibly signed) operation (its embedding packed unless `packed` is
    False, for servers older than embedding_f32)."""
    operation = operation_from_fields(op.op, op.memory_id, op.op_id, op.base_version, op.payload, op.embedding,
                                      packed)
    if op.signature:
        operation.signature.CopyFrom(pb.OperationSignature(salt=op.salt, signature=op.signature))
    return operation


def op_request(op: pb.Operation) -> OpRequest:
    """An incoming Operation as the store's OpRequest."""
    kind, fields, embedding = operation_fields(op)
    return OpRequest(op.op_id, op.memory_id, kind, op.base_version, fields, embedding,
                     op.signature.salt, op.signature.signature)


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


def link_proto(link: LinkRow) -> pb.Link:
    """The wire form of a link (its reason masked like every text, `secrets_scan.mask`)."""
    return pb.Link(target_id=link.target_id, relation=link.relation, author_agent=link.author_agent,
                   weight=link.weight, reason=secrets_scan.mask(link.reason))


def memory_proto(m: MemoryRow) -> pb.Memory:
    """The wire form of a memory, with any secret in its texts masked (`secrets_scan.mask`)."""
    m = secrets_scan.masked(m)
    return pb.Memory(
        id=m.id, scope=m.scope, type=m.type, layer=cast(pb.Layer, m.layer), tags=m.tags, content=m.content,
        importance=m.importance, confidence=m.confidence, protected=m.protected,
        author_agent=m.author_agent, updated_by=m.updated_by, version=m.version,
        created_at_ms=m.created_at_ms, updated_at_ms=m.updated_at_ms, archived=m.archived,
        embedding_model=m.embedding_model,
        links=[link_proto(link) for link in m.links],
        last_seq=m.last_seq, trust=m.trust, quote=m.quote, authority=m.authority,
        open_conflicts=m.open_conflicts, event_time_ms=m.event_time_ms, content_agent=m.content_agent,
        content_authority=m.content_authority,
        sources=[source_proto(x) for x in m.sources], verification=verification_proto(m.verification),
        origin=pb.Origin(**m.origin.__dict__) if m.origin else None,
        **(m.procedure.as_dict() if m.procedure else {}),
    )


def entry_proto(e: Entry, packed: bool = False) -> pb.ChangelogEntry:
    """The wire form of a changelog entry (a withheld one carries only the chain links); with `packed` its
    embedding travels in embedding_f32 (for receivers that asked for packed_embeddings)."""
    if e.withheld:
        return pb.ChangelogEntry(seq=e.seq, server_time_ms=e.server_time_ms, prev_hash=e.prev_hash, hash=e.hash,
                                 withheld=True,
                                 checkpoint=checkpoint_proto(e.checkpoint) if e.checkpoint is not None else None)
    mark = None
    if e.conflict:
        mark = pb.ConflictMark(conflict_id=e.conflict["id"], kind=e.conflict["kind"],
                               other_memory_id=e.conflict.get("with", ""),
                               similarity=e.conflict.get("similarity", 0.0),
                               replaces_revision=e.conflict.get("replaces", 0))
    return pb.ChangelogEntry(
        seq=e.seq, op_id=e.op_id, agent_id=e.agent_id, memory_id=e.memory_id, op=e.op,
        base_version=e.base_version, version=e.version,
        operation=operation_from_fields(e.op, e.memory_id, e.op_id, e.base_version, e.payload, e.embedding,
                                        packed),
        server_time_ms=e.server_time_ms, prev_hash=e.prev_hash, hash=e.hash,
        embedding_model=e.embedding_model, authority=e.authority, conflict=mark,
        payload_commit=e.payload_commit, payload_salt=e.payload_salt, embedding_sha256=e.embedding_sha256,
        redacted_by=e.redacted_by, signature=e.signature or b"", signer_key=e.signer_key,
        blanked=[pb.BlankedEntry(seq=b.seq, payload_sha256=b.payload_sha256, embedding_dropped=b.embedding_dropped)
                 for b in e.blanked],
        checkpoint=checkpoint_proto(e.checkpoint) if e.checkpoint is not None else None,
        redaction=pb.AttestedEntry(entry=entry_proto(e.redaction.entry),
                                   checkpoint=checkpoint_proto(e.redaction.checkpoint),
                                   inclusion_path=e.redaction.path) if e.redaction is not None else None,
    )


def checkpoint_proto(c: Checkpoint) -> pb.Checkpoint:
    """The wire form of a signed checkpoint."""
    return pb.Checkpoint(log_id=c.log_id, size=c.size, root_hash=c.root, time_ms=c.time_ms, key=c.key,
                         signature=c.signature)


def checkpoint_from_proto(msg: pb.Checkpoint) -> Checkpoint:
    """A received checkpoint."""
    return Checkpoint(msg.log_id, msg.size, msg.root_hash, msg.time_ms, msg.key, msg.signature)


def _conflict_mark(mark: pb.ConflictMark) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": mark.conflict_id, "kind": mark.kind}
    if mark.kind == "semantic":
        doc.update({"with": mark.other_memory_id, "similarity": mark.similarity})
    if mark.replaces_revision:
        doc["replaces"] = mark.replaces_revision
    return doc


def entry_from_proto(msg: pb.ChangelogEntry) -> Entry:
    """A received entry as the store's Entry (its hash can be recomputed and compared)."""
    if msg.withheld:
        return Entry(seq=msg.seq, op_id="", agent_id="", memory_id="", op="", base_version=0, version=0,
                     payload={}, embedding=None, embedding_model="", server_time_ms=msg.server_time_ms,
                     prev_hash=msg.prev_hash, hash=msg.hash, withheld=True,
                     checkpoint=checkpoint_from_proto(msg.checkpoint) if msg.HasField("checkpoint") else None)
    kind, fields, embedding = operation_fields(msg.operation)
    return Entry(
        seq=msg.seq, op_id=msg.op_id, agent_id=msg.agent_id, memory_id=msg.memory_id, op=msg.op,
        base_version=msg.base_version, version=msg.version, payload=fields,
        embedding=(embedding if isinstance(embedding, bytes) else np.asarray(embedding, dtype="<f4").tobytes())
        if embedding else None,
        embedding_model=msg.embedding_model, server_time_ms=msg.server_time_ms,
        prev_hash=msg.prev_hash, hash=msg.hash, authority=msg.authority,
        conflict=_conflict_mark(msg.conflict) if msg.HasField("conflict") else None,
        payload_commit=msg.payload_commit, payload_salt=msg.payload_salt, embedding_sha256=msg.embedding_sha256,
        redacted_by=msg.redacted_by, signature=msg.signature or None, signer_key=msg.signer_key,
        blanked=tuple(BlankedEntry(b.seq, b.payload_sha256, b.embedding_dropped) for b in msg.blanked),
        checkpoint=checkpoint_from_proto(msg.checkpoint) if msg.HasField("checkpoint") else None,
        redaction=Attested(entry_from_proto(msg.redaction.entry), checkpoint_from_proto(msg.redaction.checkpoint),
                           tuple(msg.redaction.inclusion_path)) if msg.HasField("redaction") else None,
    )


def conflict_proto(c: Conflict, memory_version: int = 0) -> pb.Conflict:
    """The wire form of a conflict with its revisions."""
    return pb.Conflict(
        id=c.id, kind=c.kind, memory_id=c.memory_id, other_memory_id=c.other_memory_id, similarity=c.similarity,
        scope=c.scope, opened_by=c.opened_by, opened_at_ms=c.opened_at_ms, visible_revision=c.visible_revision,
        memory_version=memory_version, agents=c.agents, resolved=c.resolved, resolved_by=c.resolved_by,
        resolved_at_ms=c.resolved_at_ms, resolved_seq=c.resolved_seq, resolution=c.resolution,
        kept_revision=c.kept_revision, note=c.note,
        revisions=[revision_proto(r) for r in c.revisions], base=revision_proto(c.base) if c.base else None,
    )


def revision_proto(r: Revision) -> pb.ConflictRevision:
    """The wire form of a revision (a conflict's, or a state in a memory's history), its texts masked."""
    return pb.ConflictRevision(
        revision=r.revision, memory_id=r.memory_id, agent_id=r.agent_id, authority=r.authority, seq=r.seq,
        base_version=r.base_version, version=r.version, visible=r.visible,
        content=secrets_scan.mask(r.state["content"]),
        type=r.state["type"], tags=[secrets_scan.mask(t) for t in r.state["tags"]], importance=r.state["importance"],
        confidence=r.state["confidence"], protected=r.state["protected"], archived=r.state["archived"],
        trust=r.state["trust"], quote=secrets_scan.mask(r.state["quote"]),
        content_agent=r.state.get("content_agent", ""), content_authority=r.state.get("content_authority", 0),
    )


def revision(r: pb.ConflictRevision) -> Revision:
    """A received revision."""
    return Revision(
        revision=r.revision, memory_id=r.memory_id, agent_id=r.agent_id, authority=r.authority, seq=r.seq,
        base_version=r.base_version, version=r.version, visible=r.visible,
        state={"content": r.content, "type": r.type, "tags": list(r.tags), "importance": r.importance,
               "confidence": r.confidence, "protected": r.protected, "archived": r.archived,
               "trust": r.trust, "quote": r.quote, "authority": r.authority, "content_agent": r.content_agent,
               "content_authority": r.content_authority},
    )


def conflict_from_proto(msg: pb.Conflict) -> tuple[Conflict, int]:
    """A received conflict, and the current version of its memory."""
    revisions = tuple(revision(r) for r in msg.revisions)
    conflict = Conflict(
        id=msg.id, kind=msg.kind, memory_id=msg.memory_id, other_memory_id=msg.other_memory_id,
        similarity=msg.similarity, scope=msg.scope, opened_by=msg.opened_by, opened_at_ms=msg.opened_at_ms,
        visible_revision=msg.visible_revision, resolved_seq=msg.resolved_seq, resolved_by=msg.resolved_by,
        resolved_at_ms=msg.resolved_at_ms, resolution=msg.resolution, kept_revision=msg.kept_revision,
        note=msg.note, revisions=revisions, base=revision(msg.base) if msg.HasField("base") else None,
    )
    return conflict, msg.memory_version


def search_filter(f: pb.SearchFilter) -> Filter:
    """The store's Filter from the wire form."""
    return Filter(
        scopes=tuple(f.scopes), types=tuple(f.types), tags=tuple(t.lower() for t in f.tags),
        layers=tuple(f.layers), authors=tuple(f.authors), created_after_ms=f.created_after_ms,
        created_before_ms=f.created_before_ms, include_archived=f.include_archived,
    )


DIRECTIONS = {pb.DIRECTION_UNSPECIFIED: "", pb.DIRECTION_OUT: "out", pb.DIRECTION_IN: "in",
              pb.DIRECTION_BOTH: "both"}
DIRECTION_VALUES = {"out": pb.DIRECTION_OUT, "in": pb.DIRECTION_IN, "both": pb.DIRECTION_BOTH}


def direction(value: int, default: str) -> str:
    """A request's Direction as a name (UNSPECIFIED: `default`).

    Raises:
        InvalidArgument: not a Direction.
    """
    if value not in DIRECTIONS:
        raise InvalidArgument(f"direction must be one of {sorted(pb.Direction.keys())}, got {value}")
    return DIRECTIONS[value] or default


def step_proto(s: Step) -> pb.GraphStep:
    """The wire form of a memory a walk reached."""
    return pb.GraphStep(memory=memory_proto(s.memory), depth=s.depth, via_id=s.via_id, relation=s.relation,
                        weight=s.weight, reason=secrets_scan.mask(s.reason), direction=DIRECTION_VALUES[s.direction])


def step(s: pb.GraphStep) -> Step:
    """A received GraphStep."""
    return Step(memory_row(s.memory), s.depth, s.via_id, s.relation, s.weight, s.reason, DIRECTIONS[s.direction])


def walk_proto(w: Walk) -> pb.TraverseResponse:
    """The wire form of a walk."""
    return pb.TraverseResponse(start=memory_proto(w.start), steps=[step_proto(s) for s in w.steps],
                               truncated=w.truncated)


def walk(r: pb.TraverseResponse) -> Walk:
    """A received walk."""
    return Walk(memory_row(r.start), [step(s) for s in r.steps], r.truncated)


def graph_rank_proto(g: GraphRank) -> pb.GraphSearchResponse:
    """The wire form of a graph search's answer."""
    return pb.GraphSearchResponse(iterations=g.iterations, results=[
        pb.GraphSearchResult(memory=memory_proto(r.memory), score=r.score, path=r.path, relations=r.relations,
                             seed=r.seed) for r in g.results])


def graph_rank(msg: pb.GraphSearchResponse) -> GraphRank:
    """A received graph search's answer."""
    return GraphRank([Ranked(memory_row(r.memory), r.score, tuple(r.path), tuple(r.relations), r.seed)
                      for r in msg.results], msg.iterations)


def timeline_proto(t: Timeline) -> pb.TimelineResponse:
    """The wire form of a timeline."""
    return pb.TimelineResponse(memories=[memory_proto(m) for m in t.memories], anchor_index=t.anchor_index)


def timeline(r: pb.TimelineResponse) -> Timeline:
    """A received timeline."""
    return Timeline([memory_row(m) for m in r.memories], r.anchor_index)


def hit_proto(h: Hit) -> pb.SearchResult:
    """The wire form of a search hit."""
    return pb.SearchResult(
        memory=memory_proto(h.memory), neighbours=[step_proto(s) for s in h.neighbours],
        score=pb.ScoreParts(
            vector_rank=h.vector_rank, vector_distance=h.vector_distance,
            keyword_rank=h.keyword_rank, bm25=h.bm25, rrf=h.rrf, final=h.final,
            keyword_coverage=h.keyword_coverage, vector_score=h.vector_score, keyword_score=h.keyword_score,
            fused=h.fused, **{name: getattr(h, name) for name in COGNITIVE_PARTS},
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
        trust=m.trust, quote=m.quote, authority=m.authority,
        event_time_ms=m.event_time_ms if m.HasField("event_time_ms") else None,
        content_agent=m.content_agent, content_authority=m.content_authority,
        links=tuple(LinkRow(link.target_id, link.relation, link.author_agent, link.weight or DEFAULT_WEIGHT,
                            link.reason) for link in m.links),
        open_conflicts=tuple(m.open_conflicts),
        sources=tuple(source_dict(x) for x in m.sources),
        verification=Verification(m.verification.status, tuple(m.verification.paths), m.verification.checked_at_ms,
                                  m.verification.checked_by, m.verification.sources_at_ms)
        if m.HasField("verification") else None,
        procedure=procedures.from_payload({name: list(getattr(m, name)) for name in procedures.FIELDS}) or None,
        origin=Origin(m.origin.author_agent, m.origin.created_at_ms, m.origin.updated_by, m.origin.updated_at_ms)
        if m.HasField("origin") else None,
    )


def filter_proto(f: Filter) -> pb.SearchFilter:
    """The wire form of a Filter."""
    return pb.SearchFilter(
        scopes=f.scopes, types=f.types, tags=f.tags, layers=cast("tuple[pb.Layer, ...]", f.layers), authors=f.authors,
        created_after_ms=f.created_after_ms, created_before_ms=f.created_before_ms,
        include_archived=f.include_archived,
    )


def hit(r: pb.SearchResult) -> Hit:
    """A received search result as a Hit."""
    s = r.score
    return Hit(memory=memory_row(r.memory), vector_rank=s.vector_rank, vector_distance=s.vector_distance,
               keyword_rank=s.keyword_rank, bm25=s.bm25, keyword_coverage=s.keyword_coverage,
               vector_score=s.vector_score, keyword_score=s.keyword_score, rrf=s.rrf, fused=s.fused, final=s.final,
               neighbours=tuple(step(n) for n in r.neighbours), **{name: getattr(s, name) for name in COGNITIVE_PARTS})


def sweep_proto(r: SweepReport) -> pb.DecaySweepResponse:
    """The wire form of a lifecycle sweep's report."""
    return pb.DecaySweepResponse(
        as_of_ms=r.as_of_ms, dry_run=r.dry_run, examined=r.examined, decayed=r.decayed, archived=r.archived,
        entries_written=r.entries_written, head_seq=r.head_seq,
        decisions=[pb.SweepDecision(memory_id=d.memory_id, op=d.op, reason=d.reason) for d in r.decisions],
    )


def sweep_report(msg: pb.DecaySweepResponse) -> SweepReport:
    """A received sweep report (decisions without their payloads)."""
    return SweepReport(
        as_of_ms=msg.as_of_ms, dry_run=msg.dry_run, examined=msg.examined, decayed=msg.decayed,
        archived=msg.archived, entries_written=msg.entries_written, head_seq=msg.head_seq, done=True,
        decisions=[Decision(d.memory_id, d.op, {}, d.reason) for d in msg.decisions],
    )


_REPORT_COUNTS = ("as_of_ms", "dry_run", "examined", "linked", "merged", "pruned", "promoted", "entries_written",
                  "head_seq")


def consolidation_proto(r: ConsolidationReport) -> pb.ConsolidateResponse:
    """The wire form of a consolidation's report."""
    return pb.ConsolidateResponse(
        **{k: getattr(r, k) for k in _REPORT_COUNTS},
        decisions=[pb.ConsolidationDecision(memory_id=d.memory_id, op=d.op, reason=d.reason) for d in r.decisions])


def consolidation_report(msg: pb.ConsolidateResponse) -> ConsolidationReport:
    """A received consolidation report (decisions without their payloads)."""
    return ConsolidationReport(**{k: getattr(msg, k) for k in _REPORT_COUNTS},
                               decisions=[Decision(d.memory_id, d.op, {}, d.reason) for d in msg.decisions])


def topics_proto(t: Topics) -> pb.ListTopicsResponse:
    """The wire form of topic clusters."""
    return pb.ListTopicsResponse(topics=[pb.TopicCluster(**asdict(c)) for c in t.topics],
                                 novel=[pb.Novelty(**asdict(n)) for n in t.novel])


def topics(msg: pb.ListTopicsResponse) -> Topics:
    """Received topic clusters."""
    return Topics([Topic(c.id, c.scope, c.label, c.size, c.representative_id, c.cohesion, c.newest_ms)
                   for c in msg.topics],
                  [Surprise(n.memory_id, n.topic_id, n.surprise, n.created_at_ms) for n in msg.novel])


def op_result_proto(r: OpResult) -> pb.OpResult:
    """The wire form of one appended operation's result."""
    return pb.OpResult(op_id=r.op_id, memory_id=r.memory_id, seq=r.seq, version=r.version, replayed=r.replayed,
                       conflict_id=r.conflict_id, deduplicated=r.deduplicated)


def op_result(r: pb.OpResult) -> OpResult:
    """A received result of one appended operation."""
    return OpResult(r.op_id, r.memory_id, r.seq, r.version, r.replayed, r.conflict_id, r.deduplicated)


def stats_proto(s: Stats) -> pb.StatsResponse:
    """The wire form of the server's counts."""
    return pb.StatsResponse(
        head_seq=s.head_seq, live_memories=s.live_memories, archived_memories=s.archived_memories,
        by_layer=s.by_layer, by_scope=s.by_scope,
        agents=[pb.AgentOffset(agent_id=a.agent_id, acked_seq=a.acked_seq, lag=a.lag, acked_at_ms=a.acked_at_ms)
                for a in s.agents],
        embedding_model=model_proto(s.embedding_model), data_bytes=s.data_bytes, server_version=s.server_version,
        server_time_ms=s.server_time_ms,
        read_store=None if s.read_store is None else pb.ReadStoreStatus(**asdict(s.read_store)),
    )


def stats(msg: pb.StatsResponse) -> Stats:
    """Received counts of the server."""
    return Stats(
        head_seq=msg.head_seq, live_memories=msg.live_memories, archived_memories=msg.archived_memories,
        by_layer=dict(msg.by_layer), by_scope=dict(msg.by_scope),
        agents=[AgentOffset(a.agent_id, a.acked_seq, a.acked_at_ms, a.lag) for a in msg.agents],
        embedding_model=model_info(msg.embedding_model) if msg.HasField("embedding_model") else None,
        data_bytes=msg.data_bytes, server_version=msg.server_version, server_time_ms=msg.server_time_ms,
        read_store=ReadStoreStatus(**{f.name: getattr(msg.read_store, f.name) for f in fields(ReadStoreStatus)})
        if msg.HasField("read_store") else None,
    )
