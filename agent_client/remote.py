"""The gRPC connection to the server: it speaks the core's types and raises the kernel's typed errors.

Every call, and every message of a stream, goes through `translate` when it
fails, the agent's one map from a gRPC status to a typed error: UNAVAILABLE and
DEADLINE_EXCEEDED mean "offline" (`ServerUnavailable`), any other status is the
server's refusal, raised as the kernel's error of that code
(`mnemosync.kernel.errors`: NOT_FOUND as `NotFound`, ABORTED as `StaleVersion`,
…) with the server's message unchanged, or as `CallFailed` for a status no
kernel error stands for. Requests are built and responses read with
`mnemosync.kernel.codec`, so callers get `MemoryRow`s, `Hit`s, `Entry`s and
`OpResult`s, never protobuf messages or grpc exceptions.

With mTLS a failed handshake also arrives as UNAVAILABLE; `translate` then
asks `mnemosync.agent.tls.diagnose` what went wrong (expired, wrong CA, hostname
mismatch, plain-text server) and raises TlsError, which is not "offline":
writes are not queued behind a certificate problem. A revoked certificate is
refused by the server itself (UNAUTHENTICATED, with its message).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import NamedTuple, cast

import grpc

from mnemosync.agent.errors import CallFailed, ServerUnavailable, TlsError
from mnemosync.agent.own_writes import Elided
from mnemosync.kernel import codec, overview
from mnemosync.kernel.checkpoint import Attested, CheckpointReply
from mnemosync.kernel.conflict_projection import Conflict
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import (
    AlreadyExists,
    ChainBroken,
    CodedError,
    FailedPrecondition,
    InvalidArgument,
    MnemosyncError,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    StaleVersion,
    Unauthenticated,
)
from mnemosync.kernel.graph import Timeline, Walk
from mnemosync.kernel.graph_rank import GraphRank
from mnemosync.kernel.lifecycle import SweepReport
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.metadata import AGENT_METADATA_KEY, RETRY_AFTER_KEY
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import ValidOp
from mnemosync.kernel.outcomes import OpResult, Stats
from mnemosync.kernel.overview import Activity, AgentsView, ChainCheck, ChangelogRow, MemoryHistory, OutboxReport
from mnemosync.kernel.search import Filter, Hit
from mnemosync.kernel.snapshot import Manifest, ReplicaSeal, manifest_from_proto
from mnemosync.kernel.topics import Topics
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

_OFFLINE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
RECONNECT_BACKOFF_MS = 1000
"""The longest wait of gRPC's connection backoff: while it runs, calls to a server that was down fail at once
without trying, so with the live stream's one-second retries (`mnemosync.agent.sync.MAX_BACKOFF`) a returning
server is reached within about 2 s."""


REFUSALS: dict[grpc.StatusCode, Callable[[str], MnemosyncError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: lambda message: StaleVersion(message=message),
    grpc.StatusCode.OUT_OF_RANGE: OutOfRange,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.DATA_LOSS: ChainBroken,
}
"""The kernel's error for each status the server refuses with (RESOURCE_EXHAUSTED adds its retry_after)."""


def refusal(code: grpc.StatusCode, message: str) -> MnemosyncError:
    """The typed error for a status the server refused a call with (not UNAVAILABLE: that is `translate`'s)."""
    make = REFUSALS.get(code)
    return make(message) if make is not None else CallFailed(code.name, message)


