"""Per-agent Ed25519 signatures: issued with the CA, made by the agent client, checked by the server on
every write and again by `mnemosync verify`, which finds an entry forged under a recomputed hash chain."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from agent_client.client import AgentClient
from agent_client.settings import ClientSettings
from mnemosync.v1 import memory_pb2 as pb
from mnemosync.v1 import memory_pb2_grpc as pb_grpc
from server import ca
from server.app import run_server
from server.core import certificates, entry, signing
from server.core.entry import GENESIS_HASH
from server.settings import ServerSettings

from conftest import TEST_MODEL, add_op


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA with a server certificate, a signing agent, a plain agent and a signing admin."""
    ca_dir = tmp_path_factory.mktemp("pki") / "ca"
    ca.init_ca(ca_dir)
    ca.issue_server(ca_dir, ["127.0.0.1"])
    ca.issue_agent(ca_dir, "signer", authority=3, scopes=["user"], signing=True)
    ca.issue_agent(ca_dir, "plain", authority=3, scopes=["user"])
    ca.issue_agent(ca_dir, "root", authority=1, scopes=["*"], admin=True, signing=True)
    return ca_dir


@pytest.fixture
def tls_server(tmp_path, pki):
    tls_dir = tmp_path / "tls"
    tls_dir.mkdir()
    for name in ("ca.crt", "server.crt", "server.key", "crl.pem"):
        shutil.copy(pki / name, tls_dir / name)
    settings = ServerSettings(data_dir=tmp_path / "server", listen="127.0.0.1:0", tls_dir=tls_dir,
                              synchronous="normal")
    with run_server(settings) as running:
        yield running


def _stub(address: str, bundle: Path):
    creds = grpc.ssl_channel_credentials((bundle / "ca.crt").read_bytes(), (bundle / "agent.key").read_bytes(),
                                         (bundle / "agent.crt").read_bytes())
    channel = grpc.secure_channel(address, creds)
    return channel, pb_grpc.MemoryServiceStub(channel)


def _refusal(stub, op: pb.Operation) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as refused:
        stub.Append(pb.AppendRequest(operations=[op], embedding_model=TEST_MODEL), timeout=10)
    return refused.value.code(), refused.value.details()


def test_the_ca_puts_the_signing_key_in_the_certificate_and_writes_the_private_half_0600(pki):
    bundle = pki / "agents" / "signer"
    key = signing.load_private(bundle / signing.SIGNING_KEY_FILE)
    assert oct((bundle / signing.SIGNING_KEY_FILE).stat().st_mode & 0o777) == "0o600"
    from cryptography import x509

    grant = certificates.grant_from_certificate(x509.load_pem_x509_certificate((bundle / "agent.crt").read_bytes()))
    assert grant.signing_key == signing.public_hex(key)
    assert ca.signing_keys(pki)["signer"] == {grant.signing_key}
    assert not (pki / "agents" / "plain" / signing.SIGNING_KEY_FILE).exists()


def test_a_signing_agent_writes_signed_entries_and_verify_checks_them_against_the_ca(
        tls_server, pki, embedder, model_path, tmp_path):
    settings = ClientSettings(server=tls_server.address, cert_dir=pki / "agents" / "signer",
                              cache_dir=tmp_path / "cache", embed_model=model_path, timeout=5.0)
    with AgentClient(settings, embedder=embedder, live=False) as client:
        added = client.add("Deploys go through ops/deploy.sh")
        client.update(added.memory_id, importance=0.8)
        assert client.cache.snapshot() == tls_server.store.snapshot()  # signed entries fold like any other
    entries = [e for e in _all(tls_server) if e.agent_id == "signer"]
    assert len(entries) == 2 and all(e.signature and e.signer_key == ca.signing_keys(pki)["signer"].pop()
                                     for e in entries)
    report = tls_server.store.verify(ca.signing_keys(pki))
    assert report.ok and report.signed == 2
    other_ca = tmp_path / "other-ca"
    ca.init_ca(other_ca)
    ca.issue_agent(other_ca, "signer", authority=3, scopes=["user"], signing=True)
    wrong = tls_server.store.verify(ca.signing_keys(other_ca))
    assert not wrong.ok and "a key the CA never issued to agent signer" in wrong.problem


def _all(running) -> list[entry.Entry]:
    return list(running.store.read(0, 1000))


def test_the_server_refuses_unsigned_forged_and_unverifiable_signatures_and_writes_nothing(tls_server, pki):
    signer_channel, signer = _stub(tls_server.address, pki / "agents" / "signer")
    plain_channel, plain = _stub(tls_server.address, pki / "agents" / "plain")
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

        assert tls_server.store.head_seq() == 0
        plain.Append(pb.AppendRequest(operations=[add_op("Plain agents still write unsigned")],
                                      embedding_model=TEST_MODEL), timeout=10)
        assert tls_server.store.head_seq() == 1
    finally:
        signer_channel.close()
        plain_channel.close()


def test_verify_finds_an_entry_forged_under_a_recomputed_hash_chain(tls_server, pki, embedder, model_path, tmp_path):
    """Whoever holds the database can rewrite an entry and recompute every hash after it; only the
    agent's signature, which they cannot make, shows the forgery."""
    settings = ClientSettings(server=tls_server.address, cert_dir=pki / "agents" / "signer",
                              cache_dir=tmp_path / "cache", embed_model=model_path, timeout=5.0)
    with AgentClient(settings, embedder=embedder, live=False) as client:
        client.add("Releases happen on Tuesdays")
        client.add("Alice owns the billing service")
    path = tls_server.store.path
    tls_server.store.close()
    _forge(path, seq=1, content="Releases happen on Fridays")
    result = subprocess.run([sys.executable, "-m", "server.cli", "verify", "--data-dir",
                             str(path.parent), "--ca-dir", str(pki), "--json"],
                            capture_output=True, text=True, timeout=120)
    report = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    assert (report["first_bad_seq"], report["problem"]) == (1, "entry 1's signature by agent signer does not verify")


def _forge(path: Path, *, seq: int, content: str) -> None:
    """Rewrites entry `seq`'s content with a fresh commitment and re-hashes the chain from there."""
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER changelog_no_update")
        from server.changelog import _COLUMNS, _entry

        entries = [_entry(row) for row in conn.execute(f"SELECT {_COLUMNS} FROM changelog ORDER BY seq")]
        prev = GENESIS_HASH
        for e in entries:
            if e.seq == seq:
                payload = {**e.payload, "content": content}
                e = replace(e, payload=payload, payload_commit=entry.commit_payload(payload, e.payload_salt))
            e = replace(e, prev_hash=prev)
            e = replace(e, hash=e.computed_hash())
            conn.execute("UPDATE changelog SET payload = ?, payload_commit = ?, prev_hash = ?, hash = ? WHERE seq = ?",
                         (entry.canonical_json(e.payload), e.payload_commit, e.prev_hash, e.hash, e.seq))
            prev = e.hash


def test_a_redaction_keeps_the_writers_signatures_valid(tls_server, pki, embedder, model_path, tmp_path):
    def client(name: str) -> AgentClient:
        settings = ClientSettings(server=tls_server.address, cert_dir=pki / "agents" / name,
                                  cache_dir=tmp_path / name, embed_model=model_path, timeout=5.0)
        return AgentClient(settings, embedder=embedder, live=False)

    with client("signer") as signer, client("root") as root:
        added = signer.add("The vault combination is 31-41-59")
        root.redact(added.memory_id, "leaked vault combination")
    report = tls_server.store.verify(ca.signing_keys(pki))
    assert report.ok and (report.signed, report.redacted) == (2, 1)
