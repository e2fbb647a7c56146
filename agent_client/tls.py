"""The agent's certificate files, its TLS channel credentials, and plain words for TLS failures.

An agent's certificate directory is the bundle `mnemosync ca issue-agent NAME`
writes: `ca.crt` (the CA that issued the server's certificate), `agent.crt`
and `agent.key`. The agent id is read from agent.crt; the server takes it from
the same certificate.

grpc reports every failed handshake as UNAVAILABLE with an opaque detail
("Socket closed" when the server refused our certificate), so when a call
fails that way `diagnose` repeats the handshake with Python's `ssl` module,
which says exactly what went wrong, and words it with what to do.
"""

from __future__ import annotations

import datetime as dt
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path

import grpc
from cryptography import x509
from cryptography.exceptions import InvalidSignature

from mnemosync.agent.errors import TlsError
from mnemosync.kernel.certificates import AGENT_CERT, AGENT_KEY, CA_CERT, grant_from_certificate
from mnemosync.kernel.errors import Unauthenticated

_HANDSHAKE_HINTS = ("socket closed", "handshake", "ssl", "tsi_", "hostname verification", "certificate")


@dataclass(frozen=True)
class AgentTls:
    """An agent's TLS files.

    Args:
        cert_dir: The directory holding ca.crt, agent.crt and agent.key.
        server_name: Name to check the server certificate against, when it
            differs from the host in the server address.
    """

    cert_dir: Path
    server_name: str | None = None

    @property
    def ca_cert(self) -> Path:
        """The CA certificate that must have issued the server's certificate."""
        return self.cert_dir / CA_CERT

    @property
    def cert(self) -> Path:
        """This agent's certificate."""
        return self.cert_dir / AGENT_CERT

    @property
    def key(self) -> Path:
        """This agent's private key."""
        return self.cert_dir / AGENT_KEY

    def signing_key(self):
        """The agent's Ed25519 signing key, or None when its bundle has none (it does not sign).

        Raises:
            TlsError: the key file cannot be read.
        """
        from mnemosync.kernel import signing
        from mnemosync.kernel.errors import InvalidArgument

        path = self.cert_dir / signing.SIGNING_KEY_FILE
        if not path.exists():
            return None
        try:
            return signing.load_private(_private_key(path))
        except (InvalidArgument, OSError) as exc:
            raise TlsError(f"the signing key {path} cannot be used: {exc}; issue the agent again "
                           "(mnemosync ca revoke NAME, then mnemosync ca issue-agent NAME --signing)") from None

    def check_files(self) -> None:
        """Raises TlsError naming any missing file and how to get it."""
        missing = [p.name for p in (self.ca_cert, self.cert, self.key) if not p.is_file()]
        if missing:
            raise TlsError(
                f"the certificate directory {self.cert_dir} lacks {', '.join(missing)}; give --cert-dir "
                "the directory `mnemosync ca issue-agent NAME` wrote (it holds ca.crt, agent.crt, agent.key)"
            )

    def certificate(self) -> x509.Certificate:
        """This agent's parsed certificate.

        Raises:
            TlsError: missing or unreadable.
        """
        self.check_files()
        try:
            return x509.load_pem_x509_certificate(self.cert.read_bytes())
        except ValueError as exc:
            raise TlsError(f"{self.cert} is not a PEM certificate ({exc})") from None

    def agent_id(self) -> str:
        """The agent id in agent.crt (the server uses this id, nothing else).

        Raises:
            TlsError: the files are missing or it is not an agent certificate.
        """
        try:
            return grant_from_certificate(self.certificate()).agent_id
        except Unauthenticated as exc:
            raise TlsError(f"{self.cert}: {exc}") from None

    def credentials(self) -> grpc.ChannelCredentials:
        """grpc channel credentials presenting agent.crt and trusting only ca.crt."""
        self.check_files()
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_cert.read_bytes(),
            private_key=_private_key(self.key).read_bytes(),
            certificate_chain=self.cert.read_bytes(),
        )

    def channel_options(self) -> list[tuple[str, str]]:
        """Extra channel options (the server-name override, when set)."""
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []


def _private_key(path: Path) -> Path:
    """A key file, made 0600 if others could read it (`mnemosync.kernel.private_files`).

    Raises:
        TlsError: others can read it and this process cannot change that.
    """
    from mnemosync.kernel.private_files import NotPrivate, check_key

    try:
        return check_key(path)
    except NotPrivate as exc:
        raise TlsError(str(exc)) from None


def looks_like_handshake_failure(details: str) -> bool:
    """True when an UNAVAILABLE detail may hide a TLS handshake failure."""
    lowered = (details or "").lower()
    return any(hint in lowered for hint in _HANDSHAKE_HINTS)


