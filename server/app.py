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

from mnemosync.v1 import memory_pb2
from server.ca import load_server_tls
from server.clock import SYSTEM_CLOCK, Clock
from server.core.errors import FailedPrecondition
from server.core.model_identity import ModelInfo
from server.identity import CertificateIdentity
from server.policy import load as load_policy
from server.ratelimit import RequestGuard
from server.service import MemoryServicer
from server.settings import ServerSettings
from server.sqlite_store import SqliteStore
from server.store import Store
from server.tolerant_decoding import add_memory_service

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
def run_server(settings: ServerSettings, *, pin_model: ModelInfo | None = None,
               clock: Clock = SYSTEM_CLOCK) -> Iterator[RunningServer]:
    """Starts the server on `settings.listen` and stops it on exit.

    Args:
        settings: What to serve, where, and with which limits.
        pin_model: The embedding model a new data directory pins (see `mnemosync serve --embed-model`).
        clock: The server's time (tests pass one they move by hand).

    With `settings.tls_dir` it serves mTLS only: a client must present a
    certificate issued by the CA in ca.crt, and every caller is read from its
    certificate (`CertificateIdentity`), never from call metadata.

    Raises:
        FailedPrecondition: plain text requested on a non-loopback address,
            neither TLS files nor --insecure given, both given, or the TLS
            files are missing or unusable.
        RevocationListUnreadable: the TLS directory's crl.pem is unreadable or not signed by its CA.
        PolicyError: the policy file cannot be used (the message names the file and the key).

    Whatever fails once the store is open closes it again, so the data
    directory is free for the next attempt in the same process.
    """
    host, port = split_host_port(settings.listen)
    tls = None
    if settings.insecure and settings.tls_dir is not None:
        raise FailedPrecondition(
            "both --insecure and --tls-dir were given: choose one (mTLS with --tls-dir, or plain text "
            "on loopback for development with --insecure)"
        )
    if not settings.insecure:
        if settings.tls_dir is None:
            raise FailedPrecondition(
                "TLS is not configured: give --tls-dir DIR (MNEMOSYNC_TLS_DIR) holding ca.crt, server.crt, "
                "server.key and crl.pem from `mnemosync ca`, or --insecure for plain-text development on a "
                "loopback address"
            )
        tls = load_server_tls(settings.tls_dir)
    elif not is_loopback(host):
        raise FailedPrecondition(
            f"refusing plain text on {host}: --insecure is allowed only on a loopback "
            "address (127.0.0.1, ::1, localhost); other addresses need TLS"
        )
    with SqliteStore(
        settings.db_path,
        synchronous=settings.synchronous,
        limits=settings.limits,
        rrf_k=settings.rrf_k,
        pin_model=pin_model,
        clock=clock,
    ) as store:  # closed after the server stops, and by any failure on the way there (a bad policy file)
        options = [
            ("grpc.max_receive_message_length", settings.limits.max_message_bytes),
            ("grpc.max_send_message_length", settings.limits.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=settings.max_workers, thread_name_prefix="rpc"),
            options=options,
        )
        servicer = MemoryServicer(
            store,
            identity=CertificateIdentity(tls.revocations) if tls is not None else None,  # never metadata under mTLS
            policy=load_policy(settings.policy_file),  # agent grants (development mode) and governance rules
            guard=RequestGuard.from_limits(settings.limits, clock.monotonic),
            page_size=settings.sync_page_size,
        )
        add_memory_service(servicer, server)  # as the generated registration, but bad bytes get INVALID_ARGUMENT
        health_servicer = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            server,
        )
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            if tls is None:
                bound = server.add_insecure_port(target)
            else:
                bound = server.add_secure_port(target, grpc.ssl_server_credentials(
                    [(tls.private_key, tls.cert_chain)], root_certificates=tls.ca_cert, require_client_auth=True))
        except RuntimeError as exc:
            raise FailedPrecondition(f"cannot listen on {settings.listen}: {exc}") from exc
        if bound == 0:
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
