"""The markdown vault (issue 31 item 4, seed 004's format): export, edit in place, add, delete, sync; the real
server, real SQLite, real caches, the real model and the `mnemosync vault` commands.
"""

from __future__ import annotations

import json
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
    assert front["relations"] == [{"target": b, "type": "causal", "direction": "outgoing", "strength": 0.5,
                                   "context": "the script reads the host"}]
    assert content == "Deploys go through ops/deploy.sh"
    assert vault.parse(_file_of(root, proc).read_text(), "p")[0]["steps"] == ["build", "push"]
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
    file_p.write_text("\n".join(line for line in file_p.read_text().split("\n")
                                if not line.startswith(("steps:", "preconditions:"))))
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
