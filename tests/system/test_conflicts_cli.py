"""`mnemosync conflicts` as a real process against a real server: list, show, resolve, and its exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, ServeProcess, fake_vector

POLICY = """
[agents.lead]
authority = 2
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory, model_path):
    """One server for the module, pinned to the real model (the CLI embeds merged content with it)."""
    from mnemosync.agent.model import fingerprint_model

    root = tmp_path_factory.mktemp("cli")
    policy = root / "policy.toml"
    policy.write_text(POLICY)
    fp = fingerprint_model(model_path)
    model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
    with ServeProcess(root / "data", "--embed-model", str(model_path),
                      env={"MNEMOSYNC_POLICY_FILE": str(policy)}) as server:
        yield server, model, root, model_path


class Writer(RawAgent):
    """A RawAgent writing 384-dim vectors under the real model's fingerprint."""

    def __init__(self, address: str, agent_id: str, model: pb.EmbeddingModel):
        super().__init__(address, agent_id)
        self.model = model

    def write(self, memory_id: str | None = None, base_version: int = 0, content: str = "", **kind):
        op = pb.Operation(op_id=os.urandom(16).hex()[:8] + "-0000-4000-8000-" + os.urandom(6).hex(),
                          memory_id=memory_id or _uuid(), base_version=base_version, **kind)
        return self.append(op, model=self.model).results[0]

    def add_text(self, content: str) -> str:
        return self.write(add=pb.AddOp(scope="user", content=content,
                                       embedding=fake_vector(content, 384))).memory_id

    def update_text(self, memory_id: str, base_version: int, content: str):
        return self.write(memory_id, base_version, update=pb.UpdateOp(content=content,
                                                                      embedding=fake_vector(content, 384)))


def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


@pytest.fixture
def conflict(served):
    """A fresh write conflict: (memory id, conflict id) with agent-a's revision visible."""
    server, model, _, _ = served
    a, b = Writer(server.address, "agent-a", model), Writer(server.address, "agent-b", model)
    memory_id = a.add_text(f"The cache TTL is 60s ({_uuid()[:8]})")
    a.update_text(memory_id, 1, "The cache TTL is 120s")
    conflict_id = b.update_text(memory_id, 1, "The cache TTL is 30s").conflict_id
    yield memory_id, conflict_id
    a.close()
    b.close()


def mnemosync(served, agent_id: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    server, _, root, model_path = served
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNC_")}
    return subprocess.run(
        [sys.executable, "-m", "mnemosync.cli", "conflicts", *args, "--server", server.address,
         "--agent-id", agent_id, "--insecure", "--cache-dir", str(root / "agents" / agent_id),
         "--embed-model", str(model_path)],
        capture_output=True, text=True, timeout=120, env={**env, "COLUMNS": "120"}, input=stdin)


def test_list_shows_a_table_for_people_and_json_for_scripts(served, conflict):
    memory_id, conflict_id = conflict
    table = mnemosync(served, "agent-a", "list", "--memory", memory_id)
    assert table.returncode == 0, table.stderr
    header, row = table.stdout.splitlines()
    assert header.split() == ["ID", "KIND", "MEMORY", "AGENTS", "AGE", "REVS", "STATUS", "SHOWS"]
    assert row.split()[:3] == [str(conflict_id), "write", memory_id[:8]]
    assert "agent-a, agent-b" in row and " open " in row and row.endswith("The cache TTL is 120s")
    listed = mnemosync(served, "agent-a", "list", "--memory", memory_id, "--json")
    doc = json.loads(listed.stdout)
    assert listed.returncode == 0 and doc["offline"] is False
    [found] = doc["conflicts"]
    assert (found["id"], found["kind"], found["memory_id"], found["agents"]) == (
        conflict_id, "write", memory_id, ["agent-a", "agent-b"])
    assert [r["content"] for r in found["revisions"]] == ["The cache TTL is 120s", "The cache TTL is 30s"]


def test_show_puts_the_revisions_side_by_side_with_a_diff_authors_and_versions(served, conflict):
    memory_id, conflict_id = conflict
    shown = mnemosync(served, "agent-b", "show", str(conflict_id))
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert f"conflict {conflict_id}: write conflict on memory {memory_id}" in out
    assert "memory is at version 3" in out
    lines = out.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("revision 1 (visible)")))
    assert lines[at].endswith("| revision 2")
    assert lines[at + 1].startswith("by agent-a (authority 3)") and lines[at + 1].endswith("| by agent-b (authority 3)")
    assert "made from v1, now v2" in lines[at + 2] and lines[at + 2].endswith("made from v1, now v3")
    assert "The cache TTL is 120s" in lines[at + 4] and lines[at + 4].endswith("| The cache TTL is 30s")
    assert "-The cache TTL is 120s" in out and "+The cache TTL is 30s" in out
    assert f"mnemosync conflicts resolve {conflict_id} --keep REVISION" in out
    doc = json.loads(mnemosync(served, "agent-b", "show", str(conflict_id), "--json").stdout)
    assert doc["conflict"]["visible_revision"] == 1 and doc["conflict"]["memory_version"] == 3
    assert [(d["from"], d["to"]) for d in doc["diffs"]] == [(1, 2)]
    assert "+The cache TTL is 30s" in doc["diffs"][0]["diff"]


