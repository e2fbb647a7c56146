"""mTLS identity, revocation, TLS failure messages, limits and tamper evidence, with real
certificates from the CA code and command, and real TLS servers on loopback ports."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from agent_client.cache import Cache
from agent_client.errors import HistoryMismatch, PermissionDenied, ResourceExhausted, TlsError, Unauthenticated
from agent_client.remote import Remote
from agent_client.settings import ClientSettings
from agent_client.sync import catch_up
from agent_client.tls import AgentTls
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server import ca
from server.app import run_server
from server.core import certificates
from server.core.errors import FailedPrecondition
from server.core.errors import PermissionDenied as ServerPermissionDenied
from server.core.limits import Limits
from server.core.metadata import RETRY_AFTER_KEY
from server.identity import Caller, CertificateIdentity, require_admin
from server.ratelimit import TokenBuckets
from server.settings import ServerSettings

from conftest import RawAgent, add_op, free_port
from serving import ServeProcess

YEARS_AGO = dt.datetime.now(dt.UTC) - dt.timedelta(days=800)


def _mnemosync(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "server.cli", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})


class TlsAgent(RawAgent):
    """A RawAgent over mTLS with an agent bundle; `claimed_id` is sent as metadata (and must be ignored)."""

    def __init__(self, address: str, bundle: Path, claimed_id: str | None = None):
        creds = grpc.ssl_channel_credentials((bundle / "ca.crt").read_bytes(), (bundle / "agent.key").read_bytes(),
                                             (bundle / "agent.crt").read_bytes())
        self.channel = grpc.secure_channel(address, creds)
        self.stub = pb_grpc.MemoryServiceStub(self.channel)
        self.agent_id = bundle.name
        self.metadata = (("x-mnemosync-agent", claimed_id),) if claimed_id else ()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA with a server certificate for 127.0.0.1/localhost and agents alice, bob and root (admin)."""
    ca_dir = tmp_path_factory.mktemp("pki") / "ca"
    ca.init_ca(ca_dir)
    ca.issue_server(ca_dir, ["localhost", "127.0.0.1"])
    ca.issue_agent(ca_dir, "alice", authority=3, scopes=["user", "project:web"])
    ca.issue_agent(ca_dir, "bob", authority=4, scopes=["user"])
    ca.issue_agent(ca_dir, "root", authority=1, scopes=["*"], admin=True)
    ca.issue_agent(ca_dir, "stale", authority=3, scopes=["user"], now=YEARS_AGO, days=30)
    return ca_dir


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> Path:
    """Another CA, with its own agent mallory."""
    ca_dir = tmp_path_factory.mktemp("foreign") / "ca"
    ca.init_ca(ca_dir, name="someone else's CA")
    ca.issue_server(ca_dir, ["127.0.0.1"])
    ca.issue_agent(ca_dir, "mallory", authority=1, scopes=["*"], admin=True)
    return ca_dir


def _tls_settings(tmp_path: Path, tls_dir: Path, **limits) -> ServerSettings:
    return ServerSettings(data_dir=tmp_path / "server", listen="127.0.0.1:0", tls_dir=tls_dir, synchronous="normal",
                          limits=Limits(**limits))


@pytest.fixture
def tls_dir(tmp_path, pki) -> Path:
    """The server's own TLS directory (a copy, so revocations in one test stay there)."""
    target = tmp_path / "tls"
    target.mkdir()
    for name in ("ca.crt", "server.crt", "server.key", "crl.pem"):
        shutil.copy(pki / name, target / name)
    return target


@pytest.fixture
def tls_server(tmp_path, tls_dir):
    with run_server(_tls_settings(tmp_path, tls_dir)) as running:
        yield running


def _remote(address: str, bundle: Path, server_name: str | None = None) -> Remote:
    return Remote(address, bundle.name, insecure=False, timeout=5, tls=AgentTls(bundle, server_name))


# -- the CA ------------------------------------------------------------------------


