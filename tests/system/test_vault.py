"""The markdown vault (issue 31 item 4, seed 004's format): export, edit in place, add, delete, sync; the real
server, real SQLite, real caches, the real model and the `mnemosync vault` commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

from mnemosync.agent import vault

from helpers import mnemosync


def _file_of(root, memory_id):
    state = json.loads((root / "_state.json").read_text())["files"]
    return root / next(path for path, r in state.items() if r["id"] == memory_id)


def test_a_vault_round_trip_makes_exactly_the_edits_adds_and_forgets_with_the_right_authors(server, make_client,
                                                                                             tmp_path):
    writer, editor, reader = (make_client(server.address, n) for n in ("writer", "editor", "reader"))
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    a, b, c, d = (writer.add(text, scope=scope, tags=["deploy"]).memory_id for text in (
        "Deploys go through ops/deploy.sh", "The staging host is db-7", "CI runs on every push",
        "Releases leave on Tuesdays"))
    proc = writer.add("Deploy the web app", scope=scope, type="procedure", steps=["build", "push"],
                      preconditions=["tests pass"]).memory_id
    writer.link(a, b, "causal", weight=0.5, reason="the script reads the host")
    root = tmp_path / "vault"
    assert vault.export(editor, root, scopes=(scope,)) == 5

    front, content = vault.parse(_file_of(root, a).read_text(), "a")
    assert (front["id"], front["type"], front["layer"], front["tags"], front["author"], front["version"]) == (
        a, "fact", "factual", ["deploy"], "writer", 1)
    assert front["relations"] == [{"target": f"[[{_file_of(root, b).stem}]]", "type": "causal",
                                   "direction": "outgoing", "strength": 0.5, "context": "the script reads the host",
                                   "id": b}]  # a link a markdown editor follows
    assert content == "Deploys go through ops/deploy.sh"
    assert vault.parse(_file_of(root, proc).read_text(), "p")[1] == (
        "Deploy the web app\n\n## Preconditions\n1. tests pass\n\n## Steps\n1. build\n2. push")
    index = json.loads((root / "_index.json").read_text())
    assert index["count"] == 5 and index["entries"][a]["path"] == _file_of(root, a).relative_to(root).as_posix()

    edited_a = _file_of(root, a)
    edited_a.write_text(edited_a.read_text().replace("ops/deploy.sh", "ops/deploy.sh --canary"))
    edited_b = _file_of(root, b)
    edited_b.write_text(edited_b.read_text().replace('tags: ["deploy"]', 'tags: ["hosts", "staging"]'))
    (root / "graph" / "fact" / "new-note.md").write_text(
        f'---\ntype: decision\nscope: "{scope}"\ntags: ["ci"]\nimportance: 0.7\n---\n\n'
        "CI must stay under ten minutes\n")
    _file_of(root, c).unlink()

    report = vault.sync(editor, root)
    assert sorted(report.updated) == sorted([a, b]) and len(report.added) == 1 and report.forgotten == [c]
    assert report.unchanged == 2 and report.conflicts == [] and report.refused == []
    reader.sync()
    got_a, got_b, got_c, got_d = (reader.get(i) for i in (a, b, c, d))
    assert (got_a.content, got_a.version, got_a.author_agent, got_a.updated_by) == (
        "Deploys go through ops/deploy.sh --canary", 2, "writer", "editor")
    assert (got_b.tags, got_b.content, got_b.version) == (["hosts", "staging"], "The staging host is db-7", 2)
    assert got_c.archived and got_c.version == 2 and got_c.updated_by == "editor"
    assert (got_d.version, got_d.updated_by) == (1, "writer")
    new = reader.get(report.added[0])
    assert (new.content, new.type, new.author_agent, new.version, new.scope, new.importance) == (
        "CI must stay under ten minutes", "decision", "editor", 1, scope, 0.7)
    assert vault.parse((root / "graph" / "fact" / "new-note.md").read_text(), "n")[0]["id"] == new.id
    assert vault.parse(edited_a.read_text(), "a")[0]["version"] == 2  # written again with the new version

    again = vault.sync(editor, root)
    assert (again.updated, again.added, again.forgotten, again.unchanged) == ([], [], [], 5)

    writer.update(d, content="Releases leave on Wednesdays")
    file_d = _file_of(root, d)
    file_d.write_text(file_d.read_text().replace("Tuesdays", "Thursdays"))
    clash = vault.sync(editor, root)
    assert clash.updated == [d] and [m for m, _ in clash.conflicts] == [d]
    assert "Thursdays" in file_d.read_text()  # the editor's text stays until the conflict is resolved
    reader.sync()
    assert clash.conflicts[0][1] in reader.get(d).open_conflicts

    file_p = _file_of(root, proc)
    file_p.write_text(file_p.read_text().split("\n## Preconditions")[0] + "\n")
    plain = vault.sync(editor, root)
    assert plain.updated == [proc] and reader.get(proc).procedure is None


def test_the_vault_commands_export_and_sync_and_a_bad_file_is_named(server, make_client, tmp_path, model_path):
    env = {"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "cli-agent", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cli-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    make_client(server.address, "writer").add("The vault keeps the team's memory", scope=scope)
    root = tmp_path / "vault"
    done = mnemosync("vault", "export", str(root), "--scope", scope, "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["exported"] == 1
    (root / "broken.md").write_text("no front matter here\n")
    exported = next(root.glob("graph/fact/*.md"))
    (root / "copy.md").write_text(exported.read_text())  # the same id again: refused, the rest goes on
    synced = mnemosync("vault", "sync", str(root), "--json", env=env)
    assert synced.returncode == 0, synced.stderr
    answer = json.loads(synced.stdout)
    assert answer["unchanged"] == 1 and answer["added"] == [] and answer["updated"] == []
    refused = {r["path"]: r["reason"] for r in answer["refused"]}
    assert refused["broken.md"] == "broken.md: a vault file starts with a '---' line and its front matter"
    assert set(refused) == {"broken.md", "copy.md"} and "already" in refused["copy.md"]


def test_vault_sync_and_export_neither_read_nor_write_through_a_link_out_of_the_vault(server, make_client, tmp_path,
                                                                                        model_path):
    """Issue 33 (item 15's shape on the vault): a note linked to a file outside the vault, or reached through a
    linked folder, is named as refused and never read; a link standing where the vault writes a note, its index
    or its state is replaced by a file in the vault, so no file outside is overwritten or deleted."""
    env = {"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "cli-agent", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cli-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    kept = make_client(server.address, "writer").add("The vault keeps the team's memory", scope=scope).memory_id
    private = '---\ntype: "fact"\n---\n\nthe root password of the backup host is in my head\n'
    outside = tmp_path / "outside"
    (outside / "notes").mkdir(parents=True)
    (outside / "private.txt").write_text(private)
    (outside / "notes" / "secret.md").write_text(private)
    root = tmp_path / "vault"
    assert mnemosync("vault", "export", str(root), "--scope", scope, env=env).returncode == 0
    (root / "leak.md").symlink_to(outside / "private.txt")
    (root / "linked").symlink_to(outside / "notes", target_is_directory=True)
    note = _file_of(root, kept)
    relative = note.relative_to(root).as_posix()
    note.unlink()
    (outside / "edited.md").write_text(vault.render(make_client(server.address, "reader").get(kept)).replace(
        "keeps the team's memory", "keeps nothing"))
    note.symlink_to(outside / "edited.md")

    synced = mnemosync("vault", "sync", str(root), "--json", env=env)
    assert synced.returncode == 0, synced.stderr
    answer = json.loads(synced.stdout)
    refused = {r["path"]: r["reason"] for r in answer["refused"]}
    assert set(refused) == {"leak.md", "linked", relative}
    assert all("symbolic link" in reason for reason in refused.values()), refused
    assert "out of the vault" in refused["leak.md"] and "folder out of the vault" in refused["linked"]
    assert (answer["added"], answer["updated"], answer["forgotten"]) == ([], [], [])
    reader = make_client(server.address, "reader")
    reader.sync()
    assert reader.get(kept).content == "The vault keeps the team's memory" and not reader.get(kept).archived
    hits = [h.memory.content for h in reader.search("backup host root password", limit=5).hits]
    assert not any("backup host" in c for c in hits)
    assert (outside / "private.txt").read_text() == private and (outside / "notes" / "secret.md").read_text() == private

    (root / "_index.json").unlink()
    (root / "_index.json").symlink_to(outside / "private.txt")
    exported = mnemosync("vault", "export", str(root), "--scope", scope, env=env)
    assert exported.returncode == 0, exported.stderr
    assert (outside / "private.txt").read_text() == private
    assert "keeps nothing" in (outside / "edited.md").read_text()
    assert not note.is_symlink() and "keeps the team's memory" in note.read_text()
    assert not (root / "_index.json").is_symlink() and json.loads((root / "_index.json").read_text())["count"] == 1


def _cli_env(server, tmp_path, model_path, agent="cli-agent"):
    return {"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": agent, "MNEMOSYNC_INSECURE": "1",
            "MNEMOSYNC_CACHE_DIR": str(tmp_path / f"{agent}-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}


def _git(root, *args):
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", *args], cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _sync_json(root, env):
    synced = mnemosync("vault", "sync", str(root), "--json", env=env)
    assert synced.returncode == 0, synced.stderr
    return json.loads(synced.stdout)


def test_a_note_renamed_with_git_mv_or_moved_to_another_type_folder_is_the_same_memory(server, make_client,
                                                                                          tmp_path, model_path):
    """A file whose id the state records under a path that is gone is that memory moved: its new path is
    recorded, an untouched rename writes nothing, a moved and edited file is an update from its version, and
    nothing is forgotten or refused."""
    env = _cli_env(server, tmp_path, model_path)
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    writer = make_client(server.address, "writer")
    a, b, c = (writer.add(text, scope=scope).memory_id for text in (
        "Deploys go through ops/deploy.sh", "The staging host is db-7", "CI runs on every push"))
    root = tmp_path / "vault"
    assert mnemosync("vault", "export", str(root), "--scope", scope, env=env).returncode == 0
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "export")
    old_a, old_b = (_file_of(root, i).relative_to(root).as_posix() for i in (a, b))
    _git(root, "mv", old_a, "graph/fact/how-we-deploy.md")
    (root / "graph" / "decision").mkdir()
    _git(root, "mv", old_b, "graph/decision/staging-host.md")
    moved_b = root / "graph" / "decision" / "staging-host.md"
    moved_b.write_text(moved_b.read_text().replace("db-7", "db-8"))
    old_c = _file_of(root, c).relative_to(root).as_posix()
    _git(root, "mv", old_c, "graph/fact/ci.md")  # moved and broken: refused, and its memory is not forgotten
    (root / "graph" / "fact" / "ci.md").write_text((root / "graph" / "fact" / "ci.md").read_text().replace(
        "tags: []", "tags: [ci"))

    answer = _sync_json(root, env)
    assert [r["path"] for r in answer["refused"]] == ["graph/fact/ci.md"]
    assert answer["forgotten"] == [] and answer["added"] == []
    assert answer["updated"] == [b] and answer["unchanged"] == 0
    assert sorted((m["memory_id"], m["from"], m["to"]) for m in answer["moved"]) == sorted([
        (a, old_a, "graph/fact/how-we-deploy.md"), (b, old_b, "graph/decision/staging-host.md")])
    reader = make_client(server.address, "reader")
    reader.sync()
    got_a, got_b = reader.get(a), reader.get(b)
    assert (got_a.archived, got_a.version, got_a.content) == (False, 1, "Deploys go through ops/deploy.sh")
    assert (got_b.archived, got_b.version, got_b.content) == (False, 2, "The staging host is db-8")
    state = json.loads((root / "_state.json").read_text())["files"]
    assert {path: r["id"] for path, r in state.items()} == {"graph/fact/how-we-deploy.md": a,
                                                             "graph/decision/staging-host.md": b, old_c: c}
    assert vault.parse(moved_b.read_text(), "b")[0]["version"] == 2
    assert not reader.get(c).archived
    (root / "graph" / "fact" / "ci.md").write_text((root / "graph" / "fact" / "ci.md").read_text().replace(
        "tags: [ci", "tags: []"))
    again = _sync_json(root, env)
    assert (again["updated"], again["forgotten"], again["unchanged"], again["refused"]) == ([], [], 2, [])
    assert [(m["memory_id"], m["from"], m["to"]) for m in again["moved"]] == [(c, old_c, "graph/fact/ci.md")]


def test_a_fresh_clone_without_state_adopts_its_files_and_says_deletions_are_not_seen(server, make_client, tmp_path,
                                                                                        model_path):
    """A teammate's clone has no _state.json (it is kept out of git): sync compares each file with the memory its
    id names; an unchanged file is recorded without a write, an older unedited one is written again as the memory
    now is, an edited one is an update from its version (a concurrent change is a conflict), an id the server does
    not know is an add under that id, and a deleted file is named as not detectable instead of forgotten."""
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    writer = make_client(server.address, "writer")
    a, b, c, d, e = (writer.add(text, scope=scope).memory_id for text in (
        "Deploys go through ops/deploy.sh", "The staging host is db-7", "CI runs on every push",
        "Releases leave on Tuesdays", "The on-call rota is in the wiki"))
    origin = tmp_path / "origin"
    assert mnemosync("vault", "export", str(origin), "--scope", scope,
                     env=_cli_env(server, tmp_path, model_path, "alice")).returncode == 0
    _git(origin, "init", "-q")
    (origin / ".gitignore").write_text("_state.json\n_index.json\n")
    _git(origin, "add", ".")
    _git(origin, "commit", "-q", "-m", "the team's memory")
    _git(tmp_path, "clone", "-q", str(origin), "clone")
    clone = tmp_path / "clone"
    assert not (clone / "_state.json").exists()
    writer.update(d, content="Releases leave on Wednesdays")
    writer.update(e, content="The on-call rota is in PagerDuty")  # e's file is not edited: only older
    file_b, file_c, file_d, file_e = (clone / _file_of(origin, i).relative_to(origin) for i in (b, c, d, e))
    file_b.write_text(file_b.read_text().replace("db-7", "db-8"))
    file_c.unlink()
    file_d.write_text(file_d.read_text().replace("Tuesdays", "Thursdays"))
    fresh = str(uuid.uuid4())
    (clone / "graph" / "fact" / "new.md").write_text(f'---\nid: {fresh}\nscope: "{scope}"\n---\n\nNew note\n')

    bob = _cli_env(server, tmp_path, model_path, "bob")
    answer = _sync_json(clone, bob)
    assert answer["state_missing"] is True and answer["forgotten"] == [] and answer["refused"] == []
    assert answer["added"] == [fresh] and sorted(answer["adopted"]) == sorted([a, e])
    assert sorted(answer["updated"]) == sorted([b, d]) and [m["memory_id"] for m in answer["conflicts"]] == [d]

    reader = make_client(server.address, "reader")
    reader.sync()
    assert (reader.get(a).version, reader.get(c).archived) == (1, False)
    assert (reader.get(b).content, reader.get(b).version, reader.get(b).updated_by) == (
        "The staging host is db-8", 2, "bob")
    got_d = reader.get(d)
    assert got_d.content == "Releases leave on Wednesdays" and len(got_d.open_conflicts) == 1
    assert (reader.get(fresh).content, reader.get(fresh).author_agent, reader.get(fresh).scope) == (
        "New note", "bob", scope)
    got_e = reader.get(e)
    assert (got_e.content, got_e.version, got_e.open_conflicts) == ("The on-call rota is in PagerDuty", 2, ())
    assert vault.parse(file_e.read_text(), "e") == (vault.parse(vault.render(got_e), "e")[0],
                                                    "The on-call rota is in PagerDuty")  # written as it is now
    state = json.loads((clone / "_state.json").read_text())["files"]
    assert sorted(r["id"] for r in state.values()) == sorted([a, b, d, e, fresh])
    again = _sync_json(clone, bob)
    assert (again["state_missing"], again["adopted"], again["updated"], again["unchanged"]) == (False, [], [], 5)

    third = tmp_path / "third"
    assert mnemosync("vault", "export", str(third), "--scope", scope, env=bob).returncode == 0
    (third / "_state.json").unlink()
    said = mnemosync("vault", "sync", str(third), env=bob)
    assert said.returncode == 0, said.stderr
    assert said.stdout.startswith("0 updated, 0 added, 0 forgotten, 0 unchanged, 0 moved, 6 adopted")
    assert "no _state.json" in said.stdout and "deleted files cannot be detected" in said.stdout


def test_seed_004_style_yaml_front_matter_is_read_and_any_other_form_is_named_with_its_line(server, make_client,
                                                                                            tmp_path, model_path):
    """Bare words in a flow list, a block list, unquoted and single-quoted strings and seed 004's relations block
    are read as YAML reads them; a nested list, an unclosed quote or an indented line continuing nothing is
    refused with the file and line, and nothing is written for it."""
    env = _cli_env(server, tmp_path, model_path)
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    make_client(server.address, "writer").add("The vault keeps the team's memory", scope=scope)
    root = tmp_path / "vault"
    assert mnemosync("vault", "export", str(root), "--scope", scope, env=env).returncode == 0
    (root / "graph" / "solution").mkdir()
    (root / "graph" / "solution" / "redis.md").write_text(
        "---\n# written by hand, as seed 004 shows\ntype: solution\ntitle: Fixed Redis connection timeouts\n"
        f"scope: {scope}\ntags: [redis, timeout, \"redis-7\", 'prod']\nimportance: 0.8\n"
        "created: 2025-12-06T16:25:58+00:00\nrelations:\n  - target: def789ab-0000\n    type: SOLVES\n"
        "    strength: 0.8\n    context: \"Keepalive prevents idle disconnections\"\n---\n\n"
        "Fixed Redis connection timeouts with a keepalive\n")
    (root / "graph" / "solution" / "steps.md").write_text(
        f"---\ntype: procedure\nscope: '{scope}'\ntags:\n- deploy\n-   ci\nsteps:\n  - build the image\n"
        "  - push it\n---\n\nDeploy the web app\n")
    bad = {"nested.md": ("tags: [redis, [nested]]", 4), "unclosed.md": ("tags: [redis, \"timeout]", 4),
           "indented.md": ("tags:\n  - redis\n    deeper: 1", 6), "quote.md": ('title: "Fixed Redis', 4)}
    for file, (line, _) in bad.items():
        (root / file).write_text(f"---\ntype: solution\nscope: {scope}\n{line}\n---\n\nNot read\n")

    answer = _sync_json(root, env)
    refused = {r["path"]: r["reason"] for r in answer["refused"]}
    assert set(refused) == set(bad), refused
    for file, (_, number) in bad.items():
        assert refused[file].startswith(f"{file}: line {number}"), refused[file]
    assert len(answer["added"]) == 2 and answer["unchanged"] == 1
    reader = make_client(server.address, "reader")
    reader.sync()
    redis, steps = (reader.get(i) for i in answer["added"])
    assert (redis.type, redis.tags, redis.importance, redis.scope) == (
        "solution", ["prod", "redis", "redis-7", "timeout"], 0.8, scope)
    assert (steps.type, steps.tags, list(steps.procedure.steps)) == ("procedure", ["ci", "deploy"],
                                                               ["build the image", "push it"])
    front, _ = vault.parse((root / "graph" / "solution" / "redis.md").read_text(), "redis")
    assert front["id"] == redis.id and front["tags"] == ["prod", "redis", "redis-7", "timeout"]
    hits = [h.memory.content for h in reader.search("Not read", limit=10).hits]
    assert "Not read" not in hits


def test_a_settled_file_with_its_recorded_size_and_time_is_not_read_again(server, make_client, tmp_path, model_path):
    """Unchanged files cost a stat: once a file's size and time of change are recorded (it last changed long
    enough ago), a sync does not read it; a new time (touch, git checkout) makes it read and hashed, and a fresh
    one is recorded without them, so an edit in the same clock tick is still seen."""
    env = _cli_env(server, tmp_path, model_path)
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    memory_id = make_client(server.address, "writer").add("Releases leave on Tuesdays", scope=scope).memory_id
    root = tmp_path / "vault"
    assert mnemosync("vault", "export", str(root), "--scope", scope, env=env).returncode == 0
    note = _file_of(root, memory_id)
    relative = note.relative_to(root).as_posix()
    assert "mtime_ns" not in json.loads((root / "_state.json").read_text())["files"][relative]  # just written
    past = time.time() - 60
    os.utime(note, (past, past))
    assert _sync_json(root, env)["unchanged"] == 1
    recorded = json.loads((root / "_state.json").read_text())["files"][relative]
    assert (recorded["size"], recorded["mtime_ns"]) == (note.stat().st_size, note.stat().st_mtime_ns)

    note.write_text(note.read_text().replace("Tuesdays", "Saturday"))
    os.utime(note, ns=(recorded["mtime_ns"], recorded["mtime_ns"]))  # an edit that hides: size and time kept
    hidden = _sync_json(root, env)
    assert (hidden["unchanged"], hidden["updated"]) == (1, [])  # not read, as agent_client/MEMORIES.md says

    os.utime(note)  # a new time of change: read, hashed, and this time an edit
    seen = _sync_json(root, env)
    assert (seen["unchanged"], seen["updated"]) == (0, [memory_id])
    reader = make_client(server.address, "reader")
    reader.sync()
    assert reader.get(memory_id).content == "Releases leave on Saturday"
    assert "mtime_ns" not in json.loads((root / "_state.json").read_text())["files"][relative]  # rewritten now


def test_one_note_nested_too_deep_or_too_large_is_named_and_the_rest_of_the_vault_syncs(server, make_client,
                                                                                        tmp_path):
    """A teammate's note with 100,000-deep JSON front matter or of several MiB must not break everyone's sync: it
    is refused before it is parsed (or read), named, and every other note syncs."""
    editor = make_client(server.address, "editor")
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    editor.add("The vault keeps the team's memory", scope=scope)
    root = tmp_path / "vault"
    vault.export(editor, root, scopes=(scope,))
    (root / "deep.md").write_text(f"---\nscope: \"{scope}\"\ntags: {'[' * 100_000}{']' * 100_000}\n---\n\nDeep\n")
    (root / "huge.md").write_text(f"---\nscope: \"{scope}\"\n---\n\n" + "big " * 300_000)
    (root / "fine.md").write_text(f"---\nscope: \"{scope}\"\n---\n\nCI runs on every push\n")

    report = vault.sync(editor, root)
    refused = dict(report.refused)
    assert set(refused) == {"deep.md", "huge.md"}
    assert refused["deep.md"] == "deep.md: line 3: the value nests more than 8 levels deep"
    assert refused["huge.md"].endswith(" bytes, larger than 1024 KiB, more than any memory holds; not read")
    assert len(report.added) == 1 and editor.get(report.added[0]).content == "CI runs on every push"


def test_a_stale_note_claiming_the_newest_version_becomes_a_conflict_not_an_overwrite(server, make_client, tmp_path):
    """alice's vault wrote version 1; bob changed the memory since; alice's edited note says `version: 2`. The
    version `_state.json` recorded is what the edit was made from, so bob's change is not silently lost."""
    alice, bob = make_client(server.address, "alice"), make_client(server.address, "bob")
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    memory_id = alice.add("Releases leave on Tuesdays", scope=scope).memory_id
    root = tmp_path / "vault"
    vault.export(alice, root, scopes=(scope,))
    bob.sync()
    bob.update(memory_id, content="Releases leave on Wednesdays", base_version=1)
    note = _file_of(root, memory_id)
    note.write_text(note.read_text().replace("Tuesdays", "Thursdays").replace("version: 1", "version: 2"))

    report = vault.sync(alice, root)
    assert report.updated == [memory_id] and [m for m, _ in report.conflicts] == [memory_id]
    bob.sync()
    assert bob.get(memory_id).content == "Releases leave on Wednesdays"  # the change the note never saw stays
    assert bob.get(memory_id).open_conflicts


