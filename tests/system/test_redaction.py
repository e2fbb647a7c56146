"""Redaction end to end: the secret leaves the server, every cache, the changelog and the files, the chain
still verifies, and the `mnemosync redact` command.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from mnemosync.kernel import projections, reflection, secrets_scan
from mnemosync.kernel.entry import REDACTED_TEXT, Entry
from mnemosync.kernel.errors import InvalidArgument, PermissionDenied, StaleVersion
from mnemosync.kernel.search import Filter
from mnemosync.server import changelog, maintenance, merkle_log
from mnemosync.server.app import run_server
from mnemosync.shim import core_memories
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, snapshot

SECRET = "31-41-59-26-53"


POLICY = """
[agents.root]
authority = 1
admin = true

[conflicts]
semantic_threshold = 0.6
"""


CONFORMANCE = True  # the tests on `policy_server` run on SQLite and on PostgreSQL (conftest.STORE_KINDS)


@pytest.fixture
def policy_server(tmp_path, store_setting):
    with run_server(replace(dev_settings(tmp_path, policy=POLICY), store=store_setting)) as running:
        yield running


@pytest.fixture
def sqlite_policy_server(tmp_path):
    """For the tests that read the SQLite files' raw bytes. (PostgreSQL keeps dead row versions and its WAL until
    it vacuums and recycles them: a redaction there removes the text from every answer, not from its files.)"""
    with run_server(dev_settings(tmp_path, policy=POLICY)) as running:
        yield running


def _files_hold(directory: Path, needle: str) -> list[str]:
    """Names of the SQLite files (and their WALs) under `directory` whose raw bytes contain `needle`."""
    return [p.name for p in directory.rglob("*.db*") if needle.encode() in p.read_bytes()]


def _dump(snapshot) -> str:
    return json.dumps(snapshot, default=lambda v: v.hex() if isinstance(v, bytes) else str(v))


def test_a_redaction_removes_the_secret_from_the_server_every_cache_and_the_changelog_and_the_chain_verifies(
        sqlite_policy_server, make_client, tmp_path):
    policy_server = sqlite_policy_server
    address = policy_server.address
    alice, bob, carol, root = (make_client(address, name) for name in ("alice", "bob", "carol", "root"))
    memory = alice.add(f"The staging vault combination is {SECRET}", tags=["ops"], quote=f"it is {SECRET}")
    alice.update(memory.memory_id, importance=0.9)
    stale = bob.update(memory.memory_id, base_version=1, content=f"Staging vault combination {SECRET}, rotated")
    assert stale.conflict_id  # a write conflict whose revisions hold the secret too
    near = carol.add("The staging vault combination: ask the ops team", tags=["ops"])
    semantic = next(v.conflict for v in root.conflicts().conflicts if v.conflict.kind == "semantic")
    assert {semantic.memory_id, semantic.other_memory_id} == {near.memory_id, memory.memory_id}
    root.resolve_conflict(semantic.id, merged_content=f"Staging vault combination {SECRET}; ask ops",
                          note=f"merged, kept {SECRET}")
    for client in (alice, bob, carol, root):
        client.sync()
    assert SECRET in _dump(bob.cache.snapshot())  # the checks below could fail
    assert _files_hold(policy_server.store.path.parent, SECRET) and _files_hold(bob.cache.path.parent, SECRET)

    before = policy_server.store.head_seq()
    result = root.redact(memory.memory_id, "a vault combination was pasted into a memory")
    assert result.seq == before + 1
    for client in (alice, bob, carol):
        client.sync()

    server_view = snapshot(policy_server.store)
    redacted = server_view[memory.memory_id]
    assert (redacted["content"], redacted["quote"], redacted["archived"], redacted["vec"], redacted["fts"]) == (
        REDACTED_TEXT, REDACTED_TEXT, True, None, None)
    assert redacted["updated_by"] == "root" and redacted["authority"] == 1
    assert SECRET not in _dump(server_view)
    for client in (alice, bob, carol):
        assert client.cache.snapshot() == server_view
    assert not _files_hold(policy_server.store.path.parent, SECRET)
    for client in (alice, bob, carol):
        assert not _files_hold(client.cache.path.parent, SECRET), client.agent_id

    entries = RawAgent(address, "auditor").sync()
    assert SECRET not in str(entries)
    audit = entries[-1]
    assert (audit.op, audit.agent_id, audit.operation.redact.reason) == (
        "redact", "root", "a vault combination was pasted into a memory")
    blanked = [e for e in entries if e.redacted_by]
    assert blanked and all(e.redacted_by == audit.seq and e.payload_salt == "" for e in blanked)
    assert {e.memory_id for e in blanked} == {memory.memory_id, near.memory_id}  # the merge, filed under carol's

    report = policy_server.store.log.verify()
    assert report.ok and report.redacted == len(blanked)
    maintenance.rebuild(policy_server.store)
    assert snapshot(policy_server.store) == server_view
    dave = make_client(address, "dave")
    assert dave.cache.snapshot() == server_view  # folding the blanked entries gives the same state
    search = dave.search("staging vault combination", include_archived=True)
    assert memory.memory_id not in {h.memory.id for h in search.hits}


def test_redaction_needs_an_admin_and_the_current_version_and_writes_nothing_otherwise(policy_server, make_client):
    alice, root = make_client(policy_server.address, "alice"), make_client(policy_server.address, "root")
    memory = alice.add(f"The vault combination is {SECRET}")
    head = policy_server.store.head_seq()
    with pytest.raises(PermissionDenied, match="admin operation"):
        alice.redact(memory.memory_id, "my own mistake")
    with pytest.raises(StaleVersion):
        root.redact(memory.memory_id, "leaked", base_version=2)
    with pytest.raises(Exception, match="reason must not be empty"):
        root.redact(memory.memory_id, " ")
    assert policy_server.store.head_seq() == head
    assert policy_server.store.reads.get(memory.memory_id).content.endswith(SECRET)


def test_sending_a_redacted_operation_again_replays_it_and_writes_nothing(policy_server):
    alice, root = RawAgent(policy_server.address, "alice"), RawAgent(policy_server.address, "root")
    op = add_op(f"The vault combination is {SECRET}")
    first = alice.append(op).results[0]
    root.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=first.memory_id, base_version=1,
                             redact=pb.RedactOp(reason="leaked")))
    head = policy_server.store.head_seq()
    again = alice.append(op).results[0]
    assert (again.replayed, again.seq, policy_server.store.head_seq()) == (True, first.seq, head)


def _add_as_an_older_server_did(store, content: str, tags: tuple[str, ...] = ()) -> str:
    """Appends an add as a server before schema version 3 wrote it: its hash covers the payload itself (no
    salted commitment), and no intake gate looked at the content (its leaf goes into the transparency log, as
    the migration to version 4 puts it there). Returns the new memory's id."""
    memory_id = str(uuid.uuid4())

    def write(conn):
        seq, prev = changelog.head(conn)
        entry = Entry(seq=seq + 1, op_id=str(uuid.uuid4()), agent_id="alice", memory_id=memory_id, op="add",
                      base_version=0, version=1, payload={
                          "scope": "user", "type": "fact", "layer": 3, "tags": list(tags), "importance": 0.5,
                          "confidence": 0.9, "protected": False, "content": content},
                      embedding=None, embedding_model="", server_time_ms=1, prev_hash=prev, authority=3)
        entry = replace(entry, hash=entry.computed_hash())
        changelog.insert(conn, entry, "")
        merkle_log.append_leaf(conn, entry.seq, entry.hash)
        projections.apply(conn, entry)

    store.submit(write)
    return memory_id


