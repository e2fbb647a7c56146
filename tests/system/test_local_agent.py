"""One local agent per machine (issue 29), with real processes: `mnemosync-mcp` relays, the `mnemosync agent`
they start, a real server and the real model.

Each test has its own runtime directory (`ops.local_agents.private_runtime`), so the agents it starts are its
own and are stopped at its end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from test_mcp_shim import JWT_FACT, run_shim, shim_env

from mnemosync.v1 import memory_pb2 as pb
from ops import local_agents

from helpers import RawAgent, ServeProcess, free_port, wait_until


@pytest.fixture
def runtime(tmp_path):
    """The test's runtime directory; the agents' logs are copied into `tmp_path` at the end, to read after a
    failure."""
    with local_agents.private_runtime() as path:
        try:
            yield path
        finally:
            for log in (path / "mnemosync").glob("*.log"):
                shutil.copy(log, tmp_path / log.name)


def agent_of(runtime: Path, agent_id: str) -> dict:
    [status] = [s for s in local_agents.statuses(runtime) if s["agent"] == agent_id]
    return status


def test_two_sessions_started_at_once_share_one_agent_and_another_agent_id_gets_its_own(tmp_path, model_path,
                                                                                           runtime):
    with ServeProcess(tmp_path / "server", embed_model=model_path) as served:
        env = shim_env(served.address, "alice", tmp_path / "alice", model_path, XDG_RUNTIME_DIR=str(runtime))
        opened: dict[int, object] = {}
        release = threading.Event()
        errors: list[BaseException] = []

        def session(i: int) -> None:
            try:
                with run_shim(env, tmp_path / f"alice{i}.err") as shim:
                    opened[i] = shim
                    release.wait(120)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=session, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: len(opened) == 2 or errors, timeout=90, message="the two sessions did not open")
            assert not errors, errors
            alice = agent_of(runtime, "alice")
            assert len(alice["sessions"]) == 2, alice  # one agent, both sessions: the lock, not luck
            mnemosync = str(Path(sys.executable).parent / "mnemosync")
            status = subprocess.run([mnemosync, "status"], env={**os.environ, **env}, capture_output=True, text=True,
                                    timeout=60)
            assert f"local    pid {alice['pid']}, up " in status.stdout and "2 sessions attached" in status.stdout
            doctor = subprocess.run([mnemosync, "doctor", "--json"], env={**os.environ, **env}, capture_output=True,
                                    text=True, timeout=60)
            [check] = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "agent"]
            assert check["status"] == "ok" and "2 sessions attached, cache live" in check["summary"]
            own = RawAgent(served.address, "alice")
            try:  # the server hears of the sessions with the agent's acknowledgements (ListAgents, the dashboard)
                wait_until(lambda: own.call("ListAgents", pb.ListAgentsRequest()).caller.agent_id and [
                    a.sessions for a in own.call("ListAgents", pb.ListAgentsRequest()).agents
                    if a.agent_id == "alice" and a.HasField("sessions")] == [2], timeout=30,
                    message="the server never heard of alice's two sessions")
            finally:
                own.close()
            first, second = opened[0], opened[1]
            added = first.ok("add_memory", {"content": JWT_FACT, "type": "decision"})
            found = second.ok("search", {"query": "how are login tokens signed?"})
            assert found["results"][0]["id"] == added["id"]
            with run_shim(shim_env(served.address, "bob", tmp_path / "bob", model_path, XDG_RUNTIME_DIR=str(runtime)),
                          tmp_path / "bob.err") as bob:
                assert bob.ok("search", {"query": "how are login tokens signed?"})["results"][0]["id"] == added["id"]
                bobs = agent_of(runtime, "bob")
                assert bobs["pid"] != alice["pid"] and len(bobs["sessions"]) == 1
                assert len(local_agents.statuses(runtime)) == 2
        finally:
            release.set()
            for t in threads:
                t.join(60)


def test_killing_the_agent_loses_no_acknowledged_or_queued_write_and_the_session_carries_on(tmp_path, model_path,
                                                                                             runtime):
    listen = f"127.0.0.1:{free_port()}"
    server = ServeProcess(tmp_path / "server", listen=listen, embed_model=model_path).start()
    try:
        env = shim_env(listen, "carol", tmp_path / "carol", model_path, XDG_RUNTIME_DIR=str(runtime))
        with run_shim(env, tmp_path / "carol.err") as carol:
            acknowledged, failed = [], []
            first = agent_of(runtime, "carol")["pid"]

            def write(n: int) -> None:
                result = carol.call("add_memory", {"content": f"Deploy note {n}: the canary runs for {n} minutes"})
                (failed if result.is_error else acknowledged).append(
                    result.content[0].text if result.is_error else result.structured_content["id"])

            for n in range(3):
                write(n)
            killer = threading.Timer(0.05, os.kill, (first, signal.SIGKILL))
            killer.start()  # while the next writes are under way
            for n in range(3, 12):
                write(n)
            killer.join()
            assert agent_of(runtime, "carol")["pid"] != first  # the relay started a new agent
            assert all("agent stopped before answering" in text for text in failed), failed
            assert len(failed) <= 2 and len(acknowledged) + len(failed) == 12  # only what was under way failed
            assert carol.ok("search", {"query": "how long does the canary run?"})["results"]

            server.kill()  # a write the agent queues, then the agent dies before it could send it
            queued = carol.ok("add_memory", {"content": "The release train leaves every Tuesday at 10"})
            assert queued["pending"] is True
            os.kill(agent_of(runtime, "carol")["pid"], signal.SIGKILL)
            server = ServeProcess(tmp_path / "server", listen=listen, embed_model=model_path).start()
            carol.wait_for("stats", {}, lambda s: s["online"] and s["outbox_pending"] == 0, timeout=60)

        auditor = RawAgent(listen, "auditor")
        try:
            stored = {e.memory_id for e in auditor.sync() if e.op == "add"}
        finally:
            auditor.close()
        assert set(acknowledged) <= stored, "an acknowledged write was lost"
        assert queued["id"] in stored, "a queued write was lost with the agent"
    finally:
        server.stop()


def test_a_session_started_while_the_cache_is_far_behind_answers_from_the_server_at_once(tmp_path, model_path,
                                                                                        runtime, embedder):
    behind = 50_000
    with ServeProcess(tmp_path / "server", embed_model=model_path) as served:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        writer = RawAgent(served.address, "importer")
        try:
            texts = [JWT_FACT] + [f"Service {i} keeps its deploy logs for {i % 30 + 1} days" for i in range(99)]
            results = writer.append(*[pb.Operation(op_id=str(uuid.uuid4()), memory_id=str(uuid.uuid4()), add=pb.AddOp(
                scope="project:demo", type="fact", content=t, embedding=embedder.embed(t))) for t in texts],
                model=model).results
            versions = {r.memory_id: r.version for r in results}
            ids = list(versions)
            for start in range(0, behind, 500):  # tag edits: history that grows without new memories
                ops = []
                for k in range(start, start + 500):
                    memory_id = ids[k % len(ids)]
                    ops.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id,
                                            base_version=versions[memory_id],
                                            update=pb.UpdateOp(replace_tags=True, tags=[f"round-{k // len(ids)}"])))
                    versions[memory_id] += 1
                writer.append(*ops, model=model)
        finally:
            writer.close()
        env = shim_env(served.address, "dave", tmp_path / "dave", model_path, XDG_RUNTIME_DIR=str(runtime))
        started = time.perf_counter()
        with run_shim(env, tmp_path / "dave.err") as dave:
            found = dave.ok("search", {"query": "how are login tokens signed?"})
            answered = time.perf_counter() - started
            status = agent_of(runtime, "dave")
            assert found["results"][0]["id"] == ids[0] and "offline" not in found
            assert not status["live"] and status["cache_offset"] < behind, status  # answered by the server
            hook = subprocess.run([str(Path(sys.executable).parent / "mnemosync"), "hook", "session-start"],
                                  input=json.dumps({"cwd": "/home/dev/src/demo", "hook_event_name": "SessionStart"}),
                                  env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
            assert hook.returncode == 0, hook.stderr
            if "The local agent is catching the cache up: seq " not in hook.stdout:  # said at once, not waited for
                # the catch-up won the race with the hook: then the block says synced, and only when it was so
                assert "Synced: the local agent keeps the cache" in hook.stdout and agent_of(runtime, "dave")["live"], (
                    hook.stdout)
            wait_until(lambda: agent_of(runtime, "dave")["live"], timeout=180,
                       message="the agent's cache never caught up")
            assert agent_of(runtime, "dave")["cache_offset"] >= behind + len(texts)
            assert dave.ok("search", {"query": "how are login tokens signed?"})["results"][0]["id"] == ids[0]
        print(f"first search answered {answered:.2f} s after the session started, {behind:,} entries behind")


def test_another_os_user_cannot_reach_the_agents_socket(tmp_path, model_path, runtime):
    if os.getuid() != 0:
        pytest.skip("needs root to run a process as another user")
    with ServeProcess(tmp_path / "server", embed_model=model_path) as served:
        env = shim_env(served.address, "erin", tmp_path / "erin", model_path, XDG_RUNTIME_DIR=str(runtime))
        with run_shim(env, tmp_path / "erin.err"):
            [sock] = (runtime / "mnemosync").glob("agent-*.sock")
            assert oct(sock.stat().st_mode & 0o777) == "0o600"
            assert oct((runtime / "mnemosync").stat().st_mode & 0o777) == "0o700"
            probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n"
                     "except PermissionError:\n    print('refused')\nelse:\n    print('connected')\n")
            done = subprocess.run(["/usr/bin/python3", "-c", probe, str(sock)], capture_output=True, text=True,
                                  timeout=30, user=65534, group=65534)  # the venv's interpreter is root's alone
            assert done.stdout.strip() == "refused", done.stderr


def test_a_session_that_finds_an_in_process_session_on_the_socket_says_what_to_do(tmp_path, model_path, runtime):
    with ServeProcess(tmp_path / "server", embed_model=model_path) as served:
        env = shim_env(served.address, "fay", tmp_path / "fay", model_path, XDG_RUNTIME_DIR=str(runtime))
        with run_shim({**env, "MNEMOSYNC_IN_PROCESS": "1"}, tmp_path / "fay.err") as whole:
            assert whole.ok("search", {"query": "anything"})["results"] == []
            done = subprocess.run([sys.executable, "-m", "mnemosync.shim"], env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "a session started with --in-process serves" in done.stderr and "--in-process too" in done.stderr


def test_an_agent_that_cannot_start_is_reported_once_without_an_earlier_agents_words(tmp_path, runtime):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOSYNC_")}
    env.update(XDG_RUNTIME_DIR=str(runtime), MNEMOSYNC_DATA_HOME=str(tmp_path / "data"))
    for _ in range(2):  # the second finds the first one's lines in the same log
        done = subprocess.run([sys.executable, "-m", "mnemosync.shim"], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60)
        said = [line for line in done.stderr.splitlines() if line.startswith("Error")]
        assert done.returncode == 1 and len(said) == 1, done.stderr
        assert said[0].startswith("Error: no agent certificate: give --cert-dir DIR"), done.stderr
