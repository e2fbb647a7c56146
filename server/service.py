"""The gRPC servicer (asyncio): translates requests into store calls and back.

Every store error is mapped to its gRPC status exactly once, here, by
`_rpc`, which also writes refused calls to the audit log (`mnemosync.server.audit`).

The servicer runs on `grpc.aio`, so an open stream costs no thread: a
Subscribe stream that waits for news is a suspended coroutine. The store is
blocking (SQLite), so every store call runs in a bounded thread pool (the
`executor`, `ServerSettings.max_workers` threads); streams read the changelog
page by page through it, so a catch-up of any size needs bounded memory. Live
streams wake on `HeadSignal`, which the store's writer thread fires after each
commit; subscribers at the same position with the same scopes share one read
of the new entries (`_Pages`), so a commit costs one read, not one per stream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import replace
from typing import Any, NamedTuple, ParamSpec, TypeVar

import grpc

from mnemosync.kernel import codec, graph, graph_rank, overview
from mnemosync.kernel.errors import ChainBroken, InvalidArgument, MnemosyncError, NotFound, OutOfRange
from mnemosync.kernel.lifecycle import LifecycleSettings
from mnemosync.kernel.limits import Limits
from mnemosync.kernel.metadata import HEAD_METADATA_KEY, RETRY_AFTER_KEY
from mnemosync.server import audit as audit_module
from mnemosync.server import costly_reads, link_visibility
from mnemosync.server.chain_walks import SharedWalk
from mnemosync.server.clock import SYSTEM_CLOCK
from mnemosync.server.identity import Caller, IdentityResolver, MetadataIdentity, require_admin
from mnemosync.server.ledger import Ledger
from mnemosync.server.notary import Notary
from mnemosync.server.policy import Policy
from mnemosync.server.presence import Presence
from mnemosync.server.ratelimit import RateLimited, RequestGuard
from mnemosync.server.snapshots import snapshot_stream
from mnemosync.server.tolerant_decoding import UndecodableRequest
from mnemosync.v1 import memory_pb2 as pb

log = logging.getLogger(__name__)
_P = ParamSpec("_P")
_T = TypeVar("_T")

STREAM_PAGE = 1000
FLUSH_SECONDS = 1.0
"""How often buffered uses (Get) are written into the access statistics."""
MAX_CHECKPOINT_EVERY = 100_000
MAX_PROVE = 64
"""Entries one GetCheckpoint proves at most (`CheckpointRequest.prove`)."""
RETRY_READ_SECONDS = 1.0
IDENTITY_RECHECK_SECONDS = 2.0
"""How long an idle Subscribe stream waits before it checks its caller's certificate again (revocation, expiry):
the check also runs before every page a stream sends, so a revoked or expired agent receives nothing more."""
STREAMS = frozenset({"Sync", "SyncBatches", "Subscribe", "GetSnapshot"})
DELIVERY_SLOTS = 32
"""Live deliveries written at once. A commit wakes every Subscribe stream; without a bound, one commit queues a
write per stream on the event loop ahead of any call that arrives meanwhile."""
SLOT_HOLD_SECONDS = 0.05
"""How long one delivery may hold its slot: a subscriber that does not read (its flow-control window is full)
finishes its write outside the slots, so it cannot stall anyone else's."""
ON_LOOP_OPS = 16
ON_LOOP_BYTES = 32 * 1024
"""An Append of at most this many operations and bytes is validated on the event loop (an add of a short text
with its vector costs ~1 ms of Python there); a larger one on a pool thread, so that its validation and secret
scan do not hold up every other call the loop serves."""


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


async def _abort(context, exc: MnemosyncError):
    if isinstance(exc, RateLimited) and exc.retry_after is not None:
        context.set_trailing_metadata(((RETRY_AFTER_KEY, str(max(1, round(exc.retry_after * 1000)))),))
    await context.abort(grpc.StatusCode[exc.code], str(exc))