def test_entries_written_before_redaction_existed_are_refused_by_name(policy_server):
    """A schema-version-2 entry's hash covers its text, so it cannot be blanked: the refusal says so."""
    alice, root = RawAgent(policy_server.address, "alice"), RawAgent(policy_server.address, "root")
    memory_id = _add_as_an_older_server_did(policy_server.store, f"vault {SECRET}")
    with pytest.raises(grpc.RpcError) as refused:
        root.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=1,
                                 redact=pb.RedactOp(reason="leaked")))
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "written before redaction existed (seq 1)" in refused.value.details()
    assert alice.get(memory_id).content == f"vault {SECRET}"


def test_search_and_reads_mask_a_secret_stored_before_the_gate_knew_it(server, make_client):
    """The intake gate refuses secrets, but a memory stored by an older server may hold one: reads mask it."""
    key = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    memory_id = _add_as_an_older_server_did(server.store, f"The deploy user's key is {key}")
    raw = RawAgent(server.address, "bob")
    shown = "The deploy user's key is [secret: an AWS access key id]"
    assert raw.get(memory_id).content == shown
    assert [r.memory.content for r in raw.search("deploy user key")] == [shown]
    bob = make_client(server.address, "bob")
    assert bob.get(memory_id).content == shown
    hits = bob.local_search("deploy user key", vector=None, limit=5, filter=Filter(), mode="keyword").hits
    assert [h.memory.content for h in hits] == [shown]
    assert [m.content for m in bob.local.recent(since_ms=0)] == [shown]  # what the MCP tools list
    assert bob.cache.get(memory_id).content.endswith(key)  # stored as it was: only the output is masked