def test_ca_commands_write_keys_0600_print_no_secret_and_record_the_grant(tmp_path):
    ca_dir = str(tmp_path / "ca")
    outputs = [
        _mnemosync("ca", "init", "--ca-dir", ca_dir),
        _mnemosync("ca", "issue-server", "--ca-dir", ca_dir, "--host", "memory.internal", "--host", "10.0.0.5"),
        _mnemosync("ca", "issue-agent", "alice", "--ca-dir", ca_dir, "--authority", "3", "--scope", "user",
                   "--scope", "project:web"),
        _mnemosync("ca", "issue-agent", "ops", "--authority", "1", "--scope", "*", "--admin",
                   env={"MNEMOSYNC_CA_DIR": ca_dir}),
    ]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert "PRIVATE KEY" not in result.stdout + result.stderr
    keys = [tmp_path / "ca/ca.key", tmp_path / "ca/server.key", tmp_path / "ca/agents/alice/agent.key",
            tmp_path / "ca/agents/ops/agent.key"]
    assert all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    assert "--cert-dir" in outputs[2].stdout and str(tmp_path / "ca/agents/alice") in outputs[2].stdout

    listed = json.loads(_mnemosync("ca", "list", "--ca-dir", ca_dir, "--json").stdout)
    assert [(i["kind"], i["name"]) for i in listed] == [("server", "memory.internal"), ("agent", "alice"),
                                                         ("agent", "ops")]
    assert listed[0]["hosts"] == ["memory.internal", "10.0.0.5"]
    assert (listed[1]["authority"], listed[1]["scopes"], listed[1]["admin"]) == (3, ["user", "project:web"], False)
    assert (listed[2]["authority"], listed[2]["scopes"], listed[2]["admin"]) == (1, None, True)

    again = _mnemosync("ca", "issue-agent", "alice", "--ca-dir", ca_dir, "--authority", "3", "--scope", "user")
    assert again.returncode == 4 and "already has a certificate; revoke it first" in again.stderr  # 4: exists
    revoked = _mnemosync("ca", "revoke", "alice", "--ca-dir", ca_dir)
    assert revoked.returncode == 0 and "revoked agent alice" in revoked.stdout
    table = _mnemosync("ca", "list", "--ca-dir", ca_dir).stdout
    assert "REVOKED" in table and "agent alice" in table
    reinit = _mnemosync("ca", "init", "--ca-dir", ca_dir)
    assert reinit.returncode == 4 and "a CA already exists" in reinit.stderr


def test_an_agent_certificate_carries_its_id_authority_scopes_and_admin_flag(pki):
    from cryptography import x509

    def grant(name: str) -> certificates.AgentGrant:
        cert = x509.load_pem_x509_certificate((pki / "agents" / name / "agent.crt").read_bytes())
        assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == name
        return certificates.grant_from_certificate(cert)

    assert grant("alice") == certificates.AgentGrant("alice", 3, ("user", "project:web"), False)
    assert grant("root") == certificates.AgentGrant("root", 1, None, True)
    server_cert = x509.load_pem_x509_certificate((pki / "server.crt").read_bytes())
    with pytest.raises(Exception, match="not a mnemosync agent certificate"):
        certificates.grant_from_certificate(server_cert)


# -- identity over mTLS --------------------------------------------------------------


def test_agent_a_cannot_become_b_by_sending_bs_id_in_metadata(tls_server, pki):
    alice = TlsAgent(tls_server.address, pki / "agents/alice", claimed_id="bob")
    try:
        written = alice.add("written by alice, claiming to be bob")
        alice.call("Ack", pb.AckRequest(seq=written.seq))
        [entry] = alice.sync(0)
        assert entry.agent_id == "alice"
        assert alice.get(written.memory_id).author_agent == "alice"
        offsets = {a.agent_id: a.acked_seq for a in alice.call("Stats", pb.StatsRequest()).agents}
        assert offsets == {"alice": 1}  # acknowledged as itself; bob has no offset
    finally:
        alice.close()


def test_the_caller_gets_authority_scopes_and_admin_from_the_certificate_only(pki, tls_dir):
    identity = CertificateIdentity(ca.load_server_tls(tls_dir).revocations)

    class Context:
        def __init__(self, bundle: str):
            self.pem = (pki / "agents" / bundle / "agent.crt").read_bytes()

        def auth_context(self):
            return {"x509_pem_cert": [self.pem]}

        def invocation_metadata(self):
            return (("x-mnemosync-agent", "root"),)

    assert identity(Context("alice")) == Caller("alice", 3, ("user", "project:web"), False)
    assert identity(Context("root")) == Caller("root", 1, None, True)

    class NoCertificate(Context):
        def auth_context(self):
            return {}

    with pytest.raises(Exception, match="no client certificate"):
        identity(NoCertificate("alice"))


