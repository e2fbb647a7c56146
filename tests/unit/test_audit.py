"""`mnemosync.server.audit`: refused and revoked calls are recorded on the server (who, what, why), never with the text
they carried, in a bounded file."""

from __future__ import annotations

import json
import os
import shutil
import stat

import grpc
import pytest
from cryptography import x509

from mnemosync.kernel.errors import PermissionDenied
from mnemosync.server import ca
from mnemosync.server.app import run_server
from mnemosync.server.audit import AUDIT_FILE, AuditLog
from mnemosync.server.identity import Caller

from helpers import TEST_MODEL_INFO, TlsAgent, add_op, refused, tls_settings


def _serial(bundle) -> str:
    return format(x509.load_pem_x509_certificate((bundle / "agent.crt").read_bytes()).serial_number, "X")


def test_refused_and_revoked_calls_are_recorded_with_who_what_and_why(tmp_path, pki, tls_dir):
    secret = "ghp" + "_" + "aB3dE5gH7jK9mN1pQ2sT4vW6yZ8aB3dE5gH7j"
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as running:
        bob = TlsAgent(running.address, pki / "agents" / "bob")
        op = add_op("ops runbook", scope="project:web")
        code, details = refused(lambda: bob.append(op))
        assert code == grpc.StatusCode.PERMISSION_DENIED
        assert refused(lambda: bob.add(f"the token is {secret}"))[0] == grpc.StatusCode.INVALID_ARGUMENT
        assert refused(lambda: bob.add("", scope="user"))[0] == grpc.StatusCode.INVALID_ARGUMENT  # a mere mistake
        revoked_ca = tmp_path / "ca-copy"
        shutil.copytree(pki, revoked_ca)
        ca.revoke(revoked_ca, "bob")
        shutil.copy(revoked_ca / "crl.pem", tls_dir / "crl.pem")
        assert refused(lambda: bob.sync(0))[0] == grpc.StatusCode.UNAUTHENTICATED
        bob.close()
        records = running.audit.read()

    path = tmp_path / "server" / AUDIT_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [(r["method"], r["code"], r["rule"]) for r in records] == [
        ("Append", "PERMISSION_DENIED", "scope-not-granted"),
        ("Append", "INVALID_ARGUMENT", "intake-no-secrets"),
        ("Sync", "UNAUTHENTICATED", ""),
    ]
    serial = _serial(pki / "agents" / "bob")
    assert all(r["agent"] == "bob" and r["certificate"] == serial and r["peer"].startswith("ipv4:127.0.0.1")
               for r in records)
    assert records[0]["request"] == {"count": 1, "operations": [
        {"op": "add", "memory_id": op.memory_id, "scope": "project:web"}]}
    assert records[0]["reason"] == details and records[0]["authority"] == 4
    assert "was revoked" in records[2]["reason"] and records[2]["authority"] is None
    assert "ops runbook" not in path.read_text() and secret[4:] not in path.read_text()


def test_the_scope_refusal_under_mtls_names_the_certificate_not_the_policy_file(tls_server, pki):
    bob = TlsAgent(tls_server.address, pki / "agents" / "bob")
    code, details = refused(lambda: bob.add("web notes", scope="project:web"))
    bob.close()
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert details.startswith("scope-not-granted: agent bob may not add memories in scope 'project:web'")
    assert f"its certificate (serial {_serial(pki / 'agents' / 'bob')}) grants 'user'" in details
    assert "mnemosync ca issue-agent bob --scope project:web" in details and "policy file" not in details


def test_the_audit_log_rotates_and_keeps_a_bounded_number_of_files(tmp_path):
    log = AuditLog(tmp_path / AUDIT_FILE, max_bytes=2_000, backups=2)
    for i in range(60):
        log.refused("Get", None, f"ipv4:127.0.0.1:{i}", Caller("mallory", 5),
                    PermissionDenied(f"scope-not-granted: attempt {i}"))
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [AUDIT_FILE, f"{AUDIT_FILE}.1", f"{AUDIT_FILE}.2"]
    assert all((tmp_path / name).stat().st_size <= 2_000 for name in files)
    newest = [json.loads(line)["reason"] for line in (tmp_path / AUDIT_FILE).read_text().splitlines()]
    assert newest[-1] == "scope-not-granted: attempt 59"
    assert all(stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o600 for name in files)


@pytest.mark.parametrize("denied", [True, False])
def test_only_refusals_about_the_caller_are_audited(denied):
    from mnemosync.kernel.errors import InvalidArgument
    from mnemosync.server.audit import worth_auditing

    exc = PermissionDenied("layer-1-human-only: …") if denied else InvalidArgument("content must not be empty")
    assert worth_auditing(exc) is denied


def test_a_credential_sent_in_a_scope_or_memory_id_is_masked_in_the_audit_log(tmp_path):
    """audit.jsonl stored credentials sent in `scope` or `memory_id` verbatim."""
    from helpers import RawAgent, dev_settings

    key = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    settings = dev_settings(tmp_path)
    with run_server(settings) as server:
        agent = RawAgent(server.address, "alice")
        for op in (add_op("a note", scope=f"project:{key}"), add_op("a note", memory_id=key)):
            code, details = refused(lambda op=op: agent.append(op))
            assert code == grpc.StatusCode.INVALID_ARGUMENT and "intake-no-secrets" in details
        agent.close()
    written = (settings.data_dir / AUDIT_FILE).read_text()
    assert written.count("intake-no-secrets") >= 2 and key not in written
    assert "[secret: an AWS access key id]" in written
