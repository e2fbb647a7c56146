"""`mnemosync.server.identity`: who calls, from metadata in development mode and only from the certificate under
mTLS."""

from __future__ import annotations

import shutil

import grpc
import pytest
from cryptography import x509

from mnemosync.kernel.errors import PermissionDenied as ServerPermissionDenied
from mnemosync.kernel.errors import Unauthenticated
from mnemosync.server import ca
from mnemosync.server.app import run_server
from mnemosync.server.identity import Caller, CertificateIdentity, require_admin
from mnemosync.v1 import memory_pb2 as pb

from helpers import TEST_MODEL_INFO, TlsAgent, tls_remote, tls_settings


def test_a_call_without_an_agent_identity_is_unauthenticated(server):
    channel = grpc.insecure_channel(server.address)
    stub = __import__("mnemosync.v1.memory_pb2_grpc", fromlist=["x"]).MemoryServiceStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        stub.Stats(pb.StatsRequest(), timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "x-mnemosync-agent" in err.value.details()
    channel.close()


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

    def serial(bundle: str) -> str:
        return format(x509.load_pem_x509_certificate(Context(bundle).pem).serial_number, "X")

    assert identity(Context("alice")) == Caller("alice", 3, ("user", "project:web"), False,
                                                certificate_serial=serial("alice"))
    assert identity(Context("root")) == Caller("root", 1, None, True, certificate_serial=serial("root"))

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


def test_a_revoked_certificate_is_refused_from_its_next_call_and_others_keep_working(tmp_path, pki, tls_dir):
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as server:
        bob = tls_remote(server.address, pki / "agents/bob")
        alice = tls_remote(server.address, pki / "agents/alice")
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


def test_an_accepted_agent_id_is_remembered_and_a_refused_one_is_refused_on_every_call():
    from mnemosync.kernel.errors import InvalidArgument
    from mnemosync.kernel.metadata import AGENT_METADATA_KEY
    from mnemosync.server.identity import agent_from_metadata

    key_id = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    for _ in range(2):
        with pytest.raises(InvalidArgument, match="agent id"):
            agent_from_metadata([(AGENT_METADATA_KEY, f"ci-{key_id}")])
        with pytest.raises(Unauthenticated, match="agent id must be"):
            agent_from_metadata([(AGENT_METADATA_KEY, "no spaces allowed")])
        assert agent_from_metadata([("other", "x"), (AGENT_METADATA_KEY, "agent-a")]) == "agent-a"
