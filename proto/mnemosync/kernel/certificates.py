"""What an agent certificate says, as both ends read it: the bundle's files, the agent id and its grant.

An agent's identity under mTLS is its certificate (`mnemosync ca issue-agent`,
`mnemosync.server.ca`). The server reads the grant from it on every call
(`mnemosync.server.identity.CertificateIdentity`); the agent reads its own id from the
same file (`mnemosync.agent.tls`). The agent id is the subject common name and,
with the grant, is written as subject-alternative-name URIs (readable with
`openssl x509 -noout -text`)::

    urn:mnemosync:agent:<agent id>
    urn:mnemosync:authority:<1..6>
    urn:mnemosync:scope:<percent-encoded scope>   (one per scope; `*` for every scope)
    urn:mnemosync:admin                           (only on admin certificates)
    urn:mnemosync:ed25519:<hex public key>        (only for agents that sign their operations)

An agent's bundle directory holds `ca.crt`, `agent.crt`, `agent.key` and, when
it signs, `signing.key` (`mnemosync.kernel.signing.SIGNING_KEY_FILE`).

The server's certificate names, beside its hosts, the public half of the key it
signs transparency-log checkpoints with (`mnemosync.kernel.checkpoint`), so an agent
trusts that key because the CA does::

    urn:mnemosync:checkpoint-key:<hex Ed25519 public key>
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import quote, unquote

from cryptography import x509

from mnemosync.kernel.errors import Unauthenticated

CA_CERT = "ca.crt"
AGENT_CERT = "agent.crt"
AGENT_KEY = "agent.key"

URI_PREFIX = "urn:mnemosync:"
ALL_SCOPES = "*"

HUMAN_AUTHORITY = 1
AUTOMATED_AUTHORITY = 6

CHECKPOINT_KEY_URI = f"{URI_PREFIX}checkpoint-key:"
"""The prefix of the server certificate's URI naming its checkpoint key."""

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")


def validate_agent_id(agent_id: str) -> str:
    """Checks an agent id: 1 to 64 characters of letters, digits and `_.@-`."""
    if not _AGENT_ID.fullmatch(agent_id or ""):
        raise Unauthenticated(
            f"agent id must be 1 to 64 characters of letters, digits and _.@-; got {agent_id[:70]!r}"
        )
    return agent_id


@dataclass(frozen=True)
class AgentGrant:
    """What an agent certificate grants.

    Attributes:
        agent_id: The agent's id (also the certificate's common name).
        authority: 1 (human) to 6 (automated extractor); lower is stronger.
        scopes: Scopes it may use; None means every scope.
        admin: May perform admin operations.
        signing_key: Its Ed25519 public key, hex, when it must sign its operations.
    """

    agent_id: str
    authority: int
    scopes: tuple[str, ...] | None
    admin: bool = False
    signing_key: str = ""

    def uris(self) -> list[str]:
        """The subject-alternative-name URIs that encode this grant."""
        uris = [f"{URI_PREFIX}agent:{self.agent_id}", f"{URI_PREFIX}authority:{self.authority}"]
        scopes = (ALL_SCOPES,) if self.scopes is None else self.scopes
        uris += [f"{URI_PREFIX}scope:{quote(s, safe='') if s != ALL_SCOPES else s}" for s in scopes]
        if self.admin:
            uris.append(f"{URI_PREFIX}admin")
        if self.signing_key:
            uris.append(f"{URI_PREFIX}ed25519:{self.signing_key}")
        return uris


def grant_from_certificate(cert: x509.Certificate) -> AgentGrant:
    """Reads the agent id, authority, scopes and admin flag from an agent certificate.

    Raises:
        Unauthenticated: it is not a mnemosync agent certificate.
    """
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        uris = san.get_values_for_type(x509.UniformResourceIdentifier)
    except x509.ExtensionNotFound:
        uris = []
    agent_id, authority, scopes, admin, signing_key = None, None, [], False, ""
    for uri in uris:
        if not uri.startswith(URI_PREFIX):
            continue
        kind, _, value = uri[len(URI_PREFIX):].partition(":")
        if kind == "agent":
            agent_id = value
        elif kind == "authority" and value.isdigit():
            authority = int(value)
        elif kind == "scope":
            scopes.append(value if value == ALL_SCOPES else unquote(value))
        elif kind == "admin":
            admin = True
        elif kind == "ed25519" and re.fullmatch(r"[0-9a-f]{64}", value):
            signing_key = value
    if agent_id is None or authority is None:
        raise Unauthenticated(
            f"certificate {cert.subject.rfc4514_string()} is not a mnemosync agent certificate "
            "(no urn:mnemosync:agent / authority names); issue one with `mnemosync ca issue-agent`"
        )
    return AgentGrant(agent_id, authority, None if ALL_SCOPES in scopes else tuple(scopes), admin, signing_key)


def checkpoint_key(cert: x509.Certificate) -> str:
    """The checkpoint key a server certificate names (hex), or "" when it names none."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ""
    for uri in san.get_values_for_type(x509.UniformResourceIdentifier):
        value = uri[len(CHECKPOINT_KEY_URI):] if uri.startswith(CHECKPOINT_KEY_URI) else ""
        if re.fullmatch(r"[0-9a-f]{64}", value):
            return value
    return ""
