"""The Claude Code plugin: its manifests validate, it installs into a fresh home with the real `claude` command
line (from npm, installed once into `.venv/node` when npm is there), its MCP server connects as Claude Code
starts it, every hook command runs from the installed files as Claude Code runs it, and its launcher finds
the mnemosync installation or says what to do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from helpers import ServeProcess, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "mcp_shim" / "claude_plugin"
LAUNCHER = PLUGIN / "bin" / "mnemosync-plugin"
VENV_BIN = Path(sys.executable).parent
NODE_DIR = REPO / ".venv" / "node"
HOOK_EVENTS = {"SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"}
OPTION_TYPES = {"string", "number", "boolean", "directory", "file"}
OPTION_FIELDS = {"type", "title", "description", "required", "default", "multiple", "sensitive", "min", "max"}
TRANSCRIPT = REPO / "tests" / "data" / "claude_transcript.jsonl"


@pytest.fixture(scope="session")
def claude() -> str | None:
    """The real `claude` command line, installed with npm into .venv/node the first time; None without npm."""
    binary = NODE_DIR / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        if shutil.which("npm") is None:
            return None
        subprocess.run(["npm", "install", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund",
                        "@anthropic-ai/claude-code"], check=True, capture_output=True, timeout=600)
    return str(binary)


def claude_env(home: Path, **extra: str) -> dict[str, str]:
    """An environment for `claude` in a temporary home, with no network traffic it can avoid."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOSYNC_", "CLAUDE_"))}
    return {**env, "HOME": str(home), "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **extra}


def test_the_manifests_follow_the_documented_schema():
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    manifest = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    [entry] = market["plugins"]
    assert market["name"] == entry["name"] == manifest["name"] == "mnemosync" and market["owner"]["name"]
    assert (REPO / entry["source"]).resolve() == PLUGIN and entry["version"] == manifest["version"]
    for key, option in manifest["userConfig"].items():
        assert re.fullmatch(r"[A-Za-z_]\w*", key) and option["type"] in OPTION_TYPES
        assert set(option) <= OPTION_FIELDS and option["title"] and option["description"]
    env = manifest["mcpServers"]["mnemosync"]["env"]
    assert env == {f"CLAUDE_PLUGIN_OPTION_{k.upper()}": f"${{user_config.{k}}}" for k in manifest["userConfig"]}
    hooks = json.loads((PLUGIN / "hooks" / "hooks.json").read_text())["hooks"]
    assert set(hooks) == HOOK_EVENTS
    for groups in hooks.values():
        for hook in (h for g in groups for h in g["hooks"]):
            assert hook["command"].startswith('"${CLAUDE_PLUGIN_ROOT}/bin/mnemosync-plugin" hook ')
    assert os.access(LAUNCHER, os.X_OK)


def test_the_real_claude_command_line_validates_the_marketplace_and_the_plugin(claude, tmp_path):
    if claude is None:
        pytest.skip("npm is not installed: the manifests are checked against the documented schema only")
    for path in (REPO, PLUGIN):
        done = subprocess.run([claude, "plugin", "validate", "--strict", str(path)], capture_output=True, text=True,
                              env=claude_env(tmp_path), timeout=120)
        assert done.returncode == 0 and "Validation passed" in done.stdout, done.stdout + done.stderr


@pytest.fixture
def installed(claude, tmp_path, model_path):
    """The plugin installed from this checkout into a fresh home; (claude, env, install path, server)."""
    if claude is None:
        pytest.skip("npm is not installed, so there is no claude command line to install the plugin with")
    runtime = tempfile.mkdtemp(prefix="mp-", dir="/tmp")
    home = tmp_path / "home"
    home.mkdir()
    env = claude_env(home, MNEMOSYNC_EMBED_MODEL=str(model_path), XDG_RUNTIME_DIR=runtime, MNEMOSYNC_TIMEOUT="5")
    with ServeProcess(tmp_path / "server", embed_model=model_path) as server:
        for command in (["plugin", "marketplace", "add", str(REPO)],
                        ["plugin", "install", "mnemosync@mnemosync", "--config", "insecure=true", "--config",
                         "agent_id=hana", "--config", f"server={server.address}", "--config",
                         f"install_dir={VENV_BIN}"]):
            done = subprocess.run([claude, *command], capture_output=True, text=True, env=env, cwd=tmp_path,
                                  timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
        record = json.loads((home / ".claude/plugins/installed_plugins.json").read_text())
        path = Path(record["plugins"]["mnemosync@mnemosync"][0]["installPath"])
        yield claude, env, path, server
    from mnemosync.agent import local_socket

    # the warm agents the hooks started, by the pid each reports: every socket in this test's runtime directory
    for path in local_socket.runtime_dir({"XDG_RUNTIME_DIR": runtime}).glob("agent-*.sock"):
        try:
            os.kill(local_socket.ask(path, {"op": "ping"}, timeout=2)["pid"], signal.SIGTERM)
        except (OSError, KeyError, ValueError):
            pass
    shutil.rmtree(runtime, ignore_errors=True)


def hook_environment(env: dict, install_path: Path, project: Path) -> dict[str, str]:
    """What Claude Code adds for a plugin's hook: its root, the project, and each option as
    CLAUDE_PLUGIN_OPTION_<KEY> (the value set, else the manifest's default, else empty)."""
    manifest = json.loads((install_path / ".claude-plugin" / "plugin.json").read_text())
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())
    chosen = settings["pluginConfigs"]["mnemosync@mnemosync"]["options"]
    options = {k: chosen.get(k, o.get("default", "")) for k, o in manifest["userConfig"].items()}
    return {**env, "CLAUDE_PLUGIN_ROOT": str(install_path), "CLAUDE_PROJECT_DIR": str(project),
            **{f"CLAUDE_PLUGIN_OPTION_{k.upper()}": (str(v).lower() if isinstance(v, bool) else str(v))
               for k, v in options.items()}}


def test_installed_in_a_fresh_home_its_mcp_server_connects_and_every_hook_runs(installed, tmp_path, model_path):
    claude, env, install_path, server = installed
    project = tmp_path / "web"
    project.mkdir()
    listed = subprocess.run([claude, "mcp", "list"], capture_output=True, text=True, env=env, cwd=project,
                            timeout=180)
    assert re.search(r"plugin:mnemosync:mnemosync: .*mnemosync-plugin mcp - ✔ Connected", listed.stdout), \
        listed.stdout + listed.stderr

    hooks = json.loads((install_path / "hooks" / "hooks.json").read_text())["hooks"]
    hook_env = hook_environment(env, install_path, project)
    transcript = shutil.copy(TRANSCRIPT, tmp_path / "session.jsonl")
    common = {"session_id": "3f2a9c1b-5d1e-4c1a-9a57-5f0c2a8e9d10", "transcript_path": str(transcript),
              "cwd": str(project), "permission_mode": "default"}
    inputs = {"SessionStart": {"source": "startup"},
              "UserPromptSubmit": {"prompt": "Did we decide to move billing to PostgreSQL 15 for JSONB invoice "
                                             "metadata?"},
              "PreCompact": {"trigger": "manual", "custom_instructions": ""}, "SessionEnd": {"reason": "exit"}}

    def run(event: str) -> subprocess.CompletedProcess:
        [group] = hooks[event]
        [hook] = group["hooks"]
        command = hook["command"].replace("${CLAUDE_PLUGIN_ROOT}", str(install_path))
        return subprocess.run(["sh", "-c", command], input=json.dumps({**common, "hook_event_name": event,
                                                                       **inputs[event]}),
                              capture_output=True, text=True, env=hook_env, cwd=project, timeout=hook["timeout"])

    started = run("SessionStart")
    assert started.returncode == 0 and "# Shared memory (mnemosync)" in started.stdout
    assert "Agent hana, scope project:web" in started.stdout
    for event in ("PreCompact", "SessionEnd"):
        assert run(event).returncode == 0

    def recalled() -> str | None:
        done = run("UserPromptSubmit")
        assert done.returncode == 0
        return done.stdout or None

    # the first prompt starts the warm agent; once the session was shown the episode, it is not injected again
    out = wait_until(recalled, timeout=120, interval=1, message="the prompt hook never recalled the stored episode")
    assert run("UserPromptSubmit").stdout == ""
    context = json.loads(out)["hookSpecificOutput"]["additionalContext"]
    assert "PostgreSQL 15" in context and "episode, hana" in context


def launcher(*args: str, env: dict, plugin: Path = PLUGIN, stdin: str = "{}") -> subprocess.CompletedProcess:
    return subprocess.run([str(plugin / "bin" / "mnemosync-plugin"), *args], capture_output=True, text=True,
                          env=env, timeout=120, input=stdin)


@pytest.fixture
def bare_env(tmp_path) -> dict[str, str]:
    """No mnemosync on PATH, nothing recorded, an unreachable server."""
    path = ":".join(p for p in os.environ.get("PATH", "").split(":") if not (Path(p) / "mnemosync").exists())
    return {"PATH": path, "HOME": str(tmp_path), "MNEMOSYNC_DATA_HOME": str(tmp_path / "data"),
            "MNEMOSYNC_SERVER": f"127.0.0.1:{free_port()}", "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_AGENT_ID": "ivy",
            "MNEMOSYNC_TIMEOUT": "1", "MNEMOSYNC_RECALL": "off"}


def test_the_launcher_says_what_to_do_when_it_finds_no_installation(bare_env, tmp_path):
    copy = shutil.copytree(PLUGIN, tmp_path / "cache" / "mnemosync")  # as installed from GitHub: no checkout around
    started = launcher("hook", "session-start", env=bare_env, plugin=copy)
    assert started.returncode == 0 and "Set the plugin's install_dir option" in started.stdout
    served = launcher("mcp", env=bare_env, plugin=copy)
    assert served.returncode == 1 and "mnemosync is not installed where this plugin can find it" in served.stderr
    prompt = launcher("hook", "prompt", env=bare_env, plugin=copy)
    assert (prompt.returncode, prompt.stdout) == (0, "")


@pytest.mark.parametrize("how", ["option", "option naming the checkout", "recorded by init", "the checkout", "PATH"])
def test_the_launcher_finds_the_installation_each_documented_way(bare_env, tmp_path, how):
    plugin, env = PLUGIN, dict(bare_env)
    if how != "the checkout":
        plugin = shutil.copytree(PLUGIN, tmp_path / "cache" / "mnemosync")
    if how == "option":
        env["CLAUDE_PLUGIN_OPTION_INSTALL_DIR"] = str(VENV_BIN)
    elif how == "option naming the checkout":
        env["CLAUDE_PLUGIN_OPTION_INSTALL_DIR"] = str(REPO)
    elif how == "recorded by init":
        (tmp_path / "data").mkdir()
        (tmp_path / "data" / "install-bin").write_text(f"{VENV_BIN}\n")
    elif how == "PATH":
        env["PATH"] = f"{VENV_BIN}:{env['PATH']}"
    started = launcher("hook", "session-start", env=env, plugin=plugin)
    assert started.returncode == 0 and "# Shared memory (mnemosync)" in started.stdout, started.stdout


def test_plugin_options_become_mnemosync_settings_and_override_the_environment_only_when_set(bare_env, tmp_path):
    env = {**bare_env, "CLAUDE_PLUGIN_OPTION_INSTALL_DIR": str(VENV_BIN), "CLAUDE_PLUGIN_OPTION_AGENT_ID": "jade",
           "CLAUDE_PLUGIN_OPTION_SCOPE": "project:shop", "CLAUDE_PLUGIN_OPTION_SERVER": "",
           "CLAUDE_PLUGIN_OPTION_INSECURE": "true"}
    started = launcher("hook", "session-start", env=env)
    assert "Agent jade, scope project:shop" in started.stdout
    assert f"server at {bare_env['MNEMOSYNC_SERVER']}" in started.stdout  # an empty option keeps the environment's


def test_init_with_plugin_installs_it_for_the_project_through_the_claude_command_line(claude, tmp_path):
    if claude is None:
        pytest.skip("npm is not installed, so there is no claude command line to install the plugin with")
    home, project = tmp_path / "home", tmp_path / "shop"
    home.mkdir()
    project.mkdir()
    env = claude_env(home, PATH=f"{Path(claude).parent}:{os.environ['PATH']}", MNEMOSYNC_DATA_HOME=str(tmp_path / "d"))
    done = subprocess.run([str(VENV_BIN / "mnemosync"), "init", "--plugin", "--insecure", "--agent-id", "kim"],
                          capture_output=True, text=True, env=env, cwd=project, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "plugin install mnemosync@mnemosync" in done.stdout
    assert "not yet set:" not in done.stdout.replace("(Claude Code lists them as not yet set)", "")
    assert "plugin options set: agent_id, insecure; optional, left at their defaults" in done.stdout
    assert 'tools ("compact")' in done.stdout and 'scope ("")' in done.stdout
    assert json.loads((project / ".claude" / "settings.json").read_text())["enabledPlugins"] == {
        "mnemosync@mnemosync": True}
    options = json.loads((home / ".claude" / "settings.json").read_text())["pluginConfigs"]["mnemosync@mnemosync"]
    assert options["options"] == {"insecure": True, "agent_id": "kim"}
    assert not (project / ".mcp.json").exists()  # the plugin brings the server entry and the hooks


def test_init_approves_the_projects_server_so_claude_does_not_list_it_as_pending(claude, tmp_path):
    if claude is None:
        pytest.skip("npm is not installed, so there is no claude command line to ask")
    home, project = tmp_path / "home", tmp_path / "shop"
    home.mkdir()
    project.mkdir()
    from ops import local_agents

    with local_agents.private_runtime() as runtime:  # the agent the listed server starts is stopped at the end
        env = claude_env(home, MNEMOSYNC_DATA_HOME=str(tmp_path / "d"), XDG_RUNTIME_DIR=str(runtime))
        done = subprocess.run([str(VENV_BIN / "mnemosync"), "init", "--insecure", "--agent-id", "kim",
                               "--server", "127.0.0.1:9"], capture_output=True, text=True, env=env, cwd=project,
                              timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "approved the mnemosync server of .mcp.json" in done.stdout
        # the one step left to a person: trusting the folder when claude first starts in it
        (home / ".claude.json").write_text(json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}}))
        listed = subprocess.run([claude, "mcp", "list"], capture_output=True, text=True, env=env, cwd=project,
                                timeout=120)
    assert "mnemosync:" in listed.stdout, listed.stdout + listed.stderr
    assert "Pending approval" not in listed.stdout


