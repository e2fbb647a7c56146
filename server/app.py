"""Assembling and running the gRPC server: service, health, reflection.

`run_server` is a context manager (as in grpc's examples) so tests and the CLI
start and stop the server the same way: it yields once the port is bound and,
on exit, stops accepting calls, lets calls in flight finish within the grace
period, and only then closes the store, so every acknowledged write is
committed before the process exits.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mnemosync.v1 import memory_pb2, memory_pb2_grpc
from server.errors import FailedPrecondition
from server.intake import ModelInfo
from server.service import MemoryServicer
from server.settings import ServerSettings
from server.store import Store

log = logging.getLogger(__name__)

SERVICE_NAME = memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
SHUTDOWN_GRACE_SECONDS = 10.0


@dataclass
class RunningServer:
    """A started server: its bound port, the store and the grpc.Server."""

    port: int
    address: str
    store: Store
    grpc_server: grpc.Server
    health: health.HealthServicer


def split_host_port(listen: str) -> tuple[str, int]:
    """Splits `host:port` (IPv6 hosts in brackets).

    Raises:
        ValueError: not of that form.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"listen address must be HOST:PORT, got {listen!r}")
    return host.strip("[]"), int(port)


def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@contextmanager
def run_server(settings: ServerSettings, *, pin_model: ModelInfo | None = None) -> Iterator[RunningServer]:
    """Starts the server on `settings.listen` and stops it on exit.

    Raises:
        FailedPrecondition: plain text requested on a non-loopback address, or
            TLS requested (not available in this build yet).
    """
    host, port = split_host_port(settings.listen)
    if not settings.insecure:
        raise FailedPrecondition(
            "TLS is not configured: start with --insecure for plain-text development "
            "on a loopback address"
        )
    if not is_loopback(host):
        raise FailedPrecondition(
            f"refusing plain text on {host}: --insecure is allowed only on a loopback "
            "address (127.0.0.1, ::1, localhost); other addresses need TLS"
        )
    store = Store(
        settings.db_path,
        synchronous=settings.synchronous,
        limits=settings.limits,
        rrf_k=settings.rrf_k,
        pin_model=pin_model,
    )
    options = [
        ("grpc.max_receive_message_length", settings.limits.max_message_bytes),
        ("grpc.max_send_message_length", settings.limits.max_message_bytes),
        ("grpc.so_reuseport", 0),
    ]
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=settings.max_workers, thread_name_prefix="rpc"),
        options=options,
    )
    servicer = MemoryServicer(store)
    memory_pb2_grpc.add_MemoryServiceServicer_to_server(servicer, server)
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    try:
        bound = server.add_insecure_port(f"[{host}]:{port}" if ":" in host else f"{host}:{port}")
    except RuntimeError as exc:
        store.close()
        raise FailedPrecondition(f"cannot listen on {settings.listen}: {exc}") from exc
    if bound == 0:
        store.close()
        raise FailedPrecondition(f"cannot listen on {settings.listen}: the address is in use or unavailable")
    server.start()
    for name in ("", SERVICE_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    address = f"[{host}]:{bound}" if ":" in host else f"{host}:{bound}"
    try:
        yield RunningServer(bound, address, store, server, health_servicer)
    finally:
        health_servicer.enter_graceful_shutdown()
        servicer.stop_streams()
        server.stop(SHUTDOWN_GRACE_SECONDS).wait()
        store.close()