def _fmt(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def check_own_certificate(tls: AgentTls, now: dt.datetime | None = None) -> str | None:
    """What is wrong with the agent's own files, without touching the network (None if nothing)."""
    now = now or dt.datetime.now(dt.UTC)
    cert = tls.certificate()
    name = cert.subject.rfc4514_string()
    if cert.not_valid_after_utc < now:
        return (f"this agent's certificate {tls.cert} ({name}) expired on {_fmt(cert.not_valid_after_utc)}; "
                "ask the operator for a new one (mnemosync ca revoke NAME, then mnemosync ca issue-agent NAME)")
    if cert.not_valid_before_utc > now:
        return (f"this agent's certificate {tls.cert} is not valid before {_fmt(cert.not_valid_before_utc)}; "
                "check this machine's clock")
    try:
        ca = x509.load_pem_x509_certificate(tls.ca_cert.read_bytes())
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return (f"{tls.cert} was not issued by the CA in {tls.ca_cert}: the files come from different CAs; "
                "use the whole directory `mnemosync ca issue-agent` wrote")
    return None


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def _server_certificate(host: str, port: int, server_name: str, timeout: float) -> x509.Certificate | None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                ctx.wrap_socket(raw, server_hostname=server_name) as conn:
            der = conn.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


def _names(cert: x509.Certificate | None) -> str:
    if cert is None:
        return "unknown names"
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [*san.get_values_for_type(x509.DNSName), *map(str, san.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        names = []
    return ", ".join(names) or cert.subject.rfc4514_string()


def diagnose(tls: AgentTls, address: str, *, timeout: float = 3.0) -> str | None:
    """Repeats the TLS handshake with Python's ssl and says what failed, or None if nothing did.

    Covers: this agent's certificate expired or from another CA (checked
    locally, and as the server's alert), the server's certificate expired,
    issued by another CA, or not valid for the name used, and a server that
    does not speak TLS at all.
    """
    local = check_own_certificate(tls)
    if local:
        return local
    host, port = _split(address)
    name = tls.server_name or host
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cafile=str(tls.ca_cert))
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    ctx.set_alpn_protocols(["h2"])
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return None  # not a TLS problem: the server is down or unreachable
    try:
        with ctx.wrap_socket(raw, server_hostname=name) as conn:
            # TLS 1.3 gives the server's verdict on our certificate after the handshake: a grpc
            # server that accepts it sends its HTTP/2 settings, one that refuses it hangs up.
            try:
                if conn.recv(1) == b"":
                    return (f"the server at {address} refused this agent's certificate {tls.cert}: it was "
                            "issued by a CA the server does not trust, or is not an agent certificate; use "
                            "the bundle `mnemosync ca issue-agent` wrote with the server's CA")
            except TimeoutError:
                pass
    except ssl.SSLCertVerificationError as exc:
        return _server_side_problem(exc, host, port, name, tls, timeout)
    except ssl.SSLError as exc:
        return _refused_by_server(exc, address)
    except OSError:
        return None
    finally:
        raw.close()
    return None


def _server_side_problem(exc: ssl.SSLCertVerificationError, host: str, port: int, name: str, tls: AgentTls,
                         timeout: float) -> str:
    cert = _server_certificate(host, port, name, timeout)
    message = (exc.verify_message or str(exc)).lower()
    where = f"the server at {host}:{port}"
    if "expired" in message:
        when = f" on {_fmt(cert.not_valid_after_utc)}" if cert else ""
        return f"{where} presents a certificate that expired{when}; the operator must issue a new one " \
               "(mnemosync ca issue-server --host NAME --force) and restart the server"
    if "hostname" in message or "ip address mismatch" in message:
        return (f"{where} presents a certificate for {_names(cert)}, not for {name!r}; connect using one of "
                "those names (--server NAME:PORT), set --tls-server-name, or have the operator reissue it "
                "with that --host")
    if "issuer" in message or "self-signed" in message or "self signed" in message:
        return (f"{where} presents a certificate that was not issued by the CA in {tls.ca_cert} (wrong CA); "
                "use the ca.crt of the CA that issued the server's certificate")
    return f"{where} presents a certificate this agent cannot verify: {exc.verify_message or exc}"


def _refused_by_server(exc: ssl.SSLError, address: str) -> str:
    reason = (exc.reason or str(exc)).upper()
    if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason:
        return (f"the server at {address} does not speak TLS (it runs with --insecure); connect with "
                "--insecure (loopback development only) or restart the server with --tls-dir")
    if "UNKNOWN_CA" in reason:
        return (f"the server at {address} refused this agent's certificate: it was issued by a CA the server "
                "does not trust (wrong CA); use a certificate from the server's CA (mnemosync ca issue-agent)")
    if "EXPIRED" in reason:
        return (f"the server at {address} refused this agent's certificate as expired; ask the operator for a "
                "new one (mnemosync ca issue-agent)")
    if "CERTIFICATE_REQUIRED" in reason:
        return f"the server at {address} requires a client certificate; give --cert-dir"
    return f"the TLS handshake with {address} failed: {exc.reason or exc}"
