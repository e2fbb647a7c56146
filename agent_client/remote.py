"""The gRPC connection to the server, with errors translated once.

Every call goes through `_call`, which turns `grpc.RpcError` into the typed
errors of `agent_client.errors`: UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED
during connection mean "offline", anything else is the server's refusal.

With mTLS a failed handshake also arrives as UNAVAILABLE; `translate` then
asks `agent_client.tls.diagnose` what went wrong (expired, wrong CA, hostname
mismatch, plain-text server) and raises TlsError, which is not "offline":
writes are not queued behind a certificate problem. A revoked certificate is
refused by the server itself (UNAUTHENTICATED, with its message).
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from agent_client.errors import ResourceExhausted, ServerUnavailable, TlsError, refused
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server.core.metadata import AGENT_METADATA_KEY, RETRY_AFTER_KEY

_OFFLINE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}
MAX_MESSAGE_BYTES = 32 * 1024 * 1024


def translate(exc: grpc.RpcError, address: str, tls=None) -> Exception:
    """The typed client error for a failed call.

    Args:
        exc: The grpc error.
        address: The server address, for messages.
        tls: The channel's `agent_client.tls.AgentTls`, if it uses mTLS (for diagnosing handshakes).
    """
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    if code in _OFFLINE_CODES:
        if tls is not None and code == grpc.StatusCode.UNAVAILABLE:
            from agent_client.tls import diagnose, looks_like_handshake_failure

            reason = diagnose(tls, address) if looks_like_handshake_failure(details) else None
            if reason:
                return TlsError(reason)
        hint = ""
        if tls is None and "socket closed" in (details or "").lower():
            hint = "; if that server uses TLS, connect with --cert-dir instead of --insecure"
        return ServerUnavailable(f"mnemosync server at {address} is unreachable ({code.name}: {details}){hint}")
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return ResourceExhausted(code.name, details or code.name, _retry_after(exc))
    return refused(code.name, details or code.name)


def _retry_after(exc) -> float | None:
    try:
        for key, value in exc.trailing_metadata() or ():
            if key == RETRY_AFTER_KEY:
                return int(value) / 1000
    except (AttributeError, ValueError):
        pass
    return None


class Remote:
    """A channel to one server with one agent identity.

    Args:
        address: HOST:PORT of the server.
        agent_id: Sent as call metadata in development mode (with mTLS the
            server reads it from the certificate instead).
        insecure: Use a plain-text channel.
        timeout: Seconds for unary calls.
        tls: The agent's certificate files (`agent_client.tls.AgentTls`); required unless insecure.

    Raises:
        TlsError: neither insecure nor certificate files, or the files are missing.
    """

    def __init__(self, address: str, agent_id: str, *, insecure: bool = True, timeout: float = 10.0,
                 tls=None):
        self.address = address
        self.timeout = timeout
        self.tls = None if insecure else tls
        self._metadata = ((AGENT_METADATA_KEY, agent_id),) if insecure else ()
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.initial_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000),
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
        """The connection `settings` (an `agent_client.settings.ClientSettings`) describe."""
        return cls(settings.server, agent_id, insecure=settings.insecure, timeout=settings.timeout,
                   tls=settings.tls())

    def close(self) -> None:
        """Closes the channel (cancelling open streams)."""
        self._channel.close()

    def _call(self, method: str, request, timeout: float | None = None):
        try:
            return getattr(self._stub, method)(
                request, metadata=self._metadata, timeout=timeout or self.timeout
            )
        except grpc.RpcError as exc:
            raise translate(exc, self.address, self.tls) from None

    def append(self, operations: list[pb.Operation], model: pb.EmbeddingModel | None) -> pb.AppendResponse:
        """Append (see the proto)."""
        return self._call("Append", pb.AppendRequest(operations=operations, embedding_model=model))

    def get(self, memory_id: str) -> pb.Memory:
        """Get (see the proto)."""
        return self._call("Get", pb.GetRequest(id=memory_id)).memory

    def search(self, request: pb.SearchRequest) -> list[pb.SearchResult]:
        """Search (see the proto)."""
        return list(self._call("Search", request).results)

    def ack(self, seq: int) -> pb.AckResponse:
        """Ack (see the proto)."""
        return self._call("Ack", pb.AckRequest(seq=seq))

    def stats(self) -> pb.StatsResponse:
        """Stats (see the proto)."""
        return self._call("Stats", pb.StatsRequest())

    def list_conflicts(self, request: pb.ListConflictsRequest) -> list[pb.Conflict]:
        """ListConflicts (see the proto)."""
        return list(self._call("ListConflicts", request).conflicts)

    def get_conflict(self, conflict_id: int) -> pb.Conflict:
        """GetConflict (see the proto)."""
        return self._call("GetConflict", pb.GetConflictRequest(id=conflict_id)).conflict

    def sync(self, since_seq: int, max_entries: int = 0) -> Iterator[pb.ChangelogEntry]:
        """Sync: yields entries after since_seq; errors arrive typed while iterating."""
        try:
            stream = self._stub.Sync(
                pb.SyncRequest(since_seq=since_seq, max_entries=max_entries), metadata=self._metadata
            )
            yield from stream
        except grpc.RpcError as exc:
            raise translate(exc, self.address, self.tls) from None

    def subscribe(self, since_seq: int):
        """Subscribe: returns the call (iterate it; `.cancel()` ends it)."""
        return self._stub.Subscribe(pb.SubscribeRequest(since_seq=since_seq), metadata=self._metadata)
