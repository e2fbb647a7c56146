"""mTLS deployed: the `mnemosync ca`, `serve --tls-dir`, `verify` and `status` commands as processes, and an
agent detecting a server restored from an older backup.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import stat
import subprocess
from pathlib import Path

import grpc
import pytest

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import HistoryMismatch
from mnemosync.agent.sync import catch_up
from mnemosync.server import ca
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import (
    TEST_MODEL,
    ServeProcess,
    TlsAgent,
    add_op,
    five_memories_served,
    free_port,
    mnemosync,
    server_tls_dir,
    tls_remote,
    tls_settings,
)


def test_ca_commands_write_keys_0600_print_no_secret_and_record_the_grant(tmp_path):
    ca_dir = str(tmp_path / "ca")
    outputs = [
        mnemosync("ca", "init", "--ca-dir", ca_dir),
        mnemosync("ca", "issue-server", "--ca-dir", ca_dir, "--host", "memory.internal", "--host", "10.0.0.5"),
        mnemosync("ca", "issue-agent", "alice", "--ca-dir", ca_dir, "--authority", "3", "--scope", "user",
                   "--scope", "project:web"),
        mnemosync("ca", "issue-agent", "ops", "--authority", "1", "--scope", "*", "--admin",
                   env={"MNEMOSYNC_CA_DIR": ca_dir}),
        mnemosync("ca", "issue-agent", "ci", "--ca-dir", ca_dir, "--authority", "6", "--scope", "project:*"),
    ]
    for result in outputs:
        assert result.returncode == 0, result.stderr
        assert "PRIVATE KEY" not in result.stdout + result.stderr
    keys = [tmp_path / "ca/ca.key", tmp_path / "ca/server/server.key", tmp_path / "ca/agents/alice/agent.key",
            tmp_path / "ca/agents/ops/agent.key"]
    assert all(stat.S_IMODE(k.stat().st_mode) == 0o600 for k in keys)
    assert f"serve with: mnemosync serve --tls-dir {tmp_path / 'ca/server'}" in outputs[1].stdout
    assert "--cert-dir" in outputs[2].stdout and str(tmp_path / "ca/agents/alice") in outputs[2].stdout

    listed = json.loads(mnemosync("ca", "list", "--ca-dir", ca_dir, "--json").stdout)
    assert [(i["kind"], i["name"]) for i in listed] == [("server", "memory.internal"), ("agent", "alice"),
                                                         ("agent", "ops"), ("agent", "ci")]
    assert listed[0]["hosts"] == ["memory.internal", "10.0.0.5"]
    assert (listed[1]["authority"], listed[1]["scopes"], listed[1]["admin"]) == (3, ["user", "project:web"], False)
    assert (listed[2]["authority"], listed[2]["scopes"], listed[2]["admin"]) == (1, None, True)
    assert (listed[3]["authority"], listed[3]["scopes"]) == (6, ["project:*"])  # a prefix grant, as in the policy

    again = mnemosync("ca", "issue-agent", "alice", "--ca-dir", ca_dir, "--authority", "3", "--scope", "user")
    assert again.returncode == 4 and "already has a certificate; revoke it first" in again.stderr  # 4: exists
    revoked = mnemosync("ca", "revoke", "alice", "--ca-dir", ca_dir)
    assert revoked.returncode == 0 and "revoked agent alice" in revoked.stdout
    table = mnemosync("ca", "list", "--ca-dir", ca_dir).stdout
    assert "REVOKED" in table and "agent alice" in table
    reinit = mnemosync("ca", "init", "--ca-dir", ca_dir)
    assert reinit.returncode == 4 and "a CA already exists" in reinit.stderr


def test_serve_with_tls_dir_and_the_cli_with_cert_dir_work_end_to_end(tmp_path, pki):
    with ServeProcess(tmp_path / "data", "--no-insecure", "--tls-dir", str(pki / "server")) as server:
        agent = ["--server", server.address, "--cert-dir", str(pki / "agents/alice"),
                 "--cache-dir", str(tmp_path / "cache")]
        status = mnemosync("status", "--json", *agent)
        assert status.returncode == 0, status.stderr
        report = json.loads(status.stdout)
        assert report["agent_id"] == "alice" and report["online"] is True
        stale = mnemosync("sync", "--server", server.address, "--cert-dir", str(pki / "agents/stale"),
                           "--cache-dir", str(tmp_path / "cache2"))
        assert stale.returncode == 1
        assert stale.stderr.startswith("Error: this agent's certificate") and "expired on" in stale.stderr
    started = next(line for line in server.stderr_lines if "mTLS: client certificates" in line)
    assert f"revocations read from {pki / 'server' / 'crl.pem'} (CRL number " in started and "0 revoked" in started


def test_serve_refuses_to_start_without_a_revocation_list_unless_told_and_then_says_so(tmp_path, pki):
    tls_dir = server_tls_dir(tmp_path / "tls", pki)
    (tls_dir / "crl.pem").unlink()
    refused = mnemosync("serve", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0", "--tls-dir",
                        str(tls_dir))
    assert refused.returncode == 1 and f"no revocation list at {tls_dir / 'crl.pem'}" in refused.stderr
    assert "--allow-missing-crl" in refused.stderr
    with ServeProcess(tmp_path / "data", "--no-insecure", "--tls-dir", str(tls_dir), "--allow-missing-crl") as server:
        pass
    started = next(line for line in server.stderr_lines if "mTLS: client certificates" in line)
    assert "NO REVOCATION LIST" in started and "revoked certificates are accepted" in started


def _tamper(db: Path, *statements: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER IF EXISTS changelog_no_update")
    conn.execute("DROP TRIGGER IF EXISTS changelog_no_delete")
    for sql in statements:
        conn.execute(sql)
    conn.commit()
    conn.close()


def test_verify_finds_a_deleted_row(tmp_path):
    data = tmp_path / "data"
    five_memories_served(data)
    _tamper(data / "mnemosync.db", "DELETE FROM changelog WHERE seq = 3")
    broken = mnemosync("verify", "--data-dir", str(data), "--json")
    assert broken.returncode == 1
    report = json.loads(broken.stdout)
    assert report["first_bad_seq"] == 3 and report["problem"] == "entry 3 is missing (next is 4)"


def test_verify_finds_swapped_rows(tmp_path):
    data = tmp_path / "data"
    five_memories_served(data)
    _tamper(data / "mnemosync.db",
            "UPDATE changelog SET seq = -1 WHERE seq = 2",
            "UPDATE changelog SET seq = 2 WHERE seq = 3",
            "UPDATE changelog SET seq = 3 WHERE seq = -1")
    broken = mnemosync("verify", "--data-dir", str(data))
    assert broken.returncode == 1
    assert broken.stdout.strip() == "BROKEN at seq 2: entry 2 does not follow entry 1"


def test_a_client_detects_a_server_restored_from_an_older_backup(tmp_path, pki):
    data, backup, port = tmp_path / "data", tmp_path / "backup", free_port()
    serve_args = ("--no-insecure", "--tls-dir", str(pki / "server"))
    bundle = pki / "agents/alice"
    cache = Cache(tmp_path / "alice-cache" / "cache.db")

    def serve() -> ServeProcess:
        return ServeProcess(data, *serve_args, listen=f"127.0.0.1:{port}")

    def sync_once() -> None:
        remote = tls_remote(f"127.0.0.1:{port}", bundle)
        try:
            catch_up(cache, remote)
        finally:
            remote.close()

    with serve() as server:
        writer = TlsAgent(server.address, pki / "agents/root")  # nothing is pinned: an admin's write pins the model
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
        cli = mnemosync("sync", "--server", f"127.0.0.1:{port}", "--cert-dir", str(bundle),
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


def test_status_names_a_refused_connection_precisely_and_exits_1(tls_server, tls_dir, pki, foreign, tmp_path):
    def status(bundle: Path, *extra: str) -> subprocess.CompletedProcess:
        return mnemosync("status", "--server", tls_server.address, "--cert-dir", str(bundle),
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
    down = mnemosync("status", "--server", f"127.0.0.1:{free_port()}", "--cert-dir", str(pki / "agents/alice"),
                      "--cache-dir", str(tmp_path / "cache"))
    assert down.returncode == 0, down.stderr
    assert "(UNREACHABLE)" in down.stdout


def test_only_an_admin_pins_the_embedding_model_so_a_first_agent_cannot_lock_out_every_honest_writer(tmp_path,
                                                                                                      tls_dir, pki):
    """On a server host without the model file nothing is pinned at start; a non-admin agent's first write used to
    pin whatever model it claimed (an 8-dimension fake), and every honest write failed afterwards."""
    with run_server(tls_settings(tmp_path, tls_dir)) as server:
        _only_an_admin_pins(server, pki)


def _only_an_admin_pins(tls_server, pki) -> None:
    fake = pb.EmbeddingModel(name="fake", dimensions=8, sha256="cd" * 32)
    bob = TlsAgent(tls_server.address, pki / "agents" / "bob")
    with pytest.raises(grpc.RpcError) as refused:
        bob.append(add_op("a note", vector=[0.5] * 8), model=fake)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert refused.value.details().startswith("model-pin-needs-admin: ")
    assert tls_server.store.head_seq() == 0 and tls_server.store.reads.model() is None
    root = TlsAgent(tls_server.address, pki / "agents" / "root")
    assert root.add("the operator's first note").seq == 1  # an admin's write pins the model it names
    assert tls_server.store.reads.model().name == TEST_MODEL.name
    assert bob.add("an honest note").seq == 2