def test_the_redact_command_refuses_a_non_admin_by_rule_and_redacts_for_an_admin(policy_server, tmp_path):
    import os
    import subprocess
    import sys

    memory_id = RawAgent(policy_server.address, "alice").append(
        add_op(f"The vault combination is {SECRET}")).results[0].memory_id

    def redact(agent: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "mnemosync.cli", "redact", memory_id, "--reason", "leaked",
             "--server", policy_server.address, "--insecure", "--agent-id", agent,
             "--cache-dir", str(tmp_path / agent)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "MNEMOSYNC_EMBED_MODEL": "/nonexistent"})

    refused = redact("alice")
    assert refused.returncode != 0 and "redacting a memory is an admin operation" in refused.stderr
    done = redact("root")
    assert done.returncode == 0, done.stderr
    assert f"{memory_id}  v2  redacted at seq 2" in done.stdout
    assert policy_server.store.reads.get(memory_id).content == REDACTED_TEXT


def test_a_redaction_reason_holding_a_credential_is_refused_by_the_intake_gate(policy_server, make_client):
    alice, root = make_client(policy_server.address, "alice"), make_client(policy_server.address, "root")
    memory = alice.add(f"The vault combination is {SECRET}")
    head = policy_server.store.head_seq()
    key = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    secret = "intake-no-secrets: reason contains what looks like an AWS access key id"
    with pytest.raises(InvalidArgument, match=secret):
        root.redact(memory.memory_id, f"leaked next to {key}")
    assert policy_server.store.head_seq() == head


def test_a_second_redaction_removes_the_first_ones_reason_from_the_changelog_and_the_files(sqlite_policy_server,
                                                                                           make_client):
    """A reason the gate cannot recognise as a secret can still leak one; redacting the memory again blanks the
    earlier redaction's reason like any other text of that memory."""
    policy_server = sqlite_policy_server
    alice, root = make_client(policy_server.address, "alice"), make_client(policy_server.address, "root")
    memory = alice.add("The staging vault combination is in the ops vault")
    first = root.redact(memory.memory_id, f"someone pasted the combination {SECRET} here")
    alice.sync()
    assert _files_hold(policy_server.store.path.parent, SECRET)
    second = root.redact(memory.memory_id, "the first redaction's reason repeated the secret", base_version=2)
    entries = RawAgent(policy_server.address, "auditor").sync()
    reasons = {e.seq: (e.operation.redact.reason, e.redacted_by) for e in entries if e.op == "redact"}
    assert reasons == {first.seq: (REDACTED_TEXT, second.seq),
                       second.seq: ("the first redaction's reason repeated the secret", 0)}
    assert not _files_hold(policy_server.store.path.parent, SECRET)
    assert policy_server.store.log.verify().ok
    alice.sync()
    assert alice.cache.snapshot() == snapshot(policy_server.store)
    assert make_client(policy_server.address, "dave").cache.snapshot() == snapshot(policy_server.store)