def translate(exc: grpc.RpcError, address: str, tls=None) -> CodedError:
    """The typed error for a failed call.

    Args:
        exc: The grpc error.
        address: The server address, for messages.
        tls: The channel's `mnemosync.agent.tls.AgentTls`, if it uses mTLS (for diagnosing handshakes).
    """
    code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    if code in _OFFLINE_CODES:
        if tls is not None and code == grpc.StatusCode.UNAVAILABLE:
            from mnemosync.agent.tls import diagnose, looks_like_handshake_failure

            reason = diagnose(tls, address) if looks_like_handshake_failure(details) else None
            if reason:
                return TlsError(reason)
        hint = "; is `mnemosync serve` running there? (the address comes from --server or MNEMOSYNC_SERVER)"
        if tls is None and "socket closed" in (details or "").lower():
            hint = "; if that server uses TLS, connect with --cert-dir instead of --insecure"
        log.debug("%s: %s: %s", address, code.name, details)
        return ServerUnavailable(f"mnemosync server at {address} is unreachable ({_last_reason(code, details)}){hint}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ResourceExhausted(details or code.name, _retry_after(exc))
    return refusal(code, details or code.name)


def _log_failure(call) -> None:
    if not call.cancelled() and call.exception() is not None:
        log.info("a background acknowledgement failed: %s", call.exception())


def _last_reason(code: grpc.StatusCode, details: str | None) -> str:
    """The last, most specific reason in gRPC's details ("failed to connect to all addresses; last error: UNKNOWN:
    ipv4:127.0.0.1:1: Failed to connect to remote host: Connection refused" reads "connection refused")."""
    text = (details or "").strip()
    if not text:
        return code.name.lower().replace("_", " ")
    last = text.rsplit(": ", 1)[-1].strip()
    return last[:1].lower() + last[1:] if last else text


def _retry_after(exc: grpc.Call) -> float | None:
    for key, value in exc.trailing_metadata() or ():
        if key == RETRY_AFTER_KEY and value.isdigit():
            return int(value) / 1000
    return None


class Subscription:
    """A live Subscribe stream: iterating yields entries as the server commits them; `cancel` ends it.

    Errors, while waiting to be accepted or while iterating, arrive as the
    typed errors (a cancelled stream as a `CallFailed` with code CANCELLED).
    """

    def __init__(self, call, translated: Callable[[], AbstractContextManager]):
        self._call = call
        self._translated = translated

    def wait_accepted(self) -> None:
        """Blocks until the server has accepted the stream (its headers arrived).

        Raises:
            CodedError: the stream failed instead (ServerUnavailable when the server cannot be reached).
        """
        with self._translated():
            self._call.initial_metadata()
            if self._call.done() and self._call.code() != grpc.StatusCode.OK:
                raise self._call  # the call is its own RpcError: it ended before the server accepted it

    def __iter__(self) -> Iterator[Entry | Elided]:
        """Entries, and with SubscribeRequest.elide_own_entries the `Elided` markers of this agent's own."""
        with self._translated():
            for message in self._call:
                if message.elided:
                    yield Elided(message.seq, message.prev_hash, message.hash,
                                 codec.checkpoint_from_proto(message.checkpoint)
                                 if message.HasField("checkpoint") else None)
                else:
                    yield codec.entry_from_proto(message)

    def cancel(self) -> None:
        """Ends the stream (the iterating thread then gets the CANCELLED refusal)."""
        self._call.cancel()


class SyncStream:
    """A SyncBatches stream: iterating yields each page as received (`ReceivedPage`); `cancel` ends it (from any
    thread).

    Errors while iterating arrive as typed errors (a cancelled stream as a `CallFailed` with code CANCELLED).
    """

    def __init__(self, call, translated: Callable[[], AbstractContextManager]):
        self._call = call
        self._translated = translated

    def __iter__(self) -> Iterator[ReceivedPage]:
        with self._translated():
            for batch in self._call:
                yield ReceivedPage(batch)

    def cancel(self) -> None:
        """Ends the stream (an iterating thread then gets the CANCELLED refusal)."""
        self._call.cancel()


class ReceivedPage:
    """One page of a SyncBatches stream, parsed but not yet decoded.

    Receiving can run on a thread of its own (it waits without the GIL); decoding is Python work, so it belongs on
    the thread that applies the page: on another thread it would hold the GIL the applying thread needs between
    its SQLite steps.
    """

    def __init__(self, batch):
        self._batch = batch

    def entries(self) -> list[Entry]:
        """The page's entries, decoded."""
        return [codec.entry_from_proto(message) for message in self._batch.entries]


class SnapshotChunk(NamedTuple):
    """One message of GetSnapshot: the manifest and seal on the first only, where `data` starts in the file."""

    manifest: Manifest | None
    seal: ReplicaSeal | None
    offset: int
    data: bytes


class Remote:
    """A channel to one server with one agent identity.

    Args:
        address: HOST:PORT of the server.
        agent_id: Sent as call metadata in development mode (with mTLS the
            server reads it from the certificate instead).
        insecure: Use a plain-text channel.
        timeout: Seconds for unary calls.
        tls: The agent's certificate files (`mnemosync.agent.tls.AgentTls`); required unless insecure.

    Raises:
        TlsError: neither insecure nor certificate files, or the files are missing.
    """

    def __init__(self, address: str, agent_id: str, *, insecure: bool = True, timeout: float = 10.0,
                 tls=None):
        self.address = address
        self.timeout = timeout
        self._closed = False
        self.tls = None if insecure else tls
        self.outbox_report: Callable[[], OutboxReport] | None = None
        self.sessions_report: Callable[[], int] | None = None
        """How many MCP sessions this agent's local process serves, sent with every Ack (None: not a local
        agent process)."""
        """What Ack reports about this agent's outbox (set by the `AgentClient` that owns one)."""
        self._metadata = ((AGENT_METADATA_KEY, agent_id),) if insecure else ()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
            # Channels to one address otherwise share a process-wide subchannel, so one
            # channel's connection backoff would make another fail fast.
            ("grpc.use_local_subchannel_pool", 1),
        ]
        if insecure:
            self._channel = grpc.insecure_channel(address, options=options)
        elif tls is None:
            raise TlsError(
                "no agent certificate: give --cert-dir DIR (MNEMOSYNC_CERT_DIR), the directory "
                "`mnemosync ca issue-agent NAME` wrote, or --insecure for a development server on loopback"
            )
        else:
            self._channel = grpc.secure_channel(address, tls.credentials(),
                                                options=options + tls.channel_options())
        self._stub = pb_grpc.MemoryServiceStub(self._channel)

    @classmethod
    def from_settings(cls, settings, agent_id: str) -> Remote:
        """The connection `settings` (an `mnemosync.agent.client_settings.ClientSettings`) describe."""
        return cls(settings.server, agent_id, insecure=settings.insecure, timeout=settings.timeout,
                   tls=settings.tls())

    def close(self) -> None:
        """Closes the channel (cancelling open streams); later calls raise ServerUnavailable."""
        self._closed = True
        self._channel.close()

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Turns a failed call into its typed error (`translate`)."""
        try:
            yield
        except grpc.RpcError as exc:
            raise translate(exc, self.address, self.tls) from None
        except ValueError:
            if self._closed:  # grpc: "Cannot invoke RPC on closed channel!"
                raise ServerUnavailable(f"the connection to the mnemosync server at {self.address} was closed") \
                    from None
            raise

    def _call(self, method: str, request):
        with self._translated():
            return getattr(self._stub, method)(request, metadata=self._metadata, timeout=self.timeout)

    def append(self, operations: Sequence[ValidOp], model: ModelInfo | None) -> list[OpResult]:
        """Append: writes the operations in one batch; their results in order."""
        return self.write(operations, model, entries=False)[0]

    def write(self, operations: Sequence[ValidOp], model: ModelInfo | None, *,
              entries: bool = True) -> tuple[list[OpResult], list[Entry]]:
        """Append, asking for the entries it wrote (AppendRequest.return_entries): the results in order, and the
        entries (consecutive, the last closed by a checkpoint) for the writer's cache."""
        request = pb.AppendRequest(operations=[codec.operation_proto(op) for op in operations],
                                   embedding_model=codec.model_proto(model), return_entries=entries)
        response = self._call("Append", request)
        return ([codec.op_result(r) for r in response.results],
                [codec.entry_from_proto(e) for e in response.entries])

    def get(self, memory_id: str) -> MemoryRow:
        """Get: the memory as the server has it (secrets masked)."""
        return codec.memory_row(self._call("Get", pb.GetRequest(id=memory_id)).memory)

    def search(self, query: str, *, vector: list[float] | None, model: ModelInfo | None, limit: int,
               filter: Filter, mode: str, neighbours: int = 0) -> list[Hit]:
        """Search: the server's hits, best first, with their score parts (and `neighbours` graph neighbours)."""
        request = pb.SearchRequest(query=query, query_vector=vector or [],
                                   embedding_model=codec.model_proto(model) if vector else None, limit=limit,
                                   filter=codec.filter_proto(filter), mode=codec.MODE_VALUES[mode],
                                   neighbours=neighbours)
        return [codec.hit(r) for r in self._call("Search", request).results]

    def traverse(self, memory_id: str, *, edge_types: Sequence[str], direction: str, depth: int, limit: int,
                 include_archived: bool) -> Walk:
        """Traverse: the memories within `depth` links of one memory, as the server walks them."""
        request = pb.TraverseRequest(memory_id=memory_id, edge_types=list(edge_types),
                                     direction=codec.DIRECTION_VALUES.get(direction, direction), depth=depth,
                                     limit=limit, include_archived=include_archived)
        return codec.walk(self._call("Traverse", request))

    def graph_search(self, query: str, *, vector: list[float] | None, model: ModelInfo | None, seeds: int,
                     alpha: float, limit: int, scopes: Sequence[str], edge_types: Sequence[str]) -> GraphRank:
        """GraphSearch: Personalized PageRank from the server's hits of `query`, in this agent's scopes."""
        request = pb.GraphSearchRequest(query=query, query_vector=vector or [],
                                        embedding_model=codec.model_proto(model) if vector else None,
                                        scopes=list(scopes), seeds=seeds, alpha=alpha, limit=limit,
                                        edge_types=list(edge_types))
        return codec.graph_rank(self._call("GraphSearch", request))

    def causal_chain(self, memory_id: str, *, direction: str, depth: int, limit: int) -> Walk:
        """GetCausalChain: causes ("in") and effects ("out") of one memory."""
        request = pb.CausalChainRequest(memory_id=memory_id, direction=codec.DIRECTION_VALUES.get(direction, direction),
                                        depth=depth, limit=limit)
        return codec.walk(self._call("GetCausalChain", request))

    def timeline(self, *, memory_id: str, limit: int, start_ms: int | None, end_ms: int | None,
                 scopes: Sequence[str], tags: Sequence[str], include_archived: bool) -> Timeline:
        """GetTimeline: memories by their own event time, around one memory or in a window."""
        request = pb.TimelineRequest(memory_id=memory_id, limit=limit, start_ms=start_ms or 0, end_ms=end_ms or 0,
                                     scopes=list(scopes), tags=list(tags), include_archived=include_archived)
        return codec.timeline(self._call("GetTimeline", request))

    def record_use(self, memory_ids: Sequence[str], kind: str = "used") -> int:
        """RecordUse: reports uses of memories ("used" or "recall"); returns how many counted."""
        request = pb.RecordUseRequest(memory_ids=list(memory_ids), kind=codec.USE_KIND_VALUES[kind])
        return self._call("RecordUse", request).counted

    def decay_sweep(self, *, dry_run: bool = False, now_ms: int = 0) -> SweepReport:
        """DecaySweep (admin): runs the lifecycle sweep, or with `dry_run` reports what it would write."""
        return codec.sweep_report(self._call("DecaySweep", pb.DecaySweepRequest(dry_run=dry_run, now_ms=now_ms)))

    def consolidate(self, *, dry_run: bool = False, now_ms: int = 0, links_only: bool = False) -> ConsolidationReport:
        """Consolidate (admin): runs consolidation, or with `dry_run` reports what it would write."""
        return codec.consolidation_report(self._call("Consolidate", pb.ConsolidateRequest(
            dry_run=dry_run, now_ms=now_ms, links_only=links_only)))

    def list_topics(self, *, scopes: Sequence[str] = (), limit: int = 20, novel_since_ms: int = 0) -> Topics:
        """ListTopics: the server's topic clusters of what this agent may read."""
        return codec.topics(self._call("ListTopics", pb.ListTopicsRequest(
            scopes=list(scopes), limit=limit, novel_since_ms=novel_since_ms)))

    def ack(self, seq: int) -> tuple[int, int]:
        """Ack: records this agent's offset, with its outbox when `outbox_report` is set; returns (acked_seq,
        head_seq)."""
        response = self._call("Ack", self._ack_request(seq))
        return response.acked_seq, response.head_seq

    def ack_in_background(self, seq: int) -> None:
        """Ack without waiting for the answer (a failure is only logged: the next acknowledgement carries a
        newer offset anyway)."""
        try:
            call = self._stub.Ack.future(self._ack_request(seq), metadata=self._metadata, timeout=self.timeout)
        except ValueError:  # the channel is closed
            return
        call.add_done_callback(_log_failure)

    def _ack_request(self, seq: int) -> pb.AckRequest:
        report = self.outbox_report() if self.outbox_report is not None else None
        sessions = self.sessions_report() if self.sessions_report is not None else None
        return pb.AckRequest(seq=seq, outbox=overview.outbox_proto(report), sessions=sessions)

    def stats(self) -> Stats:
        """Stats: the server's counts and every agent's offset."""
        return codec.stats(self._call("Stats", pb.StatsRequest()))

    def list_conflicts(self, *, include_resolved: bool = False, memory_id: str = "",
                       limit: int = 100) -> list[tuple[Conflict, int]]:
        """ListConflicts: each conflict with its memory's current version."""
        request = pb.ListConflictsRequest(include_resolved=include_resolved, memory_id=memory_id, limit=limit)
        return [codec.conflict_from_proto(c) for c in self._call("ListConflicts", request).conflicts]

    def get_conflict(self, conflict_id: int) -> tuple[Conflict, int]:
        """GetConflict: the conflict with its memory's current version."""
        return codec.conflict_from_proto(self._call("GetConflict", pb.GetConflictRequest(id=conflict_id)).conflict)

    # -- the operator's view (see memory.proto) ---------------------------------------------------------------------

    def list_agents(self) -> AgentsView:
        """ListAgents: every agent's grant, offset, lag, presence and outbox, and this caller as the server sees it."""
        return overview.agents_view(self._call("ListAgents", pb.ListAgentsRequest()))

    def list_changelog(self, *, before_seq: int = 0, after_seq: int = 0, limit: int = 0, agent_id: str = "",
                       scope: str = "", op: str = "", memory_id: str = "") -> tuple[list[ChangelogRow], int]:
        """ListChangelog: entries newest first with their scopes, filtered, and the head when read."""
        request = pb.ListChangelogRequest(before_seq=before_seq, after_seq=after_seq, limit=limit, agent_id=agent_id,
                                          scope=scope, op=op, memory_id=memory_id)
        return overview.changelog_rows(self._call("ListChangelog", request))

    def memory_history(self, memory_id: str) -> MemoryHistory:
        """GetMemoryHistory: the memory and every entry that changed it, with what it showed after each."""
        return overview.history(self._call("GetMemoryHistory", pb.GetMemoryHistoryRequest(memory_id=memory_id)))

    def list_memories(self, *, scopes: Sequence[str] = (), type: str = "", author_agent: str = "", layer: int = 0,
                      id_prefix: str = "", include_archived: bool = False, limit: int = 0,
                      offset: int = 0) -> tuple[list[MemoryRow], int]:
        """ListMemories: a page of memories newest first, filtered, and how many match in all."""
        found = self._call("ListMemories", pb.ListMemoriesRequest(
            scopes=scopes, type=type, author_agent=author_agent, layer=cast(pb.Layer, layer), id_prefix=id_prefix,
            include_archived=include_archived, limit=limit, offset=offset))
        return [codec.memory_row(m) for m in found.memories], found.total

    def activity(self, minutes: int = 0) -> Activity:
        """GetActivity: writes and searches per minute, and memory counts, in this caller's scopes."""
        return overview.activity(self._call("GetActivity", pb.GetActivityRequest(minutes=minutes)))

    def verify_chain(self) -> ChainCheck:
        """VerifyChain: the server walks its hash chain now."""
        return overview.chain(self._call("VerifyChain", pb.VerifyChainRequest()))

    def sync(self, since_seq: int, max_entries: int = 0, checkpoint_every: int = 0) -> Iterator[Entry]:
        """Sync: yields the entries after since_seq (a checkpoint on every `checkpoint_every`-th and the last);
        errors arrive typed while iterating. Uses SyncBatches with packed embeddings (a page per message)."""
        stream = self.sync_pages(since_seq, max_entries, checkpoint_every)
        try:
            for page in stream:
                yield from page.entries()
        finally:
            stream.cancel()  # a caller that stops early must not leave the call open

    def sync_pages(self, since_seq: int, max_entries: int = 0, checkpoint_every: int = 0) -> SyncStream:
        """SyncBatches with packed embeddings: the entries after since_seq a page at a time (see `sync`)."""
        request = pb.SyncRequest(since_seq=since_seq, max_entries=max_entries, checkpoint_every=checkpoint_every,
                                 packed_embeddings=True)
        with self._translated():
            call = self._stub.SyncBatches(request, metadata=self._metadata)
        return SyncStream(call, self._translated)

    def checkpoint(self, size: int = 0, consistency_from: int = 0, prove: Sequence[int] = ()) -> CheckpointReply:
        """GetCheckpoint: a signed checkpoint of `size` entries (0: the head), the consistency proof from the
        checkpoint of `consistency_from` entries, and the entries at `prove` with their audit paths in it."""
        response = self._call("GetCheckpoint", pb.CheckpointRequest(size=size, consistency_from=consistency_from,
                                                                    prove=list(prove)))
        checkpoint = codec.checkpoint_from_proto(response.checkpoint)
        return CheckpointReply(checkpoint, tuple(response.consistency_proof), response.server_certificate,
                               tuple(Attested(codec.entry_from_proto(a.entry), checkpoint, tuple(a.inclusion_path))
                                     for a in response.proven))

    def snapshot(self, size: int = 0, offset: int = 0) -> Iterator[SnapshotChunk]:
        """GetSnapshot: the snapshot at `size` (0: the newest) from byte `offset` of this agent's replica file, a
        chunk at a time (the first with the manifest and the file's seal); errors arrive typed while iterating."""
        with self._translated():
            call = self._stub.GetSnapshot(pb.SnapshotRequest(size=size, offset=offset), metadata=self._metadata)
        try:
            with self._translated():
                for chunk in call:
                    first = chunk.HasField("manifest")
                    yield SnapshotChunk(
                        manifest_from_proto(chunk.manifest) if first else None,
                        ReplicaSeal(chunk.replica.sha256, chunk.replica.length, chunk.replica.signature)
                        if first else None, chunk.offset, chunk.data)
        finally:
            call.cancel()

    def subscribe(self, since_seq: int, *, elide_own: bool = False) -> Subscription:
        """Subscribe: a live stream of the entries after since_seq (with `elide_own`, this agent's own entries
        arrive as `Elided` markers: SubscribeRequest.elide_own_entries)."""
        with self._translated():
            call = self._stub.Subscribe(pb.SubscribeRequest(since_seq=since_seq, packed_embeddings=True,
                                                            elide_own_entries=elide_own),
                                        metadata=self._metadata)
        return Subscription(call, self._translated)
