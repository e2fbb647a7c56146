"""Claude Code's hooks as Claude Code runs them: the documented JSON on stdin, a new `mnemosync` process each
time (the console script, so the fast path is the one tested), against a real server with the real model.

UserPromptSubmit recalls through a warm process; PreCompact and SessionEnd store the transcript in the
background. Each test checks what the hook printed, its exit code and that it answered within the hook
timeout Claude Code is given for it (5 s for the prompt).
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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mnemosync.agent import local_socket

from helpers import ServeProcess, free_port, wait_until

MNEMOSYNC = str(Path(sys.executable).parent / "mnemosync")
TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "claude_transcript.jsonl"
PROJECT = "/home/me/src/web"
JWT_FACT = "The auth service signs JWTs with RS256 and rotates the signing keys every 90 days"
PROMPT_TIMEOUT = 5.0


def hook_input(event: str, **fields) -> dict:
    """The JSON Claude Code sends a command hook (common fields, then the event's own)."""
    return {"session_id": "3f2a9c1b-5d1e-4c1a-9a57-5f0c2a8e9d10", "transcript_path": str(TRANSCRIPT),
            "cwd": PROJECT, "permission_mode": "default", "hook_event_name": event, **fields}


def run_hook(event: str, payload: dict, env: dict, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess,
                                                                                    float]:
    started = time.monotonic()
    done = subprocess.run([MNEMOSYNC, "hook", event], input=json.dumps(payload), capture_output=True, text=True,
                          env=env, timeout=60, cwd=cwd)
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def served(tmp_path_factory, model_path):
    """A server holding alice's decision in project:web."""
    root = tmp_path_factory.mktemp("hooks")
    with ServeProcess(root / "server", embed_model=model_path) as server:
        yield server, root


@pytest.fixture
def hook_env(served, model_path, tmp_path):
    """The environment Claude Code gives hooks, with this agent's settings and a private runtime directory."""
    server, _ = served
    runtime = tempfile.mkdtemp(prefix="mh-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOSYNC_", "CLAUDE_"))}
    env.update({"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "carol", "MNEMOSYNC_INSECURE": "1",
                "MNEMOSYNC_CACHE_DIR": str(tmp_path / "carol"), "MNEMOSYNC_EMBED_MODEL": str(model_path),
                "MNEMOSYNC_TIMEOUT": "5", "XDG_RUNTIME_DIR": runtime, "CLAUDE_PROJECT_DIR": PROJECT})
    yield env
    stop_agent(env)
    shutil.rmtree(runtime, ignore_errors=True)


def stop_agent(env: dict) -> None:
    """Stops the `mnemosync agent` a test's hook started (by the pid it reports), if one runs."""
    try:
        path = local_socket.socket_path(env)
        pid = local_socket.ask(path, {"op": "ping"}, timeout=2)["pid"]
    except OSError:
        return
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not path.exists(), timeout=20, message="the agent did not stop")


@pytest.fixture(scope="module")
def decision(served, model_path):
    """alice's stored decision (written through the real client, so with the real embedding)."""
    server, root = served
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    settings = ClientSettings(server=server.address, agent_id="alice", insecure=True, cache_dir=root / "alice",
                              embed_model=model_path, scope="project:web")
    with AgentClient(settings, live=False) as alice:
        return alice.add(JWT_FACT, type="decision", tags=["auth"])


def warm(env: dict) -> dict:
    path = local_socket.socket_path(env)
    return wait_until(lambda: _ping(path), timeout=60, message="no warm agent answered on the local socket")


def _ping(path: Path) -> dict | None:
    try:
        return local_socket.ask(path, {"op": "ping"}, timeout=2)
    except (OSError, ValueError):
        return None


