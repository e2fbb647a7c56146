"""`mnemosync.agent.outbox`: the durable queue of offline writes is never moved aside, and its failures are typed."""

from __future__ import annotations

import pytest

from mnemosync.agent.client import AgentClient
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.errors import StorageError
from mnemosync.agent.outbox import OUTBOX_STEPS, Outbox
from mnemosync.kernel import db


def test_an_outbox_from_a_newer_mnemosync_is_refused_and_left_where_it_is(tmp_path):
    path = tmp_path / "agent" / "outbox.db"
    Outbox(path).close()
    conn = db.connect(path, synchronous="normal").conn
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    message = (f"the local file {path} cannot be used: the database {path} has schema version 99, but this "
               f"mnemosync knows versions up to {len(OUTBOX_STEPS)}; upgrade mnemosync to open it")
    with pytest.raises(StorageError) as refused:
        Outbox(path)
    assert str(refused.value) == message
    with pytest.raises(StorageError) as at_start:  # the agent client raises only its own errors
        AgentClient(ClientSettings(agent_id="alice", insecure=True, cache_dir=tmp_path / "agent"), live=False)
    assert str(at_start.value) == message
    assert path.exists()  # the queued writes stay where they are
