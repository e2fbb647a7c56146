"""`mnemosync.server.notary`: where the checkpoint key lives, the checkpoints it signs, and what goes on the wire."""

from __future__ import annotations

import shutil

import pytest

from mnemosync.kernel.errors import FailedPrecondition
from mnemosync.server.notary import load_key


def test_in_development_the_key_is_made_once_in_the_data_directory_readable_only_by_its_owner(tmp_path):
    key = load_key(tmp_path / "data", None)
    assert key.path == tmp_path / "data" / "checkpoint.key" and key.certificate == b""
    assert oct(key.path.stat().st_mode & 0o777) == "0o600"
    assert load_key(tmp_path / "data", None).public == key.public


def test_under_mtls_the_key_is_the_one_the_server_certificate_names(tmp_path, pki, foreign):
    key = load_key(tmp_path / "data", pki / "server")
    assert key.path == pki / "server" / "checkpoint.key" and key.certificate
    mixed = tmp_path / "mixed"
    shutil.copytree(pki / "server", mixed)
    shutil.copy(foreign / "server" / "checkpoint.key", mixed / "checkpoint.key")
    with pytest.raises(FailedPrecondition, match="is not the checkpoint key .*server.crt names; copy server.crt, "
                                                 "server.key and checkpoint.key from the same"):
        load_key(tmp_path / "data", mixed)


def test_a_tls_directory_without_a_checkpoint_key_falls_back_to_the_data_directory_and_warns(tmp_path, pki, caplog):
    older = tmp_path / "older"
    shutil.copytree(pki / "server", older, ignore=shutil.ignore_patterns("checkpoint.key"))
    key = load_key(tmp_path / "data", older)
    assert key.path == tmp_path / "data" / "checkpoint.key" and key.certificate == b""
    assert "agents will trust" in caplog.text and "mnemosync ca issue-server --force" in caplog.text


def test_a_checkpoint_is_signed_once_per_size_and_its_signature_covers_every_field(server):
    from dataclasses import replace

    from mnemosync.kernel.codec import checkpoint_from_proto
    from mnemosync.v1 import memory_pb2 as pb

    from helpers import RawAgent, add_op

    agent = RawAgent(server.address, "writer")
    agent.append(add_op("one"), add_op("two"))
    first = checkpoint_from_proto(agent.call("GetCheckpoint", pb.CheckpointRequest(size=2)).checkpoint)
    again = checkpoint_from_proto(agent.call("GetCheckpoint", pb.CheckpointRequest(size=2)).checkpoint)
    assert first == again and first.size == 2 and first.signed_by(first.key)
    for changed in (replace(first, size=3), replace(first, root="00" * 32), replace(first, time_ms=1),
                    replace(first, log_id="another")):
        assert not changed.signed_by(first.key)