def test_admin_operations_need_an_admin_certificate():
    require_admin(Caller("root", 1, None, admin=True), "resolving a conflict for another agent")
    with pytest.raises(ServerPermissionDenied) as err:
        require_admin(Caller("alice", 3, ("user",)), "resolving a conflict for another agent")
    assert err.value.code == "PERMISSION_DENIED"
    assert str(err.value) == (
        "resolving a conflict for another agent is an admin operation and agent alice's certificate is not an "
        "admin certificate (rule: admin operations need a certificate issued with "
        "`mnemosync ca issue-agent NAME --admin`)")


def test_the_client_maps_permission_denied_to_its_own_typed_error():
    from agent_client.errors import refused

    assert isinstance(refused("PERMISSION_DENIED", "no"), PermissionDenied)


def test_a_revoked_certificate_is_refused_from_its_next_call_and_others_keep_working(tmp_path, pki, tls_dir):
    with run_server(_tls_settings(tmp_path, tls_dir)) as server:
        bob = _remote(server.address, pki / "agents/bob")
        alice = _remote(server.address, pki / "agents/alice")
        try:
            assert bob.stats().head_seq == 0
            revoked_ca = tmp_path / "ca-copy"
            shutil.copytree(pki, revoked_ca)
            ca.revoke(revoked_ca, "bob")
            shutil.copy(revoked_ca / "crl.pem", tls_dir / "crl.pem")  # what the operator ships to the server
            with pytest.raises(Unauthenticated) as err:
                bob.stats()
            assert "the certificate of agent bob" in str(err.value) and "was revoked" in str(err.value)
            assert "mnemosync ca issue-agent bob" in str(err.value)
            assert alice.stats().head_seq == 0
        finally:
            bob.close()
            alice.close()


def test_a_revocation_list_not_signed_by_the_ca_stops_every_call(tmp_path, pki, tls_dir, foreign):
    with run_server(_tls_settings(tmp_path, tls_dir)) as server:
        alice = _remote(server.address, pki / "agents/alice")
        try:
            shutil.copy(foreign / "crl.pem", tls_dir / "crl.pem")
            with pytest.raises(Exception, match="revocation list .* cannot be used"):
                alice.stats()
        finally:
            alice.close()


def test_a_certificate_from_another_ca_is_refused_at_the_handshake(tls_server, tls_dir, foreign, tmp_path):
    mallory = TlsAgent(tls_server.address, foreign / "agents/mallory", claimed_id="alice")
    with pytest.raises(grpc.RpcError) as err:
        mallory.add("let me in")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    mallory.close()
    # Even trusting the right CA for the server, its own certificate is refused.
    bundle = tmp_path / "mallory-with-our-ca"
    shutil.copytree(foreign / "agents/mallory", bundle)
    shutil.copy(tls_dir / "ca.crt", bundle / "ca.crt")
    sneaky = TlsAgent(tls_server.address, bundle)
    with pytest.raises(grpc.RpcError) as err:
        sneaky.add("let me in")
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    sneaky.close()
    assert tls_server.store.head_seq() == 0


def test_a_plain_text_client_cannot_talk_to_a_tls_server(tls_server):
    remote = Remote(tls_server.address, "alice", insecure=True, timeout=3)
    with pytest.raises(Exception) as err:
        remote.stats()
    assert "if that server uses TLS, connect with --cert-dir instead of --insecure" in str(err.value)
    remote.close()


# -- what the agent is told when TLS fails ------------------------------------------------


def test_an_expired_agent_certificate_is_named_with_what_to_do(tls_server, pki):
    remote = _remote(tls_server.address, pki / "agents/stale")
    with pytest.raises(TlsError) as err:
        remote.stats()
    message = str(err.value)
    assert "this agent's certificate" in message and "expired on" in message
    assert "ask the operator for a new one" in message
    remote.close()


def test_a_server_certificate_from_another_ca_is_called_the_wrong_ca(tls_server, foreign):
    remote = _remote(tls_server.address, foreign / "agents/mallory")
    with pytest.raises(TlsError) as err:
        remote.stats()
    assert "was not issued by the CA in" in str(err.value) and "(wrong CA)" in str(err.value)
    remote.close()


def test_an_agent_bundle_mixing_two_cas_is_named(tls_server, pki, foreign, tmp_path):
    bundle = tmp_path / "mixed"
    shutil.copytree(foreign / "agents/mallory", bundle)
    shutil.copy(pki / "ca.crt", bundle / "ca.crt")
    remote = _remote(tls_server.address, bundle)
    with pytest.raises(TlsError, match="the files come from different CAs"):
        remote.stats()
    remote.close()


