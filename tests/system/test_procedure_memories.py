"""Procedure memories (issue 31 item 5, seed 004): steps, preconditions and postconditions stored in the changelog,
folded alike by the server and every cache, found by a search for a step, and shown as numbered lists.

The real server, real SQLite, real caches, the real model and the `mnemosync` command.
"""

from __future__ import annotations

import json
import uuid

import pytest

from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.search import Filter
from mnemosync.shim import core_memories

from helpers import mnemosync

STEPS = ["Run the test suite", "Build the docker image with the release tag", "Push the image to the registry",
         "Roll the LXC container over to the new image"]
PRE = ["All tests pass on main", "The changelog names the release"]
POST = ["The health endpoint answers 200", "The Discord bot is online"]


def _scope() -> str:
    return f"project:p{uuid.uuid4().hex[:12]}"


def test_a_procedure_is_stored_found_by_a_step_and_every_cache_agrees(server, make_client):
    writer, reader = make_client(server.address, "writer"), make_client(server.address, "reader")
    scope = _scope()
    added = writer.add("Deploy Major Domo to production", scope=scope, type="procedure", steps=STEPS,
                       preconditions=PRE, postconditions=POST).memory_id
    plain = writer.add("Major Domo is a Discord bot", scope=scope).memory_id
    got = reader.get(added)
    assert (list(got.procedure.steps), list(got.procedure.preconditions), list(got.procedure.postconditions)) == (
        STEPS, PRE, POST)
    assert reader.get(plain).procedure is None
    served = reader.search("registry", scopes=[scope], mode="keyword").hits
    reader.sync()
    cached = reader.local_search("registry", vector=None, limit=5, mode="keyword", filter=Filter(scopes=(scope,))).hits
    assert [h.memory.id for h in served] == [h.memory.id for h in cached] == [added]  # only a step says "registry"
    assert list(served[0].memory.procedure.steps) == STEPS

    writer.update(added, steps=STEPS[:2] + ["Tag the release in git"])
    reader.sync()
    again = reader.get(added)
    assert list(again.procedure.steps) == STEPS[:2] + ["Tag the release in git"]
    assert list(again.procedure.preconditions) == PRE and list(again.procedure.postconditions) == POST  # kept
    assert again.version == 2
    assert reader.search("registry", scopes=[scope], mode="keyword").hits == []  # the old step left the index
    assert [h.memory.id for h in reader.search("git tag release", scopes=[scope], mode="keyword").hits] == [added]
    writer.sync()
    snapshots = [c.cache.snapshot()[added] for c in (writer, reader)]
    assert snapshots[0]["procedure"] == snapshots[1]["procedure"] is not None
    assert snapshots[0]["fts"] == snapshots[1]["fts"] and "Tag the release in git" in snapshots[0]["fts"][0]

    core = core_memories.build(reader.local, [scope], budget_tokens=800).markdown
    block = core[core.index("- Deploy Major Domo"):]
    assert "\n  Preconditions:\n    1. All tests pass on main\n    2. The changelog names the release\n" in block
    assert "\n  Steps:\n    1. Run the test suite\n    2. Build the docker image with the release tag\n" \
           "    3. Tag the release in git\n" in block


def test_a_procedure_over_the_limits_is_refused_naming_the_field_and_nothing_is_written(server, make_client):
    writer = make_client(server.address, "writer")
    scope = _scope()
    with pytest.raises(InvalidArgument, match="steps has 51 items; the limit is 50"):
        writer.add("Too long a procedure", scope=scope, type="procedure", steps=[f"step {i}" for i in range(51)])
    with pytest.raises(InvalidArgument, match=r"preconditions\[1\] must be a non-empty text"):
        writer.add("A procedure with an empty condition", scope=scope, type="procedure", steps=["go"],
                   preconditions=["ready", "  "])
    assert writer.search("procedure", scopes=[scope], mode="keyword").hits == []


def test_the_commands_store_a_procedure_and_get_shows_numbered_lists(server, tmp_path, model_path):
    env = {"MNEMOSYNC_SERVER": server.address, "MNEMOSYNC_AGENT_ID": "cli-agent", "MNEMOSYNC_INSECURE": "1",
           "MNEMOSYNC_CACHE_DIR": str(tmp_path / "cli-cache"), "MNEMOSYNC_EMBED_MODEL": str(model_path)}
    added = mnemosync("add", "Rotate the signing key", "--type", "procedure", "--scope", _scope(),
                      "--precondition", "A new key is in the vault", "--step", "Publish the new public key",
                      "--step", "Switch signing to the new key", "--postcondition", "Old tokens still verify",
                      "--json", env=env)
    assert added.returncode == 0, added.stderr
    memory_id = json.loads(added.stdout)["memory_id"]
    shown = mnemosync("get", memory_id, env=env)
    assert shown.returncode == 0, shown.stderr
    assert ("Rotate the signing key\n\nPreconditions:\n  1. A new key is in the vault\nSteps:\n"
            "  1. Publish the new public key\n  2. Switch signing to the new key\nPostconditions:\n"
            "  1. Old tokens still verify\n") in shown.stdout
    as_json = json.loads(mnemosync("get", memory_id, "--json", env=env).stdout)
    assert as_json["steps"] == ["Publish the new public key", "Switch signing to the new key"]
    changed = mnemosync("update", memory_id[:8], "--step", "Switch signing", "--json", env=env)
    assert changed.returncode == 0, changed.stderr
    assert json.loads(mnemosync("get", memory_id, "--json", env=env).stdout)["steps"] == ["Switch signing"]
