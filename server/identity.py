"""Who is calling: the one place an RPC's caller is resolved.

The servicer asks its `IdentityResolver` for a `Caller` on every RPC and
passes it down; nothing else looks at metadata or certificates, and request
bodies never carry an agent id.

`MetadataIdentity` is development mode (plain text on loopback): the agent id
comes from the `x-mnemosync-agent` call metadata, and authority and scopes
from the server's agent policy when one is configured.

`CertificateIdentity` is the mTLS mode: the agent id, authority, scopes and
admin flag come from the client certificate the TLS handshake verified (see
`mnemosync.kernel.certificates` for where they live in it); call metadata is ignored entirely.
"""

from __future__ import annotations

import datetime as dt
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cryptography import x509

from mnemosync.kernel import secrets_scan
from mnemosync.kernel.certificates import grant_from_certificate, validate_agent_id
from mnemosync.kernel.errors import PermissionDenied, Unauthenticated
from mnemosync.kernel.metadata import AGENT_METADATA_KEY

if TYPE_CHECKING:
    from mnemosync.server.revocation import RevocationList


@dataclass(frozen=True)
class Caller:
    """The authenticated agent behind one RPC.

    Attributes:
        agent_id: Stable id, recorded as the author of its writes.
        authority: 1 (human) to 6 (automated extractor); lower is stronger.
        scopes: Scopes it may read and write; None means every scope.
        admin: May perform admin operations (resolving for others, redaction).
        signing_key: Its Ed25519 public key (hex) when its certificate carries one:
            then every operation it sends must be signed (`mnemosync.kernel.signing`).
        certificate_serial: The serial (hex) of the client certificate its grant was read
            from; empty in development mode, where the grant comes from the policy file.
    """

    agent_id: str
    authority: int = 3
    scopes: tuple[str, ...] | None = None
    admin: bool = False
    signing_key: str = ""
    certificate_serial: str = ""


class CertificateRefused(Unauthenticated):
    """A client certificate that was read but is no longer good (revoked, expired); names whose it is."""

    def __init__(self, message: str, agent_id: str, certificate_serial: str):
        super().__init__(message)
        self.agent_id = agent_id
        self.certificate_serial = certificate_serial


class IdentityResolver(Protocol):
    """Turns a gRPC call context into a Caller (or raises Unauthenticated)."""

    def __call__(self, context) -> Caller: ...


def agent_from_metadata(metadata) -> str:
    """The agent id from call metadata (development mode).

    Raises:
        Unauthenticated: no or malformed `x-mnemosync-agent`.
    """
    for key, value in metadata or ():
        if key == AGENT_METADATA_KEY:
            return _checked_agent_id(value)
    raise Unauthenticated(
        f"no agent identity: send the {AGENT_METADATA_KEY} metadata key "
        "(the agent client does this from --agent-id / MNEMOSYNC_AGENT_ID)"
    )


@functools.lru_cache(maxsize=1024)
def _checked_agent_id(value: str) -> str:
    """`value` scanned for secrets (it is recorded in every entry the agent writes) and validated as an agent id.
    An agent sends the same id with every call, so an accepted one is remembered; a refusal raises and is not."""
    secrets_scan.check(value, "agent id")
    return validate_agent_id(value)


@dataclass(frozen=True)
class MetadataIdentity:
    """Development-mode resolver: agent id from metadata.

    Args:
        policy: Optional lookup from agent id to its Caller (authority, scopes);
            agents it does not know get `Caller(agent_id)` defaults.
    """

    policy: Callable[[str], Caller | None] | None = None

    def __call__(self, context) -> Caller:
        agent_id = agent_from_metadata(context.invocation_metadata())
        known = self.policy(agent_id) if self.policy else None
        return known or Caller(agent_id)


def require_admin(caller: Caller, action: str) -> None:
    """Refuses an admin-only action to a caller without an admin certificate.

    Args:
        caller: The caller.
        action: What was attempted, for the message (for example "resolving a conflict for another agent").

    Raises:
        PermissionDenied: the caller is not admin (the message names the rule).
    """
    if not caller.admin:
        raise PermissionDenied(
            f"{action} is an admin operation and agent {caller.agent_id}'s certificate is not an admin "
            "certificate (rule: admin operations need a certificate issued with "
            "`mnemosync ca issue-agent NAME --admin`)"
        )


class CertificateIdentity:
    """mTLS resolver: everything about the caller comes from its verified client certificate.

    The TLS handshake has already checked the chain to the CA and the validity
    period; this adds what grpc cannot do there: the revocation list, the
    validity period on long-lived connections, and reading the grant.

    Args:
        revocations: The server's revocation list (crl.pem), checked on every call.
        clock: Current time (tests pass a fixed one).
    """

    _CACHE_MAX = 1024

    def __init__(self, revocations: RevocationList, clock: Callable[[], dt.datetime] | None = None):
        self.revocations = revocations
        self._clock = clock or (lambda: dt.datetime.now(dt.UTC))
        self._parsed: dict[bytes, tuple[int, dt.datetime, Caller]] = {}
        self._lock = threading.Lock()

    def _parse(self, pem: bytes) -> tuple[int, dt.datetime, Caller]:
        with self._lock:
            hit = self._parsed.get(pem)
        if hit is not None:
            return hit
        try:
            cert = x509.load_pem_x509_certificate(pem)
        except ValueError as exc:
            raise Unauthenticated(f"the client certificate cannot be read: {exc}") from None
        grant = grant_from_certificate(cert)
        validate_agent_id(grant.agent_id)
        parsed = (cert.serial_number, cert.not_valid_after_utc,
                  Caller(grant.agent_id, grant.authority, grant.scopes, grant.admin, grant.signing_key,
                         format(cert.serial_number, "X")))
        with self._lock:
            if len(self._parsed) >= self._CACHE_MAX:
                self._parsed.clear()
            self._parsed[pem] = parsed
        return parsed

    def __call__(self, context) -> Caller:
        pems = context.auth_context().get("x509_pem_cert")
        if not pems:
            raise Unauthenticated(
                "no client certificate: this server requires mTLS; connect with --cert-dir (the bundle "
                "`mnemosync ca issue-agent NAME` wrote)"
            )
        serial, not_after, caller = self._parse(pems[0])
        if self.revocations.is_revoked(serial):
            raise CertificateRefused(
                f"the certificate of agent {caller.agent_id} (serial {serial:X}) was revoked; ask the "
                f"operator for a new one (mnemosync ca issue-agent {caller.agent_id})",
                caller.agent_id, caller.certificate_serial,
            )
        if not_after < self._clock():
            raise CertificateRefused(
                f"the certificate of agent {caller.agent_id} expired at {not_after:%Y-%m-%d %H:%M} UTC; "
                f"ask the operator for a new one (mnemosync ca issue-agent {caller.agent_id})",
                caller.agent_id, caller.certificate_serial,
            )
        return caller
