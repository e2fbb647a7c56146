"""The revocation list the server reads: which certificates the CA revoked, failing closed.

grpc's TLS stack cannot check a CRL during the handshake, so the identity
resolver (`mnemosync.server.identity.CertificateIdentity`) asks `RevocationList` on
every call; the file is only stat()ed unless it changed. `crl.pem` carries a
CRL number that grows with every list the CA signs (`mnemosync.server.ca`); the server
keeps the highest number it has accepted in its data directory
(`CRL_NUMBER_FILE`) and refuses a list with a lower one, since an older list
would undo later revocations, also across restarts. It refuses to start
without a `crl.pem` unless told so explicitly (`--allow-missing-crl`), and
when the file disappears while it runs, it keeps the last good list and says
so loudly.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec

from mnemosync.kernel import private_files
from mnemosync.kernel.errors import MnemosyncError

log = logging.getLogger(__name__)

CRL_NUMBER_FILE = "crl-number"
"""In the server's data directory: the highest CRL number the server has accepted."""


class RevocationListUnreadable(MnemosyncError):
    """The server's crl.pem is missing, unreadable, not signed by its CA, or older than one already accepted."""

    code = "UNAVAILABLE"


def crl_number(crl: x509.CertificateRevocationList) -> int:
    """A revocation list's CRL number (0 for lists written before mnemosync numbered them)."""
    try:
        return crl.extensions.get_extension_for_class(x509.CRLNumber).value.crl_number
    except x509.ExtensionNotFound:
        return 0


class RevocationList:
    """The serials revoked by the CA, from a signed crl.pem, re-read whenever the file changes; fails closed.

    grpc's TLS stack cannot check a CRL during the handshake, so the identity
    resolver asks this on every call; the file is only stat()ed unless it changed.

    * No crl.pem at start: refused (RevocationListUnreadable) unless
      `allow_missing`, when nothing is revoked until a list appears.
    * A list with a lower CRL number than the highest accepted (kept in
      `state_path`, so a restart does not forget it): refused at start; while
      serving, the last good list stays in force and an error is logged.
    * crl.pem deleted while serving: the last good list stays in force and an
      error is logged until it is back.
    * crl.pem unreadable or not signed by the CA: every call is refused until fixed.

    Args:
        path: The crl.pem file.
        ca_cert: The CA certificate whose signature the list must carry.
        state_path: Where the highest accepted CRL number is kept (None: only in memory).
        allow_missing: Start without a crl.pem (a loud warning; for a first test only).
    """

    def __init__(self, path: Path, ca_cert: x509.Certificate, *, state_path: Path | None = None,
                 allow_missing: bool = False):
        self.path = Path(path)
        self._ca_cert = ca_cert
        self._state_path = Path(state_path) if state_path is not None else None
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._serials: frozenset[int] = frozenset()
        self._error: str | None = None
        self.number = 0
        """The CRL number of the list in force (0: none yet, or an unnumbered list)."""
        self.loaded = False
        """True once a list has been accepted."""
        self.highest_seen = self._read_state()
        self._refresh()
        if self._error:
            raise RevocationListUnreadable(self._error)
        if not self.loaded:
            if not allow_missing:
                raise RevocationListUnreadable(
                    f"no revocation list at {self.path}: without it a revoked certificate would be accepted. Copy "
                    "crl.pem from the CA directory (mnemosync ca init and revoke write it), or start with "
                    "--allow-missing-crl to run without revocation checks until it appears")
            log.warning("NO REVOCATION LIST: %s is missing and --allow-missing-crl was given; every certificate "
                        "the CA issued is accepted, revoked or not, until that file appears", self.path)

    @property
    def revoked(self) -> int:
        """How many serials the list in force revokes."""
        return len(self._serials)

    def _read_state(self) -> int:
        if self._state_path is None:
            return 0
        try:
            return int(self._state_path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0
        except ValueError as exc:
            raise RevocationListUnreadable(
                f"{self._state_path} does not hold a CRL number ({exc}); restore it, or delete it to accept "
                "whatever crl.pem holds now") from None

    def _remember(self, number: int) -> None:
        self.highest_seen = number
        if self._state_path is not None:
            private_files.write_private(self._state_path, f"{number}\n".encode())

    def _refresh(self) -> None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._stamp is not None and self.loaded:
                log.error("REVOCATION LIST MISSING: %s was deleted; the last good list (CRL number %d, %d revoked) "
                          "stays in force until it is restored", self.path, self.number, len(self._serials))
            self._stamp = None
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        with self._lock:
            if stamp == self._stamp:
                return
            self._stamp = stamp
            try:
                crl = x509.load_pem_x509_crl(self.path.read_bytes())
                public = self._ca_cert.public_key()
                if (crl.issuer != self._ca_cert.subject or not isinstance(public, ec.EllipticCurvePublicKey)
                        or not crl.is_signature_valid(public)):
                    raise InvalidSignature("not signed by this server's CA")
            except (ValueError, InvalidSignature, OSError) as exc:
                self._error = (f"the revocation list {self.path} cannot be used ({exc or type(exc).__name__}); "
                               "the operator must restore it from the CA directory (mnemosync ca revoke writes it)")
                log.error("REVOCATION LIST UNUSABLE: %s; every call is refused until it is fixed", self._error)
                return
            number = crl_number(crl)
            if number < self.highest_seen:
                message = (f"the revocation list {self.path} has CRL number {number}, older than number "
                           f"{self.highest_seen} already accepted: an older list would undo later revocations. "
                           "Copy the current crl.pem from the CA directory (if the CA itself was replaced on "
                           f"purpose, delete {self._state_path})")
                if not self.loaded:
                    self._error = message
                    return
                log.error("OLDER REVOCATION LIST REFUSED: %s; the list in force (CRL number %d) stays", message,
                          self.number)
                return
            self._serials = frozenset(r.serial_number for r in crl)
            self._error = None
            self.number, self.loaded = number, True
            if number > self.highest_seen:
                self._remember(number)

    def is_revoked(self, serial: int) -> bool:
        """True when the CA revoked this serial.

        Raises:
            RevocationListUnreadable: crl.pem changed into something unreadable or unsigned.
        """
        self._refresh()
        if self._error:
            raise RevocationListUnreadable(self._error)
        return serial in self._serials
