"""The server's checkpoint key, and the signed checkpoints and proofs it hands to agents.

Where the key lives. Under mTLS it is `checkpoint.key` in the TLS directory,
made by `mnemosync ca issue-server` together with the server certificate, which
names its public half (`mnemosync.kernel.certificates.checkpoint_key`); the server
sends that certificate with every checkpoint, so an agent trusts the key because
its CA issued it. In development mode (and under mTLS with a server certificate
issued before checkpoints existed) the key is `checkpoint.key` in the data
directory, made on first start, and agents trust it on first use, saying so
loudly. Either way the key is never in the database file: whoever holds only
that file can rewrite it, but cannot sign a checkpoint of the rewritten log.

`Notary` signs checkpoints (`mnemosync.kernel.checkpoint`) of the store's tree on
demand, keeping the most recent ones (every subscriber of a new entry gets the
same checkpoint), and prepares entries for the wire: a checkpoint on the entries
that close a page, and on a blanked entry the redaction that blanked it with its
inclusion proof (`mnemosync.kernel.checkpoint.Attested`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemosync.kernel import certificates, signing
from mnemosync.kernel.checkpoint import Attested, Checkpoint, sign
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument
from mnemosync.server.ca import CHECKPOINT_KEY, SERVER_CERT
from mnemosync.server.clock import SYSTEM_CLOCK, Clock
from mnemosync.server.ledger import Ledger

log = logging.getLogger(__name__)

_KEPT = 64


@dataclass(frozen=True)
class CheckpointKey:
    """The key checkpoints are signed with.

    Attributes:
        key: The Ed25519 private key.
        path: Where it was read from.
        certificate: DER of the server certificate that names its public half (empty when none does:
            agents then trust the key on first use).
    """

    key: Ed25519PrivateKey
    path: Path
    certificate: bytes = b""

    @property
    def public(self) -> str:
        """The public key, lower-case hex."""
        return signing.public_hex(self.key)


def load_key(data_dir: Path, tls_dir: Path | None) -> CheckpointKey:
    """The server's checkpoint key (see the module docstring for where it lives).

    Raises:
        FailedPrecondition: the TLS directory's key is unreadable or not the one its server.crt names.
    """
    if tls_dir is not None and (Path(tls_dir) / CHECKPOINT_KEY).exists():
        path = Path(tls_dir) / CHECKPOINT_KEY
        try:
            key = signing.load_private(path)
            cert = x509.load_pem_x509_certificate((Path(tls_dir) / SERVER_CERT).read_bytes())
        except (InvalidArgument, ValueError, OSError) as exc:
            raise FailedPrecondition(f"cannot use the checkpoint key {path}: {exc}") from None
        if certificates.checkpoint_key(cert) != signing.public_hex(key):
            raise FailedPrecondition(
                f"{path} is not the checkpoint key {Path(tls_dir) / SERVER_CERT} names; copy server.crt, server.key "
                "and checkpoint.key from the same `mnemosync ca issue-server` together")
        return CheckpointKey(key, path, cert.public_bytes(serialization.Encoding.DER))
    path = Path(data_dir) / CHECKPOINT_KEY
    if tls_dir is not None:
        log.warning("the TLS directory %s has no %s (its server certificate predates checkpoints): agents will "
                    "trust %s on first use instead of through the CA; issue the server certificate again "
                    "(mnemosync ca issue-server --force) to fix this", tls_dir, CHECKPOINT_KEY, path)
    if not path.exists():
        _create(path)
    try:
        return CheckpointKey(signing.load_private(path), path)
    except (InvalidArgument, OSError) as exc:
        raise FailedPrecondition(f"cannot use the checkpoint key {path}: {exc}") from None


def _create(path: Path) -> None:
    """Writes a new key with mode 0600 from the start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(signing.private_pem(signing.generate()))


class Notary:
    """Signs checkpoints of a store's transparency log and attaches proofs to outgoing entries. Thread-safe.

    Args:
        store: The store whose tree it signs.
        key: The checkpoint key.
        clock: Where checkpoint times come from.
    """

    def __init__(self, store: Ledger, key: CheckpointKey, clock: Clock = SYSTEM_CLOCK):
        self.store = store
        self.key = key
        self._clock = clock
        self._log_id = store.log_id()
        self._lock = threading.Lock()
        self._signed: OrderedDict[int, Checkpoint] = OrderedDict()

    def checkpoint(self, size: int) -> Checkpoint:
        """A signed checkpoint of the first `size` entries (at most the head)."""
        with self._lock:
            found = self._signed.get(size)
            if found is not None:
                self._signed.move_to_end(size)
                return found
        made = sign(self.key.key, self._log_id, size, self.store.log.tree_root(size), self._clock.now_ms())
        with self._lock:
            self._signed[size] = made
            while len(self._signed) > _KEPT:
                self._signed.popitem(last=False)
        return made

    def outgoing(self, entry: Entry, *, close_page: bool) -> Entry:
        """`entry` as it goes on the wire: with a checkpoint at its seq when it closes a page, and, when it is
        blanked, with the redaction that blanked it and that redaction's proof of inclusion."""
        if close_page:
            entry = replace(entry, checkpoint=self.checkpoint(entry.seq))
        if entry.redacted_by and not entry.withheld:
            entry = replace(entry, redaction=self.attested(entry.redacted_by))
        return entry

    def attested(self, seq: int) -> Attested | None:
        """The entry at `seq` with the current head's checkpoint and its audit path in it (None if there is none)."""
        found = self.store.log.entry(seq)
        if found is None:
            return None
        size = self.store.head_seq()
        return Attested(found, self.checkpoint(size), tuple(self.store.log.inclusion_proof(seq, size)))