def test_a_project_set_up_by_init_connects_from_a_clean_environment_as_the_agent_it_named(claude, tmp_path,
                                                                                          model_path):
    """`claude mcp list` starts the server without the settings' `env` (anthropics/claude-code#36161): what the
    server needs travels in the entry's args, and the personal settings (the agent id, the model) in the
    project's settings.local.json, which nothing checks in."""
    if claude is None:
        pytest.skip("npm is not installed, so there is no claude command line to ask")
    from ops import local_agents

    home, project = tmp_path / "home", tmp_path / "web"
    home.mkdir()
    project.mkdir()
    with ServeProcess(tmp_path / "server", embed_model=model_path) as server, \
            local_agents.private_runtime() as runtime:
        env = claude_env(home, XDG_RUNTIME_DIR=str(runtime))
        done = subprocess.run([str(VENV_BIN / "mnemosync"), "init", "--insecure", "--agent-id", "alice", "--server",
                               server.address, "--embed-model", str(model_path)], capture_output=True, text=True,
                              env=env, cwd=project, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        (home / ".claude.json").write_text(json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}}))
        listed = subprocess.run([claude, "mcp", "list"], capture_output=True, text=True, env=env, cwd=project,
                                timeout=180)
        assert re.search(r"mnemosync: .*mnemosync-mcp .* - ✔ Connected", listed.stdout), listed.stdout + listed.stderr
        assert [s["agent"] for s in local_agents.statuses(runtime)] == ["alice"]
    checked_in = (project / ".mcp.json").read_text() + (project / ".claude" / "settings.json").read_text()
    assert "alice" not in checked_in and str(model_path) not in checked_in


