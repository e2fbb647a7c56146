"""A small certificate authority for mnemosync's mutual TLS, and what the server reads from it.

Layout of a CA directory (`mnemosync ca init --ca-dir DIR`)::

    DIR/ca.key              CA private key (0600; never on the server)
    DIR/ca.crt              CA certificate: the trust root of servers and agents
    DIR/crl.pem             signed, numbered revocation list (rewritten by `ca revoke`)
    DIR/index.json          every certificate issued: name, kind, serial, grant, revocation
    DIR/server/             the server's TLS folder (`ca issue-server --host NAME...`):
                            ca.crt, server.crt, server.key (0600), checkpoint.key (0600: the server's
                            Ed25519 key for transparency-log checkpoints, its public half in server.crt,
                            see `mnemosync.kernel.certificates`), crl.pem
    DIR/agents/NAME/        one agent's bundle: ca.crt, agent.crt, agent.key (0600)

The server's TLS directory (`serve --tls-dir`) needs `ca.crt`, `server.crt`,
`server.key` and `crl.pem`: exactly what `issue-server` writes to its own
folder. The server refuses a TLS directory holding `ca.key`: whoever broke
into the server host would then hold the CA and could issue itself any
certificate (any agent, authority 1, admin).

`crl.pem` carries a CRL number that grows with every list the CA signs; how
the server reads it, failing closed, is `mnemosync.server.revocation`.

What an agent may do is part of its certificate, so nothing else has to be
configured on the server. The agent id is the subject common name and, with
the grant, is written as subject-alternative-name URIs (readable with
`openssl x509 -noout -text`)::

    urn:mnemosync:agent:<agent id>
    urn:mnemosync:authority:<1..6>
    urn:mnemosync:scope:<percent-encoded scope>   (one per scope; `*` for every scope)
    urn:mnemosync:admin                           (only on admin certificates)

Keys are ECDSA P-256 (fast handshakes, supported by every TLS stack grpc uses).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from mnemosync.kernel import private_files
from mnemosync.kernel.certificates import (
    AGENT_CERT,
    AGENT_KEY,
    ALL_SCOPES,
    AUTOMATED_AUTHORITY,
    CA_CERT,
    CHECKPOINT_KEY_URI,
    HUMAN_AUTHORITY,
    AgentGrant,
    validate_agent_id,
)
from mnemosync.kernel.errors import FailedPrecondition, InvalidArgument, Unauthenticated
from mnemosync.kernel.operations import validate_scope_pattern
from mnemosync.kernel.signing import SIGNING_KEY_FILE, IssuedKey, private_pem, public_hex
from mnemosync.kernel.signing import generate as generate_signing_key
from mnemosync.server.revocation import CRL_NUMBER_FILE, RevocationList, crl_number

CA_KEY = "ca.key"
CRL = "crl.pem"
INDEX = "index.json"
SERVER_CERT = "server.crt"
SERVER_KEY = "server.key"
CHECKPOINT_KEY = "checkpoint.key"
AGENTS = "agents"
SERVER_DIR = "server"

_CLOCK_SKEW = dt.timedelta(minutes=5)


class CaError(FailedPrecondition):
    """The CA directory, a certificate or a key is missing, unreadable or already exists."""


@dataclass(frozen=True)
class Issued:
    """One certificate in the CA's index."""

    name: str
    kind: str
    """"server" or "agent"."""
    serial: str
    """Hex serial number, as `openssl x509 -serial` prints it (upper case)."""
    not_before: str
    not_after: str
    path: str
    hosts: list[str] = field(default_factory=list)
    authority: int | None = None
    scopes: list[str] | None = None
    admin: bool = False
    revoked_at: str | None = None
    signing_key: str = ""
    """The agent's Ed25519 public key, hex ("" when it does not sign)."""

    def to_dict(self) -> dict:
        """JSON-ready data."""
        return asdict(self)


@dataclass(frozen=True)
class ServerTls:
    """The files `serve --tls-dir` loads, as PEM bytes."""

    ca_cert: bytes
    cert_chain: bytes
    private_key: bytes
    revocations: RevocationList