def test_a_new_notes_title_and_steps_are_kept_and_the_sync_names_the_files_it_wrote(server, make_client, tmp_path,
                                                                                    model_path):
    """Through `mnemosync vault sync`: a new note's `title` stays its title, a procedure's steps are a numbered
    list in the body that an edit there changes, and the report names each note it wrote."""
    env = _cli_env(server, tmp_path, model_path)
    scope = f"project:v{uuid.uuid4().hex[:10]}"
    root = tmp_path / "vault"
    assert mnemosync("vault", "export", str(root), "--scope", scope, env=env).returncode == 0
    (root / "graph").mkdir()
    (root / "graph" / "deploy.md").write_text(
        f"---\ntype: procedure\ntitle: \"Deploy checklist\"\nscope: \"{scope}\"\n---\n\nHow the web app ships.\n\n"
        "## Steps\n1. build the image\n2. push it\n")
    said = mnemosync("vault", "sync", str(root), env=env)
    assert said.returncode == 0, said.stderr
    assert said.stdout.splitlines()[:2] == ["0 updated, 1 added, 0 forgotten, 0 unchanged, 0 moved, 0 adopted",
                                            "  wrote graph/deploy.md"]
    front, body = vault.parse((root / "graph" / "deploy.md").read_text(), "deploy")
    assert front["title"] == "Deploy checklist" and "steps" not in front
    assert body == "Deploy checklist\n\nHow the web app ships.\n\n## Steps\n1. build the image\n2. push it"
    (root / "graph" / "deploy.md").write_text((root / "graph" / "deploy.md").read_text().replace(
        "2. push it", "2. push it\n3. watch the health check"))
    answer = _sync_json(root, env)
    assert answer["written"] == ["graph/deploy.md"] and len(answer["updated"]) == 1
    reader = make_client(server.address, "reader")
    reader.sync()
    shown = reader.get(answer["updated"][0])
    assert list(shown.procedure.steps) == ["build the image", "push it", "watch the health check"]
    assert shown.content == "Deploy checklist\n\nHow the web app ships."


