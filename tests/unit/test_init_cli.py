"""`mnemosync init`: it writes the project's Claude Code files, merges into what is there, and changes nothing
when run again."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

from click.testing import CliRunner

from mnemosync.cli import cli

BIN = Path(sys.executable).parent


def init(*args: str, data_home: Path):
    env = {"MNEMOSYNC_DATA_HOME": str(data_home), "MNEMOSYNC_CONFIG": None}
    return CliRunner().invoke(cli, ["init", *args], env=env, catch_exceptions=False)


def test_init_writes_the_server_entry_the_hooks_and_the_scope_from_the_folder(tmp_path):
    project = tmp_path / "My App"
    project.mkdir()
    done = init(str(project), "--insecure", "--agent-id", "alice", data_home=tmp_path / "data")
    assert done.exit_code == 0, done.output
    assert f"project {project}: scope project:My-App" in done.stdout
    mcp = json.loads((project / ".mcp.json").read_text())["mcpServers"]["mnemosync"]
    assert mcp == {"type": "stdio", "command": str(BIN / "mnemosync-mcp"),
                   "args": ["--insecure", "--scope", "project:My-App"], "env": {}}
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["env"] == {"MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_SCOPE": "project:My-App"}
    local = json.loads((project / ".claude" / "settings.local.json").read_text())
    assert local == {"env": {"MNEMOSYNC_AGENT_ID": "alice"}}
    commands = {event: [h["command"] for g in groups for h in g["hooks"]] for event, groups in
                settings["hooks"].items()}
    mnemosync = shlex.quote(str(BIN / "mnemosync"))
    assert commands == {"SessionStart": [f"{mnemosync} hook session-start"], "UserPromptSubmit": [
        f"{mnemosync} hook prompt"], "PreCompact": [f"{mnemosync} hook precompact"],
        "SessionEnd": [f"{mnemosync} hook session-end"]}
    assert settings["hooks"]["SessionStart"][0]["matcher"] == "startup|resume|clear|compact"
    assert (tmp_path / "data" / "install-bin").read_text() == f"{BIN.absolute()}\n"


def test_init_keeps_other_servers_and_hooks_and_changes_nothing_the_second_time(tmp_path):
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {"other": {"command": "other-mcp"}}}))
    (tmp_path / ".claude").mkdir()
    theirs = {"hooks": [{"type": "command", "command": "echo hi"}]}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({
        "permissions": {"allow": ["Bash(ls)"]}, "env": {"OTHER": "1"}, "hooks": {"UserPromptSubmit": [theirs]}}))
    assert init(str(tmp_path), "--scope", "project:web", data_home=tmp_path / "d").exit_code == 0
    servers = json.loads((tmp_path / ".mcp.json").read_text())["mcpServers"]
    assert set(servers) == {"other", "mnemosync"}
    settings = json.loads((tmp_path / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(ls)"]}
    assert settings["env"] == {"OTHER": "1", "MNEMOSYNC_SCOPE": "project:web"}
    assert settings["hooks"]["UserPromptSubmit"][0] == theirs and len(settings["hooks"]["UserPromptSubmit"]) == 2
    again = init(str(tmp_path), "--scope", "project:web", data_home=tmp_path / "d")
    assert again.exit_code == 0
    assert [line.split(" ", 1)[0] for line in again.stdout.splitlines()[1:]] == ["unchanged"] * 3


def test_the_team_gets_the_server_in_checked_in_files_and_each_person_keeps_their_own_out_of_git(tmp_path):
    """A teammate who clones the project gets the server and how to reach it, never alice's id, certificate folder
    or model; a project set up by an earlier init has alice's id moved out of its checked-in settings."""
    project = tmp_path / "web"
    (project / ".git" / "info").mkdir(parents=True)
    (project / ".claude").mkdir()
    (project / ".claude" / "settings.json").write_text(json.dumps({"env": {"MNEMOSYNC_AGENT_ID": "alice"}}))
    done = init(str(project), "--server", "mem.internal:50051", "--tls-server-name", "memory", "--agent-id", "alice",
                "--cert-dir", str(tmp_path), "--embed-model", str(tmp_path / "m.gguf"), data_home=tmp_path / "d")
    assert done.exit_code == 0, done.output
    assert "moved MNEMOSYNC_AGENT_ID to .claude/settings.local.json" in done.stdout
    args = json.loads((project / ".mcp.json").read_text())["mcpServers"]["mnemosync"]["args"]
    assert args == ["--server", "mem.internal:50051", "--tls-server-name", "memory", "--scope", "project:web"]
    shared = json.loads((project / ".claude" / "settings.json").read_text())["env"]
    assert shared == {"MNEMOSYNC_SERVER": "mem.internal:50051", "MNEMOSYNC_TLS_SERVER_NAME": "memory",
                      "MNEMOSYNC_SCOPE": "project:web"}
    personal = json.loads((project / ".claude" / "settings.local.json").read_text())["env"]
    assert personal == {"MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_CERT_DIR": str(tmp_path.resolve()),
                        "MNEMOSYNC_EMBED_MODEL": str((tmp_path / "m.gguf").resolve())}
    assert (project / ".git" / "info" / "exclude").read_text() == "/.claude/settings.local.json\n"
    again = init(str(project), "--server", "mem.internal:50051", "--tls-server-name", "memory", "--agent-id", "alice",
                 "--cert-dir", str(tmp_path), "--embed-model", str(tmp_path / "m.gguf"), data_home=tmp_path / "d")
    assert [line.split(" ", 1)[0] for line in again.stdout.splitlines()[1:]] == ["unchanged"] * 4


def test_claude_codes_project_settings_fill_what_the_environment_lacks_and_nothing_else(tmp_path):
    from mnemosync.shim.project_settings import with_project_settings

    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps({"env": {
        "MNEMOSYNC_SERVER": "shared:1", "MNEMOSYNC_AGENT_ID": "team", "OTHER": "x"}}))
    (tmp_path / ".claude" / "settings.local.json").write_text(json.dumps({"env": {"MNEMOSYNC_AGENT_ID": "alice"}}))
    project = {"CLAUDE_PROJECT_DIR": str(tmp_path)}
    assert with_project_settings({**project, "MNEMOSYNC_SERVER": "mine:2"}) == {
        **project, "MNEMOSYNC_SERVER": "mine:2", "MNEMOSYNC_AGENT_ID": "alice"}
    assert with_project_settings({"MNEMOSYNC_SERVER": "mine:2"}) == {"MNEMOSYNC_SERVER": "mine:2"}


def test_local_writes_the_personal_settings_file(tmp_path):
    assert init(str(tmp_path), "--local", "--cert-dir", str(tmp_path), data_home=tmp_path / "d").exit_code == 0
    local = json.loads((tmp_path / ".claude" / "settings.local.json").read_text())
    assert local["env"]["MNEMOSYNC_CERT_DIR"] == str(tmp_path.resolve())
    assert not (tmp_path / ".claude" / "settings.json").exists()


def test_a_file_that_is_not_json_is_left_alone_and_named(tmp_path):
    (tmp_path / ".mcp.json").write_text("{ not json")
    done = init(str(tmp_path), data_home=tmp_path / "d")
    assert done.exit_code == 4 and f"{tmp_path / '.mcp.json'} is not valid JSON" in done.stderr
    assert (tmp_path / ".mcp.json").read_text() == "{ not json"