def test_a_hostname_mismatch_names_the_names_the_certificate_carries(tls_server, pki):
    remote = _remote(tls_server.address, pki / "agents/alice", server_name="memory.example.com")
    with pytest.raises(TlsError) as err:
        remote.stats()
    message = str(err.value)
    assert "presents a certificate for localhost, 127.0.0.1, not for 'memory.example.com'" in message
    assert "--tls-server-name" in message
    remote.close()


def test_an_expired_server_certificate_is_named(tmp_path, pki):
    tls_dir = tmp_path / "expired-tls"
    shutil.copytree(pki, tls_dir)
    ca.issue_server(tls_dir, ["127.0.0.1"], now=YEARS_AGO, days=30, overwrite=True)
    with run_server(_tls_settings(tmp_path, tls_dir)) as server:
        remote = _remote(server.address, tls_dir / "agents/alice")
        with pytest.raises(TlsError, match="presents a certificate that expired on .* issue-server"):
            remote.stats()
        remote.close()


def test_a_tls_client_told_a_plain_text_server_does_not_speak_tls(server, pki):
    remote = _remote(server.address, pki / "agents/alice")
    with pytest.raises(TlsError, match="does not speak TLS .*--insecure"):
        remote.stats()
    remote.close()


def test_an_unreachable_tls_server_is_offline_not_a_certificate_problem(pki):
    remote = _remote(f"127.0.0.1:{free_port()}", pki / "agents/alice")
    with pytest.raises(Exception) as err:
        remote.stats()
    assert type(err.value).__name__ == "ServerUnavailable"
    remote.close()


def test_client_settings_take_the_agent_id_from_the_certificate(pki):
    settings = ClientSettings(cert_dir=pki / "agents/alice")
    assert settings.resolved_agent_id() == "alice"
    with pytest.raises(TlsError, match="does not match the certificate"):
        ClientSettings(cert_dir=pki / "agents/alice", agent_id="bob").resolved_agent_id()
    with pytest.raises(TlsError, match="no agent certificate: give --cert-dir"):
        Remote("127.0.0.1:1", "alice", insecure=False)


def test_the_server_needs_tls_files_or_insecure_and_not_both(tmp_path, pki):
    def start(**kwargs):
        settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", synchronous="normal", **kwargs)
        with run_server(settings):
            pass

    with pytest.raises(FailedPrecondition, match="TLS is not configured: give --tls-dir"):
        start()
    with pytest.raises(FailedPrecondition, match="lacks server.crt, server.key"):
        (tmp_path / "only-ca").mkdir()
        shutil.copy(pki / "ca.crt", tmp_path / "only-ca" / "ca.crt")
        start(tls_dir=tmp_path / "only-ca")
    with pytest.raises(FailedPrecondition, match="both --insecure and --tls-dir"):
        start(tls_dir=pki, insecure=True)


def test_serve_with_tls_dir_and_the_cli_with_cert_dir_work_end_to_end(tmp_path, pki):
    with ServeProcess(tmp_path / "data", "--no-insecure", "--tls-dir", str(pki)) as server:
        agent = ["--server", server.address, "--cert-dir", str(pki / "agents/alice"),
                 "--cache-dir", str(tmp_path / "cache")]
        status = _mnemosync("status", "--json", *agent)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["agent_id"] == "alice" and report["online"] is True
        stale = _mnemosync("sync", "--server", server.address, "--cert-dir", str(pki / "agents/stale"),
                           "--cache-dir", str(tmp_path / "cache2"))
        assert stale.returncode == 1
        assert stale.stderr.startswith("Error: this agent's certificate") and "expired on" in stale.stderr
    assert any("mTLS: client certificates" in line for line in server.stderr_lines)


# -- limits ------------------------------------------------------------------------------