def test_a_redaction_removes_the_secret_from_link_reasons_tags_history_and_every_files_bytes(sqlite_policy_server,
                                                                                             make_client):
    """Redaction is for text the gate did not recognise, wherever the memory carried it: a link's reason, a tag,
    the quote, an earlier version, the keyword index. Afterwards neither the server's files nor a cache's hold it,
    `Get` does not return it, and `verify` finds the projections equal to a fresh fold."""
    policy_server = sqlite_policy_server
    alice, bob, root = (make_client(policy_server.address, name) for name in ("alice", "bob", "root"))
    target = alice.add("The ops runbook lives in the wiki")
    memory = alice.add("Open the staging vault with the combination", tags=["vault", f"combo-{SECRET}"],
                       quote=f"use {SECRET}")
    alice.update(memory.memory_id, content="Open the staging vault with the combination from ops")
    alice.link(memory.memory_id, target.memory_id, "semantic", reason=f"the runbook repeats {SECRET}")
    for client in (alice, bob):
        client.sync()
    assert SECRET in _dump(bob.cache.snapshot()) and _files_hold(bob.cache.path.parent, SECRET)

    root.redact(memory.memory_id, "a vault combination was pasted into a link and a tag")
    for client in (alice, bob):
        client.sync()
    view = snapshot(policy_server.store)
    assert SECRET not in _dump(view)
    assert view[memory.memory_id]["tags"] == [] and view[memory.memory_id]["tag_index"] == []
    assert [link.reason for link in view[memory.memory_id]["links"]] == [REDACTED_TEXT]
    shown = bob.get(memory.memory_id)
    assert SECRET not in repr(shown) and shown.links and shown.links[0].reason == REDACTED_TEXT
    assert SECRET not in str(RawAgent(policy_server.address, "auditor").sync())
    assert not _files_hold(policy_server.store.path.parent, SECRET)
    for client in (alice, bob):
        assert client.cache.snapshot() == view
        assert not _files_hold(client.cache.path.parent, SECRET), client.agent_id
    report = policy_server.store.log.verify()
    assert report.ok, report
    maintenance.rebuild(policy_server.store)
    assert snapshot(policy_server.store) == view
    assert make_client(policy_server.address, "dave").cache.snapshot() == view


def test_the_redact_command_reaches_every_file_the_server_wrote_procedures_sources_and_snapshots_included(
        sqlite_policy_server, make_client, tmp_path):
    """Issue 37 item 5: after `redact`, the snapshot images and replica files in the server's data folder still held
    the secret until the next snapshot or GetSnapshot, and issue 37 item 13: a redaction must take a procedure's
    steps and conditions and the memory's sources with it. Every file under the data folder, raw bytes."""
    import os
    import subprocess
    import sys

    from mnemosync.server import snapshots

    server = sqlite_policy_server
    data_dir = server.store.path.parent
    alice = make_client(server.address, "alice")
    memory = alice.add("Open the staging vault", type="procedure", tags=["vault"], quote="open it",
                       steps=["take the combination", f"turn the dial to {SECRET}"],
                       preconditions=[f"the card {SECRET} is at hand"], postconditions=[f"the log shows {SECRET}"],
                       sources=[f"https://wiki.example/vault/{SECRET}"])
    alice.verify(memory.memory_id, "unverified", [f"vault/{SECRET}.md"], base_version=1)
    snapshots.make_in(data_dir)
    held = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*")
                  if p.is_file() and SECRET.encode() in p.read_bytes())
    assert any(name.startswith("snapshots/") for name in held) and any(n.startswith("mnemosync.db") for n in held)

    done = subprocess.run(
        [sys.executable, "-m", "mnemosync.cli", "redact", memory.memory_id, "--reason", "leaked", "--server",
         server.address, "--insecure", "--agent-id", "root", "--cache-dir", str(tmp_path / "root")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "MNEMOSYNC_EMBED_MODEL": "/nonexistent"})
    assert done.returncode == 0, done.stderr
    held = sorted(str(p.relative_to(data_dir)) for p in data_dir.rglob("*")
                  if p.is_file() and SECRET.encode() in p.read_bytes())
    assert held == []
    shown = alice.get(memory.memory_id)
    assert not shown.procedure and not shown.sources and SECRET not in repr(shown)
    assert SECRET not in str(RawAgent(server.address, "auditor").sync())
    assert server.store.log.verify().ok
    alice.sync()  # the blanked entries prove their blanking once sent, and fold to what the server holds
    assert alice.cache.snapshot() == snapshot(server.store)
    assert make_client(server.address, "dave").cache.snapshot() == snapshot(server.store)


