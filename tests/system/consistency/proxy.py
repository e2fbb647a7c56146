"""A gRPC proxy between the agents and the server: the network faults of the consistency suite.

Every agent client of the suite talks to the server through `FaultProxy`, a
real gRPC server in the test process that forwards each call, as raw bytes, to
the real server and passes its answers, statuses and trailers back. The proxy
is where the suite breaks the network the way networks break, without mocking
anything of mnemosync:

* `partition(agent)`: that agent's calls fail with UNAVAILABLE and its open
  streams are cut, while the server and every other agent carry on;
* `fail_append(agent, nth, after_commit)`: the agent's nth Append from now
  fails with UNAVAILABLE, either before it reaches the server or after the
  server committed it (the reply is lost, the write is not);
* `redeliver(back)`: the next Subscribe streams start `back` entries before
  the offset the agent asked for (at-least-once delivery of entries it has);
* `cut_streams(agent)`: its open streams end with UNAVAILABLE, as when a
  connection drops, so it subscribes again.

Counters (`appends_failed`, `replies_lost`, `redelivered`) say which faults
actually happened, so the suite can report and require them; `failed_appends`
says which operations each failed Append carried.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass

import grpc

from mnemosync.v1 import memory_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["MemoryService"]
FORWARDED_METADATA = ("x-mnemosync-", "retry-after-ms")


@dataclass(frozen=True)
class FailedAppend:
    """An Append the proxy failed: whose, the op_ids it carried in order, and whether the server committed it."""

    agent: str
    op_ids: tuple[str, ...]
    after_commit: bool

    @classmethod
    def of(cls, agent: str, request: bytes, *, after_commit: bool) -> FailedAppend:
        operations = pb.AppendRequest.FromString(request).operations
        return cls(agent, tuple(op.op_id for op in operations), after_commit)


class _Stream:
    """A forwarded stream and whether the proxy cut it."""

    def __init__(self, call):
        self.call = call
        self.cut = False


class FaultProxy:
    """Forwards MemoryService calls from `listen` to `upstream`; see the module docstring.

    Args:
        upstream: HOST:PORT of the real server (it may stop and start again on that port).
    """

    def __init__(self, upstream: str):
        self.upstream = upstream
        self._lock = threading.Lock()
        self._partitioned: set[str] = set()
        self._append_faults: dict[str, tuple[int, bool]] = {}
        self._redeliver = 0
        self._streams: dict[str, set] = {}
        self.appends_failed = 0
        self.replies_lost = 0
        self.redelivered = 0
        self.failed_appends: list[FailedAppend] = []
        self._channel = grpc.insecure_channel(upstream, options=[
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 500),
            ("grpc.use_local_subchannel_pool", 1),
        ])
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="proxy"))
        self._server.add_generic_rpc_handlers((_Handler(self),))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def close(self) -> None:
        self._server.stop(0).wait()
        self._channel.close()

    # -- the faults ------------------------------------------------------------------

    def partition(self, agent: str) -> None:
        """Cuts `agent` off: its calls fail and its streams end with UNAVAILABLE until `heal`."""
        with self._lock:
            self._partitioned.add(agent)
        self.cut_streams(agent)

    def heal(self, agent: str | None = None) -> None:
        """Ends the partition of `agent` (None: of every agent)."""
        with self._lock:
            if agent is None:
                self._partitioned.clear()
            else:
                self._partitioned.discard(agent)

    def partitioned(self, agent: str) -> bool:
        with self._lock:
            return agent in self._partitioned

    def fail_append(self, agent: str, nth: int, *, after_commit: bool) -> None:
        """Makes `agent`'s nth Append from now (1 = the next) fail with UNAVAILABLE.

        With `after_commit` the server receives and commits it and the reply is lost;
        otherwise it never reaches the server.
        """
        with self._lock:
            self._append_faults[agent] = (nth, after_commit)

    def disarm(self, agent: str) -> bool:
        """Drops a pending `fail_append` of `agent`; True if it had not fired yet."""
        with self._lock:
            return self._append_faults.pop(agent, None) is not None

    def redeliver(self, back: int) -> None:
        """Makes the next Subscribe streams start `back` entries early (0: as asked)."""
        with self._lock:
            self._redeliver = back

    def cut_streams(self, agent: str) -> None:
        """Ends `agent`'s open streams with UNAVAILABLE."""
        with self._lock:
            calls = list(self._streams.get(agent, ()))
        for stream in calls:
            stream.cut = True
            stream.call.cancel()

    # -- forwarding --------------------------------------------------------------------

    def _refuse_if_partitioned(self, agent: str, context) -> None:
        if self.partitioned(agent):
            context.abort(grpc.StatusCode.UNAVAILABLE, f"the test proxy has cut {agent} off the network")

    def _append_fault(self, agent: str) -> bool | None:
        """None: no fault for this Append; else whether it fails after the server committed it."""
        with self._lock:
            armed = self._append_faults.get(agent)
            if armed is None:
                return None
            nth, after_commit = armed
            if nth > 1:
                self._append_faults[agent] = (nth - 1, after_commit)
                return None
            del self._append_faults[agent]
            return after_commit

    def unary(self, method: str, request: bytes, context) -> bytes:
        agent = _agent_of(context)
        self._refuse_if_partitioned(agent, context)
        fault = self._append_fault(agent) if method.endswith("/Append") else None
        if fault is False:
            with self._lock:
                self.appends_failed += 1
                self.failed_appends.append(FailedAppend.of(agent, request, after_commit=False))
            context.abort(grpc.StatusCode.UNAVAILABLE, "the test proxy lost this Append on its way to the server")
        call = self._channel.unary_unary(method)
        try:
            response = call(request, metadata=_forwarded(context), timeout=_remaining(context))
        except grpc.RpcError as exc:
            _pass_on(exc, context)
        if fault:
            with self._lock:
                self.replies_lost += 1
                self.failed_appends.append(FailedAppend.of(agent, request, after_commit=True))
            context.abort(grpc.StatusCode.UNAVAILABLE, "the test proxy lost the server's reply to this Append")
        return response

    def stream(self, method: str, request: bytes, context):
        agent = _agent_of(context)
        self._refuse_if_partitioned(agent, context)
        asked = None
        if method.endswith("/Subscribe"):
            with self._lock:
                back = self._redeliver
            if back:
                message = pb.SubscribeRequest.FromString(request)
                asked = message.since_seq
                message.since_seq = max(0, asked - back)
                request = message.SerializeToString()
        call = self._channel.unary_stream(method)(request, metadata=_forwarded(context))
        forwarded = _Stream(call)
        context.add_callback(call.cancel)
        with self._lock:
            self._streams.setdefault(agent, set()).add(forwarded)
        try:
            context.send_initial_metadata(_headers(call.initial_metadata()))
            for message in call:
                if asked is not None and pb.ChangelogEntry.FromString(message).seq <= asked:
                    with self._lock:
                        self.redelivered += 1
                yield message
        except grpc.RpcError as exc:
            if forwarded.cut:
                context.abort(grpc.StatusCode.UNAVAILABLE, f"the test proxy cut {agent}'s stream")
            if context.is_active():
                _pass_on(exc, context)
        finally:
            with self._lock:
                self._streams.get(agent, set()).discard(forwarded)


