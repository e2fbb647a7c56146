"""`mnemosync doctor`: one test per failure it reports, each with the fix it names and exit code 1, and the
all-well case (exit 0). Real servers (plain text and mTLS), real files, the real model.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import replace

from click.testing import CliRunner

from mnemosync.agent.client import AgentClient
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.cli import cli
from mnemosync.server import ca
from mnemosync.server.app import run_server

from helpers import ManualClock, dev_settings, free_port


def doctor(*args: str, env: dict | None = None) -> tuple[int, dict[str, dict]]:
    """Runs `mnemosync doctor --json ARGS`; (exit code, finding per check)."""
    clean = {"MNEMOSYNC_CONFIG": None, "MNEMOSYNC_AGENT_ID": None, "MNEMOSYNC_CERT_DIR": None,
             "MNEMOSYNC_INSECURE": None, "MNEMOSYNC_SERVER": None, "MNEMOSYNC_CACHE_DIR": None,
             "MNEMOSYNC_TIMEOUT": None, "MNEMOSYNC_EMBED_MODEL": None, **(env or {})}
    result = CliRunner().invoke(cli, ["doctor", "--json", *args], env=clean, catch_exceptions=False)
    report = json.loads(result.stdout.splitlines()[0])
    assert report["ok"] == (result.exit_code == 0)
    return result.exit_code, {f["check"]: f for f in report["checks"]}


def dev(address: str, tmp_path, model_path, agent: str = "alice") -> list[str]:
    return ["--server", address, "--insecure", "--agent-id", agent, "--cache-dir", str(tmp_path / agent),
            "--embed-model", str(model_path)]


def test_all_is_well_exits_0(server, tmp_path, model_path):
    code, found = doctor(*dev(server.address, tmp_path, model_path))
    assert code == 0
    assert {c: f["status"] for c, f in found.items()} == {
        "model": "ok", "certificate": "ok", "server": "ok", "model match": "ok", "clock": "ok", "cache": "ok",
        "outbox": "ok", "captures": "ok", "agent": "ok"}
    assert found["agent"]["summary"].startswith("no local agent runs")
    assert "over plain text (development)" in found["server"]["summary"]
    assert "this machine is" in found["clock"]["summary"]


def test_an_unreachable_server_fails_and_says_how_to_start_it(tmp_path, model_path):
    code, found = doctor(*dev(f"127.0.0.1:{free_port()}", tmp_path, model_path))
    assert code == 1 and found["server"]["status"] == "fail"
    assert "unreachable" in found["server"]["summary"] and "mnemosync serve" in found["server"]["fix"]
    assert found["model match"]["status"] == found["clock"]["status"] == "skip"


def test_a_missing_model_fails_and_says_how_to_build_it(server, tmp_path):
    code, found = doctor(*dev(server.address, tmp_path, tmp_path / "none.gguf"))
    assert code == 1 and found["model"]["status"] == "fail"
    assert found["model"]["fix"].startswith("run `mnemosync model build`")


def test_a_model_other_than_the_servers_pinned_one_fails(server, agents, tmp_path, model_path):
    agents("pinner").add("the first write pins the server's model")  # the tests' 16-dimension vectors
    code, found = doctor(*dev(server.address, tmp_path, model_path))
    assert code == 1 and found["model match"]["status"] == "fail"
    assert "the server pinned test-vectors (16 dimensions" in found["model match"]["summary"]


def test_an_expired_certificate_fails_before_the_server_is_tried(tls_server, pki, tmp_path, model_path):
    code, found = doctor("--server", tls_server.address, "--cert-dir", str(pki / "agents/stale"), "--cache-dir",
                         str(tmp_path / "stale"), "--embed-model", str(model_path))
    assert code == 1 and found["certificate"]["status"] == "fail"
    assert "expired on" in found["certificate"]["summary"]


def test_a_certificate_near_its_expiry_is_a_warning_with_the_days_left(tls_dir, pki, tmp_path, model_path):
    issued = tmp_path / "ca-copy"
    shutil.copytree(pki, issued)
    ca.issue_agent(issued, "brief", authority=3, scopes=["user"], days=5)
    code, found = doctor("--server", f"127.0.0.1:{free_port()}", "--cert-dir", str(issued / "agents/brief"),
                         "--cache-dir", str(tmp_path / "brief"), "--embed-model", str(model_path))
    assert found["certificate"]["status"] == "warn" and "valid for 5 more days" in found["certificate"]["summary"]


def test_a_revoked_certificate_fails_with_the_servers_refusal(tls_server, tls_dir, pki, tmp_path, model_path):
    revoked = tmp_path / "ca-copy"
    shutil.copytree(pki, revoked)
    ca.revoke(revoked, "bob")
    shutil.copy(revoked / "crl.pem", tls_dir / "crl.pem")
    code, found = doctor("--server", tls_server.address, "--cert-dir", str(pki / "agents/bob"), "--cache-dir",
                         str(tmp_path / "bob"), "--embed-model", str(model_path))
    assert code == 1 and found["certificate"]["status"] == "ok" and found["server"]["status"] == "fail"
    assert "revoked" in found["server"]["summary"] and "over mTLS" not in found["server"]["summary"]
    assert "ask the operator for a new one" in found["server"]["fix"]


def test_a_corrupt_cache_fails_and_says_it_is_rebuilt(server, tmp_path, model_path):
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "cache.db").write_bytes(b"this is not a database" * 100)
    code, found = doctor(*dev(server.address, tmp_path, model_path))
    assert code == 1 and found["cache"]["status"] == "fail"
    assert "rebuilds it from the server" in found["cache"]["fix"]


def test_queued_writes_the_server_refused_fail_and_name_the_refusal(tmp_path, model_path, embedder):
    listen = f"127.0.0.1:{free_port()}"
    settings = ClientSettings(server=listen, agent_id="alice", insecure=True, cache_dir=tmp_path / "alice",
                              embed_model=model_path, timeout=2)
    with AgentClient(settings, embedder=embedder, live=False) as alice:
        assert alice.add("a note for a scope alice was never granted", scope="project:secret").pending
    policy = '[defaults]\nscopes = ["user"]\n'
    with run_server(replace(dev_settings(tmp_path, policy=policy), listen=listen)) as running:
        with AgentClient(settings, embedder=embedder, live=False):
            pass  # its start sends the queued write, which the server refuses
        code, found = doctor(*dev(running.address, tmp_path, model_path))
    assert code == 1 and found["outbox"]["status"] == "fail"
    assert "1 queued write was refused" in found["outbox"]["summary"]
    assert "scope-not-granted" in found["outbox"]["summary"]


def test_queued_writes_waiting_while_the_server_is_down_are_fine(tmp_path, model_path, embedder):
    settings = ClientSettings(server=f"127.0.0.1:{free_port()}", agent_id="alice", insecure=True,
                              cache_dir=tmp_path / "alice", embed_model=model_path, timeout=2)
    with AgentClient(settings, embedder=embedder, live=False) as alice:
        alice.add("written while the server is away")
    _, found = doctor(*dev(settings.server, tmp_path, model_path))
    assert found["outbox"]["status"] == "ok" and "sent when the server is back" in found["outbox"]["summary"]


def test_a_clock_far_from_the_servers_fails(tmp_path, model_path):
    clock = ManualClock(now_ms=int(time.time() * 1000) - 120_000)  # the server runs two minutes behind
    with run_server(dev_settings(tmp_path), clock=clock.clock) as running:
        code, found = doctor(*dev(running.address, tmp_path, model_path))
    assert code == 1 and found["clock"]["status"] == "fail"
    skew = re.fullmatch(r"this machine is ([\d.]+) s ahead of the server", found["clock"]["summary"])
    assert skew and float(skew.group(1)) >= 119
    assert "NTP" in found["clock"]["fix"]


def test_a_bad_setting_fails_as_the_settings_check(tmp_path):
    code, found = doctor("--insecure", "--cache-dir", str(tmp_path / "c"), env={"MNEMOSYNC_TIMEOUT": "soon"})
    assert code == 1 and list(found) == ["settings"]
    assert found["settings"]["summary"] == "MNEMOSYNC_TIMEOUT must be a number, got 'soon'"


def test_people_get_a_line_per_check_and_the_fix_under_each_failure(tmp_path, model_path):
    result = CliRunner().invoke(cli, ["doctor", *dev(f"127.0.0.1:{free_port()}", tmp_path, model_path)],
                                env={"MNEMOSYNC_CONFIG": None}, catch_exceptions=False)
    lines = result.stdout.splitlines()
    assert result.exit_code == 1 and result.stderr == "Error: 1 of 9 checks failed: server\n"
    assert lines[0].startswith("ok    model") and any(line.startswith("FAIL  server") for line in lines)
    assert any(line.strip().startswith("-> start the server") for line in lines)
