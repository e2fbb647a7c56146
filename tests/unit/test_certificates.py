"""`mnemosync.kernel.certificates`: what an agent certificate carries."""

from __future__ import annotations

import pytest

from mnemosync.kernel import certificates


def test_an_agent_certificate_carries_its_id_authority_scopes_and_admin_flag(pki):
    from cryptography import x509

    def grant(name: str) -> certificates.AgentGrant:
        cert = x509.load_pem_x509_certificate((pki / "agents" / name / "agent.crt").read_bytes())
        assert cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value == name
        return certificates.grant_from_certificate(cert)

    assert grant("alice") == certificates.AgentGrant("alice", 3, ("user", "project:web"), False)
    assert grant("root") == certificates.AgentGrant("root", 1, None, True)
    server_cert = x509.load_pem_x509_certificate((pki / "server" / "server.crt").read_bytes())
    with pytest.raises(Exception, match="not a mnemosync agent certificate"):
        certificates.grant_from_certificate(server_cert)