def _rpc(method):
    """Resolves the caller, applies its rate limit and stream cap, records the call (`self.presence`), and turns
    store errors into gRPC statuses.

    Decorates unary methods and stream methods alike; a stream method is a
    coroutine named in `STREAMS` that writes its messages with `context.write`
    and holds one of the agent's stream slots while it runs. The limits come
    from `self.guard` (a `mnemosync.server.ratelimit.RequestGuard`); without one nothing
    is limited. A refusal that matters for security (`mnemosync.server.audit.worth_auditing`)
    is written to `self.audit`.
    """
    name = method.__name__
    is_stream = name in STREAMS

    @functools.wraps(method)
    async def handler(self, request, context):
        caller = None
        try:
            caller = self.identity(context)
            if self.broken is not None:
                raise ChainBroken(self.broken)
            if isinstance(request, UndecodableRequest):
                raise InvalidArgument(request.describe())
            guard = self.guard
            if guard is not None:
                guard.admit(caller.agent_id)
            self.presence.called(caller, name)
            if name in costly_reads.COSTLY:
                async with self.costly.slot(caller.agent_id, name):
                    return await method(self, request, context, caller)
            if guard is None:
                return await method(self, request, context, caller)
            if not is_stream:
                return await method(self, request, context, caller)
            with guard.stream(caller.agent_id):
                return await method(self, request, context, caller)
        except MnemosyncError as exc:
            self._audit(name, request, context, caller, exc)
            await _abort(context, exc)

    return handler


class HeadSignal:
    """The changelog head as the event loop sees it, moved by the store's writer thread after each commit.

    `moved` may be called from any thread; everything else runs on the loop.
    Waiters wait on one shared asyncio event, replaced at each move, so a
    commit wakes every waiting stream with one loop callback.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, head: int):
        self.head = head
        self._loop = loop
        self._event = asyncio.Event()
        self.stopping = False

    def moved(self, head: int) -> None:
        """The store committed up to `head` (thread-safe)."""
        self._loop.call_soon_threadsafe(self._set, head)

    def stop(self) -> None:
        """Ends every wait (shutdown); call on the loop."""
        self.stopping = True
        self._set(self.head)

    def _set(self, head: int) -> None:
        self.head = max(self.head, head)
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait_past(self, seq: int, timeout: float | None = None) -> None:
        """Returns once the head is past `seq`, the server is stopping, or `timeout` seconds passed."""
        try:
            async with asyncio.timeout(timeout):
                while self.head <= seq and not self.stopping:
                    await self._event.wait()
        except TimeoutError:
            pass


def batch_bytes(messages: list[pb.ChangelogEntry]) -> bytes:
    """The serialized ChangelogBatch of `messages`: each entry serialized and framed as field 1, byte for byte what
    `ChangelogBatch(entries=messages).SerializeToString()` gives without first copying every entry into a batch."""
    parts = []
    for message in messages:
        data = message.SerializeToString()
        parts.append(_BATCH_ENTRY_TAG + _varint(len(data)))
        parts.append(data)
    return b"".join(parts)


_BATCH_ENTRY_TAG = bytes([(pb.ChangelogBatch.DESCRIPTOR.fields_by_name["entries"].number << 3) | 2])
"""Field 1 (entries), wire type 2 (length-delimited)."""


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


class _Outgoing(NamedTuple):
    """One live entry, serialized once for every stream that shares its page."""

    seq: int
    author: str
    """The writer's agent_id ("" for a withheld entry, which is never elided)."""
    entry: bytes
    elided: bytes
    """The marker sent in its place to its own writer (SubscribeRequest.elide_own_entries)."""


def _marker(entry: pb.ChangelogEntry) -> bytes:
    marker = pb.ChangelogEntry(seq=entry.seq, agent_id=entry.agent_id, prev_hash=entry.prev_hash, hash=entry.hash,
                               server_time_ms=entry.server_time_ms, elided=True)
    if entry.HasField("checkpoint"):
        marker.checkpoint.CopyFrom(entry.checkpoint)
    return marker.SerializeToString()


class _Pages:
    """Reads of the next page shared by every stream at the same position with the same scopes."""

    def __init__(self, read: Callable[[int, Caller, bool], Any]):
        self._read = read
        self._pending: dict[tuple, asyncio.Future] = {}

    async def after(self, since: int, caller: Caller, packed: bool) -> list[_Outgoing]:
        key = (since, caller.scopes, packed)
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._read(since, caller, packed))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)  # one stream going away must not cancel the others' read