def test_a_tag_holding_a_secret_is_masked_on_the_way_out_like_the_content(server, make_client):
    """Tags were never masked: a credential in a tag showed in Get, Search, the MCP results and the core block."""
    key = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    memory_id = _add_as_an_older_server_did(server.store, "The deploy user's access key", tags=("deploy", key))
    raw = RawAgent(server.address, "bob")
    masked = ["deploy", "[secret: an AWS access key id]"]
    assert list(raw.get(memory_id).tags) == masked
    assert [list(r.memory.tags) for r in raw.search("deploy user access key")] == [masked]
    bob = make_client(server.address, "bob")
    assert bob.get(memory_id).tags == masked
    hits = bob.local_search("deploy user access key", vector=None, limit=5, filter=Filter(), mode="keyword").hits
    assert [h.memory.tags for h in hits] == [masked]
    assert [m.tags for m in bob.local.recent(since_ms=0)] == [masked]


def test_a_tag_holding_a_secret_is_masked_in_topic_labels_tag_listings_reflection_and_the_operators_views(
        server, make_client, monkeypatch):
    """Issue 33 item 12: topic labels are built from tags, so a credential in a tag (stored before the gate knew its
    shape) showed in ListTopics, the cache's topics and tag listing (MCP list_topics) and the reflection; the
    changelog view, a memory's history and the core block mask it too."""
    key = "ghp_" + "a1b2c3d4e5f6g7h8i9j0k1l2m3n4o5p6q7r8"
    shown = "[secret: a GitHub token]"
    scope = f"project:t{uuid.uuid4().hex[:10]}"
    real = secrets_scan.check
    monkeypatch.setattr(secrets_scan, "check", lambda text, name: None if key in text else real(text, name))
    alice = make_client(server.address, "alice")
    ids = [alice.add(f"The deploy user's access key number {i} for the staging deploy", scope=scope,
                     tags=["zz", key]).memory_id for i in range(4)]
    alice.flush()
    monkeypatch.setattr(secrets_scan, "check", real)
    raw = RawAgent(server.address, "bob")
    labels = [t.label for t in raw.call("ListTopics", pb.ListTopicsRequest(scopes=[scope])).topics]
    changelog_view = str(raw.call("ListChangelog", pb.ListChangelogRequest(limit=1000)))
    history = str(raw.call("GetMemoryHistory", pb.GetMemoryHistoryRequest(memory_id=ids[0])))
    bob = make_client(server.address, "bob")
    bob.sync()
    local = bob.local
    texts = {
        "ListTopics": repr(labels),
        "ListChangelog": changelog_view,
        "GetMemoryHistory": history,
        "cache topics": repr([t.label for t in local.topics(scopes=[scope]).topics]),
        "cache tag listing": repr([t.name for t in local.tag_topics(scopes=[scope])]),
        "reflection": reflection.markdown(local.reflection(now_ms=int(time.time() * 1000), scopes=[scope]), str),
        "core block": core_memories.build(local, [scope]).markdown,
    }
    assert labels and all(shown in label for label in labels)
    assert {name for name, text in texts.items() if key in text} == set()
    assert shown in texts["cache tag listing"] and shown in texts["reflection"] and shown in texts["cache topics"]