def test_an_agent_over_its_rate_limit_gets_resource_exhausted_with_a_retry_hint(tmp_path):
    settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              limits=Limits(rate_per_agent=2, rate_burst=3))
    now = [0.0]  # the rate limit's clock: it moves only when the test moves it
    with run_server(settings, clock=lambda: now[0]) as server:
        flooder, other = RawAgent(server.address, "flooder"), RawAgent(server.address, "other")
        for _ in range(3):
            flooder.call("Stats", pb.StatsRequest())
        with pytest.raises(grpc.RpcError) as err:
            flooder.append(add_op("one too many"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details().startswith("rate limit: agent flooder may make 2 calls per second (bursts of 3); "
                                              "retry after ")
        retry_ms = int(dict(err.value.trailing_metadata())[RETRY_AFTER_KEY])
        assert 0 < retry_ms <= 500
        assert server.store.head_seq() == 0
        other.call("Stats", pb.StatsRequest())  # another agent has its own bucket
        remote = Remote(server.address, "flooder", insecure=True, timeout=5)
        with pytest.raises(ResourceExhausted) as typed:
            remote.stats()
        assert typed.value.retry_after is not None and 0 < typed.value.retry_after <= 0.5
        now[0] += typed.value.retry_after  # the hint is right: after that wait the bucket has a token again
        remote.stats()
        for agent in (flooder, other):
            agent.close()
        remote.close()


def test_a_token_bucket_refills_at_its_rate():
    now = [0.0]
    buckets = TokenBuckets(rate=10, burst=2, clock=lambda: now[0])
    assert buckets.take("a") == 0 and buckets.take("a") == 0
    assert buckets.take("a") == pytest.approx(0.1)
    now[0] += 0.1
    assert buckets.take("a") == 0
    assert TokenBuckets(rate=0, burst=1).take("a") == 0  # 0 disables


def test_an_agent_cannot_hold_more_streams_than_its_cap(tmp_path):
    settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              limits=Limits(max_streams_per_agent=2))
    with run_server(settings) as server:
        agent = RawAgent(server.address, "greedy")
        streams = [agent.stub.Subscribe(pb.SubscribeRequest(), metadata=agent.metadata) for _ in range(2)]
        for s in streams:
            s.initial_metadata()  # accepted and open
        with pytest.raises(grpc.RpcError) as err:
            agent.sync(0)
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "already has 2 Sync/Subscribe streams open; the limit is 2 per agent" in err.value.details()
        assert RawAgent(server.address, "someone-else").sync(0) == []
        streams[0].cancel()
        deadline = time.monotonic() + 10
        while True:  # the server notices the cancelled stream within its poll interval
            try:
                assert agent.sync(0) == []
                break
            except grpc.RpcError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        streams[1].cancel()
        agent.close()


# -- tamper evidence ---------------------------------------------------------------------


def _tamper(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER IF EXISTS changelog_no_update")
    conn.execute("DROP TRIGGER IF EXISTS changelog_no_delete")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def _five_entries(data: Path) -> None:
    with ServeProcess(data) as server:
        agent = RawAgent(server.address, "agent-a")
        for i in range(5):
            agent.add(f"memory {i}")
        agent.close()


def test_verify_finds_a_deleted_row(tmp_path):
    data = tmp_path / "data"
    _five_entries(data)
    _tamper(data / "mnemosync.db", "DELETE FROM changelog WHERE seq = 3")
    broken = _mnemosync("verify", "--data-dir", str(data), "--json")
    assert broken.returncode == 1
    report = json.loads(broken.stdout)
    assert report["first_bad_seq"] == 3 and report["problem"] == "entry 3 is missing (next is 4)"


def test_verify_finds_swapped_rows(tmp_path):
    data = tmp_path / "data"
    _five_entries(data)
    _tamper(data / "mnemosync.db",
            "UPDATE changelog SET seq = -1 WHERE seq = 2",
            "UPDATE changelog SET seq = 2 WHERE seq = 3",
            "UPDATE changelog SET seq = 3 WHERE seq = -1")
    broken = _mnemosync("verify", "--data-dir", str(data))
    assert broken.returncode == 1
    assert broken.stdout.strip() == "BROKEN at seq 2: entry 2 does not follow entry 1"


def test_a_client_detects_a_server_restored_from_an_older_backup(tmp_path, pki):
    data, backup, port = tmp_path / "data", tmp_path / "backup", free_port()
    serve_args = ("--no-insecure", "--tls-dir", str(pki))
    bundle = pki / "agents/alice"
    cache = Cache(tmp_path / "alice-cache" / "cache.db")

    def serve() -> ServeProcess:
        return ServeProcess(data, *serve_args, listen=f"127.0.0.1:{port}")

    def sync_once() -> None:
        remote = _remote(f"127.0.0.1:{port}", bundle)
        try:
            catch_up(cache, remote)
        finally:
            remote.close()

    with serve() as server:
        writer = TlsAgent(server.address, bundle)
        for i in range(3):
            writer.add(f"before the backup {i}")
        writer.close()
    shutil.copytree(data, backup)  # the backup: copied while the server is stopped
    with serve() as server:
        writer = TlsAgent(server.address, bundle)
        for i in range(3):
            writer.add(f"after the backup {i}")
        writer.close()
        sync_once()
    assert cache.offset == 6
    shutil.rmtree(data)
    shutil.copytree(backup, data)  # the operator restores the older copy
    with serve():
        with pytest.raises(HistoryMismatch) as err:
            sync_once()
        assert "no longer has changelog entry 6, which this agent already applied (its head is 3)" in str(err.value)
        cli = _mnemosync("sync", "--server", f"127.0.0.1:{port}", "--cert-dir", str(bundle),
                         "--cache-dir", str(tmp_path / "alice-cache"))
        assert cli.returncode == 1 and "Error: the server at" in cli.stderr and "older backup" in cli.stderr
        writer = TlsAgent(f"127.0.0.1:{port}", bundle)
        for i in range(4):  # the restored server moves past the agent's offset: a fork, not a continuation
            writer.add(f"a different future {i}")
        writer.close()
        with pytest.raises(HistoryMismatch, match="has a different changelog entry 6 .* history was rewritten"):
            sync_once()
    assert cache.offset == 6  # nothing was applied from the restored server
    cache.close()


def test_an_unchanged_server_passes_the_history_check(tls_server, pki, tmp_path):
    agent = TlsAgent(tls_server.address, pki / "agents/alice")
    agent.append(add_op("one"), add_op("two"))
    cache = Cache(tmp_path / "c" / "cache.db")
    remote = _remote(tls_server.address, pki / "agents/alice")
    assert catch_up(cache, remote).offset == 2
    agent.add("three")
    assert catch_up(cache, remote).applied == 1
    for thing in (agent, remote, cache):
        thing.close()



# -- `mnemosync status` over mTLS ----------------------------------------------------------


def test_status_names_a_refused_connection_precisely_and_exits_1(tls_server, tls_dir, pki, foreign, tmp_path):
    def status(bundle: Path, *extra: str) -> subprocess.CompletedProcess:
        return _mnemosync("status", "--server", tls_server.address, "--cert-dir", str(bundle),
                          "--cache-dir", str(tmp_path / f"cache-{bundle.name}-{len(extra)}"), *extra)

    healthy = status(pki / "agents/alice")
    assert healthy.returncode == 0, healthy.stderr
    assert "(online)" in healthy.stdout

    expired = status(pki / "agents/stale")
    assert expired.returncode == 1
    assert "NOT CONNECTED: UNAUTHENTICATED" in expired.stdout and "cache    " in expired.stdout
    assert expired.stderr.startswith("Error: this agent's certificate") and "expired on" in expired.stderr
    assert "UNREACHABLE" not in expired.stdout + expired.stderr

    wrong_ca = status(foreign / "agents/mallory")
    assert wrong_ca.returncode == 1 and "(wrong CA)" in wrong_ca.stderr

    mismatch = status(pki / "agents/alice", "--tls-server-name", "memory.example.com")
    assert mismatch.returncode == 1
    assert "presents a certificate for localhost, 127.0.0.1, not for 'memory.example.com'" in mismatch.stderr

    revoked_ca = tmp_path / "ca-copy"
    shutil.copytree(pki, revoked_ca)
    ca.revoke(revoked_ca, "bob")
    shutil.copy(revoked_ca / "crl.pem", tls_dir / "crl.pem")
    revoked = status(pki / "agents/bob", "--json")
    assert revoked.returncode == 1
    report = json.loads(revoked.stdout)
    assert report["agent_id"] == "bob" and report["online"] is False
    assert "the certificate of agent bob" in report["error"] and "was revoked" in report["error"]
    assert revoked.stderr.startswith("Error: ") and "was revoked" in revoked.stderr


def test_status_of_an_agent_whose_tls_server_is_down_is_unreachable_and_exits_0(pki, tmp_path):
    down = _mnemosync("status", "--server", f"127.0.0.1:{free_port()}", "--cert-dir", str(pki / "agents/alice"),
                      "--cache-dir", str(tmp_path / "cache"))
    assert down.returncode == 0, down.stderr
    assert "(UNREACHABLE)" in down.stdout
