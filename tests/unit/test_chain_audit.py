"""`mnemosync.server.chain_audit`: old entries edited behind a stopped server, which the start-up check does not walk
(issue 37, item 4), are found by the background audit, and the server stops serving them."""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import replace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from mnemosync.server.app import run_server
from mnemosync.server.boot_check import MARK_FILE
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, edit_database, refused, wait_until

POLICY = """
[agents.root]
authority = 1
admin = true
"""

TAMPERS = {
    "entry 1 edited": "UPDATE changelog SET payload = replace(payload, 'fact number 0', 'fact number 9') WHERE seq = 1",
    "entries 2 and 3 swapped": "UPDATE changelog SET seq = CASE seq WHEN 2 THEN -3 ELSE -2 END WHERE seq IN (2, 3); "
                               "UPDATE changelog SET seq = -seq WHERE seq < 0",
    "entry 3 deleted": "DROP TRIGGER changelog_no_delete; DELETE FROM changelog WHERE seq = 3",
    "a forged redaction mark": "UPDATE changelog SET payload = replace(payload, 'fact number 1', '[redacted]'), "
                               "payload_salt = '', redacted_by = 7 WHERE seq = 2",
    "a corrupt Merkle leaf": "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 0 AND idx = 4",
}


@pytest.fixture(scope="module")
def marked(tmp_path_factory):
    """A data directory of eight entries (the seventh a redaction), all behind the start-up check's mark."""
    settings = dev_settings(tmp_path_factory.mktemp("pristine"), policy=POLICY)
    with run_server(settings) as running:
        alice, root = RawAgent(running.address, "alice"), RawAgent(running.address, "root")
        ids = [alice.append(add_op(f"fact number {i}")).results[0].memory_id for i in range(6)]
        root.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids[5], base_version=1,
                                 redact=pb.RedactOp(reason="a secret")))
        alice.append(add_op("fact number 7"))
        alice.close()
        root.close()
    with run_server(settings):  # this start marks entries 1 to 8 as verified
        pass
    assert json.loads((settings.data_dir / MARK_FILE).read_text())["size"] == 8
    return settings


@pytest.mark.parametrize("tamper", sorted(TAMPERS))
def test_an_old_entry_edited_behind_a_stopped_server_is_found_by_the_background_audit_which_stops_serving(
        marked, tmp_path, tamper, caplog):
    settings = replace(marked, data_dir=tmp_path / "server", chain_audit_after_seconds=0)
    shutil.copytree(marked.data_dir, settings.data_dir)
    for statement in TAMPERS[tamper].split("; "):
        edit_database(settings.db_path, statement)
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
    settings = replace(marked, data_dir=tmp_path / "server", chain_audit_after_seconds=0)
    shutil.copytree(marked.data_dir, settings.data_dir)
    with run_server(settings) as running:
        wait_until(lambda: running.chain_audit.walks == 1, timeout=60)
        agent = RawAgent(running.address, "alice")
        assert len(agent.sync(0)) == 8
        agent.close()