REDACT_POLICY = """
[agents.root]
authority = 1
admin = true
"""


def test_a_redaction_reaches_every_file_the_agent_wrote(make_client, tmp_path):
    """After `redact` and a sync, no file of the agent's (its cache folder: the cache, the outbox, the recall log,
    the sessions' record; its vault: the note, a file name that is a slug of the text, the state and index) holds
    the secret's bytes, and `vault sync` says it removed the note."""
    from mnemosync.server.app import run_server
    from mnemosync.shim.hook_answers import HookAnswers

    from helpers import dev_settings

    secret = "31-41-59-26-53"
    with run_server(dev_settings(tmp_path, policy=REDACT_POLICY)) as server:
        alice, root = make_client(server.address, "alice"), make_client(server.address, "root")
        memory_id = alice.add(f"The staging vault combination is {secret}", scope="project:ops").memory_id
        alice.add("The staging vault is in the basement", scope="project:ops")
        vault_dir = tmp_path / "vault"
        vault.export(alice, vault_dir)
        answers = HookAnswers(alice, scope="project:ops", log_all=True)
        answers({"op": "recall", "prompt": "What is the staging vault combination?", "session_id": "s1"})
        agent_files = [p for p in (*alice.cache.path.parent.rglob("*"), *vault_dir.rglob("*")) if p.is_file()]

        def holding() -> list[str]:
            files = [p for p in (*alice.cache.path.parent.rglob("*"), *vault_dir.rglob("*")) if p.is_file()]
            return sorted(str(p) for p in files if secret.encode() in p.read_bytes() or secret in p.name)

        assert {p.name for p in agent_files} >= {"recall-log.jsonl", "_state.json", "_index.json"}
        assert any("recall-log" in p for p in holding()) and any(p.endswith(".md") for p in holding())

        root.redact(memory_id, "a combination was pasted into a memory")
        alice.sync()
        report = vault.sync(alice, vault_dir)
        assert holding() == []
        assert [m for m, _ in report.removed] == [memory_id] and secret in report.removed[0][1]
        assert memory_id not in (vault_dir / "_state.json").read_text()
