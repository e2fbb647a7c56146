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
    assert mcp == {"type": "stdio", "command": str(BIN / "mnemosync-mcp"), "args": [], "env": {}}
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    assert settings["env"] == {"MNEMOSYNC_AGENT_ID": "alice", "MNEMOSYNC_INSECURE": "1",
                               "MNEMOSYNC_SCOPE": "project:My-App"}
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
