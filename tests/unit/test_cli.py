"""`mnemosync.cli` and `mnemosync.kernel.command_line`: the `mnemosync` command table and its one error edge, which
prints every typed error as `Error: …` and exits with the documented code, for every command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

from click.testing import CliRunner

from mnemosync.cli import COMMANDS, cli
from mnemosync.kernel.command_line import EXIT_CODES

from helpers import free_port


def run(*args: str, env: dict | None = None):
    """`mnemosync ARGS` in this process, without the developer's own MNEMOSYNC_* settings."""
    clean = {"MNEMOSYNC_CONFIG": None, "MNEMOSYNC_AGENT_ID": None, "MNEMOSYNC_CERT_DIR": None,
             "MNEMOSYNC_INSECURE": None, "MNEMOSYNC_SERVER": None, "MNEMOSYNC_CACHE_DIR": None,
             "MNEMOSYNC_TIMEOUT": None, **(env or {})}
    return CliRunner().invoke(cli, list(args), env=clean, catch_exceptions=False)


def agent_args(server, tmp_path, agent: str = "alice") -> list[str]:
    return ["--server", server.address, "--agent-id", agent, "--insecure", "--cache-dir", str(tmp_path / agent)]


def test_the_table_names_every_command_and_loads_each_by_name():
    assert sorted(COMMANDS) == ["add", "agent", "ca", "conflicts", "dashboard", "doctor", "embed", "export", "forget",
                                "get", "graph", "hook", "import", "ingest", "init", "link", "list", "maintain",
                                "migrate-store", "model", "rebuild", "recall", "recent", "redact", "reflect",
                                "restore", "search", "serve", "snapshot", "status", "sync", "topics", "update", "vault",
                                "verify", "verify-memories"]
    for name in COMMANDS:
        assert cli.get_command(None, name).name == name
    assert cli.get_command(None, "no-such-command") is None


def test_exit_codes_follow_the_error_code():
    assert EXIT_CODES == {"NOT_FOUND": 3, "ABORTED": 4, "FAILED_PRECONDITION": 4, "ALREADY_EXISTS": 4,
                          "PERMISSION_DENIED": 5}


def test_a_missing_memory_exits_3_with_the_servers_message(server, tmp_path):
    memory_id = str(uuid.uuid4())
    result = run("get", memory_id, *agent_args(server, tmp_path))
    assert (result.exit_code, result.stderr) == (3, f"Error: no memory with id {memory_id}\n")


def test_with_json_an_error_is_also_a_json_document_on_stdout(server, tmp_path):
    memory_id = str(uuid.uuid4())
    result = run("get", memory_id, "--json", *agent_args(server, tmp_path))
    assert result.exit_code == 3
    assert json.loads(result.stdout) == {"error": {"code": "NOT_FOUND", "message": f"no memory with id {memory_id}"}}


def test_a_refusal_by_a_governance_rule_exits_5(server, agents, tmp_path):
    memory_id = agents("alice").add("a note").memory_id
    result = run("redact", memory_id, "--reason", "leaked", *agent_args(server, tmp_path))
    assert result.exit_code == 5  # the default policy makes nobody an admin
    assert result.stderr.splitlines()[-1] + "\n" == (
        "Error: redacting a memory is an admin operation and agent alice's certificate is not an admin "
        "certificate (rule: admin operations need a certificate issued with `mnemosync ca issue-agent NAME "
        "--admin`)\n")


def test_something_that_already_exists_exits_4(tmp_path):
    assert run("ca", "init", "--ca-dir", str(tmp_path / "ca")).exit_code == 0
    again = run("ca", "init", "--ca-dir", str(tmp_path / "ca"))
    assert (again.exit_code, again.stderr) == (
        4, f"Error: a CA already exists in {tmp_path / 'ca'}; use another --ca-dir to start a new one\n")


def test_a_bad_setting_exits_1_naming_the_variable(tmp_path):
    result = run("status", "--insecure", "--cache-dir", str(tmp_path / "c"), env={"MNEMOSYNC_TIMEOUT": "soon"})
    assert (result.exit_code, result.stderr) == (1, "Error: MNEMOSYNC_TIMEOUT must be a number, got 'soon'\n")


def test_a_missing_database_exits_3_for_the_operators_commands(tmp_path):
    for command in ("verify", "rebuild"):
        result = run(command, "--data-dir", str(tmp_path / "none"))
        assert (result.exit_code, result.stderr) == (
            3, f"Error: no mnemosync database at {tmp_path / 'none' / 'mnemosync.db'}; give the server's "
               "--data-dir\n")


