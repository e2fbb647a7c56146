"""`mnemosync.kernel.signing`: signing keys in certificates, and the server refusing unsigned, forged or
unverifiable operations.
"""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest

from mnemosync.kernel import certificates, signing
from mnemosync.server import ca
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc

from helpers import TEST_MODEL, add_op


def _stub(address: str, bundle: Path):
    creds = grpc.ssl_channel_credentials((bundle / "ca.crt").read_bytes(), (bundle / "agent.key").read_bytes(),
                                         (bundle / "agent.crt").read_bytes())
    channel = grpc.secure_channel(address, creds)
    return channel, pb_grpc.MemoryServiceStub(channel)


def _refusal(stub, op: pb.Operation) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as refused:
        stub.Append(pb.AppendRequest(operations=[op], embedding_model=TEST_MODEL), timeout=10)
    return refused.value.code(), refused.value.details()


def test_the_ca_puts_the_signing_key_in_the_certificate_and_writes_the_private_half_0600(signing_pki):
    bundle = signing_pki / "agents" / "signer"
    key = signing.load_private(bundle / signing.SIGNING_KEY_FILE)
    assert oct((bundle / signing.SIGNING_KEY_FILE).stat().st_mode & 0o777) == "0o600"
    from cryptography import x509

    grant = certificates.grant_from_certificate(x509.load_pem_x509_certificate((bundle / "agent.crt").read_bytes()))
    assert grant.signing_key == signing.public_hex(key)
    assert [i.signing_key for i in ca.issued_keys(signing_pki) if i.agent_id == "signer"] == [grant.signing_key]
    assert not (signing_pki / "agents" / "plain" / signing.SIGNING_KEY_FILE).exists()


@pytest.fixture
def signing_server(tmp_path, signing_pki):
    """An mTLS server trusting `signing_pki`, with the test vectors' model pinned by the operator."""
    from mnemosync.server.app import run_server

    from helpers import TEST_MODEL_INFO, server_tls_dir, tls_settings

    with run_server(tls_settings(tmp_path, server_tls_dir(tmp_path / "tls", signing_pki)),
                    pin_model=TEST_MODEL_INFO) as running:
        yield running


def test_the_server_refuses_unsigned_forged_and_unverifiable_signatures_and_writes_nothing(signing_server, signing_pki):
    signer_channel, signer = _stub(signing_server.address, signing_pki / "agents" / "signer")
    plain_channel, plain = _stub(signing_server.address, signing_pki / "agents" / "plain")
    try:
        code, details = _refusal(signer, add_op("An unsigned write"))
        assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("signature-required:")

        forged = add_op("A write signed with someone else's key")
        forged.signature.CopyFrom(pb.OperationSignature(salt=os.urandom(16), signature=os.urandom(64)))
        code, details = _refusal(signer, forged)
        assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("signature-invalid:")

        code, details = _refusal(plain, forged)
        assert code == grpc.StatusCode.PERMISSION_DENIED and details.startswith("signature-unverifiable:")

        short = add_op("A malformed signature")
        short.signature.CopyFrom(pb.OperationSignature(salt=b"x", signature=b"y"))
        code, details = _refusal(signer, short)
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "signature.salt must be 16 bytes" in details

        assert signing_server.store.head_seq() == 0
        plain.Append(pb.AppendRequest(operations=[add_op("Plain agents still write unsigned")],
                                      embedding_model=TEST_MODEL), timeout=10)
        assert signing_server.store.head_seq() == 1
    finally:
        signer_channel.close()
        plain_channel.close()