def test_the_first_prompt_starts_a_warm_agent_waits_for_it_and_injects_the_memory_with_its_id(hook_env, decision,
                                                                                             tmp_path):
    project = tmp_path / "web"  # a project with its own `server` package must not shadow mnemosync's
    (project / "server").mkdir(parents=True)
    (project / "server" / "__init__.py").write_text("raise SystemExit('the project's server package was imported')\n")
    payload = hook_input("UserPromptSubmit", prompt="How does the auth service sign JWTs, and how often do we rotate "
                                                    "the keys?")
    first, seconds = run_hook("prompt", payload, hook_env, cwd=project)  # nothing warm: it starts one and waits
    assert first.returncode == 0 and seconds < PROMPT_TIMEOUT
    out = json.loads(first.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "UserPromptSubmit"
    assert f"[{decision.memory_id[:8]} v1, decision, alice," in out["additionalContext"]
    assert JWT_FACT in out["additionalContext"]
    assert warm(hook_env)["agent"] == "carol"


def test_session_start_starts_the_warm_agent_so_the_first_prompt_is_answered(hook_env, decision):
    start, _ = run_hook("session-start", hook_input("SessionStart", source="startup"), hook_env)
    assert start.returncode == 0 and "Core memories" in start.stdout
    assert local_socket.is_starting(local_socket.socket_path(hook_env)) or warm(hook_env)
    prompt = {**hook_input("UserPromptSubmit", prompt="how are JWTs signed by the auth service?"),
              "session_id": "another-session"}  # the session start may have shown it to its own session already
    done, seconds = run_hook("prompt", prompt, hook_env)
    assert done.returncode == 0 and seconds < PROMPT_TIMEOUT
    assert JWT_FACT in json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]


def test_a_memory_is_injected_once_per_session_unless_it_changed(hook_env, model_path, tmp_path):
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    server = ServeProcess(tmp_path / "server", listen=f"127.0.0.1:{free_port()}", embed_model=model_path).start()
    env = {**hook_env, "MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_RECALL_LOG": "1"}
    alice = AgentClient(ClientSettings(server=server.address, agent_id="alice", insecure=True, scope="project:web",
                                       cache_dir=tmp_path / "alice", embed_model=model_path), live=False)
    question = "How does the auth service sign JWTs, and how often do we rotate the keys?"

    def ask(session: str) -> str:
        done, seconds = run_hook("prompt", {**hook_input("UserPromptSubmit", prompt=question), "session_id": session},
                                 env)
        assert done.returncode == 0 and seconds < PROMPT_TIMEOUT
        return json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] if done.stdout else ""

    try:
        with alice:
            stored = alice.add(JWT_FACT, type="decision")
            assert JWT_FACT in ask("session-1")
            assert ask("session-1") == ""  # shown already in this session
            stop_agent(env)
            assert ask("session-1") == ""  # a new agent remembers what the last one showed
            assert JWT_FACT in ask("session-2")  # another session has not seen it
            updated = alice.update(stored.memory_id, base_version=stored.version,
                                   content=JWT_FACT + "; the public keys are published at /.well-known/jwks.json")
        context = ask("session-1")  # changed since: shown again, once
        assert f"[{stored.memory_id[:8]} v{updated.version}," in context and "jwks.json" in context
        assert ask("session-1") == ""
        log = [json.loads(line) for line in (tmp_path / "carol" / "recall-log.jsonl").read_text().splitlines()]
    finally:
        stop_agent(env)
        server.stop()
    assert [bool(e["injected"]) for e in log] == [True, False, False, True, True, False]
    repeated = log[1]
    assert (repeated["session_id"], repeated["prompt"]) == ("session-1", question)
    assert repeated["candidates"][0]["reason"] == "already injected in this session"
    assert set(repeated["candidates"][0]["features"]) >= {"similarity", "above_background", "overlap", "chat"}


def test_a_prompt_with_nothing_relevant_gets_nothing(hook_env, decision):
    run_hook("prompt", hook_input("UserPromptSubmit", prompt="Warm up the agent please, nothing else"), hook_env)
    warm(hook_env)
    done, seconds = run_hook("prompt", hook_input("UserPromptSubmit", prompt="Write a haiku about autumn leaves "
                                                                             "falling on a quiet pond"), hook_env)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "") and seconds < PROMPT_TIMEOUT


def test_with_the_server_down_the_warm_agent_answers_from_its_cache(hook_env, decision, model_path, tmp_path):
    server = ServeProcess(tmp_path / "server", listen=f"127.0.0.1:{free_port()}", embed_model=model_path).start()
    env = {**hook_env, "MNEMOSYNC_SERVER": server.address}
    try:
        from mnemosync.agent.client import AgentClient
        from mnemosync.agent.client_settings import ClientSettings

        with AgentClient(ClientSettings(server=server.address, agent_id="alice", insecure=True, scope="project:web",
                                        cache_dir=tmp_path / "alice", embed_model=model_path), live=False) as alice:
            alice.add(JWT_FACT, type="decision")
        run_hook("prompt", hook_input("UserPromptSubmit", prompt="Warm up the agent please, nothing else"), env)
        warm(env)
    finally:
        server.stop()
    question = "How does the auth service sign JWTs, and how often do we rotate the keys?"
    done, seconds = run_hook("prompt", hook_input("UserPromptSubmit", prompt=question), env)
    assert done.returncode == 0 and seconds < PROMPT_TIMEOUT
    context = json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "the server is unreachable, so these come from this agent's cache" in context and JWT_FACT in context
    stop_agent(env)