def test_a_usage_error_exits_2():
    result = run("conflicts", "resolve", "7")
    assert result.exit_code == 2 and "give exactly one of --keep REVISION and --merged-file PATH" in result.stderr


def test_a_usage_error_with_json_prints_the_json_error_on_stdout():
    result = run("get", "--json")
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {"error": {"code": "USAGE", "message": "Missing argument 'MEMORY_ID'."}}
    nothing_to_change = run("update", "2f1c0b7e", "--json", "--insecure")
    assert nothing_to_change.exit_code == 2
    assert json.loads(nothing_to_change.stdout)["error"]["message"].startswith("nothing to change")


def test_get_update_forget_and_restore_take_the_8_character_prefix_others_print(server, tmp_path):
    added = run("add", "Deploys go through ops/deploy.sh", *agent_args(server, tmp_path))
    full = added.stdout.split()[0]
    prefix = full[:8]
    assert run("get", prefix, *agent_args(server, tmp_path)).stdout.startswith(f"{full}  v1")
    updated = run("update", prefix, "--content", "Deploys go through ops/deploy.sh --canary",
                  *agent_args(server, tmp_path))
    assert updated.exit_code == 0 and updated.stdout.startswith(
        f"{full}  v2  updated from v1 (last shown to you by `mnemosync get`), seq ")
    assert "--canary" in run("get", prefix, *agent_args(server, tmp_path)).stdout
    forgotten = run("forget", prefix, "--reason", "moved", *agent_args(server, tmp_path))
    assert forgotten.stdout.startswith(f"{full}  v3  forgotten from v2 (last shown to you by `mnemosync get`), seq ")
    assert "(forgotten)" in run("get", prefix, *agent_args(server, tmp_path)).stdout
    assert run("restore", prefix, *agent_args(server, tmp_path)).stdout.startswith(
        f"{full}  v4  restored from v3 (last shown to you by `mnemosync get`), seq ")
    assert "(forgotten)" not in run("get", prefix, *agent_args(server, tmp_path)).stdout


def test_an_ambiguous_prefix_is_refused_listing_the_matches(server, agents, tmp_path):
    writer = agents("writer")
    twins = [writer.add(f"note {n}", memory_id=f"2f1c0b7e-0000-4000-8000-00000000000{n}").memory_id
             for n in (1, 2)]
    result = run("get", "2f1c0b7e", *agent_args(server, tmp_path))
    assert result.exit_code == 1
    assert "'2f1c0b7e' is the start of several memory ids" in result.stderr
    assert all(twin in result.stderr for twin in twins) and "give more characters" in result.stderr
    assert run("get", twins[1][:-1] + "2", *agent_args(server, tmp_path)).stdout.startswith(twins[1])


def test_an_update_is_made_from_the_version_get_showed_not_the_one_it_synced_and_opens_a_conflict(server, tmp_path):
    """Issue 36: carol is shown v1, dave changes it, carol updates: her command catches up first, yet her change is
    made from v1, so it opens a conflict holding dave's text, hers and the base they both started from."""
    added = run("add", "The cache TTL is 60s", "--json", *agent_args(server, tmp_path, "dave"))
    memory_id = json.loads(added.stdout)["memory_id"]
    assert run("get", memory_id[:8], *agent_args(server, tmp_path, "carol")).stdout.startswith(f"{memory_id}  v1")
    dave = run("update", memory_id[:8], "--content", "The cache TTL is 30s", *agent_args(server, tmp_path, "dave"))
    assert dave.exit_code == 0 and " v2  updated from v1 (last shown to you by `mnemosync add`)" in dave.stdout
    carol = run("update", memory_id[:8], "--content", "The cache TTL is 90s", *agent_args(server, tmp_path, "carol"))
    assert carol.exit_code == 0, carol.stderr
    assert " v3  updated from v1 (last shown to you by `mnemosync get`)" in carol.stdout
    [line] = [line for line in carol.stdout.splitlines() if "conflict" in line]
    conflict_id = int(line.split("conflict #")[1].split(":")[0])
    assert line == (f"another agent changed it first: this write opened or joined open conflict #{conflict_id}: "
                    "dave: «The cache TTL is 30s» vs carol: «The cache TTL is 90s» (review with `mnemosync "
                    f"conflicts show {conflict_id}`)")
    shown = json.loads(run("conflicts", "show", str(conflict_id), "--json", *agent_args(server, tmp_path)).stdout)
    assert [r["content"] for r in shown["conflict"]["revisions"]] == ["The cache TTL is 30s", "The cache TTL is 90s"]
    assert (shown["conflict"]["base"]["version"], shown["conflict"]["base"]["content"]) == (1, "The cache TTL is 60s")
    text = run("conflicts", "show", str(conflict_id), *agent_args(server, tmp_path)).stdout
    assert "common base: v1 by dave" in text and "  The cache TTL is 60s" in text
    synced = run("sync", *agent_args(server, tmp_path, "carol"))
    assert "1 conflict with a revision of yours waits for review: mnemosync conflicts list" in synced.stdout


