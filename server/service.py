"""The gRPC servicer: translates requests into store calls and back.

Every store error is mapped to its gRPC status exactly once, here, by
`_rpc`. Streams (Sync, Subscribe) read the changelog page by page, so a
catch-up of any size needs bounded memory.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading

import grpc

from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server.core import codec
from server.core.errors import InvalidArgument, MnemosyncError
from server.core.metadata import HEAD_METADATA_KEY, RETRY_AFTER_KEY
from server.identity import Caller, IdentityResolver, MetadataIdentity
from server.policy import Policy
from server.ratelimit import RateLimited, RequestGuard
from server.store import Store
from server.tolerant_decoding import UndecodableRequest

log = logging.getLogger(__name__)

SUBSCRIBE_POLL_SECONDS = 1.0


def _abort(context, exc: MnemosyncError):
    if isinstance(exc, RateLimited):
        context.set_trailing_metadata(((RETRY_AFTER_KEY, str(max(1, round(exc.retry_after * 1000)))),))
    context.abort(grpc.StatusCode[exc.code], str(exc))


def _rpc(method):
    """Resolves the caller, applies its rate limit and stream cap, and turns store errors into gRPC statuses.

    The limits come from `self.guard` (a `server.ratelimit.RequestGuard`); without one nothing is limited.
    """
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def stream(self, request, context):
            try:
                caller = self.identity(context)
                if isinstance(request, UndecodableRequest):
                    raise InvalidArgument(request.describe())
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
        page_size: Changelog entries Sync and Subscribe read from the store at a time.
    """

    def __init__(self, store: Store, identity: IdentityResolver | None = None, policy: Policy | None = None,
                 guard: RequestGuard | None = None, page_size: int = 1000):
        self.store = store
        self.page_size = page_size
        self.policy = policy or Policy()
        self.identity = identity or MetadataIdentity(policy=self.policy.caller_for)
        self.guard = guard
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
        end = self.store.head_seq()
        if request.max_entries:
            end = min(end, request.since_seq + request.max_entries)
        since = request.since_seq
        while since < end and context.is_active():
            entries = self.store.read(since, min(self.page_size, end - since), caller)
            if not entries:
                break
            for entry in entries:
                yield codec.entry_proto(entry)
            since = entries[-1].seq

    @_rpc
    def Subscribe(self, request: pb.SubscribeRequest, context, caller: Caller):
        since = request.since_seq
        if since < 0:
            raise InvalidArgument(f"since_seq must be >= 0, got {since}")
        # Headers go out at once, so a subscriber knows it is connected before any entry arrives.
        context.send_initial_metadata(((HEAD_METADATA_KEY, str(self.store.head_seq())),))
        while context.is_active() and not self._stopping.is_set():
            entries = self.store.read(since, self.page_size, caller)
            if not entries:
                self.store.wait_for_entries(since, SUBSCRIBE_POLL_SECONDS)
                continue
            for entry in entries:
                yield codec.entry_proto(entry)
            since = entries[-1].seq

    @_rpc
    def Ack(self, request: pb.AckRequest, context, caller: Caller) -> pb.AckResponse:
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
