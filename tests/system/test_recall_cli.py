"""`mnemosync recall PROMPT [--explain] [--json]` as a user runs it: a new process against a real server with the
real model, printing what the prompt hook would inject and every candidate's features and decision."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mnemosync.kernel.recall_decision import FEATURES

from helpers import ServeProcess

MNEMOSYNC = str(Path(sys.executable).parent / "mnemosync")
JWT_FACT = "The auth service signs JWT login tokens with RS256; the key is in Vault and rotates every 90 days"
OTHERS = ["Always use pnpm in the webapp monorepo, never npm or yarn",
          "Feature flags go through our Unleash instance; name them team.feature-name",
          "No production deploys on Fridays after 14:00 or during the December code freeze",
          "Unit tests use Vitest next to the file; end-to-end tests use Playwright in e2e/"]


@pytest.fixture(scope="module")
def store(tmp_path_factory, model_path):
    """A server holding a web team's five memories in project:web, and the environment to reach it."""
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.client_settings import ClientSettings

    root = tmp_path_factory.mktemp("recall-cli")
    with ServeProcess(root / "server", embed_model=model_path) as server:
        settings = ClientSettings(server=server.address, agent_id="alice", insecure=True, cache_dir=root / "alice",
                                  embed_model=model_path, scope="project:web")
        with AgentClient(settings, live=False) as alice:
            jwt = alice.add(JWT_FACT, type="decision")
            for text in OTHERS:
                alice.add(text, type="decision")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "MNEMOSYNC_SERVER": server.address,
               "MNEMOSYNC_AGENT_ID": "bob", "MNEMOSYNC_INSECURE": "1", "MNEMOSYNC_CACHE_DIR": str(root / "bob"),
               "MNEMOSYNC_EMBED_MODEL": str(model_path), "MNEMOSYNC_SCOPE": "project:web"}
        yield env, jwt


def recall(env: dict, *args: str) -> str:
    done = subprocess.run([MNEMOSYNC, "recall", *args], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_recall_prints_the_block_the_hook_would_inject(store):
    env, jwt = store
    out = recall(env, "how are the JWT login tokens signed by the auth service?")
    assert out.startswith("Shared memory (mnemosync) relevant to this prompt")
    assert f"[{jwt.memory_id[:8]} v1, decision, alice," in out and "RS256" in out
    assert recall(env, "write a haiku about autumn leaves on a quiet pond").strip() == "(nothing would be injected)"


def test_explain_says_in_words_why_each_candidate_was_or_was_not_injected(store):
    """Issue 41.14: no column names a reader cannot guess (`above_bg`, `cover`), no line wider than 100."""
    env, jwt = store
    out = recall(env, "how are the JWT login tokens signed by the auth service?", "--explain")
    out = out[out.index("\nScope project:web. "):]  # after the block the hook would inject
    assert "Relevance is the estimated chance that a memory is one the prompt needs" in out
    assert "The prompt: " in out and "a question" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert "above_bg" not in out and "cover " not in out
    heads = [line for line in out.splitlines() if re.match(r" ?\d+\. [0-9a-f]{8} v\d+  relevance ", line)]
    assert heads[0].startswith(f" 1. {jwt.memory_id[:8]} v1  relevance ") and heads[0].endswith("  injected")
    assert len(heads) == 1 + len(OTHERS)  # every candidate, the injected one first
    assert "above the background" in out and "% of the prompt's" in out
    assert "Not searched" in recall(env, "ok thanks", "--explain")


def test_json_gives_the_same_decision_with_every_feature(store):
    env, jwt = store
    data = json.loads(recall(env, "which package manager do we use in the webapp?", "--json"))
    assert data["scope"] == "project:web" and data["searched"] and 0 < data["threshold"] < 1
    first = data["candidates"][0]
    assert first["injected"] and "pnpm" in first["content"] and data["ids"] == [first["id"]]
    assert set(first["features"]) == set(FEATURES) and 0 <= first["probability"] <= 1
    assert [c["reason"] for c in data["candidates"][1:]] == ["below threshold"] * len(OTHERS)