# -- writing -----------------------------------------------------------------


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_private(path: Path, data: bytes, *, overwrite: bool = False) -> None:
    """Writes a secret with mode 0600 from the start (never briefly readable by others)."""
    if path.exists() and not overwrite:
        raise CaError(f"{path} already exists; refusing to overwrite a private key")
    private_files.write_private(path, data)


def _write_public(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _serial_hex(serial: int) -> str:
    return format(serial, "X")


def _iso(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).isoformat(timespec="seconds")


def _load_ca(ca_dir: Path) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key_path, cert_path = ca_dir / CA_KEY, ca_dir / CA_CERT
    if not key_path.exists() or not cert_path.exists():
        raise CaError(f"no CA in {ca_dir}: run `mnemosync ca init --ca-dir {ca_dir}` first")
    private_files.check_key(key_path)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    except (ValueError, TypeError) as exc:
        raise CaError(f"cannot read the CA in {ca_dir}: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CaError(f"the CA key {key_path} is not an elliptic-curve key, which `mnemosync ca init` makes")
    return key, cert


def _read_index(ca_dir: Path) -> list[Issued]:
    path = ca_dir / INDEX
    if not path.exists():
        return []
    return [Issued(**row) for row in json.loads(path.read_text())]


def _write_index(ca_dir: Path, issued: list[Issued]) -> None:
    _write_public(ca_dir / INDEX, json.dumps([i.to_dict() for i in issued], indent=2).encode())


def _builder(subject_cn: str, issuer: x509.Name, public_key, now: dt.datetime, days: int) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mnemosync"),
            x509.NameAttribute(NameOID.COMMON_NAME, subject_cn),
        ]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _leaf_usage(builder: x509.CertificateBuilder, ca_cert: x509.Certificate, eku) -> x509.CertificateBuilder:
    ca_ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_agreement=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_cert_sign=False,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
    )


def _days(days: int) -> int:
    if not 1 <= days <= 36_500:
        raise InvalidArgument(f"days must be 1 to 36500, got {days}")
    return days