def test_an_update_of_a_memory_never_shown_is_refused_unless_forced_or_given_a_base(server, tmp_path):
    memory_id = json.loads(run("add", "The cache TTL is 60s", "--json", *agent_args(server, tmp_path)).stdout)[
        "memory_id"]
    blind = run("update", memory_id[:8], "--content", "The cache TTL is 5s", *agent_args(server, tmp_path, "bob"))
    assert blind.exit_code == 2 and f"no command has shown you memory {memory_id[:8]}" in blind.stderr
    assert f"run `mnemosync get {memory_id[:8]}` first" in blind.stderr and "--force" in blind.stderr
    forced = run("update", memory_id[:8], "--importance", "0.9", "--force", *agent_args(server, tmp_path, "bob"))
    assert forced.exit_code == 0 and " v2  updated from the current version (--force), seq " in forced.stdout
    given = run("forget", memory_id[:8], "--base-version", "2", "--json", *agent_args(server, tmp_path, "carol"))
    assert given.exit_code == 0 and json.loads(given.stdout)["base"] == "given"
    both = run("restore", memory_id[:8], "--base-version", "3", "--force", *agent_args(server, tmp_path, "carol"))
    assert both.exit_code == 2 and "not both" in both.stderr


def test_recent_and_list_show_the_newest_memories_with_their_prefixes(server, tmp_path):
    for text in ("first note", "second note"):
        run("add", text, *agent_args(server, tmp_path))
    for command in ("recent", "list"):
        shown = run(command, "--hours", "1", *agent_args(server, tmp_path)).stdout.splitlines()
        assert [line.split("]  ")[-1] for line in shown] == ["second note", "first note"]
        assert all(len(line.split()[0]) == 8 for line in shown)
    as_json = json.loads(run("recent", "--json", *agent_args(server, tmp_path)).stdout)
    assert [m["content"] for m in as_json["memories"]] == ["second note", "first note"]


def test_recent_shows_a_memory_of_several_lines_on_one_line(server, tmp_path):
    run("add", "user: how do we deploy?\nassistant: with ops/deploy.sh\n\nafter the freeze",
        *agent_args(server, tmp_path))
    shown = run("recent", *agent_args(server, tmp_path)).stdout.splitlines()
    assert len(shown) == 1
    assert shown[0].endswith("user: how do we deploy? assistant: with ops/deploy.sh after the freeze")


def test_get_names_the_layer_as_every_other_surface_does_and_shows_importance(server, tmp_path):
    added = run("add", "Deploys need two reviews", "--layer", "legislative", "--importance", "0.8", "--json",
                *agent_args(server, tmp_path))
    shown = run("get", json.loads(added.stdout)["memory_id"][:8], *agent_args(server, tmp_path)).stdout
    assert "layer legislative  importance 0.8  confidence 0.9  " in shown and "layer 2" not in shown


def test_counts_of_one_read_in_the_singular_in_sync_import_and_export(server, tmp_path):
    run("add", "Deploys need two reviews", *agent_args(server, tmp_path, "bob"))
    synced = run("sync", *agent_args(server, tmp_path))
    assert synced.stdout.startswith("applied 1 entry in ") and "sent 0 queued writes" in synced.stdout
    exported = run("export", str(tmp_path / "out.jsonl"), *agent_args(server, tmp_path))
    assert exported.stdout == f"exported 1 memory to {tmp_path / 'out.jsonl'}\n"
    source, effect = tmp_path / "two.jsonl", str(uuid.uuid4())
    source.write_text(json.dumps({"id": effect, "content": "the API returned 500s"}) + "\n" + json.dumps(
        {"id": str(uuid.uuid4()), "content": "the disk filled up", "links": [{"target_id": effect}]}) + "\n")
    imported = run("import", str(source), *agent_args(server, tmp_path))
    assert imported.stdout.endswith("2 items: 2 written, 0 already imported, 0 duplicates of existing memories, "
                                    "1 link (0 already there), 0 refused\n")


