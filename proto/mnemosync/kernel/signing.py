"""Per-agent Ed25519 signatures on operations.

Why: the hash chain proves that history was not changed after it was written,
but whoever controls the server could still write an entry in an agent's name.
An agent issued with a signing key (`mnemosync ca issue-agent NAME --signing`)
signs every operation it sends; its public key travels in its certificate, so
the server refuses anything that key did not sign, and `mnemosync verify`
checks every stored signature again, against the CA's records when given the
CA directory.

What is signed is `mnemosync.kernel.entry.signing_document(...)`: the agent, the operation's
identity, and the commitments to its payload and embedding. The payload
commitment's salt is the agent's, so the agent can compute it before sending,
and a later redaction (which keeps the commitments) leaves signatures valid.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from mnemosync.kernel.entry import Entry, commit_payload, embedding_digest, signing_document
from mnemosync.kernel.errors import InvalidArgument, PermissionDenied
from mnemosync.kernel.operations import SALT_BYTES, ValidOp

SIGNING_KEY_FILE = "signing.key"
"""The signing key's file name in an agent's certificate bundle."""


@dataclass(frozen=True)
class Seal:
    """How one operation is committed to and signed in its changelog entry."""

    payload_salt: str
    payload_commit: str
    embedding_sha256: str
    signature: bytes | None = None
    signer_key: str = ""


def generate() -> Ed25519PrivateKey:
    """A new signing key."""
    return Ed25519PrivateKey.generate()


def public_hex(key: Ed25519PrivateKey) -> str:
    """The raw 32-byte public key, lower-case hex (as it appears in certificates and entries)."""
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def private_pem(key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted (the file is written 0600)."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_private(path: Path) -> Ed25519PrivateKey:
    """Reads a signing key written by `mnemosync ca issue-agent --signing`.

    Raises:
        InvalidArgument: the file is not an Ed25519 private key.
    """
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (ValueError, TypeError) as exc:
        raise InvalidArgument(f"{path} is not a PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidArgument(f"{path} is not an Ed25519 key")
    return key


def valid(public_key_hex: str, signature: bytes, message: bytes) -> bool:
    """True when `signature` is `public_key_hex`'s signature of `message`."""
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(public_key_hex)).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def sign_operation(key: Ed25519PrivateKey, agent_id: str, op: ValidOp) -> tuple[bytes, bytes]:
    """(salt, signature) for one validated operation, as the agent sends them."""
    salt = os.urandom(SALT_BYTES)
    document = signing_document(agent_id, op.op_id, op.memory_id, op.op, op.base_version,
                                commit_payload(op.payload, salt.hex()), embedding_digest(op.embedding))
    return salt, key.sign(document)


def seal(agent_id: str, signing_key: str, op: ValidOp, payload_json: str | None = None) -> Seal:
    """Commits to the operation's payload and checks its signature against the writer's key (the server's side).

    An unsigned operation from an agent without a key gets a random salt.

    Args:
        agent_id: The authenticated writer.
        signing_key: Its Ed25519 public key from its certificate (hex), or "" when it does not sign.
        op: The validated operation.
        payload_json: `canonical_json(op.payload)`, when the caller has it (else it is made here).

    Raises:
        PermissionDenied: the writer has a key and the operation is unsigned or
            its signature does not verify, or it is signed and the writer has no key.
    """
    salt = (op.salt or os.urandom(SALT_BYTES)).hex()
    commit = commit_payload(op.payload, salt, payload_json)
    digest = embedding_digest(op.embedding)
    if not signing_key:
        if op.signature:
            raise PermissionDenied(
                f"signature-unverifiable: operation {op.op_id} is signed but agent {agent_id}'s certificate "
                "carries no signing key; issue it with `mnemosync ca issue-agent NAME --signing`, or send unsigned"
            )
        return Seal(salt, commit, digest)
    if not op.signature:
        raise PermissionDenied(
            f"signature-required: agent {agent_id}'s certificate carries a signing key, so operation "
            f"{op.op_id} must be signed (the agent client signs when its cert dir holds {SIGNING_KEY_FILE})"
        )
    document = signing_document(agent_id, op.op_id, op.memory_id, op.op, op.base_version, commit, digest)
    if not valid(signing_key, op.signature, document):
        raise PermissionDenied(
            f"signature-invalid: operation {op.op_id}'s signature does not verify with agent {agent_id}'s "
            "signing key (a different key, or the operation changed after it was signed)"
        )
    return Seal(salt, commit, digest, op.signature, signing_key)


@dataclass(frozen=True)
class IssuedKey:
    """One certificate the CA issued an agent, as far as signatures are concerned (`mnemosync.server.ca.issued_keys`).

    Attributes:
        agent_id: The agent it names.
        signing_key: Its Ed25519 public key, hex ("" when the certificate carries none).
        not_before_ms: Valid from (ms since the epoch).
        until_ms: Valid until: its expiry, or its revocation when that came first.
        serial: Its serial number, for messages.
    """

    agent_id: str
    signing_key: str
    not_before_ms: int
    until_ms: int
    serial: str = ""


def entry_check(issued: Sequence[IssuedKey] | None) -> Callable[[Entry], str]:
    """A `mnemosync.kernel.entry.walk_chain` check of each entry's signature.

    Every signature must verify. With the CA's records (`issued`), a key the CA
    never issued to the entry's agent is reported, and so is an unsigned entry
    written while every certificate of its agent in force at that time carried a
    signing key: the server refuses such writes, so one in the log had its
    signature stripped. (An entry from a time no certificate covers, such as
    development mode before the CA, needs none.)
    """
    by_agent: dict[str, list[IssuedKey]] = {}
    for cert in issued or ():
        by_agent.setdefault(cert.agent_id, []).append(cert)

    def check(entry: Entry) -> str:
        certs = by_agent.get(entry.agent_id, [])
        if not entry.signature:
            if issued is None:
                return ""
            in_force = [c for c in certs if c.not_before_ms <= entry.server_time_ms < c.until_ms]
            if in_force and all(c.signing_key for c in in_force):
                return (f"entry {entry.seq} by agent {entry.agent_id} is not signed, but the certificate the CA "
                        f"issued that agent for that time (serial {in_force[0].serial}) carries a signing key, so "
                        "the server accepted only signed writes from it: its signature was removed")
            return ""
        if not valid(entry.signer_key, entry.signature, entry.signing_bytes()):
            return f"entry {entry.seq}'s signature by agent {entry.agent_id} does not verify"
        if issued is not None and entry.signer_key not in {c.signing_key for c in certs}:
            return (f"entry {entry.seq} is signed by a key the CA never issued to agent {entry.agent_id} "
                    f"({entry.signer_key[:16]}…)")
        return ""

    return check