def init_ca(ca_dir: Path, *, name: str = "mnemosync CA", days: int = 3650) -> Issued:
    """Creates a CA key and self-signed certificate, and an empty revocation list.

    Args:
        ca_dir: Directory to create them in (made 0700 if new).
        name: The CA's common name.
        days: Validity of the CA certificate.

    Raises:
        CaError: a CA already exists there.
    """
    ca_dir = Path(ca_dir)
    if (ca_dir / CA_KEY).exists() or (ca_dir / CA_CERT).exists():
        raise CaError(f"a CA already exists in {ca_dir}; use another --ca-dir to start a new one")
    private_files.private_dir(ca_dir)
    now = _now()
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "mnemosync"),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, subject, key.public_key(), now, _days(days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write_private(ca_dir / CA_KEY, _key_pem(key))
    _write_public(ca_dir / CA_CERT, _cert_pem(cert))
    _write_index(ca_dir, [])
    _write_crl(ca_dir, key, cert, [])
    return Issued(name, "ca", _serial_hex(cert.serial_number), _iso(cert.not_valid_before_utc),
                  _iso(cert.not_valid_after_utc), str(ca_dir / CA_CERT))


def issue_server(ca_dir: Path, hosts: list[str], *, out_dir: Path | None = None, days: int = 365,
                 overwrite: bool = False, now: dt.datetime | None = None) -> Issued:
    """Issues the server's certificate for the given DNS names and IP addresses, in a folder of its own.

    Writes `ca.crt`, `server.crt`, `server.key` (0600) and a copy of `crl.pem`
    to `out_dir`: the folder to copy to the server host and serve from
    (`serve --tls-dir`). It never holds `ca.key`.

    Also makes the server's checkpoint key (`checkpoint.key`) and names its public
    half in the certificate, so agents can check the server's signed checkpoints.

    Args:
        ca_dir: The CA directory.
        hosts: Names clients connect to (the first is also the common name).
        out_dir: The server's TLS folder (default `<ca_dir>/server`, made 0700); not the CA directory.
        days: Validity.
        overwrite: Replace an existing server certificate and key there.
        now: Issue as of this time (tests make expired certificates with it).

    Raises:
        CaError: no CA, a server certificate exists there and overwrite is False, or `out_dir` is the CA directory.
        InvalidArgument: no hosts.
    """
    ca_dir = Path(ca_dir)
    out_dir = Path(out_dir) if out_dir is not None else ca_dir / SERVER_DIR
    if not hosts:
        raise InvalidArgument("give at least one --host (a DNS name or IP address clients connect to)")
    ca_key, ca_cert = _load_ca(ca_dir)
    if out_dir.resolve() == ca_dir.resolve() or (out_dir / CA_KEY).exists():
        raise CaError(f"{out_dir} holds the CA key; the server's TLS folder must not (give another --out)")
    if (out_dir / SERVER_CERT).exists() and not overwrite:
        raise CaError(f"{out_dir / SERVER_CERT} already exists; add --force to replace it")
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP256R1())
    checkpoint_key = generate_signing_key()
    names.append(x509.UniformResourceIdentifier(CHECKPOINT_KEY_URI + public_hex(checkpoint_key)))
    cert = (
        _leaf_usage(_builder(hosts[0], ca_cert.subject, key.public_key(), now or _now(), _days(days)),
                    ca_cert, ExtendedKeyUsageOID.SERVER_AUTH)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    private_files.private_dir(out_dir)
    _write_private(out_dir / SERVER_KEY, _key_pem(key), overwrite=True)
    _write_private(out_dir / CHECKPOINT_KEY, private_pem(checkpoint_key), overwrite=True)
    _write_public(out_dir / SERVER_CERT, _cert_pem(cert))
    _write_public(out_dir / CA_CERT, _cert_pem(ca_cert))
    _write_public(out_dir / CRL, (ca_dir / CRL).read_bytes())
    issued = Issued(hosts[0], "server", _serial_hex(cert.serial_number), _iso(cert.not_valid_before_utc),
                    _iso(cert.not_valid_after_utc), str(out_dir / SERVER_CERT), hosts=list(hosts))
    _write_index(ca_dir, [*_read_index(ca_dir), issued])
    return issued


def issue_agent(ca_dir: Path, agent_id: str, *, authority: int, scopes: list[str], admin: bool = False,
                signing: bool = False, days: int = 365, now: dt.datetime | None = None) -> Issued:
    """Issues an agent certificate carrying its id, authority, scopes and admin flag.

    Writes the agent's bundle to `<ca_dir>/agents/<agent_id>/` (ca.crt,
    agent.crt, agent.key, and with `signing` signing.key); hand that directory
    to the agent (`--cert-dir`).

    Args:
        ca_dir: The CA directory.
        agent_id: 1 to 64 characters of letters, digits and `_.@-`.
        authority: 1 (human) to 6 (automated extractor).
        scopes: Scopes granted (`*` for every scope); at least one.
        admin: Grant admin operations.
        signing: Make an Ed25519 signing key and put its public half in the
            certificate: the server then accepts only operations it signed.
        days: Validity.
        now: Issue as of this time (tests make expired certificates with it).

    Raises:
        CaError: no CA, or the agent holds a certificate that is not revoked.
        InvalidArgument: a bad id, authority or scope.
    """
    ca_dir = Path(ca_dir)
    try:
        validate_agent_id(agent_id)
    except Unauthenticated as exc:
        raise InvalidArgument(str(exc)) from None
    if not HUMAN_AUTHORITY <= authority <= AUTOMATED_AUTHORITY:
        raise InvalidArgument(f"authority must be {HUMAN_AUTHORITY} (human) to {AUTOMATED_AUTHORITY} (automated "
                              f"extractor), got {authority}")
    if not scopes:
        raise InvalidArgument("give at least one --scope (for example user, project:NAME, or * for every scope)")
    granted = (None if ALL_SCOPES in scopes
               else tuple(dict.fromkeys(validate_scope_pattern(s, "--scope") for s in scopes)))
    ca_key, ca_cert = _load_ca(ca_dir)
    index = _read_index(ca_dir)
    if any(i.kind == "agent" and i.name == agent_id and i.revoked_at is None for i in index):
        raise CaError(f"agent {agent_id} already has a certificate; revoke it first "
                      f"(mnemosync ca revoke {agent_id}) to issue a new one")
    signing_key = generate_signing_key() if signing else None
    grant = AgentGrant(agent_id, authority, granted, admin,
                       public_hex(signing_key) if signing_key else "")
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        _leaf_usage(_builder(agent_id, ca_cert.subject, key.public_key(), now or _now(), _days(days)),
                    ca_cert, ExtendedKeyUsageOID.CLIENT_AUTH)
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(u) for u in grant.uris()]),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    bundle = private_files.private_dir(ca_dir / AGENTS / agent_id)
    _write_private(bundle / AGENT_KEY, _key_pem(key), overwrite=True)
    signing_path = bundle / SIGNING_KEY_FILE
    if signing_key is not None:
        _write_private(signing_path, private_pem(signing_key), overwrite=True)
    elif signing_path.exists():
        signing_path.unlink()  # a re-issued agent that no longer signs must not keep signing
    _write_public(bundle / AGENT_CERT, _cert_pem(cert))
    _write_public(bundle / CA_CERT, _cert_pem(ca_cert))
    issued = Issued(agent_id, "agent", _serial_hex(cert.serial_number), _iso(cert.not_valid_before_utc),
                    _iso(cert.not_valid_after_utc), str(bundle / AGENT_CERT), authority=authority,
                    scopes=None if granted is None else list(granted), admin=admin, signing_key=grant.signing_key)
    _write_index(ca_dir, [*index, issued])
    return issued


