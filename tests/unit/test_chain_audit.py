"""`mnemosync.server.chain_audit`: old entries edited behind a stopped server, which the start-up check does not walk
(issue 37, item 4), are found by the background audit, and the server stops serving them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mnemosync.server.app import run_server
from mnemosync.server.boot_check import MARK_FILE

from helpers import OLD_ENTRY_TAMPERS, RawAgent, dev_settings, marked_history, refused, tampered_copy, wait_until

POLICY = """
[agents.root]
authority = 1
admin = true
"""

@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """Eight entries, all behind the start-up check's mark (`helpers.marked_history`)."""
    settings = dev_settings(tmp_path_factory.mktemp("pristine"), policy=POLICY)
    marked_history(settings)
    assert json.loads((settings.data_dir / MARK_FILE).read_text())["size"] == 8
    return replace(settings, chain_audit_after_seconds=0)


@pytest.mark.parametrize("tamper", sorted(OLD_ENTRY_TAMPERS))
def test_an_old_entry_edited_behind_a_stopped_server_is_found_by_the_background_audit_which_stops_serving(
        marked, tmp_path, tamper, caplog):
    settings = tampered_copy(marked, tmp_path / "server", tamper)
    with run_server(settings) as running:  # the start-up check walks only what came after its mark: nothing
        agent = RawAgent(running.address, "alice")
        health = health_pb2_grpc.HealthStub(agent.channel)

        def stopped():
            code, details = refused(lambda: agent.get("no-such-memory"))
            return (code, details) if code == grpc.StatusCode.DATA_LOSS else None

        code, details = wait_until(stopped, timeout=60, message="the server went on serving a broken changelog")
        assert details.startswith("this server stopped serving: its background audit found the changelog broken "
                                  "at seq ") and f"run `mnemosync verify --data-dir {settings.data_dir}`" in details
        assert refused(lambda: agent.sync(0))[0] == grpc.StatusCode.DATA_LOSS
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert running.chain_audit.walks == 1
        agent.close()
    assert "BROKEN CHANGELOG found by the background audit: seq" in caplog.text


def test_the_background_audit_of_a_sound_chain_changes_nothing(marked, tmp_path):
    settings = replace(marked, data_dir=tmp_path / "server")
    shutil.copytree(marked.data_dir, settings.data_dir)
    with run_server(settings) as running:
        wait_until(lambda: running.chain_audit.walks == 1, timeout=60)
        agent = RawAgent(running.address, "alice")
        assert len(agent.sync(0)) == 8
        agent.close()