def test_show_names_who_wrote_each_revisions_text_when_its_writer_only_changed_other_fields(served):
    """lead (authority 2) changes only the importance of version 1, which agent-a wrote: lead's revision, the
    visible one, shows agent-a's older text, and every view of the conflict says whose text it is beside lead's
    name."""
    server, model = served[0], served[1]
    a, c, lead = (Writer(server.address, name, model) for name in ("agent-a", "agent-c", "lead"))
    memory_id = a.add_text(f"Releases are cut on Mondays ({_uuid()[:8]})")
    c.update_text(memory_id, 1, "Releases are cut on Tuesdays")
    conflict_id = lead.write(memory_id, 1, update=pb.UpdateOp(importance=0.9)).conflict_id
    assert conflict_id
    shown = mnemosync(served, "agent-c", "show", str(conflict_id))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("revision 2 (visible)")))
    assert lines[at + 1].startswith("by lead (authority 2)") and lines[at + 1].endswith("| by agent-c (authority 3)")
    assert lines[at + 2].startswith("text by agent-a (authority 3)")
    assert "text by" not in lines[at + 2].split("|")[1], "agent-c wrote its own text: no second name"
    assert "--- revision 2 (lead; text by agent-a)" in shown.stdout and "+++ revision 1 (agent-c)" in shown.stdout
    assert "Releases are cut on Mondays" in lines[at + 5] and lines[at + 5].endswith("| Releases are cut on Tuesdays")
    assert "importance: 0.9 -> 0.5" in shown.stdout
    doc = json.loads(mnemosync(served, "agent-c", "show", str(conflict_id), "--json").stdout)
    assert [(r["agent"], r["authority"], r["text_author"], r["text_authority"])
            for r in doc["conflict"]["revisions"]] == [("agent-c", 3, "agent-c", 3), ("lead", 2, "agent-a", 3)]
    for writer in (a, c, lead):
        writer.close()


def test_show_lists_changed_tags_as_words_not_as_python_lists(served):
    server, model = served[0], served[1]
    a, c = Writer(server.address, "agent-a", model), Writer(server.address, "agent-c", model)
    text = f"Staging uses its own database ({_uuid()[:8]})"
    memory_id = a.write(add=pb.AddOp(scope="user", content=text, tags=["db", "staging"],
                                     embedding=fake_vector(text, 384))).memory_id
    c.update_text(memory_id, 1, text + ", reset nightly")
    conflict_id = a.write(memory_id, 1, update=pb.UpdateOp(replace_tags=True, tags=["db"])).conflict_id
    shown = mnemosync(served, "agent-a", "show", str(conflict_id))
    assert "tags: db, staging -> db" in shown.stdout, shown.stdout
    assert "['db'" not in shown.stdout
    a.close()
    c.close()


