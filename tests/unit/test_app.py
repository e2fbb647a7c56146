"""`mnemosync.server.app`: what `run_server` serves (health, reflection), what it refuses to start with, and what it
leaves behind when it fails.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from mnemosync.kernel.errors import FailedPrecondition
from mnemosync.server.app import run_server
from mnemosync.server.policy import PolicyError
from mnemosync.server.settings import ServerSettings

from helpers import RawAgent


def test_health_checking_and_reflection_answer(server):
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    response = health.Check(health_pb2.HealthCheckRequest(service="mnemosync.v1.MemoryService"), timeout=10)
    assert response.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    answers = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                             timeout=10))
    names = {s.name for s in answers[0].list_services_response.service}
    assert "mnemosync.v1.MemoryService" in names
    channel.close()


def test_plain_text_on_a_non_loopback_address_is_refused(tmp_path):
    settings = ServerSettings(data_dir=tmp_path, listen="0.0.0.0:0", insecure=True)
    with pytest.raises(FailedPrecondition, match="allowed only on a loopback address"):
        with run_server(settings):
            pass


PROC_FDS = Path("/proc/self/fd")


def _open_files_under(directory: Path) -> list[str]:
    """Paths below `directory` that this process holds open (Linux /proc)."""
    found = []
    for fd in os.listdir(PROC_FDS):
        try:
            target = os.readlink(PROC_FDS / fd)
        except OSError:  # closed since listing
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


@pytest.mark.skipif(not PROC_FDS.is_dir(), reason="needs /proc/self/fd to see open files")
def test_a_bad_policy_file_is_named_and_leaves_no_database_open(tmp_path):
    data = tmp_path / "server"
    bad = tmp_path / "bad-policy.toml"
    bad.write_text("[agents.alice]\nauthority = 9\n")
    good = tmp_path / "policy.toml"
    good.write_text("[agents.alice]\nauthority = 2\n")

    def settings(policy: Path) -> ServerSettings:
        return ServerSettings(data_dir=data, listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              policy_file=policy)

    with pytest.raises(PolicyError) as err:
        with run_server(settings(bad)):
            pass
    assert str(bad) in str(err.value) and "[agents.alice] authority must be an integer from 1" in str(err.value)
    assert (data / "mnemosync.db").exists()  # the store had been opened ...
    assert _open_files_under(data) == []  # ... and was closed again

    with run_server(settings(good)) as running:
        alice = RawAgent(running.address, "alice")
        try:
            alice.add("the server starts on the same data directory once the policy is fixed")
            assert [e.authority for e in alice.sync(0)] == [2]
        finally:
            alice.close()
    assert _open_files_under(data) == []


def test_the_server_needs_tls_files_or_insecure_and_not_both(tmp_path, pki):
    def start(**kwargs):
        settings = ServerSettings(data_dir=tmp_path / "s", listen="127.0.0.1:0", synchronous="normal", **kwargs)
        with run_server(settings):
            pass

    with pytest.raises(FailedPrecondition, match="TLS is not configured: give --tls-dir"):
        start()
    with pytest.raises(FailedPrecondition, match="lacks server.crt, server.key"):
        (tmp_path / "only-ca").mkdir()
        shutil.copy(pki / "ca.crt", tmp_path / "only-ca" / "ca.crt")
        start(tls_dir=tmp_path / "only-ca")
    with pytest.raises(FailedPrecondition, match="both --insecure and --tls-dir"):
        start(tls_dir=pki, insecure=True)
