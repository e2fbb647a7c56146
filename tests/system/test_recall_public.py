"""The prompt hook on a held-out public project store at 1 and 3,000 memories, as Claude Code runs it.

The store is `workers` of `ops/bench/data/recall_public/` (test split: the decision was never fitted on it), served
by a real server (memories appended in batches, embedded through the labelled sets' embedding cache), and each
prompt goes through `mnemosync hook prompt`, a new process per prompt, to a warm local agent. At one memory a
paraphrase of the stored rule gets it and unrelated prompts get nothing; at 3,000 (the store padded in its scope
with other stores' memories, as the benchmark pads it) the hook injects what the benchmark measures for the same
prompts (`ops.bench.recall_sizes`, the cache's search path), so the benchmark's figures are the hook's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from mnemosync.agent import local_socket
from ops.bench import bench_quality, datasets, recall_prompts, recall_sizes

from helpers import ServeProcess, wait_until

MNEMOSYNC = str(Path(sys.executable).parent / "mnemosync")
STORE = "workers"


def _store() -> datasets.PromptStore:
    return next(s for s in datasets.public_recall_stores() if s.name == STORE)


@pytest.fixture(scope="module")
def cached(model_path):
    """The embedder, answering from the embedding cache the benchmark and the quality tests share."""
    from mnemosync.agent.embeddings import Embedder
    from ops.bench.embedding_cache import DEFAULT_DIR, CachedEmbeddings

    with Embedder(model_path) as embedder:
        yield CachedEmbeddings(embedder, DEFAULT_DIR)


@contextmanager
def hooked(variant: recall_sizes.Variant, root: Path, model_path: Path, cached) -> Iterator[dict[str, str]]:
    """A server holding the variant's memories in scope user (which every session reads), appended 100 at a time,
    and the environment Claude Code gives a hook of a session of project `workers`, with its warm agent caught up;
    the agent is stopped at the end."""
    from mnemosync.v1 import memory_pb2 as pb
    from ops.bench.serverproc import Client

    fp = cached.embedder.fingerprint
    with ServeProcess(root / "server", embed_model=model_path) as running:
        loader = Client(running.address, "loader")
        try:
            bench_quality.store(loader, cached, pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions,
                                                                  sha256=fp.sha256),
                                [datasets.Memory(id=i.label, content=i.content, type=i.type)
                                 for i in variant.memories])
        finally:
            loader.close()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMOSYNC_", "CLAUDE_"))}
        env.update({"MNEMOSYNC_SERVER": running.address, "MNEMOSYNC_AGENT_ID": "carol", "MNEMOSYNC_INSECURE": "1",
                    "MNEMOSYNC_CACHE_DIR": str(root / "carol"), "MNEMOSYNC_EMBED_MODEL": str(model_path),
                    "MNEMOSYNC_TIMEOUT": "5", "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="mp-", dir="/tmp"),
                    "CLAUDE_PROJECT_DIR": "/home/me/src/workers", "MNEMOSYNC_RECALL_TIMEOUT": "10"})
        try:
            _warm(env)
            yield env
        finally:
            _stop(env)
            shutil.rmtree(env["XDG_RUNTIME_DIR"], ignore_errors=True)


def _ask(env: dict[str, str], prompt: str, session: str) -> str:
    payload = {"session_id": session, "transcript_path": "/dev/null", "cwd": "/home/me/src/workers",
               "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": prompt}
    done = subprocess.run([MNEMOSYNC, "hook", "prompt"], input=json.dumps(payload), capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"] if done.stdout.strip() else ""


def _stop(env: dict[str, str]) -> None:
    path = local_socket.socket_path(env)
    try:
        pid = local_socket.ask(path, {"op": "ping"}, timeout=2)["pid"]
    except OSError:
        return
    os.kill(pid, 15)
    wait_until(lambda: not path.exists(), timeout=20, message="the agent did not stop")


def _warm(env: dict[str, str]) -> None:
    """Starts the warm agent and waits until it is caught up and live (the first prompt would otherwise race its
    catch-up of 3,000 memories)."""
    path = local_socket.socket_path(env, create=True)
    _ask(env, "hello there, starting a session", "warm-up")

    def live():
        try:
            return local_socket.ask(path, {"op": "status"}, timeout=2).get("live")
        except (OSError, ValueError):
            return False

    wait_until(live, timeout=120, message="the warm agent did not catch up")


def test_in_a_store_of_one_memory_a_paraphrase_gets_it_and_an_unrelated_prompt_nothing(tmp_path, model_path, cached):
    """Issue 38: the decision of issue 28 left a store of one memory silent (its features compared hits)."""
    store = _store()
    [variant] = [v for v in recall_sizes.variants([store], (1,)) if v.name == f"{STORE}/1/wk01"]
    with hooked(variant, tmp_path, model_path, cached) as env:
        said = _ask(env, "can I install the deps with npm install?", "s1")
        assert "Use pnpm; never npm or yarn." in said and "[" in said.splitlines()[1]
        for n, prompt in enumerate(("write a product description for a handmade mug", "thanks, appreciate it",
                                    "what is the difference between interface and type in TypeScript?")):
            assert _ask(env, prompt, f"n{n}") == "", prompt


def test_at_3000_memories_the_hook_injects_what_the_benchmark_measures(tmp_path, model_path, cached):
    """The benchmark searches the cache's way in process; the hook asks a warm agent, which asks the server. Both
    must reach the same decision on the store's prompts, so the benchmark's figures at 3,000 are the hook's."""
    from mnemosync.shim.recall import shipped_decision

    store = _store()
    [variant] = recall_sizes.variants([store], (3000,))
    measured = recall_sizes.collect([variant], cached.embed_many, tmp_path)
    select = recall_prompts.decision_selector(shipped_decision())
    expected = {row["id"]: [h.memory.content for h in select(row["text"], recall_prompts.hits_of(row))]
                for row in measured}
    with hooked(variant, tmp_path, model_path, cached) as env:
        differ, injected = [], 0
        for row in measured:
            said = _ask(env, row["text"], f"s-{row['id']}")
            lines = said.splitlines()[1:]
            injected += len(lines)
            if len(lines) != len(expected[row["id"]]) or not all(
                    any(content[:40] in line for line in lines) for content in expected[row["id"]]):
                differ.append((row["text"], lines, expected[row["id"]]))
        assert len(differ) <= 1, differ  # a near tie of two similarities may fall either way
        assert injected >= 10 and sum(map(len, expected.values())) >= 10
        assert recall_sizes.figures(measured, select)["precision"] >= 0.7
