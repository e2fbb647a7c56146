"""Sessions never silently overwrite each other (issue 36), with real processes: `mnemosync-mcp` relays, the
local agents they start, the hooks as Claude Code runs them, a real server and the real model.

A write without a base version is made from the version the session's model was shown, not from the agent's
live cache, which another agent's commit moves forward at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_mcp_shim import PROJECT_DIR, run_shim, shim_env

from ops import local_agents

from helpers import ServeProcess, wait_until

MNEMOSYNC = str(Path(sys.executable).parent / "mnemosync")


@pytest.fixture(scope="module")
def served(tmp_path_factory, model_path):
    with ServeProcess(tmp_path_factory.mktemp("reads") / "server", embed_model=model_path) as server:
        yield server


@pytest.fixture
def runtime():
    with local_agents.private_runtime() as path:
        yield path


def session(served, runtime, tmp_path, model_path, agent_id: str, name: str | None = None, **extra: str):
    """A shim session of `agent_id` (sessions of one agent id share its local agent and cache)."""
    env = shim_env(served.address, agent_id, tmp_path / agent_id, model_path, XDG_RUNTIME_DIR=str(runtime),
                   MNEMOSYNC_AGENT_IDLE_MINUTES="1", **extra)
    return run_shim(env, tmp_path / f"{name or agent_id}.err")


def test_a_session_that_read_v1_and_updates_after_another_agent_opens_a_conflict_with_both_texts_and_the_base(
        served, runtime, tmp_path, model_path):
    with session(served, runtime, tmp_path, model_path, "alice") as alice, \
            session(served, runtime, tmp_path, model_path, "bob") as bob:
        added = alice.ok("add_memory", {"content": "Postgres listens on 5432"})
        memory_id = added["id"]
        assert alice.ok("get", {"id": memory_id})["memory"]["version"] == 1
        assert bob.ok("get", {"id": memory_id})["memory"]["version"] == 1
        moved = bob.ok("update", {"id": memory_id, "content": "Postgres listens on 5433"})
        assert (moved["version"], moved.get("conflict_id"), moved.get("blind")) == (2, None, None)
        stale = alice.ok("update", {"id": memory_id, "content": "Postgres listens on 6432 behind pgbouncer"})
        conflict_id = stale["conflict_id"]
        assert conflict_id and stale["version"] == 3  # bob's change is not overwritten
        assert stale["note"].startswith(f"this write opened or joined open conflict #{conflict_id}: bob: «Postgres "
                                        "listens on 5433» vs alice: «Postgres listens on 6432 behind pgbouncer»")
        assert "\n" not in stale["note"]
        [conflict] = alice.ok("check_conflicts", {"memory_id": memory_id})["conflicts"]
        assert [(r["agent"], r["content"]) for r in conflict["revisions"]] == [
            ("bob", "Postgres listens on 5433"), ("alice", "Postgres listens on 6432 behind pgbouncer")]
        assert (conflict["base"]["version"], conflict["base"]["content"]) == (1, "Postgres listens on 5432")
        kept = alice.ok("resolve_conflict", {"conflict_id": conflict_id, "keep_revision": 1, "note": "5433 it is"})
        assert alice.ok("get", {"id": memory_id})["memory"]["content"] == "Postgres listens on 5433"
        assert kept["version"] == 4


def test_two_sessions_of_one_agent_are_apart_a_blind_write_says_so_and_reads_survive_an_agent_restart(
        served, runtime, tmp_path, model_path):
    with session(served, runtime, tmp_path, model_path, "carol", "carol1") as first, \
            session(served, runtime, tmp_path, model_path, "carol", "carol2") as second, \
            session(served, runtime, tmp_path, model_path, "dave") as dave:
        [agent] = [s for s in local_agents.statuses(runtime) if s["agent"] == "carol"]
        assert len(agent["sessions"]) == 2
        added = first.ok("add_memory", {"content": "The staging deploy needs a green canary"})
        blind = second.ok("update", {"id": added["id"], "importance": 0.9})
        assert blind["blind"] is True and not blind.get("conflict_id")
        assert blind["note"] == (f"blind write: this session had not been shown {added['id'][:8]}, so it changed v1 "
                                 "unseen; get a memory before changing it")
        apart = first.ok("update", {"id": added["id"], "content": "The staging deploy needs a green canary for "
                                                                   "ten minutes"})
        assert apart["conflict_id"], "a session's write replaced what only its sibling session had seen"

        later = first.ok("add_memory", {"content": "Release notes live in docs/releases.md"})
        os.kill(agent["pid"], signal.SIGKILL)  # the relays start a new agent and open their sessions again
        assert dave.ok("get", {"id": later["id"]})["memory"]["version"] == 1
        dave.ok("update", {"id": later["id"], "content": "Release notes live in the wiki"})
        after = first.ok("update", {"id": later["id"], "content": "Release notes live in docs/releases/"})
        assert [s["pid"] for s in local_agents.statuses(runtime) if s["agent"] == "carol"] != [agent["pid"]]
        assert after["conflict_id"], "the new agent forgot what the session had been shown"


def hook(event: str, payload: dict, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([MNEMOSYNC, "hook", event], input=json.dumps(payload), capture_output=True, text=True,
                          env=env, timeout=60)


def test_the_hooks_and_tools_of_one_claude_session_share_what_it_was_shown_and_flag_open_conflicts(
        served, runtime, tmp_path, model_path):
    """The session start shows erin's memory (v1) to Claude Code session S; the prompt hook does not repeat it in
    S (it does in another session); S's update, made after erin changed it, opens a conflict; then the session
    start and the prompt hook show the conflict's sides, not one of them as fact."""
    with session(served, runtime, tmp_path, model_path, "erin") as erin, \
            session(served, runtime, tmp_path, model_path, "frank", CLAUDE_CODE_SESSION_ID="s-frank") as frank:
        env = {**os.environ, **shim_env(served.address, "frank", tmp_path / "frank", model_path,
                                        XDG_RUNTIME_DIR=str(runtime))}
        fact = erin.ok("add_memory", {"content": "The billing export runs every night at 02:00 UTC",
                                      "type": "decision", "importance": 0.9})
        wait_until(lambda: fact["id"][:8] in hook("session-start", {"session_id": "s-frank", "cwd": PROJECT_DIR},
                                                  env).stdout, timeout=30, message="the session start never showed it")
        prompt = {"session_id": "s-frank", "cwd": PROJECT_DIR, "prompt": "When does the billing export run each "
                                                                          "night?"}
        assert fact["id"][:8] not in hook("prompt", prompt, env).stdout  # shown by the session start already
        assert fact["id"][:8] in hook("prompt", {**prompt, "session_id": "s-other"}, env).stdout
        erin.ok("update", {"id": fact["id"], "content": "The billing export runs every night at 03:00 UTC"})
        stale = frank.ok("update", {"id": fact["id"], "content": "The billing export runs every night at 01:00 UTC"})
        conflict_id = stale["conflict_id"]
        assert conflict_id and not stale.get("blind")  # made from the v1 the session start showed

        sides = "erin: «The billing export runs every night at 03:00 UTC» vs frank: «The billing export runs every " \
                "night at 01:00 UTC»"
        started = hook("session-start", {"session_id": "s-later", "cwd": PROJECT_DIR}, env).stdout
        assert f"- #{conflict_id} write on {fact['id'][:8]} v3: {sides}" in started
        assert f"- open conflict #{conflict_id}: {sides} [{fact['id'][:8]} v3" in started
        recalled = json.loads(hook("prompt", {**prompt, "session_id": "s-fresh"}, env).stdout)
        assert f"open conflict #{conflict_id}: {sides}" in recalled["hookSpecificOutput"]["additionalContext"]