def test_link_at_the_top_level_takes_prefixes_and_is_graph_link(server, tmp_path):
    a = json.loads(run("add", "the disk filled up", "--json", *agent_args(server, tmp_path)).stdout)["memory_id"]
    b = json.loads(run("add", "the API returned 500s", "--json", *agent_args(server, tmp_path)).stdout)["memory_id"]
    linked = run("link", a[:8], b[:8], "--type", "causal", "--reason", "no space to write",
                 *agent_args(server, tmp_path))
    assert linked.exit_code == 0, linked.stderr
    assert f"linked {a} -[causal]-> {b}" in linked.stdout
    assert f"-> causal {b}  (no space to write)" in run("get", a[:8], *agent_args(server, tmp_path)).stdout


def test_timeline_around_and_conflicts_of_a_memory_take_the_prefix_too(server, tmp_path):
    memory_id = json.loads(run("add", "The cache TTL is 60s", "--json", *agent_args(server, tmp_path)).stdout)[
        "memory_id"]
    run("update", memory_id[:8], "--content", "The cache TTL is 30s", "--force", *agent_args(server, tmp_path, "bob"))
    run("update", memory_id[:8], "--content", "The cache TTL is 90s", "--base-version", "1",
        *agent_args(server, tmp_path))
    around = run("graph", "timeline", "--around", memory_id[:8], *agent_args(server, tmp_path))
    assert around.exit_code == 0, around.stderr
    assert f"  {memory_id}  " in around.stdout and around.stdout.lstrip().startswith("*")
    conflicts = run("conflicts", "list", "--memory", memory_id[:8], "--json", *agent_args(server, tmp_path))
    assert conflicts.exit_code == 0, conflicts.stderr
    assert [c["memory_id"] for c in json.loads(conflicts.stdout)["conflicts"]] == [memory_id]


def test_an_offline_command_says_the_server_is_unreachable_once_in_one_line_with_what_to_do(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNC_")}
    args = ["--server", f"127.0.0.1:{free_port()}", "--agent-id", "zed", "--insecure", "--cache-dir",
            str(tmp_path / "zed")]
    added = subprocess.run([sys.executable, "-m", "mnemosync", "add", "the VPN needs MFA", *args],
                           capture_output=True, text=True, env=env, timeout=120)
    assert added.returncode == 0 and "queued offline" in added.stdout
    said = [line for line in added.stderr.splitlines() if line.strip()]
    assert len(said) == 1, added.stderr
    assert "is unreachable (connection refused); is `mnemosync serve` running there?" in said[0]
    assert "failed to connect to all addresses" not in added.stderr


def test_a_queued_add_that_became_another_memory_is_reported_and_get_says_where_it_went(server, tmp_path):
    cache = ["--agent-id", "alice", "--insecure", "--cache-dir", str(tmp_path / "alice")]
    offline = ["--server", f"127.0.0.1:{free_port()}", *cache]
    first, second = (run("add", "The VPN needs MFA since March", "--json", *offline) for _ in range(2))
    kept, lost = json.loads(first.stdout)["memory_id"], json.loads(second.stdout)["memory_id"]
    assert kept != lost and json.loads(second.stdout)["pending"] is True
    synced = run("sync", "--server", server.address, *cache)
    assert synced.exit_code == 0, synced.stderr
    assert "sent 2 queued writes" in synced.stdout
    assert (f"queued add {lost} was not stored: memory {kept} already says the same, so it became that memory"
            in synced.stdout)
    where = run("get", lost[:8], "--server", server.address, *cache)
    assert where.exit_code == 3
    assert f"memory {lost} was never stored" in where.stderr and f"so it became that memory (mnemosync get " \
        f"{kept[:8]})" in where.stderr
    assert run("get", kept[:8], "--server", server.address, *cache).stdout.startswith(kept)


def test_get_names_the_author_of_the_text_shown_apart_from_its_last_editor(server, tmp_path):
    added = json.loads(run("add", "Deploys need two reviews", "--json", *agent_args(server, tmp_path)).stdout)
    memory_id = added["memory_id"]
    assert run("update", memory_id[:8], "--importance", "0.9", "--force",
               *agent_args(server, tmp_path, "bob")).exit_code == 0
    shown = run("get", memory_id[:8], *agent_args(server, tmp_path, "bob")).stdout
    assert "last change by bob" in shown and "the text shown is alice's (authority 3)" in shown
    doc = json.loads(run("get", memory_id, "--json", *agent_args(server, tmp_path, "bob")).stdout)
    assert (doc["text_author"], doc["updated_by"]) == ("alice", "bob")