def test_resolve_keeps_a_revision_and_exit_codes_say_what_went_wrong(served, conflict):
    memory_id, conflict_id = conflict
    server = served[0]
    resolved = mnemosync(served, "agent-b", "resolve", str(conflict_id), "--keep", "2", "--note", "measured")
    assert resolved.returncode == 0, resolved.stderr
    assert resolved.stdout.strip() == (f"resolved conflict {conflict_id}: kept revision 2; memory {memory_id} "
                                       "is now v4 (seq " + resolved.stdout.split("(seq ")[1].strip())
    reader = RawAgent(server.address, "agent-a")
    assert reader.get(memory_id).content == "The cache TTL is 30s"
    reader.close()
    again = mnemosync(served, "agent-a", "resolve", str(conflict_id), "--keep", "1", "--json")
    assert again.returncode == 4
    assert json.loads(again.stdout)["error"]["code"] == "FAILED_PRECONDITION"
    assert "already resolved by agent-b" in again.stderr
    missing = mnemosync(served, "agent-a", "show", "999999")
    assert missing.returncode == 3 and "no conflict with id 999999" in missing.stderr
    both = mnemosync(served, "agent-a", "resolve", str(conflict_id), "--keep", "1", "--merged-file", "-")
    assert both.returncode == 2 and "exactly one of --keep" in both.stderr
    history = json.loads(mnemosync(served, "agent-a", "list", "--all", "--memory", memory_id, "--json").stdout)
    [closed] = history["conflicts"]
    assert (closed["resolved_by"], closed["resolution"], closed["kept_revision"], closed["note"]) == (
        "agent-b", "keep", 2, "measured")
    assert closed["visible_revision"] == 2 and [r["visible"] for r in closed["revisions"]] == [False, True]


def test_a_resolved_conflict_shows_what_the_memory_holds_not_the_revision_that_lost(served, conflict, tmp_path):
    memory_id, conflict_id = conflict
    assert mnemosync(served, "agent-b", "resolve", str(conflict_id), "--keep", "2").returncode == 0
    [row] = mnemosync(served, "agent-a", "list", "--all", "--memory", memory_id).stdout.splitlines()[1:]
    assert row.endswith("The cache TTL is 30s") and "resolved by agent-b" in row
    shown = mnemosync(served, "agent-a", "show", str(conflict_id)).stdout
    assert "revision 2 (visible)" in shown and "revision 1 (visible)" not in shown

    server, model = served[0], served[1]
    a, b = Writer(server.address, "agent-a", model), Writer(server.address, "agent-b", model)
    other = a.add_text(f"Retries back off 2s ({_uuid()[:8]})")
    a.update_text(other, 1, "Retries back off 5s")
    merged_id = b.update_text(other, 1, "Retries back off 1s").conflict_id
    merged = tmp_path / "merged.txt"
    merged.write_text("Retries back off 3s, doubling each time\n")
    assert mnemosync(served, "agent-a", "resolve", str(merged_id), "--merged-file", str(merged)).returncode == 0
    [row] = mnemosync(served, "agent-b", "list", "--all", "--memory", other).stdout.splitlines()[1:]
    assert row.endswith("Retries back off 3s, doubling each time")
    shown = mnemosync(served, "agent-b", "show", str(merged_id)).stdout
    assert "(visible)" not in shown and "the memory now says (merged): Retries back off 3s, doubling" in shown
    doc = json.loads(mnemosync(served, "agent-b", "show", str(merged_id), "--json").stdout)["conflict"]
    assert doc["memory_content"] == "Retries back off 3s, doubling each time" and doc["visible_revision"] == 0
    a.close()
    b.close()


def test_resolve_refused_by_a_governance_rule_exits_5(served):
    server, model = served[0], served[1]
    a, lead = Writer(server.address, "agent-a", model), Writer(server.address, "lead", model)
    memory_id = a.add_text(f"Flags live in Unleash ({_uuid()[:8]})")
    a.update_text(memory_id, 1, "Flags live in LaunchDarkly")
    conflict_id = lead.update_text(memory_id, 1, "Flags live in our own service").conflict_id
    denied = mnemosync(served, "agent-a", "resolve", str(conflict_id), "--keep", "2", "--json")
    assert denied.returncode == 5
    assert json.loads(denied.stdout)["error"]["message"].startswith("resolve-needs-authority:")
    assert mnemosync(served, "lead", "resolve", str(conflict_id), "--keep", "2").returncode == 0
    a.close()
    lead.close()


def test_resolve_with_a_merged_file_embeds_it_with_the_local_model(served, conflict, tmp_path):
    memory_id, conflict_id = conflict
    server = served[0]
    merged = tmp_path / "merged.txt"
    merged.write_text("The cache TTL is 90s: 120s starved the workers, 30s hammered the database\n")
    result = mnemosync(served, "agent-a", "resolve", str(conflict_id), "--merged-file", str(merged), "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["resolution"], doc["memory_id"], doc["version"], doc["pending"]) == ("merged", memory_id, 4, False)
    reader = RawAgent(server.address, "agent-b")
    assert reader.get(memory_id).content == merged.read_text().strip()
    assert reader.search("starved workers", limit=1)[0].memory.id == memory_id
    reader.close()