def revoke(ca_dir: Path, name: str) -> list[Issued]:
    """Revokes every unrevoked certificate issued to `name` and rewrites crl.pem (with the next CRL number).

    The server TLS folders inside the CA directory (`server_folders`) get the
    new list too; a running server reads it on its next call. Copy crl.pem to
    a server elsewhere.

    Raises:
        CaError: no CA, or nothing unrevoked is issued to that name.
    """
    ca_dir = Path(ca_dir)
    ca_key, ca_cert = _load_ca(ca_dir)
    index = _read_index(ca_dir)
    stamp = _iso(_now())
    revoked = [i for i in index if i.name == name and i.revoked_at is None]
    if not revoked:
        raise CaError(f"no unrevoked certificate issued to {name!r}; see `mnemosync ca list`")
    index = [Issued(**{**i.to_dict(), "revoked_at": stamp}) if i in revoked else i for i in index]
    _write_crl(ca_dir, ca_key, ca_cert, index)
    _write_index(ca_dir, index)
    for folder in server_folders(ca_dir):  # a server on this host re-reads it at once
        _write_public(folder / CRL, (ca_dir / CRL).read_bytes())
    return [i for i in index if i.name == name and i.revoked_at == stamp]


def server_folders(ca_dir: Path) -> list[Path]:
    """The server TLS folders inside the CA directory (`revoke` refreshes their crl.pem; copy it to others)."""
    ca_dir = Path(ca_dir)
    return sorted(f for f in ca_dir.iterdir()
                  if f.is_dir() and (f / SERVER_CERT).exists() and (f / CRL).exists() and not (f / CA_KEY).exists())


def list_issued(ca_dir: Path) -> list[Issued]:
    """Every certificate the CA issued, oldest first.

    Raises:
        CaError: no CA in that directory.
    """
    _load_ca(Path(ca_dir))
    return _read_index(Path(ca_dir))


def _next_crl_number(ca_dir: Path, now: dt.datetime) -> int:
    """One more than the current list's number, and never below the clock's seconds: numbers keep growing
    even if the CA directory's crl.pem was lost."""
    previous = 0
    try:
        previous = crl_number(x509.load_pem_x509_crl((ca_dir / CRL).read_bytes()))
    except (OSError, ValueError):
        pass
    return max(previous + 1, int(now.timestamp()))


