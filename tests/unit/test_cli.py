"""`mnemosync.cli` and `mnemosync.kernel.command_line`: the `mnemosync` command table and its one error edge, which
prints every typed error as `Error: …` and exits with the documented code, for every command.
"""

from __future__ import annotations

import json
import uuid

from click.testing import CliRunner

from mnemosync.cli import COMMANDS, cli
from mnemosync.kernel.command_line import EXIT_CODES


def run(*args: str, env: dict | None = None):
    """`mnemosync ARGS` in this process, without the developer's own MNEMOSYNC_* settings."""
    clean = {"MNEMOSYNC_CONFIG": None, "MNEMOSYNC_AGENT_ID": None, "MNEMOSYNC_CERT_DIR": None,
             "MNEMOSYNC_INSECURE": None, "MNEMOSYNC_SERVER": None, "MNEMOSYNC_CACHE_DIR": None,
             "MNEMOSYNC_TIMEOUT": None, **(env or {})}
    return CliRunner().invoke(cli, list(args), env=clean, catch_exceptions=False)


def agent_args(server, tmp_path, agent: str = "alice") -> list[str]:
    return ["--server", server.address, "--agent-id", agent, "--insecure", "--cache-dir", str(tmp_path / agent)]


def test_the_table_names_every_command_and_loads_each_by_name():
    assert sorted(COMMANDS) == ["add", "agent", "ca", "conflicts", "dashboard", "doctor", "embed", "export", "get",
                                "graph", "hook", "import", "ingest", "init", "maintain", "migrate-store", "model",
                                "rebuild", "recall", "redact", "reflect", "search", "serve", "status", "sync", "topics",
                                "verify"]
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