def fast_start():
    """The plugin's `bin/fast_start.py`, loaded as a module."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fast_start", PLUGIN / "bin" / "fast_start.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_launcher_starts_the_hooks_without_the_interpreters_site_set_up(bare_env, tmp_path):
    env = {**bare_env, "CLAUDE_PLUGIN_OPTION_INSTALL_DIR": str(VENV_BIN), "MNEMOSYNC_RECALL": "on",
           "MNEMOSYNC_RECALL_START_AGENT": "0", "PYTHONPROFILEIMPORTTIME": "1"}
    done = launcher("hook", "prompt", env=env, stdin=json.dumps({"prompt": "how do we deploy to production?",
                                                                  "cwd": str(tmp_path), "session_id": "s"}))
    assert (done.returncode, done.stdout) == (0, "")
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "mnemosync.agent.local_socket" in imported  # (import_module, which loads the hook, is not listed)
    assert not imported & {"site", "typing", "subprocess"}, imported & {"site", "typing", "subprocess"}
    assert not [m for m in imported if m.startswith("__editable__")]


def test_started_without_site_the_command_table_still_answers_what_a_hook_hands_on():
    done = subprocess.run([sys.executable, "-S", "-P", str(PLUGIN / "bin" / "fast_start.py"), "hook", "prompt",
                           "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Usage:" in done.stdout, done.stderr


def test_the_fast_start_maps_the_checkout_as_pyproject_does_and_leaves_other_layouts_to_site(tmp_path):
    import tomllib

    module = fast_start()
    package_dir = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    assert module.CHECKOUT_DIRS == package_dir
    found = module.package_dirs(module.site_packages(sys.executable))
    assert found is not None and Path(found["mnemosync.shim"]).resolve() == REPO / "mcp_shim"
    assert module.package_dirs(str(tmp_path)) is None
    (tmp_path / "mnemosync").mkdir()
    (tmp_path / "mnemosync" / "__init__.py").write_text("")
    assert module.package_dirs(str(tmp_path)) == {}
