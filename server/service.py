"""The gRPC servicer: translates requests into store calls and back.

Every store error is mapped to its gRPC status exactly once, here, by
`_rpc`. Streams (Sync, Subscribe) read the changelog page by page, so a
catch-up of any size needs bounded memory; the notary (`server.notary`) puts a
signed checkpoint on the entry that closes each page and the proof of its
redaction on a blanked entry.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from dataclasses import replace

import grpc

from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server.chain_walks import SharedWalk
from server.clock import SYSTEM_CLOCK
from server.core import codec, overview
from server.core.errors import InvalidArgument, MnemosyncError, OutOfRange
from server.core.metadata import HEAD_METADATA_KEY, RETRY_AFTER_KEY
from server.identity import Caller, IdentityResolver, MetadataIdentity
from server.notary import Notary
from server.policy import Policy
from server.presence import Presence
from server.ratelimit import RateLimited, RequestGuard
from server.store import Store
from server.tolerant_decoding import UndecodableRequest

log = logging.getLogger(__name__)

STREAM_PAGE = 1000
SUBSCRIBE_POLL_SECONDS = 1.0
MAX_CHECKPOINT_EVERY = 100_000


def _abort(context, exc: MnemosyncError):
    if isinstance(exc, RateLimited):
        context.set_trailing_metadata(((RETRY_AFTER_KEY, str(max(1, round(exc.retry_after * 1000)))),))
    context.abort(grpc.StatusCode[exc.code], str(exc))


def _rpc(method):
    """Resolves the caller, applies its rate limit and stream cap, records the call (`self.presence`), and turns
    store errors into gRPC statuses.

    The limits come from `self.guard` (a `server.ratelimit.RequestGuard`); without one nothing is limited.
    """
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def stream(self, request, context):
            try:
                caller = self.identity(context)
                if isinstance(request, UndecodableRequest):
                    raise InvalidArgument(request.describe())
                self.presence.called(caller, method.__name__)
                guard = self.guard
                if guard is None:
                    yield from method(self, request, context, caller)
                    return
                guard.admit(caller.agent_id)
                with guard.stream(caller.agent_id):
                    yield from method(self, request, context, caller)
            except MnemosyncError as exc:
                _abort(context, exc)

        return stream

    @functools.wraps(method)
    def unary(self, request, context):
        try:
            caller = self.identity(context)
            if isinstance(request, UndecodableRequest):
                raise InvalidArgument(request.describe())
            guard = self.guard
            if guard is not None:
                guard.admit(caller.agent_id)
            self.presence.called(caller, method.__name__)
            return method(self, request, context, caller)
        except MnemosyncError as exc:
            _abort(context, exc)

    return unary


class MemoryServicer(pb_grpc.MemoryServiceServicer):
    """Implements mnemosync.v1.MemoryService over a Store.

    Args:
        store: The storage.
        identity: Resolves each call's Caller (default: development-mode
            metadata, with authority and scopes from `policy`).
        policy: Agent grants and governance rules (default: built-in defaults).
        guard: Per-agent rate limit and stream cap (default: none).
        presence: Who called, when and how often (default: one on the system clock).
        notary: Signs checkpoints of the store's transparency log.
    """

    def __init__(self, store: Store, notary: Notary, identity: IdentityResolver | None = None,
                 policy: Policy | None = None, guard: RequestGuard | None = None, presence: Presence | None = None):
        self.store = store
        self.notary = notary
        self.policy = policy or Policy()
        self.identity = identity or MetadataIdentity(policy=self.policy.caller_for)
        self.guard = guard
        self.presence = presence or Presence(SYSTEM_CLOCK.now_ms)
        self._chain = SharedWalk(store.verify, self.presence.now_ms)
        self._stopping = threading.Event()

    def stop_streams(self) -> None:
        """Ends open Subscribe streams promptly (called at shutdown)."""
        self._stopping.set()
        self.store.wake_waiters()

    @_rpc
    def Append(self, request: pb.AppendRequest, context, caller: Caller) -> pb.AppendResponse:
        outcome = self.store.append(
            caller,
            [codec.op_request(op) for op in request.operations],
            codec.model_info(request.embedding_model),
            rules=self.policy.rules,
        )
        return pb.AppendResponse(results=[codec.op_result_proto(r) for r in outcome.results],
                                 head_seq=outcome.head_seq)

    @_rpc
    def Get(self, request: pb.GetRequest, context, caller: Caller) -> pb.GetResponse:
        return pb.GetResponse(memory=codec.memory_proto(self.store.get(request.id, caller)))

    @_rpc
    def Search(self, request: pb.SearchRequest, context, caller: Caller) -> pb.SearchResponse:
        if request.mode not in codec.MODES:
            raise InvalidArgument(f"mode must be one of {sorted(codec.MODES)}, got {request.mode}")
        for layer in request.filter.layers:
            if not 1 <= layer <= 4:
                raise InvalidArgument(f"filter.layers must hold layers 1 to 4, got {layer}")
        hits = self.store.search(
            query=request.query,
            vector=list(request.query_vector) or None,
            model=codec.model_info(request.embedding_model),
            limit=request.limit,
            filter=codec.search_filter(request.filter),
            mode=codec.MODES[request.mode],
            caller=caller,
        )
        return pb.SearchResponse(results=[codec.hit_proto(h) for h in hits])

    @_rpc
    def Sync(self, request: pb.SyncRequest, context, caller: Caller):
        if request.max_entries < 0:
            raise InvalidArgument(f"max_entries must be >= 0, got {request.max_entries}")
        every = request.checkpoint_every or STREAM_PAGE
        if not 1 <= every <= MAX_CHECKPOINT_EVERY:
            raise InvalidArgument(f"checkpoint_every must be 0 to {MAX_CHECKPOINT_EVERY}, got {every}")
        end = self.store.head_seq()
        if request.max_entries:
            end = min(end, request.since_seq + request.max_entries)
        since = start = request.since_seq
        while since < end and context.is_active():
            entries = self.store.read(since, min(STREAM_PAGE, end - since), caller)
            if not entries:
                break
            for entry in entries:
                closes = entry.seq == end or (entry.seq - start) % every == 0
                yield codec.entry_proto(self.notary.outgoing(entry, close_page=closes))
            since = entries[-1].seq

    @_rpc
    def Subscribe(self, request: pb.SubscribeRequest, context, caller: Caller):
        since = request.since_seq
        if since < 0:
            raise InvalidArgument(f"since_seq must be >= 0, got {since}")
        # Headers go out at once, so a subscriber knows it is connected before any entry arrives.
        context.send_initial_metadata(((HEAD_METADATA_KEY, str(self.store.head_seq())),))
        with self.presence.subscribed(caller):
            while context.is_active() and not self._stopping.is_set():
                entries = self.store.read(since, STREAM_PAGE, caller)
                if not entries:
                    self.store.wait_for_entries(since, SUBSCRIBE_POLL_SECONDS)
                    continue
                for entry in entries:
                    yield codec.entry_proto(self.notary.outgoing(entry, close_page=entry is entries[-1]))
                since = entries[-1].seq

    @_rpc
    def Ack(self, request: pb.AckRequest, context, caller: Caller) -> pb.AckResponse:
        if request.HasField("outbox"):
            report = overview.outbox_report(request.outbox)
            if min(report.pending, report.failed, report.oldest_pending_ms) < 0:
                raise InvalidArgument("outbox.pending, outbox.failed and outbox.oldest_pending_ms must be >= 0")
            self.presence.report_outbox(caller, report)
        acked, head = self.store.ack(caller.agent_id, request.seq)
        return pb.AckResponse(acked_seq=acked, head_seq=head)

    @_rpc
    def Stats(self, request: pb.StatsRequest, context, caller: Caller) -> pb.StatsResponse:
        return codec.stats_proto(self.store.stats())

    @_rpc
    def ListConflicts(self, request: pb.ListConflictsRequest, context, caller: Caller) -> pb.ListConflictsResponse:
        found = self.store.conflicts(caller, include_resolved=request.include_resolved,
                                     memory_id=request.memory_id, limit=request.limit)
        return pb.ListConflictsResponse(
            conflicts=[codec.conflict_proto(c, self.store.memory_version(c.memory_id)) for c in found]
        )

    @_rpc
    def GetConflict(self, request: pb.GetConflictRequest, context, caller: Caller) -> pb.GetConflictResponse:
        found = self.store.conflict(request.id, caller)
        return pb.GetConflictResponse(conflict=codec.conflict_proto(found, self.store.memory_version(found.memory_id)))

    # -- the operator's view ---------------------------------------------------

    @_rpc
    def ListAgents(self, request: pb.ListAgentsRequest, context, caller: Caller) -> pb.ListAgentsResponse:
        stats = self.store.stats()
        return overview.agents_proto(self.presence.view(stats.agents, stats.head_seq, caller))

    @_rpc
    def ListChangelog(self, request: pb.ListChangelogRequest, context, caller: Caller) -> pb.ListChangelogResponse:
        head = self.store.head_seq()  # read first: the rows are at least as new
        rows = self.store.changelog_page(caller, before_seq=request.before_seq, after_seq=request.after_seq,
                                         limit=request.limit, agent_id=request.agent_id, scope=request.scope,
                                         op=request.op, memory_id=request.memory_id)
        return overview.changelog_proto(rows, max([head, *(r.entry.seq for r in rows)]))

    @_rpc
    def GetMemoryHistory(self, request: pb.GetMemoryHistoryRequest, context,
                         caller: Caller) -> pb.GetMemoryHistoryResponse:
        return overview.history_proto(self.store.history(request.memory_id, caller))

    @_rpc
    def GetActivity(self, request: pb.GetActivityRequest, context, caller: Caller) -> pb.GetActivityResponse:
        found = self.store.activity(caller, minutes=request.minutes)
        searches = self.presence.calls_per_minute("Search", found.buckets[0].start_ms)
        found = replace(found, counting_since_ms=self.presence.started_ms,
                        buckets=[replace(b, searches=searches.get(b.start_ms, 0)) for b in found.buckets])
        return overview.activity_proto(found)

    @_rpc
    def VerifyChain(self, request: pb.VerifyChainRequest, context, caller: Caller) -> pb.VerifyChainResponse:
        return overview.chain_proto(self._chain.check())

    @_rpc
    def GetCheckpoint(self, request: pb.CheckpointRequest, context, caller: Caller) -> pb.CheckpointResponse:
        head = self.store.head_seq()
        if request.size < 0:
            raise InvalidArgument(f"size must be >= 0, got {request.size}")
        size = request.size or head
        if size > head:
            raise OutOfRange(f"size {size} is past the changelog head {head}")
        if not 0 <= request.consistency_from <= size:
            raise InvalidArgument(f"consistency_from must be 0 to size ({size}), got {request.consistency_from}")
        return pb.CheckpointResponse(
            checkpoint=codec.checkpoint_proto(self.notary.checkpoint(size)),
            consistency_proof=self.store.consistency_proof(request.consistency_from, size),
            server_certificate=self.notary.key.certificate,
        )