def episodes(env: dict, scope: str = "project:billing") -> list[str]:
    """The billing session's episodes, as `mnemosync search` finds them."""
    found = subprocess.run([MNEMOSYNC, "search", "billing replica runbook PostgreSQL", "--scope", scope,
                            "--type", "episode", "--json"], env=env, capture_output=True, text=True, timeout=60)
    return [r["memory"]["content"] for r in json.loads(found.stdout)["results"]] if found.returncode == 0 else []
def test_a_warm_agent_writes_the_session_start_block_and_it_does_not_wait_once_the_server_is_down(
        hook_env, model_path, tmp_path):
    """Warm, the hook asks the agent for the block and loads nothing heavy itself; with the server down it does
    not wait the 3 s a live cache would get (`session_start_hook.AGENT_WAIT`): the agent knows it is offline."""
    started = json.dumps(hook_input("SessionStart", source="startup"))
    with ServeProcess(tmp_path / "server", listen=f"127.0.0.1:{free_port()}", embed_model=model_path) as server:
        env = {**hook_env, "MNEMOSYNC_SERVER": server.address}
        path = local_socket.socket_path(env, create=True)
        try:
            from mnemosync.agent.client import AgentClient
            from mnemosync.agent.client_settings import ClientSettings

            with AgentClient(ClientSettings(server=server.address, agent_id="alice", insecure=True,
                                            scope="project:web", cache_dir=tmp_path / "alice", embed_model=model_path),
                             live=False) as alice:
                alice.add(JWT_FACT, type="decision")
            run_hook("session-start", json.loads(started), env)  # starts the warm agent
            wait_until(lambda: (local_socket.status_at(path) or {}).get("live"), timeout=60,
                       message="the warm agent's cache never became live")
            warm = subprocess.run([sys.executable, "-X", "importtime", "-m", "mnemosync", "hook", "session-start"],
                                  input=started, capture_output=True, text=True, env=env, timeout=60)
            assert warm.returncode == 0 and "the local agent keeps the cache live" in warm.stdout, warm.stdout
            assert JWT_FACT in warm.stdout
            imported = {line.rsplit("|", 1)[-1].strip() for line in warm.stderr.splitlines()
                        if line.startswith("import time:")}
            assert not {"click", "grpc", "numpy", "sqlite_utils"} & imported
            server.stop()
            wait_until(lambda: (local_socket.status_at(path) or {}).get("offline"), timeout=30,
                       message="the warm agent never noticed that the server is down")
            down, seconds = run_hook("session-start", json.loads(started), env)
            assert down.returncode == 0 and "is not connected to the server" in down.stdout, down.stdout
            assert JWT_FACT in down.stdout and seconds < 3.0
        finally:
            stop_agent(env)


def test_precompact_and_session_end_store_the_session_in_the_background(hook_env, served, tmp_path):
    """With no local agent running, the hooks start an ingestion of their own."""
    transcript = shutil.copy(TRANSCRIPT, tmp_path / "3f2a9c1b.jsonl")
    payload = hook_input("PreCompact", trigger="auto", custom_instructions="", transcript_path=str(transcript),
                         cwd="/home/me/src/billing")
    done, seconds = run_hook("precompact", payload, hook_env)
    assert (done.returncode, done.stdout) == (0, "") and seconds < 10
    wait_until(lambda: len(episodes(hook_env)) == 2, timeout=90,
               message=lambda: f"episodes after PreCompact: {episodes(hook_env)}")
    done, _ = run_hook("session-end", {**payload, "hook_event_name": "SessionEnd", "reason": "exit"}, hook_env)
    assert (done.returncode, done.stdout) == (0, "")
    wait_until(lambda: len(episodes(hook_env)) == 3, timeout=90,
               message=lambda: f"episodes after SessionEnd: {episodes(hook_env)}")
    assert any("Add a runbook entry for the cut-over" in c for c in episodes(hook_env))
    [log] = (Path(hook_env["XDG_RUNTIME_DIR"]) / "mnemosync").glob("ingest-*.log")
    assert log == local_socket.ingest_log(hook_env)  # the agent's own log, named by its key
    assert re.search(r": [12] episodes? stored", log.read_text())
    assert "1 episodes" not in log.read_text()