class MemoryServicer:
    """Implements mnemosync.v1.MemoryService over a Ledger, on grpc.aio.

    Args:
        store: The storage.
        notary: Signs checkpoints of the store's transparency log.
        identity: Resolves each call's Caller (default: development-mode
            metadata, with authority and scopes from `policy`).
        policy: Agent grants and governance rules (default: built-in defaults).
        guard: Per-agent rate limit and stream cap (default: none).
        executor: Threads for the blocking store calls (default: the loop's default executor).
        audit: Where refused calls are recorded (default: nowhere).
        presence: Who called, when and how often (default: one on the system clock).
        page_size: Changelog entries Sync and Subscribe read from the store at a time.
        costly: Bounds on searches, walks, timelines and topics in flight (default: `Limits`' defaults).

    Call `start` on the event loop before serving and `stop_streams` at shutdown.
    """

    def __init__(self, store: Ledger, notary: Notary, identity: IdentityResolver | None = None,
                 policy: Policy | None = None, guard: RequestGuard | None = None, *, executor: Executor | None = None,
                 audit: audit_module.AuditLog | None = None, presence: Presence | None = None,
                 page_size: int = STREAM_PAGE, costly: costly_reads.CostlyReads | None = None,
                 snapshots: Any = None):
        self.store = store
        self.snapshots = snapshots
        """The server's snapshots (`mnemosync.server.snapshots.Snapshots`), or None: GetSnapshot is NOT_FOUND."""
        self.notary = notary
        self.page_size = page_size
        self.policy = policy or Policy()
        self.identity = identity or MetadataIdentity(policy=self.policy.caller_for)
        self.guard = guard
        self.costly = costly or costly_reads.CostlyReads.from_limits(Limits())
        self.audit = audit
        self.presence = presence or Presence(SYSTEM_CLOCK.now_ms)
        self._chain = SharedWalk(store.log.verify, self.presence.now_ms)
        self._executor = executor
        self._signal: HeadSignal | None = None
        self._unwatch: Callable[[], None] | None = None
        self._pages = _Pages(self._read_page)
        self._slots: asyncio.Semaphore | None = None
        self._maintenance: asyncio.Future | None = None
        self.broken: str | None = None
        """Set when the background audit found the chain broken (`mnemosync.server.chain_audit`): every call is then
        refused with it (DATA_LOSS)."""

    def start(self, lifecycle: LifecycleSettings | None = None) -> None:
        """Binds to the running event loop and starts following the store's commits, and with `lifecycle` the
        lifecycle's background work (`maintain`)."""
        if lifecycle is not None:
            self._maintenance = asyncio.ensure_future(self.maintain(lifecycle))
        signal = HeadSignal(asyncio.get_running_loop(), 0)
        self._unwatch = self.store.watch_head(signal.moved)  # before reading the head: no commit slips between
        signal.head = self.store.head_seq()
        self._signal = signal
        self._slots = asyncio.Semaphore(DELIVERY_SLOTS)

    def stop_streams(self) -> None:
        """Ends open Subscribe streams promptly (called on the loop at shutdown)."""
        if self._maintenance is not None:
            self._maintenance.cancel()
        if self._unwatch is not None:
            self._unwatch()
        if self._signal is not None:
            self._signal.stop()

    async def _blocking(self, fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`fn(*args, **kwargs)` on the executor's threads; typed, so a call into the ledger is checked as if direct."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def _read_page(self, since: int, caller: Caller, packed: bool) -> list[_Outgoing]:
        """The next page, the last entry carrying a signed checkpoint: each entry serialized once, whole and as
        its writer's marker, for every stream that shares it."""
        def read() -> list[_Outgoing]:
            entries = self.store.log.read(since, self.page_size, caller)
            page = []
            for e in entries:
                message = codec.entry_proto(self.notary.outgoing(e, close_page=e is entries[-1]), packed)
                page.append(_Outgoing(e.seq, "" if e.withheld else e.agent_id, message.SerializeToString(),
                                      b"" if e.withheld else _marker(message)))
            return page

        return await self._blocking(read)

    def _audit(self, method: str, request, context, caller: Caller | None, exc: MnemosyncError) -> None:
        if self.audit is not None and audit_module.worth_auditing(exc):
            self.audit.refused(method, request, context.peer(), caller, exc)

    @_rpc
    async def Append(self, request: pb.AppendRequest, context, caller: Caller) -> pb.AppendResponse:
        """A small Append (`ON_LOOP_OPS`, `ON_LOOP_BYTES`) is validated here, on the loop, and waits for its commit
        as a coroutine: no thread of the pool holds it (`Writes.append_async`); a larger one is validated on a pool
        thread (from `writes.FED_FROM` operations beside the writer). What must read the store or drop snapshots
        after the commit runs on the pool."""
        ops = [codec.op_request(op) for op in request.operations]
        model, writes = codec.model_info(request.embedding_model), self.store.writes
        if len(ops) <= ON_LOOP_OPS and request.ByteSize() <= ON_LOOP_BYTES:
            outcome = await writes.append_async(caller, ops, model, rules=self.policy.rules)
        else:
            outcome = await self._blocking(writes.append, caller, ops, model, rules=self.policy.rules)
        response = pb.AppendResponse(results=[codec.op_result_proto(r) for r in outcome.results],
                                     head_seq=outcome.head_seq)
        redacted = self.snapshots is not None and any(op.op == "redact" for op in ops)
        if not (redacted or request.return_entries):
            return response

        def finish() -> pb.AppendResponse:
            if redacted:
                self.snapshots.drop_redacted()  # they hold the text: gone before the redaction is answered
            if request.return_entries:
                response.entries.extend(self._written(outcome.results, caller))
            return response

        return await self._blocking(finish)

    def _written(self, results, caller: Caller) -> list[pb.ChangelogEntry]:
        """The entries an Append wrote (one request's entries are consecutive: the writer applies a request whole),
        as Sync sends them, the last closed by a checkpoint."""
        seqs = [r.seq for r in results if r.seq and not r.replayed]
        if not seqs:
            return []
        entries = self.store.log.read(min(seqs) - 1, max(seqs) - min(seqs) + 1, caller)
        return [codec.entry_proto(self.notary.outgoing(e, close_page=e is entries[-1]), packed=True)
                for e in entries]

    @_rpc
    async def Get(self, request: pb.GetRequest, context, caller: Caller) -> pb.GetResponse:
        return await self._readable(pb.GetResponse(memory=codec.memory_proto(
            await self._blocking(self.store.reads.get, request.id, caller))), caller)

    @_rpc
    async def Search(self, request: pb.SearchRequest, context, caller: Caller) -> pb.SearchResponse:
        if request.mode not in codec.MODES:
            raise InvalidArgument(f"mode must be one of {sorted(codec.MODES)}, got {request.mode}")
        for layer in request.filter.layers:
            if not 1 <= layer <= 4:
                raise InvalidArgument(f"filter.layers must hold layers 1 to 4, got {layer}")
        hits = await self._blocking(
            self.store.reads.search,
            query=request.query,
            vector=list(request.query_vector) or None,
            model=codec.model_info(request.embedding_model),
            limit=request.limit,
            filter=codec.search_filter(request.filter),
            mode=codec.MODES[request.mode],
            caller=caller,
            rerank=not request.fusion_only,
            layers=self.policy.rules.layers,
        )
        if not 0 <= request.neighbours <= graph.MAX_NEIGHBOURS:
            raise InvalidArgument(f"neighbours must be 0 to {graph.MAX_NEIGHBOURS}, got {request.neighbours}")
        if request.neighbours and hits:
            found = await self._blocking(self.store.graph.neighbours, [h.memory.id for h in hits], request.neighbours,
                                         caller)
            hits = [replace(h, neighbours=tuple(found[h.memory.id])) for h in hits]
        return await self._readable(pb.SearchResponse(results=[codec.hit_proto(h) for h in hits]), caller)

    @_rpc
    async def RecordUse(self, request: pb.RecordUseRequest, context, caller: Caller) -> pb.RecordUseResponse:
        kind = codec.USE_KINDS.get(request.kind)
        if kind is None:
            raise InvalidArgument(f"kind must be one of {sorted(pb.UseKind.keys())}, got {request.kind}")
        ids = list(dict.fromkeys(request.memory_ids))  # an id listed twice is one use (usage_stats: the quota)
        counted = await self._blocking(self.store.lifecycle.use, caller, ids, kind,
                                       self.policy.rules.layers)
        return pb.RecordUseResponse(counted=counted)

    @_rpc
    async def DecaySweep(self, request: pb.DecaySweepRequest, context, caller: Caller) -> pb.DecaySweepResponse:
        require_admin(caller, "DecaySweep")
        if request.now_ms < 0:
            raise InvalidArgument(f"now_ms must be >= 0, got {request.now_ms}")
        report = await self._blocking(self.store.lifecycle.sweep, now_ms=request.now_ms or None,
                                      dry_run=request.dry_run, layers=self.policy.rules.layers)
        return codec.sweep_proto(report)

    @_rpc
    async def Traverse(self, request: pb.TraverseRequest, context, caller: Caller) -> pb.TraverseResponse:
        walk = await self._blocking(self.store.graph.traverse, request.memory_id, caller=caller,
                                    edge_types=list(request.edge_types),
                                    direction=codec.direction(request.direction, "out"), depth=request.depth,
                                    limit=request.limit, include_archived=request.include_archived)
        return await self._readable(codec.walk_proto(walk), caller)

    @_rpc
    async def GraphSearch(self, request: pb.GraphSearchRequest, context, caller: Caller) -> pb.GraphSearchResponse:
        seeds, alpha, limit, types = graph_rank.check(seeds=request.seeds, alpha=request.alpha, limit=request.limit,
                                                      edge_types=list(request.edge_types))
        hits = await self._blocking(
            self.store.reads.search, query=request.query, vector=list(request.query_vector) or None,
            model=codec.model_info(request.embedding_model), limit=seeds,
            filter=codec.search_filter(pb.SearchFilter(scopes=request.scopes)), mode="hybrid", caller=caller,
            layers=self.policy.rules.layers)
        found = await self._blocking(self.store.graph.graph_search, [h.memory.id for h in hits], caller=caller,
                                     scopes=list(request.scopes), edge_types=types, alpha=alpha, limit=limit)
        return codec.graph_rank_proto(found)

    @_rpc
    async def GetCausalChain(self, request: pb.CausalChainRequest, context, caller: Caller) -> pb.TraverseResponse:
        walk = await self._blocking(self.store.graph.causal_chain, request.memory_id, caller=caller,
                                    direction=codec.direction(request.direction, "both"), depth=request.depth,
                                    limit=request.limit)
        return await self._readable(codec.walk_proto(walk), caller)

    @_rpc
    async def GetTimeline(self, request: pb.TimelineRequest, context, caller: Caller) -> pb.TimelineResponse:
        timeline = await self._blocking(self.store.graph.timeline, caller=caller, memory_id=request.memory_id,
                                        limit=request.limit, start_ms=request.start_ms or None,
                                        end_ms=request.end_ms or None, scopes=list(request.scopes),
                                        tags=list(request.tags), include_archived=request.include_archived)
        return await self._readable(codec.timeline_proto(timeline), caller)

    @_rpc
    async def ListTopics(self, request: pb.ListTopicsRequest, context, caller: Caller) -> pb.ListTopicsResponse:
        if request.novel_since_ms < 0:
            raise InvalidArgument(f"novel_since_ms must be >= 0, got {request.novel_since_ms}")
        found = await self._blocking(self.store.reads.list_topics, caller, scopes=tuple(request.scopes),
                                     limit=request.limit or 20, novel_since_ms=request.novel_since_ms)
        return codec.topics_proto(found)

    @_rpc
    async def Consolidate(self, request: pb.ConsolidateRequest, context, caller: Caller) -> pb.ConsolidateResponse:
        require_admin(caller, "Consolidate")
        if request.now_ms < 0:
            raise InvalidArgument(f"now_ms must be >= 0, got {request.now_ms}")
        report = await self._blocking(self.store.lifecycle.consolidate, now_ms=request.now_ms or None,
                                      dry_run=request.dry_run, links_only=request.links_only,
                                      layers=self.policy.rules.layers)
        return codec.consolidation_proto(report)

    async def maintain(self, settings: LifecycleSettings) -> None:
        """The lifecycle's background work, until cancelled: writes buffered uses every FLUSH_SECONDS, sweeps
        every `settings.sweep_interval_seconds` and consolidates every
        `store.lifecycle.consolidation.interval_seconds` of
        real time (never when it is 0); each is for the store's clock's now, so a test that moves its clock runs
        them by hand."""
        clock_ms = _monotonic_ms
        last_sweep = last_consolidation = clock_ms()
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            try:
                await self._blocking(self.store.lifecycle.flush_uses, self.policy.rules.layers)
                interval = settings.sweep_interval_seconds
                if interval > 0 and clock_ms() - last_sweep >= interval * 1000:
                    last_sweep = clock_ms()
                    report = await self._blocking(self.store.lifecycle.sweep, layers=self.policy.rules.layers)
                    log.info("lifecycle sweep: %d memories examined, %d decay and %d archive entries written",
                             report.examined, report.decayed, report.archived)
                interval = self.store.lifecycle.consolidation.interval_seconds
                if interval > 0 and clock_ms() - last_consolidation >= interval * 1000:
                    last_consolidation = clock_ms()
                    done = await self._blocking(self.store.lifecycle.consolidate, layers=self.policy.rules.layers)
                    log.info("consolidation: %d new memories, %d links, %d merged, %d pruned, %d promoted",
                             done.examined, done.linked, done.merged, done.pruned, done.promoted)
            except MnemosyncError as exc:
                log.warning("lifecycle maintenance failed (retried next time): %s", exc)

    @_rpc
    async def Sync(self, request: pb.SyncRequest, context, caller: Caller) -> None:
        async for messages in self._sync_pages(request, caller, STREAM_PAGE, list, context):
            for message in messages:
                await context.write(message)

    @_rpc
    async def SyncBatches(self, request: pb.SyncRequest, context, caller: Caller) -> None:
        async for batch in self._sync_pages(request, caller, min(request.checkpoint_every or STREAM_PAGE, STREAM_PAGE),
                                            batch_bytes, context):
            await context.write(batch)  # already serialized (`tolerant_decoding` passes bytes on)

    async def _sync_pages(self, request: pb.SyncRequest, caller: Caller, size: int,
                          finish: Callable[[list[pb.ChangelogEntry]], Any], context):
        """Sync's entries in reads of up to `size` (one executor call each, which also runs `finish` on the page's
        messages: what is yielded), a checkpoint on every checkpoint_every-th entry from since_seq and on the
        last; the caller's certificate is checked again before every page (`_still_valid`)."""
        if request.max_entries < 0:
            raise InvalidArgument(f"max_entries must be >= 0, got {request.max_entries}")
        every = request.checkpoint_every or STREAM_PAGE
        if not 1 <= every <= MAX_CHECKPOINT_EVERY:
            raise InvalidArgument(f"checkpoint_every must be 0 to {MAX_CHECKPOINT_EVERY}, got {every}")
        end = self.store.head_seq()
        if request.max_entries:
            end = min(end, request.since_seq + request.max_entries)
        since = start = request.since_seq
        packed = request.packed_embeddings

        def page(since: int) -> tuple[int, Any]:
            entries = self.store.log.read(since, min(size, self.page_size, end - since), caller)
            messages = [codec.entry_proto(self.notary.outgoing(
                e, close_page=e.seq == end or (e.seq - start) % every == 0), packed) for e in entries]
            return (entries[-1].seq if entries else 0), finish(messages)

        while since < end:
            last, page_out = await self._blocking(page, since)
            if not last:
                break
            self._still_valid(context)
            yield page_out
            since = last

    @_rpc
    async def Subscribe(self, request: pb.SubscribeRequest, context, caller: Caller) -> None:
        since = request.since_seq
        if since < 0:
            raise InvalidArgument(f"since_seq must be >= 0, got {since}")
        signal = self._signal
        assert signal is not None, "start() binds the servicer to its loop before it serves"
        # Headers go out at once, so a subscriber knows it is connected before any entry arrives.
        await context.send_initial_metadata(((HEAD_METADATA_KEY, str(signal.head)),))
        with self.presence.subscribed(caller):
            while not signal.stopping:
                self._still_valid(context)
                if signal.head <= since:
                    await signal.wait_past(since, IDENTITY_RECHECK_SECONDS)
                    continue
                entries = await self._pages.after(since, caller, request.packed_embeddings)
                if not entries:  # the head moved but the read saw nothing yet: look again at the next commit
                    await signal.wait_past(signal.head, RETRY_READ_SECONDS)
                    continue
                self._still_valid(context)
                own = caller.agent_id if request.elide_own_entries else None
                for item in entries:
                    await self._deliver(context, item.elided if item.author == own else item.entry)
                since = entries[-1].seq

    async def _readable(self, response, caller: Caller):
        """`response` without the links into scopes `caller` may not read (`mnemosync.server.link_visibility`)."""
        def scope_of(memory_id: str) -> str | None:
            try:
                return self.store.reads.get(memory_id).scope
            except NotFound:
                return None

        return await self._blocking(link_visibility.hide_unreadable_links, response, caller, scope_of)

    def _still_valid(self, context) -> None:
        """Resolves the stream's caller again: a certificate revoked or expired since the stream opened ends it
        (CertificateRefused, UNAUTHENTICATED, audited by `_rpc`) before it sends anything more, and so does a chain
        found broken since (`broken`, DATA_LOSS)."""
        self.identity(context)
        if self.broken is not None:
            raise ChainBroken(self.broken)

    async def _deliver(self, context, entry: bytes) -> None:
        """Writes one live entry, taking a delivery slot (see DELIVERY_SLOTS) for at most SLOT_HOLD_SECONDS."""
        assert self._slots is not None, "start() binds the servicer to its loop before it serves"
        async with self._slots:
            write = asyncio.ensure_future(context.write(entry))
            await asyncio.wait((write,), timeout=SLOT_HOLD_SECONDS)
        await write

    @_rpc
    async def Ack(self, request: pb.AckRequest, context, caller: Caller) -> pb.AckResponse:
        if request.HasField("outbox"):
            report = overview.outbox_report(request.outbox)
            if min(report.pending, report.failed, report.oldest_pending_ms) < 0:
                raise InvalidArgument("outbox.pending, outbox.failed and outbox.oldest_pending_ms must be >= 0")
            self.presence.report_outbox(caller, report)
        if request.HasField("sessions"):
            if request.sessions < 0:
                raise InvalidArgument(f"sessions must be >= 0, got {request.sessions}")
            self.presence.report_sessions(caller, request.sessions)
        acked, head = await self._blocking(self.store.writes.ack, caller.agent_id, request.seq)
        return pb.AckResponse(acked_seq=acked, head_seq=head)

    @_rpc
    async def Stats(self, request: pb.StatsRequest, context, caller: Caller) -> pb.StatsResponse:
        return codec.stats_proto(await self._blocking(self.store.operator.stats, caller))

    @_rpc
    async def ListConflicts(self, request: pb.ListConflictsRequest, context,
                            caller: Caller) -> pb.ListConflictsResponse:
        def listing():
            found = self.store.reads.conflicts(caller, include_resolved=request.include_resolved,
                                         memory_id=request.memory_id, limit=request.limit)
            return [codec.conflict_proto(c, self.store.reads.memory_version(c.memory_id)) for c in found]

        return pb.ListConflictsResponse(conflicts=await self._blocking(listing))

    @_rpc
    async def GetConflict(self, request: pb.GetConflictRequest, context, caller: Caller) -> pb.GetConflictResponse:
        def one():
            found = self.store.reads.conflict(request.id, caller)
            return codec.conflict_proto(found, self.store.reads.memory_version(found.memory_id))

        return pb.GetConflictResponse(conflict=await self._blocking(one))

    # -- the operator's view ---------------------------------------------------

    @_rpc
    async def ListAgents(self, request: pb.ListAgentsRequest, context, caller: Caller) -> pb.ListAgentsResponse:
        stats = await self._blocking(self.store.operator.stats)
        return overview.agents_proto(self.presence.view(stats.agents, stats.head_seq, caller))

    @_rpc
    async def ListChangelog(self, request: pb.ListChangelogRequest, context,
                            caller: Caller) -> pb.ListChangelogResponse:
        def page():
            head = self.store.head_seq()  # read first: the rows are at least as new
            rows = self.store.operator.changelog_page(
                caller, before_seq=request.before_seq, after_seq=request.after_seq, limit=request.limit,
                agent_id=request.agent_id, scope=request.scope, op=request.op, memory_id=request.memory_id)
            return overview.changelog_proto(rows, max([head, *(r.entry.seq for r in rows)]))

        return await self._blocking(page)

    @_rpc
    async def GetMemoryHistory(self, request: pb.GetMemoryHistoryRequest, context,
                               caller: Caller) -> pb.GetMemoryHistoryResponse:
        return overview.history_proto(await self._blocking(self.store.operator.history, request.memory_id, caller))

    @_rpc
    async def ListMemories(self, request: pb.ListMemoriesRequest, context, caller: Caller) -> pb.ListMemoriesResponse:
        found, total = await self._blocking(
            self.store.operator.memories, caller, scopes=tuple(request.scopes), type=request.type,
            author_agent=request.author_agent, layer=request.layer, id_prefix=request.id_prefix,
            include_archived=request.include_archived, limit=request.limit, offset=request.offset)
        return await self._readable(pb.ListMemoriesResponse(memories=[codec.memory_proto(m) for m in found],
                                                            total=total), caller)

    @_rpc
    async def GetActivity(self, request: pb.GetActivityRequest, context, caller: Caller) -> pb.GetActivityResponse:
        found = await self._blocking(self.store.operator.activity, caller, minutes=request.minutes)
        searches = self.presence.calls_per_minute("Search", found.buckets[0].start_ms)
        found = replace(found, counting_since_ms=self.presence.started_ms,
                        buckets=[replace(b, searches=searches.get(b.start_ms, 0)) for b in found.buckets])
        return overview.activity_proto(found)

    @_rpc
    async def VerifyChain(self, request: pb.VerifyChainRequest, context, caller: Caller) -> pb.VerifyChainResponse:
        return overview.chain_proto(await self._blocking(self._chain.check))

    @_rpc
    async def GetCheckpoint(self, request: pb.CheckpointRequest, context, caller: Caller) -> pb.CheckpointResponse:
        if request.size < 0:
            raise InvalidArgument(f"size must be >= 0, got {request.size}")

        def answer():
            head = self.store.head_seq()
            size = request.size or head
            if size > head:
                raise OutOfRange(f"size {size} is past the changelog head {head}")
            if not 0 <= request.consistency_from <= size:
                raise InvalidArgument(
                    f"consistency_from must be 0 to size ({size}), got {request.consistency_from}")
            if len(request.prove) > MAX_PROVE or any(not 1 <= seq <= size for seq in request.prove):
                raise InvalidArgument(f"prove must hold at most {MAX_PROVE} seqs, each 1 to size ({size})")
            return pb.CheckpointResponse(
                checkpoint=codec.checkpoint_proto(self.notary.checkpoint(size)),
                consistency_proof=self.store.log.consistency_proof(request.consistency_from, size),
                server_certificate=self.notary.key.certificate,
                proven=[self._proven(seq, size, caller) for seq in request.prove],
            )

        return await self._blocking(answer)

    def _proven(self, seq: int, size: int, caller: Caller) -> pb.AttestedEntry:
        """The entry at `seq` as Sync sends it to `caller` (whatever the changelog now holds there: the agent
        judges it), with its audit path in the tree of `size` entries."""
        found = self.store.log.read(seq - 1, 1, caller)
        entry = codec.entry_proto(self.notary.outgoing(found[0], close_page=False), packed=True) if found \
            else pb.ChangelogEntry()
        return pb.AttestedEntry(entry=entry, inclusion_path=self.store.log.inclusion_proof(seq, size))

    @_rpc
    async def GetSnapshot(self, request: pb.SnapshotRequest, context, caller: Caller) -> None:
        await snapshot_stream(self, request, context, caller)