class _Handler(grpc.GenericRpcHandler):
    def __init__(self, proxy: FaultProxy):
        self.proxy = proxy

    def service(self, details):
        name = details.method.rsplit("/", 1)[-1]
        method = SERVICE.methods_by_name.get(name)
        if method is None:
            return None
        path = details.method
        if method.server_streaming:
            return grpc.unary_stream_rpc_method_handler(lambda request, context: self.proxy.stream(
                path, request, context))
        return grpc.unary_unary_rpc_method_handler(lambda request, context: self.proxy.unary(path, request, context))


def _agent_of(context) -> str:
    for key, value in context.invocation_metadata():
        if key == "x-mnemosync-agent":
            return value
    return ""


def _forwarded(context) -> tuple:
    return tuple((k, v) for k, v in context.invocation_metadata() if k.startswith(FORWARDED_METADATA))


def _headers(metadata) -> tuple:
    return tuple((k, v) for k, v in (metadata or ()) if k.startswith(FORWARDED_METADATA))


def _remaining(context) -> float | None:
    remaining = context.time_remaining()
    return remaining if remaining is not None and remaining < 3600 else None


def _pass_on(exc: grpc.RpcError, context):
    """Ends the proxied call with the server's status, message and trailers."""
    context.set_trailing_metadata(_headers(exc.trailing_metadata()))
    context.abort(exc.code(), exc.details() or "")