def test_with_the_local_agent_running_the_capture_hooks_hand_the_transcript_to_it(hook_env, tmp_path):
    """No second process with a model of its own: the agent records the capture and stores it."""
    start, _ = run_hook("session-start", hook_input("SessionStart", source="startup"), hook_env)
    assert start.returncode == 0
    agent = warm(hook_env)
    transcript = shutil.copy(TRANSCRIPT, tmp_path / "5d1e4c1a.jsonl")
    payload = hook_input("PreCompact", trigger="auto", transcript_path=str(transcript), cwd="/home/me/src/payments")
    done, seconds = run_hook("precompact", payload, hook_env)
    assert (done.returncode, done.stdout) == (0, "") and seconds < 10
    wait_until(lambda: len(episodes(hook_env, "project:payments")) == 2, timeout=90,
               message=lambda: f"episodes after PreCompact: {episodes(hook_env, 'project:payments')}")
    run_hook("session-end", {**payload, "hook_event_name": "SessionEnd", "reason": "exit"}, hook_env)
    wait_until(lambda: len(episodes(hook_env, "project:payments")) == 3, timeout=90,
               message=lambda: f"episodes after SessionEnd: {episodes(hook_env, 'project:payments')}")
    assert warm(hook_env)["pid"] == agent["pid"]
    assert not list((Path(hook_env["XDG_RUNTIME_DIR"]) / "mnemosync").glob("ingest-*.log"))  # no ingestion started
    status = subprocess.run([MNEMOSYNC, "status", "--json"], env=hook_env, capture_output=True, text=True, timeout=60)
    assert json.loads(status.stdout)["captures_waiting"] == []


def test_eight_processes_on_a_fresh_cache_folder_at_once_all_succeed(hook_env, tmp_path):
    """The local agent, two ingestions, the CLI, the session start and a relay open the agent's new files (cache,
    outbox, ingestion watermarks, what was shown) in the same moment (issue 36's fresh-clone failure)."""
    transcripts = [shutil.copy(TRANSCRIPT, tmp_path / f"{name}.jsonl") for name in ("7a3fc53a", "8b4ad64b")]
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}) + "\n"
    commands = [
        ([MNEMOSYNC, "agent"], None),
        ([MNEMOSYNC, "ingest", str(transcripts[0]), "--project-dir", "/home/me/src/billing", "--partial"], None),
        ([MNEMOSYNC, "ingest", str(transcripts[1]), "--project-dir", "/home/me/src/billing"], None),
        ([MNEMOSYNC, "status"], None),
        ([MNEMOSYNC, "recent"], None),
        ([MNEMOSYNC, "search", "billing replica"], None),
        ([MNEMOSYNC, "hook", "session-start"], json.dumps(hook_input("SessionStart", source="startup"))),
        ([sys.executable, "-m", "mnemosync.shim"], init),
    ]
    env = {**hook_env, "MNEMOSYNC_AGENT_IDLE_MINUTES": "0.2"}
    running = [subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env) for command, _ in commands]
    with ThreadPoolExecutor(len(running)) as pool:  # at once: the agent idles only once the relay hung up
        outcomes = list(pool.map(lambda p, stdin: p.communicate(stdin, timeout=120), running,
                                 [stdin for _, stdin in commands]))
    failed = [(command[1:3], p.returncode, err[-2000:]) for p, (command, _), (_, err)
              in zip(running, commands, outcomes, strict=True) if p.returncode]
    assert failed == []
    assert not any("cannot be used" in err or "already exists" in err for _, err in outcomes)
    assert '"result"' in outcomes[-1][0]  # the relay's session was opened and initialized
    assert "# Shared memory (mnemosync)" in outcomes[-2][0]


def test_the_capture_hooks_ignore_a_missing_transcript(hook_env):
    for event in ("precompact", "session-end"):
        done, _ = run_hook(event, hook_input("PreCompact", transcript_path="/nonexistent/x.jsonl"), hook_env)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
