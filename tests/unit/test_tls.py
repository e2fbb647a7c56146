"""`mnemosync.agent.tls`: every TLS failure named with what to do, and the agent id read from the certificate."""

from __future__ import annotations

import shutil

import grpc
import pytest

from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.errors import TlsError
from mnemosync.agent.remote import Remote
from mnemosync.server import ca
from mnemosync.server.app import run_server

from helpers import TEST_MODEL_INFO, YEARS_AGO, TlsAgent, free_port, tls_remote, tls_settings


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


def test_an_expired_agent_certificate_is_named_with_what_to_do(tls_server, pki):
    remote = tls_remote(tls_server.address, pki / "agents/stale")
    with pytest.raises(TlsError) as err:
        remote.stats()
    message = str(err.value)
    assert "this agent's certificate" in message and "expired on" in message
    assert "ask the operator for a new one" in message
    remote.close()


def test_a_server_certificate_from_another_ca_is_called_the_wrong_ca(tls_server, foreign):
    remote = tls_remote(tls_server.address, foreign / "agents/mallory")
    with pytest.raises(TlsError) as err:
        remote.stats()
    assert "was not issued by the CA in" in str(err.value) and "(wrong CA)" in str(err.value)
    remote.close()


def test_an_agent_bundle_mixing_two_cas_is_named(tls_server, pki, foreign, tmp_path):
    bundle = tmp_path / "mixed"
    shutil.copytree(foreign / "agents/mallory", bundle)
    shutil.copy(pki / "ca.crt", bundle / "ca.crt")
    remote = tls_remote(tls_server.address, bundle)
    with pytest.raises(TlsError, match="the files come from different CAs"):
        remote.stats()
    remote.close()


def test_a_hostname_mismatch_names_the_names_the_certificate_carries(tls_server, pki):
    remote = tls_remote(tls_server.address, pki / "agents/alice", server_name="memory.example.com")
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
    with run_server(tls_settings(tmp_path, tls_dir / "server"), pin_model=TEST_MODEL_INFO) as server:
        remote = tls_remote(server.address, tls_dir / "agents/alice")
        with pytest.raises(TlsError, match="presents a certificate that expired on .* issue-server"):
            remote.stats()
        remote.close()


def test_a_tls_client_told_a_plain_text_server_does_not_speak_tls(server, pki):
    remote = tls_remote(server.address, pki / "agents/alice")
    with pytest.raises(TlsError, match="does not speak TLS .*--insecure"):
        remote.stats()
    remote.close()


def test_an_unreachable_tls_server_is_offline_not_a_certificate_problem(pki):
    remote = tls_remote(f"127.0.0.1:{free_port()}", pki / "agents/alice")
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
