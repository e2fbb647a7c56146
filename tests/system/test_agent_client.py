"""The agent client end to end: real servers, the real model, caches, the outbox and the CLI."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from mnemosync.kernel import codec
from mnemosync.v1 import memory_pb2 as pb

from helpers import ServeProcess, free_port, snapshot, wait_until

CONFORMANCE = True  # the tests on `server` run on SQLite and on PostgreSQL (conftest.STORE_KINDS)


def test_a_memory_added_by_one_agent_is_found_by_another_with_a_paraphrase(server, make_client):
    a = make_client(server.address, "agent-a")
    b = make_client(server.address, "agent-b")
    added = a.add("The auth service signs JWTs with RS256 and rotates keys every 90 days", tags=["auth"])
    for text in ["The office coffee machine is descaled on Fridays",
                 "Frontend builds use Vite with the React plugin",
                 "Backups of the billing database run nightly at 02:00 UTC"]:
        a.add(text)
    summary = b.sync()
    assert summary.applied == 4 and summary.offset == 4
    outcome = b.search("how are login tokens signed?", limit=3)
    assert not outcome.offline
    assert outcome.hits[0].memory.id == added.memory_id
    assert outcome.hits[0].vector_rank == 1
    assert b.cache.get(added.memory_id).author_agent == "agent-a"


def test_boot_sync_acknowledges_the_offset_to_the_server(server, make_client):
    a = make_client(server.address, "agent-a")
    a.add("first memory for offsets")
    b = make_client(server.address, "agent-b")
    assert b.last_sync.applied == 1
    agents = {x.agent_id: x.acked_seq for x in server.store.operator.stats().agents}
    assert agents["agent-b"] == 1


def test_live_updates_bring_other_agents_writes_without_an_explicit_sync(server, make_client):
    a = make_client(server.address, "agent-a")
    b = make_client(server.address, "agent-b", live=True)
    wait_until(b.live.connected.is_set, message="live updates never connected")
    written = a.add("Staging uses the eu-west-1 cluster")
    wait_until(lambda: b.cache.get(written.memory_id), message="the write never reached the cache")
    news = b.drain_news()
    assert [e.memory_id for e in news] == [written.memory_id]
    assert b.drain_news() == []


def test_live_updates_reconnect_after_the_server_restarts(tmp_path, make_client):
    port = free_port()
    data = tmp_path / "server"
    with ServeProcess(data, listen=f"127.0.0.1:{port}") as server:
        b = make_client(server.address, "agent-b", live=True)
        wait_until(b.live.connected.is_set, message="live updates never connected")
    with ServeProcess(data, listen=f"127.0.0.1:{port}") as server:
        a = make_client(server.address, "agent-a")
        written = a.add("written after the restart")
        wait_until(lambda: b.cache.get(written.memory_id), timeout=40, message="the write never reached the cache")


def test_writes_queued_during_an_outage_are_sent_within_2_s_of_the_servers_return_without_another_call(
        tmp_path, make_client, caplog):
    """An idle agent's live stream is all that notices the server is back, and its reconnection sends the outbox:
    its waits between attempts stay at most a second however long the outage (they grew to 30 s, and queued
    writes waited 15-25 s). The time bound is three times the aim (measured: 0.75-2.15 s on a loaded machine)."""
    from mnemosync.agent.sync import MAX_BACKOFF

    caplog.set_level(logging.DEBUG, logger="mnemosync.agent.sync")
    listen = f"127.0.0.1:{free_port()}"
    data = tmp_path / "server"
    with ServeProcess(data, listen=listen) as server:
        b = make_client(server.address, "agent-b", live=True)
        wait_until(b.live.connected.is_set, message="live updates never connected")
        server.kill()
        queued = b.add("written while the server was down")
        assert queued.pending

    def waits() -> list[float]:
        return [r.args[-1] for r in caplog.records if r.msg.startswith("live updates interrupted")]

    wait_until(lambda: len(waits()) >= 8, timeout=60, message=lambda: f"the stream retried only {waits()}")
    assert max(waits()) == MAX_BACKOFF, waits()  # 0.2, 0.4, 0.8, then every second
    with ServeProcess(data, listen=listen):
        back = time.monotonic()  # the server answers from here
        wait_until(lambda: b.outbox.counts()[0] == 0, timeout=20, interval=0.02,
                   message="the queued write was never sent")
        sent_after = time.monotonic() - back
        wait_until(lambda: b.cache.get(queued.memory_id), message="the sent write never reached the cache")
    assert sent_after < 2.0 * 3, f"queued writes were sent {sent_after:.1f} s after the server returned"


def test_writes_made_while_the_server_is_down_are_searchable_and_arrive_once(tmp_path, make_client):
    port = free_port()
    data = tmp_path / "server"
    server = ServeProcess(data, listen=f"127.0.0.1:{port}").start()
    a = make_client(server.address, "agent-a")
    a.add("Written before the outage: the VPN gateway is vpn.internal")
    server.kill()
    results = [a.add(f"Offline note {i}: incident ticket INC-{1000 + i} was triaged") for i in range(50)]
    assert all(r.pending and r.seq == 0 for r in results)
    status = a.status()
    assert not status.online and status.pending == 50 and status.oldest_pending_age_s >= 0
    outcome = a.search("INC-1042", limit=5, mode="keyword")
    assert outcome.offline and "local cache" in outcome.note
    assert outcome.hits[0].memory.id == results[42].memory_id
    assert a.search("VPN gateway", limit=1).hits[0].memory.content.startswith("Written before")
    with ServeProcess(data, listen=f"127.0.0.1:{port}") as server:
        wait_until(lambda: a.status().online, message="the client never came back online")
        assert a.flush() == (50, 0)
        assert a.status().pending == 0
        b = make_client(server.address, "agent-b")
        offline_ids = [r.memory_id for r in results]
        entries = [m for m in b.cache.snapshot() if m in offline_ids]
        assert sorted(entries) == sorted(offline_ids)
        log = server_entries(server.address)
        assert [e.memory_id for e in log if e.agent_id == "agent-a"][1:] == offline_ids
        assert a.search("INC-1042", limit=1, mode="keyword").hits[0].memory.id == results[42].memory_id


def server_entries(address: str) -> list[pb.ChangelogEntry]:
    from conftest import RawAgent

    reader = RawAgent(address, "auditor")
    try:
        return reader.sync(0)
    finally:
        reader.close()


def test_an_offline_write_survives_a_crash_of_the_agent_process(tmp_path, model_path):
    port = free_port()
    data = tmp_path / "server"
    env = {**os.environ, "MNEMOSYNC_SERVER": f"127.0.0.1:{port}", "MNEMOSYNC_AGENT_ID": "cli-agent",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cache"), "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_EMBED_MODEL": str(model_path)}

    def mnemosync(*args):
        return subprocess.run([sys.executable, "-m", "mnemosync.cli", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    queued = mnemosync("add", "Queued while the server was down", "--json")
    assert queued.returncode == 0, queued.stderr
    assert json.loads(queued.stdout)["pending"] is True
    status = json.loads(mnemosync("status", "--json").stdout)
    assert status["pending"] == 1 and status["online"] is False
    with ServeProcess(data, listen=f"127.0.0.1:{port}"):
        synced = mnemosync("sync", "--json")
        assert synced.returncode == 0, synced.stderr
        assert json.loads(synced.stdout)["sent"] == 1
        found = json.loads(mnemosync("search", "queued during the outage", "--json").stdout)
        assert found["results"][0]["memory"]["content"] == "Queued while the server was down"
        assert json.loads(mnemosync("status", "--json").stdout)["pending"] == 0


def test_a_deleted_cache_is_rebuilt_and_equals_the_servers_state(server, make_client, tmp_path):
    a = make_client(server.address, "agent-a")
    ids = [a.add(f"memory {i} about topic {i % 4}", tags=[f"topic{i % 4}"]).memory_id for i in range(12)]
    a.update(ids[0], content="memory zero, corrected")
    a.forget(ids[1])
    a.link(ids[2], ids[3], "entity", weight=0.5, reason="same topic")
    a.set_layer(ids[4], "legislative")
    b = make_client(server.address, "agent-b")
    assert b.cache.snapshot() == snapshot(server.store)
    b.close()
    for name in ("cache.db", "cache.db-wal", "cache.db-shm"):
        path = tmp_path / "agents" / "agent-b" / name
        if path.exists():
            path.unlink()
    b2 = make_client(server.address, "agent-b")
    assert b2.last_sync.applied == 16
    assert b2.cache.snapshot() == snapshot(server.store)


def test_a_corrupt_cache_is_moved_aside_and_rebuilt_without_user_action(server, make_client, tmp_path):
    a = make_client(server.address, "agent-a")
    for i in range(5):
        a.add(f"memory {i}")
    b = make_client(server.address, "agent-b")
    b.close()
    cache_file = tmp_path / "agents" / "agent-b" / "cache.db"
    for suffix in ("-wal", "-shm"):
        cache_file.with_name(cache_file.name + suffix).unlink(missing_ok=True)
    cache_file.write_bytes(b"this is not a database" * 100)
    b2 = make_client(server.address, "agent-b")
    assert b2.last_sync.rebuilt and b2.last_sync.applied == 5
    assert b2.cache.snapshot() == snapshot(server.store)
    assert list((tmp_path / "agents" / "agent-b").glob("cache.db.corrupt-*"))


def test_an_agent_offline_across_ten_thousand_entries_catches_up_fully(server, make_client, embedder):
    from conftest import RawAgent

    model = embedder.fingerprint
    wire_model = codec.model_proto(model)
    b = make_client(server.address, "agent-b")
    writer = RawAgent(server.address, "bulk-writer")
    rng = np.random.default_rng(7)
    for start in range(0, 10_000, 500):
        ops = []
        for i in range(start, start + 500):
            v = rng.normal(size=model.dimensions)
            ops.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
                scope="user", content=f"bulk memory {i}", embedding=(v / np.linalg.norm(v)).tolist())))
        writer.append(*ops, model=wire_model)
    writer.close()
    progress = []
    b._progress = lambda applied, offset, head: progress.append((applied, offset, head))
    summary = b.sync()
    assert summary.applied == 10_000 and summary.offset == 10_000 == summary.head
    assert len(progress) >= 5 and progress[-1] == (10_000, 10_000, 10_000)
    assert b.cache.snapshot() == snapshot(server.store)


def test_updates_default_to_the_version_the_agent_last_saw_and_stale_ones_become_conflicts(server, make_client):
    a = make_client(server.address, "agent-a")
    b = make_client(server.address, "agent-b")
    written = a.add("The queue consumer runs 4 workers")
    b.sync()
    first = a.update(written.memory_id, content="The queue consumer runs 8 workers")
    assert first.version == 2 and first.conflict_id == 0
    stale = b.update(written.memory_id, content="The queue consumer runs 2 workers")
    assert stale.conflict_id == stale.seq and stale.version == 3
    assert a.get(written.memory_id).content == "The queue consumer runs 8 workers"
    assert b.last_sync.conflicts_waiting == 1
    [view] = b.conflicts()
    assert [r.state["content"] for r in view.conflict.revisions] == [
        "The queue consumer runs 8 workers", "The queue consumer runs 2 workers"]
    resolved = b.resolve_conflict(stale.conflict_id, merged_content="The queue consumer runs 6 workers")
    assert resolved.version == 4
    a.sync()
    assert a.cache.get(written.memory_id).content == "The queue consumer runs 6 workers"
    assert a.cache.conflict(stale.conflict_id).resolved_by == "agent-b"
    assert a.last_sync.conflicts_waiting == 0


def test_client_side_validation_refuses_bad_input_before_anything_is_sent(server, make_client):
    from mnemosync.kernel.errors import InvalidArgument

    a = make_client(server.address, "agent-a")
    with pytest.raises(InvalidArgument, match="content must not be empty"):
        a.add("   ")
    with pytest.raises(InvalidArgument, match="layer must be"):
        a.add("x", layer="cosmic")
    assert server.store.head_seq() == 0


def test_the_cli_adds_searches_gets_and_reports_status(server, model_path, tmp_path):
    env = {**os.environ, "MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "cli-agent",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cache"), "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_EMBED_MODEL": str(model_path)}

    def mnemosync(*args):
        result = subprocess.run([sys.executable, "-m", "mnemosync.cli", *args], env=env,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout

    added = json.loads(mnemosync("add", "Releases are tagged vX.Y.Z on main", "--type", "decision",
                                 "--tag", "release", "--json"))
    assert added["seq"] == 1 and not added["pending"]
    found = json.loads(mnemosync("search", "how do we tag releases", "--json"))
    assert found["results"][0]["memory"]["id"] == added["memory_id"]
    assert found["results"][0]["score"]["vector_rank"] == 1
    table = mnemosync("search", "how do we tag releases")
    assert added["memory_id"] in table
    shown = mnemosync("get", added["memory_id"])
    assert "Releases are tagged vX.Y.Z on main" in shown and "decision" in shown and "happened at" not in shown
    dated = json.loads(mnemosync("add", "Maya: I start at Rumo on the first of April", "--event-time",
                                 "2025-03-08T16:20", "--json"))
    assert json.loads(mnemosync("get", dated["memory_id"], "--json"))["event_time_ms"] == 1_741_450_800_000
    assert "happened at 2025-03-08T16:20Z" in mnemosync("get", dated["memory_id"])
    status = json.loads(mnemosync("status", "--json"))
    assert status["online"] and status["offset"] == 2 and status["head"] == 2
    bad = subprocess.run([sys.executable, "-m", "mnemosync.cli", "get", str(uuid.uuid4())], env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 3 and "Error: no memory with id" in bad.stderr  # 3: not found


def test_an_agent_reports_its_outbox_when_it_acknowledges(tmp_path, make_client):
    from mnemosync.server.app import run_server

    from helpers import RawAgent, dev_settings

    port = free_port()
    settings = dev_settings(tmp_path)
    a = make_client(f"127.0.0.1:{port}", "agent-a")  # nothing listens yet: writes wait in the outbox
    a.add("an ordinary note")
    a.add("a rule only a human may set", layer="constitutional")  # the server will refuse it
    assert a.status().pending == 2
    with run_server(dataclasses.replace(settings, listen=f"127.0.0.1:{port}")) as server:
        wait_until(lambda: a.status().online, message="the client never came back online")
        assert a.flush() == (1, 1)
        viewer = RawAgent(server.address, "agent-a")  # its own outbox (another agent's is an admin's to see)
        agents = {s.agent_id: s for s in viewer.call("ListAgents", pb.ListAgentsRequest()).agents}
        viewer.close()
    reported = agents["agent-a"]
    assert (reported.outbox.pending, reported.outbox.failed) == (0, 1)
    assert reported.acked_seq == 1 and reported.outbox_reported_at_ms > 0
