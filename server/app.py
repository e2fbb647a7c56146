"""Assembling and running the gRPC server: service, health, reflection.

`run_server` is a context manager (as in grpc's examples) so tests and the CLI
start and stop the server the same way: it yields once the port is bound and,
on exit, stops accepting calls, lets calls in flight finish within the grace
period, and only then closes the store, so every acknowledged write is
committed before the process exits.

The server is `grpc.aio` on an event loop of its own thread (`_LoopThread`),
so an open Sync or Subscribe stream costs a coroutine, not a thread; the
blocking store calls run in a bounded thread pool (`ServerSettings.max_workers`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import threading
from collections.abc import Coroutine, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from mnemosync.kernel.addresses import is_loopback, join_host_port, split_host_port
from mnemosync.kernel.errors import ChainBroken, FailedPrecondition, InvalidArgument
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.server import boot_check
from mnemosync.server.audit import AUDIT_FILE, AuditLog
from mnemosync.server.ca import load_server_tls
from mnemosync.server.chain_audit import ChainAudit
from mnemosync.server.clock import SYSTEM_CLOCK, Clock
from mnemosync.server.costly_reads import CostlyReads
from mnemosync.server.identity import CertificateIdentity
from mnemosync.server.ledger import Ledger, broken
from mnemosync.server.notary import CheckpointKey, Notary, load_key
from mnemosync.server.policy import load as load_policy
from mnemosync.server.presence import Presence
from mnemosync.server.ratelimit import RequestGuard
from mnemosync.server.revocation import RevocationList
from mnemosync.server.service import MemoryServicer
from mnemosync.server.settings import ServerSettings
from mnemosync.server.snapshots import snapshots_of
from mnemosync.server.tolerant_decoding import add_memory_service
from mnemosync.v1 import memory_pb2

log = logging.getLogger(__name__)

SERVICE_NAME = memory_pb2.DESCRIPTOR.services_by_name["MemoryService"].full_name
SHUTDOWN_GRACE_SECONDS = 10.0

_T = TypeVar("_T")


@dataclass
class RunningServer:
    """A started server: its bound port and address, the store, the audit log of refused calls, (under mTLS) the
    revocation list in force, and the background audit of its chain."""

    port: int
    address: str
    store: Ledger
    audit: AuditLog
    revocations: RevocationList | None = None
    chain_audit: ChainAudit | None = None


class _LoopThread:
    """An asyncio event loop running in its own (daemon) thread, for the grpc.aio server."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="mnemosync-rpc-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        """Runs `coroutine` on the loop and returns its result (or raises its error) in the calling thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def close(self) -> None:
        """Stops the loop, cancels what is left on it, and closes it."""
        async def cancel_rest() -> None:
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in rest:
                task.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            await self.loop.shutdown_asyncgens()

        self.run(cancel_rest())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


def check_at_start(store: Ledger, settings: ServerSettings, key: CheckpointKey | None = None) -> None:
    """Walks the changelog and recomputes its transparency log before serving (progress in the log); with the
    checkpoint `key`, only what came after the last check (`mnemosync.server.boot_check`), in the SQLite store or
    a PostgreSQL store's local replica (PostgreSQL's own copy is walked by `mnemosync verify`, not here).

    Raises:
        ChainBroken: something does not verify and `settings.allow_broken_chain` is off; the message names
            the first problem and says what to run.
    """
    head = store.head_seq()
    if head >= 10_000:
        log.info("checking the changelog (%d entries) and its transparency log before serving", head)
    def progress(n: int) -> None:
        log.info("checked %d of %d entries", n, head)

    if key is None:
        report = store.log.verify(progress=progress)
    else:
        mark = boot_check.mark_path(settings.data_dir, store.path if settings.store else None)
        report = boot_check.check(store, mark, key, progress)
    if report.ok:
        return
    advice = _advice(settings)
    if not settings.allow_broken_chain:
        raise ChainBroken(f"refusing to serve a changelog that does not verify, at {broken(report)}; {advice} "
                          "(or start with --allow-broken-chain to serve it anyway)")
    for seq, problem in report.problems:
        log.error("BROKEN CHANGELOG, served anyway (--allow-broken-chain): seq %d: %s", seq, problem)
    log.error("serving a changelog that does not verify; %s", advice)


def _advice(settings: ServerSettings) -> str:
    return (f"run `mnemosync verify --data-dir {settings.data_dir}` to see every problem, then restore the data "
            "directory from a backup you trust")


def _audit_found(report, settings: ServerSettings, servicer: MemoryServicer, health_servicer,
                 loop: _LoopThread) -> None:
    """The background audit found the chain broken: the server stops serving it (every call DATA_LOSS, health
    NOT_SERVING), or with `allow_broken_chain` logs every problem and goes on."""
    for seq, problem in report.problems:
        log.error("BROKEN CHANGELOG found by the background audit: seq %d: %s", seq, problem)
    if settings.allow_broken_chain:
        log.error("serving a changelog that does not verify (--allow-broken-chain); %s", _advice(settings))
        return
    servicer.broken = (f"this server stopped serving: its background audit found the changelog broken at "
                       f"{broken(report)}; the operator must {_advice(settings)}")
    log.error("STOPPED SERVING: %s", servicer.broken)
    loop.run(_not_serving(health_servicer))


async def _not_serving(health_servicer) -> None:
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)


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
        CaError: the TLS directory holds ca.key, or its files are unusable.
        RevocationListUnreadable: the TLS directory's crl.pem is missing (without allow_missing_crl),
            unreadable, not signed by its CA, or older than one this data directory already accepted.
        NotPrivate: a data file is open to other users and cannot be made private.
        PolicyError: the policy file cannot be used (the message names the file and the key).
        ChainBroken: the start-up check found the changelog or its transparency log broken (see
            `check_at_start`), and `settings.allow_broken_chain` is off.

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
        tls = load_server_tls(settings.tls_dir, state_dir=settings.data_dir,
                              allow_missing_crl=settings.allow_missing_crl)
    elif not is_loopback(host):
        raise FailedPrecondition(
            f"refusing plain text on {host}: --insecure is allowed only on a loopback "
            "address (127.0.0.1, ::1, localhost); other addresses need TLS"
        )
    _refuse_a_busy_address(host, port, settings.listen)
    # closed after the server stops, and by any failure on the way there (a bad policy file)
    with open_store(settings, pin_model=pin_model, clock=clock) as store:
        key = load_key(settings.data_dir, settings.tls_dir)
        check_at_start(store, settings, key)
        notary = Notary(store, key, clock)
        snapshots = snapshots_of(store, notary.key, settings, clock)
        policy = load_policy(settings.policy_file)  # agent grants (development mode) and governance rules
        executor = futures.ThreadPoolExecutor(max_workers=settings.max_workers, thread_name_prefix="store")
        audit = AuditLog(settings.data_dir / AUDIT_FILE)
        servicer = MemoryServicer(
            store,
            notary,
            identity=CertificateIdentity(tls.revocations) if tls is not None else None,  # never metadata under mTLS
            policy=policy,
            guard=RequestGuard.from_limits(settings.limits, clock.monotonic),
            executor=executor,
            audit=audit,
            presence=Presence(clock.now_ms),
            page_size=settings.sync_page_size,
            costly=CostlyReads.from_limits(settings.limits),
            snapshots=snapshots,
        )
        target = join_host_port(host, port)
        credentials = None if tls is None else grpc.ssl_server_credentials(
            [(tls.private_key, tls.cert_chain)], root_certificates=tls.ca_cert, require_client_auth=True)
        loop = _LoopThread()
        try:
            server, health_servicer, bound = loop.run(_start(servicer, settings, target, credentials))
            snapshots.start()
            chain_audit = ChainAudit(store.path, lambda report: _audit_found(report, settings, servicer,
                                                                             health_servicer, loop),
                                     after_seconds=settings.chain_audit_after_seconds,
                                     every_hours=settings.chain_audit_every_hours)
            chain_audit.start()
            address = join_host_port(host, bound)
            try:
                yield RunningServer(bound, address, store, audit, tls.revocations if tls else None, chain_audit)
            finally:
                chain_audit.stop()
                loop.run(_stop(server, health_servicer, servicer))
        finally:
            snapshots.stop()
            loop.close()
            executor.shutdown(wait=True)


def _refuse_a_busy_address(host: str, port: int, listen: str) -> None:
    """Refuses a listen address another process holds, in words, before the store is opened: gRPC would only log
    a line of its own and say to set GRPC_VERBOSITY. Other bind failures are left for gRPC to report.

    Raises:
        FailedPrecondition: the address is in use.
    """
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return
    for family, kind, proto, _name, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    raise FailedPrecondition(
                        f"cannot listen on {listen}: address already in use (another mnemosync serve or another "
                        "program listens there); stop it, or choose another --listen") from None


def open_store(settings: ServerSettings, *, pin_model: ModelInfo | None = None, clock: Clock = SYSTEM_CLOCK) -> Ledger:
    """The store `settings.store` names: the data directory's SQLite file, or a PostgreSQL database.

    Raises:
        InvalidArgument: `store` is neither empty nor a postgresql:// URL.
        StorageUnavailable: PostgreSQL cannot be reached or its driver is not installed.
    """
    options = dict(synchronous=settings.synchronous, limits=settings.limits, rrf_k=settings.rrf_k,
                   pin_model=pin_model, clock=clock, lifecycle=settings.lifecycle,
                   consolidation=settings.consolidation)
    if not settings.store:
        return Ledger.sqlite(settings.db_path, **options)
    from mnemosync.server import postgres_record

    if not postgres_record.is_postgres_url(settings.store):
        raise InvalidArgument(f"store must be empty (the SQLite file in the data directory) or a postgresql:// URL, "
                              f"got {settings.store.partition('://')[0]!r}")
    if settings.read_store and not postgres_record.is_postgres_url(settings.read_store):
        raise InvalidArgument(f"read_store must be a postgresql:// URL of a hot standby, "
                              f"got {settings.read_store.partition('://')[0]!r}")
    from mnemosync.server import published_snapshots

    def snapshot_trust() -> published_snapshots.SnapshotTrust:
        """Whose published snapshots a new replica may start from: this server's checkpoint key, and its CA's
        server certificates under mTLS (see `mnemosync.server.published_snapshots`)."""
        ca = (settings.tls_dir / "ca.crt").read_bytes() if settings.tls_dir is not None else None
        return published_snapshots.SnapshotTrust(load_key(settings.data_dir, settings.tls_dir).public, ca)

    return Ledger.postgresql(settings.store, postgres_record.replica_path(settings.data_dir, settings.store),
                             read_url=settings.read_store, snapshot_trust=snapshot_trust,
                             checkpoint_key=lambda: load_key(settings.data_dir, settings.tls_dir), **options)


async def _start(servicer: MemoryServicer, settings: ServerSettings, target: str,
                 credentials: grpc.ServerCredentials | None) -> tuple[grpc.aio.Server, Any, int]:
    """Builds the aio server on the running loop, binds it and starts serving; returns it, its health
    servicer and the bound port."""
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", settings.limits.max_message_bytes),
        ("grpc.max_send_message_length", settings.limits.max_message_bytes),
        ("grpc.so_reuseport", 0),
    ])
    servicer.start(settings.lifecycle)
    add_memory_service(servicer, server)  # as the generated registration, but bad bytes get INVALID_ARGUMENT
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )
    try:
        bound = (server.add_insecure_port(target) if credentials is None
                 else server.add_secure_port(target, credentials))
    except RuntimeError as exc:
        servicer.stop_streams()
        raise FailedPrecondition(f"cannot listen on {settings.listen}: {exc}") from exc
    if bound == 0:
        servicer.stop_streams()
        raise FailedPrecondition(f"cannot listen on {settings.listen}: the address is in use or unavailable")
    await server.start()
    for name in ("", SERVICE_NAME):
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    return server, health_servicer, bound


async def _stop(server: grpc.aio.Server, health_servicer, servicer: MemoryServicer) -> None:
    """Graceful stop: NOT_SERVING, live streams end, calls in flight get the grace period."""
    await health_servicer.enter_graceful_shutdown()
    servicer.stop_streams()
    await server.stop(SHUTDOWN_GRACE_SECONDS)