def _write_crl(ca_dir: Path, ca_key, ca_cert: x509.Certificate, index: list[Issued]) -> None:
    now = _now()
    builder = (
        x509.CertificateRevocationListBuilder()
        .issuer_name(ca_cert.subject)
        .last_update(now)
        .next_update(now + dt.timedelta(days=3650))
        .add_extension(x509.CRLNumber(_next_crl_number(ca_dir, now)), critical=False)
    )
    for issued in index:
        if issued.revoked_at:
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder()
                .serial_number(int(issued.serial, 16))
                .revocation_date(dt.datetime.fromisoformat(issued.revoked_at))
                .build()
            )
    crl = builder.sign(ca_key, hashes.SHA256())
    _write_public(ca_dir / CRL, crl.public_bytes(serialization.Encoding.PEM))


# -- reading (server side) -----------------------------------------------------


def issued_keys(ca_dir: Path) -> list[IssuedKey]:
    """Every agent certificate the CA issued, with its signing key and when it was in force (revoked ones too:
    entries written before the revocation stay valid), for `mnemosync verify --ca-dir`."""
    def ms(moment: str) -> int:
        return int(dt.datetime.fromisoformat(moment).timestamp() * 1000)

    return [IssuedKey(i.name, i.signing_key, ms(i.not_before),
                      min(ms(i.not_after), ms(i.revoked_at)) if i.revoked_at else ms(i.not_after), i.serial)
            for i in _read_index(Path(ca_dir)) if i.kind == "agent"]


def load_server_tls(tls_dir: Path, *, state_dir: Path | None = None, allow_missing_crl: bool = False) -> ServerTls:
    """Reads ca.crt, server.crt, server.key and crl.pem from the server's TLS directory.

    Args:
        tls_dir: The folder `mnemosync ca issue-server` wrote.
        state_dir: The server's data directory, where the highest accepted CRL number is kept.
        allow_missing_crl: Start without crl.pem (see `RevocationList`).

    Raises:
        CaError: the folder holds ca.key; a file is missing or unreadable; or the
            server certificate was not issued by ca.crt.
        RevocationListUnreadable: crl.pem is missing (and not allowed to be), unreadable,
            unsigned, or older than one the server already accepted.
    """
    tls_dir = Path(tls_dir)
    if (tls_dir / CA_KEY).exists():
        raise CaError(
            f"refusing to serve from {tls_dir}: it holds {CA_KEY}, the CA's private key, and whoever got into this "
            "host could then issue itself any certificate (any agent, authority 1, admin). Serve from the folder "
            f"`mnemosync ca issue-server` writes (<ca-dir>/{SERVER_DIR}/) and keep {CA_KEY} off the server"
        )
    missing = [n for n in (CA_CERT, SERVER_CERT, SERVER_KEY) if not (tls_dir / n).exists()]
    if missing:
        raise CaError(
            f"--tls-dir {tls_dir} lacks {', '.join(missing)}: create them with `mnemosync ca init` and "
            "`mnemosync ca issue-server --host NAME` (or start with --insecure on loopback for development)"
        )
    private_files.check_key(tls_dir / SERVER_KEY)
    try:
        ca_pem = (tls_dir / CA_CERT).read_bytes()
        cert_pem = (tls_dir / SERVER_CERT).read_bytes()
        key_pem = (tls_dir / SERVER_KEY).read_bytes()
        ca_cert = x509.load_pem_x509_certificate(ca_pem)
        cert = x509.load_pem_x509_certificate(cert_pem)
        serialization.load_pem_private_key(key_pem, password=None)
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature, OSError) as exc:
        raise CaError(f"cannot use the TLS files in {tls_dir}: {exc or type(exc).__name__} "
                      f"({SERVER_CERT} must be issued by {CA_CERT})") from exc
    state = None
    if state_dir is not None:
        private_files.private_dir(state_dir)
        state = Path(state_dir) / CRL_NUMBER_FILE
    return ServerTls(ca_pem, cert_pem, key_pem,
                     RevocationList(tls_dir / CRL, ca_cert, state_path=state, allow_missing=allow_missing_crl))
