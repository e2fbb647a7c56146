"""The agent's write path: one round trip per write, the outbox flushed in batches, and bulk import and export
(`mnemosync.agent.bulk`), against a real server with the real model."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest

from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import dev_settings, free_port, mnemosync, wait_until


def test_a_write_reaches_the_writers_cache_in_its_own_round_trip(server, make_client):
    a = make_client(server.address, "agent-a")
    synced = a.last_sync
    first = a.add("The release branch is cut every Tuesday")
    assert a.cache.offset == first.seq and a.cache.get(first.memory_id).content.startswith("The release branch")
    assert a.last_sync is synced  # no catch-up ran after the write
    assert a.cache.checkpoint is not None and a.cache.checkpoint.size == first.seq  # the page's checkpoint checked


def test_a_write_after_other_agents_writes_brings_them_into_the_cache_in_order(server, make_client):
    a = make_client(server.address, "agent-a")
    b = make_client(server.address, "agent-b")
    other = b.add("Staging runs on two t3.large nodes")
    mine = a.add("Production runs on six m5.xlarge nodes")
    assert mine.seq == other.seq + 1
    assert a.cache.offset == mine.seq and a.cache.get(other.memory_id) is not None


def test_a_live_writer_gets_its_own_write_once_even_when_others_wrote_between(server, make_client):
    a = make_client(server.address, "agent-a", live=True)
    b = make_client(server.address, "agent-b")
    wait_until(lambda: a.live.connected.is_set(), message="live updates never connected")
    b.add("The CDN caches images for a day")
    mine = a.add("The CDN caches scripts for an hour")
    wait_until(lambda: a.cache.offset == mine.seq, message="the live stream never brought the writes")
    assert a.drain_news() and all(e.agent_id == "agent-b" for e in a.drain_news() or [])


def test_a_subscriber_asking_for_elision_gets_markers_for_its_own_entries_and_others_whole(server, agents):
    writer, other = agents("agent-a"), agents("agent-b")
    stream = writer.stub.Subscribe(pb.SubscribeRequest(since_seq=0, elide_own_entries=True),
                                   metadata=writer.metadata, timeout=30)
    plain = other.stub.Subscribe(pb.SubscribeRequest(since_seq=0), metadata=other.metadata, timeout=30)
    mine = writer.add("The queue retries a job three times")
    marker = next(stream)  # before the next write, so its page holds it alone and closes with its checkpoint
    theirs = other.add("The queue keeps dead jobs for a week")
    entry = next(stream)
    whole = [next(plain), next(plain)]
    stream.cancel()
    plain.cancel()
    assert (marker.seq, marker.elided, marker.agent_id) == (mine.seq, True, "agent-a")
    assert not marker.HasField("operation") and not marker.op_id and not marker.memory_id and not marker.op
    assert (marker.hash, marker.prev_hash) == (whole[0].hash, whole[0].prev_hash) and not whole[0].elided
    assert marker.HasField("checkpoint") and marker.checkpoint.size == mine.seq
    assert (entry.seq, entry.elided, entry.operation.add.content) == (theirs.seq, False, whole[1].operation.add.content)


def test_a_live_writers_stream_carries_none_of_its_own_entries_and_its_cache_converges(server, make_client,
                                                                                         agents):
    a = make_client(server.address, "agent-a", live=True)
    b = make_client(server.address, "agent-b", live=True)
    wait_until(lambda: a.live.connected.is_set() and b.live.connected.is_set(), message="live updates never connected")
    for i in range(6):
        a.add(f"agent a note {i} about the billing service")
        b.add(f"agent b note {i} about the search service")
    head = b.add("the last note").seq
    wait_until(lambda: a.cache.offset == b.cache.offset == head, message="the caches never reached the head")
    # the Append's answer can fill the writer's cache before its stream brings the marker of that last entry
    wait_until(lambda: (a.live.markers, b.live.markers) == (6, 7),
               message=lambda: f"markers {(a.live.markers, b.live.markers)}, not (6, 7)")
    assert (a.live.markers, b.live.markers) == (6, 7)  # each own entry came as a marker, none whole
    assert a.live.fetched == 0 and b.live.fetched == 0  # and was filled in from the writer's Append answer
    assert a.cache.root() == b.cache.root()
    for entry in agents("reader").sync(0):
        assert a.cache.get(entry.memory_id) == b.cache.get(entry.memory_id) is not None
    news = a.drain_news()
    assert len(news) == 7 and {e.agent_id for e in news} == {"agent-b"}


def test_a_live_stream_fetches_the_agents_entries_written_by_another_of_its_processes(server, make_client, agents):
    a = make_client(server.address, "agent-a", live=True)
    wait_until(lambda: a.live.connected.is_set(), message="live updates never connected")
    elsewhere = agents("agent-a")  # the same agent in another process: its Append answers never reach `a`
    written = elsewhere.add("Written by the agent's other session")
    wait_until(lambda: a.cache.offset == written.seq, message="the live stream never brought the entry")
    assert a.live.fetched == 1 and a.cache.get(written.memory_id).content == "Written by the agent's other session"


def test_queued_writes_go_in_order_in_batches_and_only_the_refused_one_is_parked(tmp_path, make_client):
    port = free_port()
    a = make_client(f"127.0.0.1:{port}", "agent-a")  # nothing listens yet: writes wait in the outbox
    first = a.add("queued note one")
    a.add("a rule only a human may set", layer="constitutional")  # the server will refuse it
    third = a.add("queued note three")
    update = a.update(first.memory_id, content="queued note one, revised")
    with run_server(dataclasses.replace(dev_settings(tmp_path), listen=f"127.0.0.1:{port}")):
        wait_until(lambda: a.status().online, message="the client never came back online")
        assert a.flush() == (3, 1)
        assert a.status().pending == 0 and a.status().failed == 1
        assert a.get(first.memory_id).content == "queued note one, revised" and a.get(first.memory_id).version == 2
        assert a.cache.get(third.memory_id) is not None and update.pending


SECRET = "AKIA" + "Z7QX4M2P9L3K8J5H"  # an AWS access key id shape, refused at the intake gate


def _mcp_memory(path):
    lines = [
        {"type": "entity", "name": "Maya", "entityType": "person",
         "observations": ["works on the billing service", "prefers async code review"]},
        {"type": "entity", "name": "billing", "entityType": "service",
         "observations": ["is written in Go", f"deploys with key {SECRET}"]},
        {"type": "relation", "from": "Maya", "to": "billing", "relationType": "works_on"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def _notes(folder):
    folder.mkdir()
    (folder / "deploy.md").write_text("---\ntitle: Deploys\ntype: decision\ntags: [deploy, ops]\n---\n"
                                      "Deploys go through ops/deploy.sh after CI is green.\n")
    (folder / "CLAUDE.md").write_text("# Conventions\n\n- Use uv for Python environments\n"
                                      "- Run ruff before committing\n\n# Testing\n\n* Tests start real servers\n")
    (folder / ".obsidian").mkdir()
    (folder / ".obsidian" / "workspace.md").write_text("not a note")


def test_an_import_is_resumable_reports_refusals_and_its_export_imports_back_identically(tmp_path, server,
                                                                                     make_client):
    from mnemosync.agent import bulk

    a = make_client(server.address, "importer")
    _mcp_memory(tmp_path / "memory.jsonl")
    _notes(tmp_path / "notes")
    items = bulk.read_source(tmp_path / "memory.jsonl") + bulk.read_source(tmp_path / "notes")
    assert len(items) == 4 + 1 + 3
    summary = a.add_many(items, batch=3)
    assert (summary.written, summary.replayed, summary.links) == (7, 0, 1)
    assert len(summary.refused) == 1 and "AWS access key" in summary.refused[0][1]
    assert SECRET not in summary.refused[0][1]
    again = a.add_many(items, batch=3)  # an interrupted run, run again: nothing written twice
    assert (again.written, again.replayed, again.links) == (0, 7, 0) and len(again.refused) == 1
    maya = a.get(items[0].id())
    assert maya.content == "Maya: works on the billing service" and set(maya.tags) == {"person", "maya"}
    assert [(k.target_id, k.relation, k.reason) for k in maya.links] == [(items[2].id(), "entity", "works on")]
    deploy = next(i for i in items if i.key.endswith("deploy.md"))
    assert a.get(deploy.id()).type == "decision" and set(a.get(deploy.id()).tags) == {"deploy", "ops"}

    exported = tmp_path / "export.jsonl"
    exported.write_text("\n".join(bulk.export_lines(a.cache.get(i.id()) for i in items if a.cache.get(i.id())))
                        + "\n")
    other_settings = dataclasses.replace(dev_settings(tmp_path, name="other"), listen="127.0.0.1:0")
    with run_server(other_settings) as other:
        b = make_client(other.address, "importer-b")
        back = b.add_many(bulk.read_source(exported))
        assert (back.written, back.links, back.refused) == (7, 1, [])
        for item in items:
            if a.cache.get(item.id()) is None:
                continue
            mine, theirs = a.get(item.id()), b.get(item.id())
            assert (theirs.content, theirs.scope, theirs.type, theirs.layer, sorted(theirs.tags), theirs.importance,
                    theirs.links) == (mine.content, mine.scope, mine.type, mine.layer, sorted(mine.tags),
                                      mine.importance, tuple(k._replace(author_agent="importer-b") for k in mine.links))


def test_an_export_carries_a_procedures_lists_and_its_sources_and_imports_them_back(tmp_path, server, make_client):
    from mnemosync.agent import bulk

    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "deploy.sh").write_text("build() {\n  docker build .\n}\n")
    a = make_client(server.address, "exporter")
    made = a.add("Deploy the shop", type="procedure", steps=["Build", "Push"], postconditions=["Healthy"],
                 sources=["deploy.sh#build"], root=tree).memory_id
    exported = tmp_path / "export.jsonl"
    exported.write_text("\n".join(bulk.export_lines([a.get(made)])) + "\n")
    other_settings = dataclasses.replace(dev_settings(tmp_path, name="other"), listen="127.0.0.1:0")
    with run_server(other_settings) as other:
        b = make_client(other.address, "importer-b")
        assert b.add_many(bulk.read_source(exported)).written == 1
        mine, theirs = a.get(made), b.get(made)
        assert theirs.procedure == mine.procedure and list(theirs.procedure.steps) == ["Build", "Push"]
        assert theirs.sources == mine.sources and theirs.sources[0]["sha256"]


def test_an_import_run_again_after_its_folder_grew_writes_only_the_new_note_and_embeds_nothing_else(
        tmp_path, server, make_client):
    from mnemosync.agent import bulk

    a = make_client(server.address, "grower")
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(12):
        (folder / f"note-{i:02d}.md").write_text(f"Service {i} is deployed by the {['ci', 'ops', 'release'][i % 3]} "
                                                 f"pipeline on {['mondays', 'fridays'][i % 2]} (runbook {i}).\n")
    first = a.add_many(bulk.read_source(folder), batch=5)
    assert (first.written, first.refused) == (12, [])
    (folder / "note-00a.md").write_text("The staging database is refreshed from production every night.\n")
    a.embedder.clear_cache()  # as a new process would start: every stored note embedded again would be a miss
    misses = a.embedder.stats().misses
    again = a.add_many(bulk.read_source(folder), batch=5)  # every batch now holds other notes than before
    assert (again.written, again.replayed, again.refused) == (1, 12, [])
    assert a.embedder.stats().misses - misses == 1
    assert len({a.cache.get(item.id()).content for item in bulk.read_source(folder)}) == 13


def test_reimporting_an_export_writes_no_link_it_already_has_and_keeps_its_author(tmp_path, server, make_client,
                                                                                 agents):
    from mnemosync.agent import bulk

    a = make_client(server.address, "importer")
    _mcp_memory(tmp_path / "memory.jsonl")
    items = bulk.read_source(tmp_path / "memory.jsonl")
    assert a.add_many(items).links == 1
    exported = tmp_path / "export.jsonl"
    exported.write_text("\n".join(bulk.export_lines(a.cache.get(i.id()) for i in items if a.cache.get(i.id())))
                        + "\n")
    head = server.store.head_seq()
    b = make_client(server.address, "someone-else")
    again = b.add_many(bulk.read_source(exported))
    assert (again.written, again.links, again.links_unchanged) == (0, 0, 1)
    assert server.store.head_seq() == head, "re-importing an unchanged export wrote entries"
    [link] = b.get(items[0].id()).links
    assert link.author_agent == "importer"


def test_mnemosync_import_run_again_on_its_export_writes_no_link_and_says_it_was_already_there(tmp_path, server,
                                                                                                make_client):
    """The same as above through the command people run: `mnemosync import` of an export, twice."""
    def run(agent_id: str, *args: str):
        done = mnemosync(*args, "--server", server.address, "--insecure", "--agent-id", agent_id,
                         "--cache-dir", str(tmp_path / "agents" / agent_id))
        assert done.returncode == 0, done.stderr
        return done.stdout

    _mcp_memory(tmp_path / "memory.jsonl")
    first = run("importer", "import", str(tmp_path / "memory.jsonl"))
    assert "1 link (0 already there)" in first, first
    exported = tmp_path / "export.jsonl"
    run("importer", "export", str(exported))
    entries = server.store.head_seq()
    again = [run(agent, "import", str(exported)) for agent in ("someone-else", "importer")]
    for said in again:
        assert "0 written" in said and "0 links (1 already there)" in said, said
    assert server.store.head_seq() == entries, "re-importing an unchanged export wrote entries"
    reader = make_client(server.address, "reader")
    [linked] = [m for m in (reader.get(line["id"]) for line in map(json.loads, exported.read_text().splitlines()))
                if m.links]
    assert [link.author_agent for link in linked.links] == ["importer"]


def test_a_markdown_folder_import_does_not_follow_links_out_of_the_folder(tmp_path, server, make_client):
    """`notes/leak.md -> ../private.txt` was imported by `mnemosync import`: a link (to a file or a folder) that
    leads out of the folder being imported is skipped, one inside it is read once."""
    (tmp_path / "private.txt").write_text("- the root password of the backup host is in my head\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "secret.md").write_text("- the staging vault opens with the ops key\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("Deploys go through ops/deploy.sh\n")
    (notes / "leak.md").symlink_to(tmp_path / "private.txt")
    (notes / "outside").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (notes / "again.md").symlink_to(notes / "deploy.md")
    scope = f"project:i{uuid.uuid4().hex[:10]}"
    done = mnemosync("import", str(notes), "--scope", scope, "--json", "--server", server.address, "--insecure",
                     "--agent-id", "importer", "--cache-dir", str(tmp_path / "agents" / "importer"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["written"] == 1, done.stdout
    reader = make_client(server.address, "reader")
    reader.sync()
    contents = [m.content for m in reader.local.recent(since_ms=0) if m.scope == scope]
    assert len(contents) == 1 and "Deploys go through ops/deploy.sh" in contents[0]


def test_export_writes_a_private_file_with_known_credentials_masked(tmp_path, server, make_client):
    """`mnemosync export` wrote credentials in clear at mode 0644, where another local user read them."""
    import stat

    from mnemosync.agent import bulk

    key = "AKIA" + "Q3EXAMPLE7KEY2ZZ"
    line = next(bulk.export_lines([dataclasses.replace(
        _memory_row("m1", f"the deploy key is {key}"), tags=["deploy", key])]))
    assert key not in line and "[secret: an AWS access key id]" in line
    a = make_client(server.address, "exporter")
    a.add("Deploys go through ops/deploy.sh")
    target = tmp_path / "export.jsonl"
    done = mnemosync("export", str(target), "--server", server.address, "--insecure", "--agent-id", "exporter",
                     "--cache-dir", str(tmp_path / "agents" / "exporter"))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o600 and "ops/deploy.sh" in target.read_text()


def test_export_into_a_missing_folder_is_a_usage_error_that_creates_nothing(tmp_path, server):
    """`mnemosync export` into a folder that does not exist ended in a traceback (issue 33, items 13 and 16)."""
    target = tmp_path / "no" / "such" / "export.jsonl"
    done = mnemosync("export", str(target), "--server", server.address, "--insecure", "--agent-id", "exporter",
                     "--cache-dir", str(tmp_path / "agents" / "exporter"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"the folder {target.parent} does not exist" in done.stderr and not (tmp_path / "no").exists()


def _memory_row(memory_id: str, content: str):
    from mnemosync.kernel.memory import MemoryRow

    return MemoryRow(num=0, id=memory_id, scope="user", type="fact", layer=3, tags=[], content=content,
                     importance=0.5, confidence=0.9, protected=False, author_agent="a", updated_by="a", version=1,
                     created_at_ms=1, updated_at_ms=1, archived=False, embedding_model="m", content_hash="h",
                     last_seq=1)


@pytest.mark.parametrize(("line", "said"), [
    ("[" * 3000 + "]" * 3000, "nested too deeply"),
    ("[1, 2, 3]", "expected a memory"),
    ('{"id": "m1", "content": "x", "tags": "ops"}', "tags must be a list of strings"),
    ('{"id": "m1", "content": "x", "importance": "high"}', "importance must be a number"),
    ('{"id": "m1", "content": "x", "links": [{"weight": 1}]}', "links must be objects with a target_id"),
])
def test_an_odd_import_line_is_refused_by_its_line_number_not_with_a_traceback(tmp_path, line, said):
    source = tmp_path / "memories.jsonl"
    source.write_text('{"id": "m0", "content": "a fine line"}\n' + line + "\n")
    done = mnemosync("import", str(source), "--server", "127.0.0.1:9", "--insecure", "--agent-id", "importer",
                     "--cache-dir", str(tmp_path / "cache"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{source}:2: " in done.stderr and said in done.stderr


def test_an_export_imported_into_a_fresh_server_keeps_who_wrote_each_memory_and_when(tmp_path, server, make_client):
    """Issue 41 item 12: every imported memory read "by carol". The importer stays the writer of record; the
    export's writers and times come along as the memory's origin, shown beside it, and a second export keeps
    the first writer."""
    def run(address: str, cache: str, *args: str):
        done = mnemosync(*args, "--server", address, "--insecure", "--agent-id", "carol", "--cache-dir",
                         str(tmp_path / "agents" / cache))
        assert done.returncode == 0, done.stderr
        return done.stdout

    alice, bob = make_client(server.address, "alice"), make_client(server.address, "bob")
    written = alice.add("Deploys go through ops/deploy.sh")
    bob.sync()
    bob.update(written.memory_id, content="Deploys go through ops/deploy.sh --canary")
    original = bob.get(written.memory_id)
    run(server.address, "carol-a", "export", str(tmp_path / "first.jsonl"))
    with run_server(dev_settings(tmp_path, name="fresh")) as fresh:
        run(fresh.address, "carol-b", "import", str(tmp_path / "first.jsonl"))
        shown = run(fresh.address, "carol-b", "get", written.memory_id[:8])
        doc = json.loads(run(fresh.address, "carol-b", "get", written.memory_id, "--json"))
        run(fresh.address, "carol-b", "export", str(tmp_path / "second.jsonl"))
    assert "by carol at " in shown and "imported: first written by alice at " in shown
    assert "; last changed there by bob at " in shown
    assert doc["author"] == "carol" and doc["origin"] == {
        "author_agent": "alice", "created_at_ms": original.created_at_ms, "updated_by": "bob",
        "updated_at_ms": original.updated_at_ms}
    [line] = map(json.loads, (tmp_path / "second.jsonl").read_text().splitlines())
    assert line["author_agent"] == "carol" and line["origin"] == doc["origin"]
