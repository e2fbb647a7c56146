"""Property-based consistency: many agents of different authorities, random interleavings, faults.

A Hypothesis state machine drives 2 to 4 real AgentClients (real caches, the
real GGUF model) against a real `mnemosync serve` subprocess started with a
policy file that gives them different authorities (a human, two agents of
equal authority, a weak admin). It adds, updates and forgets from current and
stale versions, restores, moves layers, links and unlinks, resolves conflicts,
syncs, takes the server down (SIGTERM with a rebuild, or kill -9), loses
caches, crashes an agent in the middle of applying a batch, delivers
operations and old suffixes twice, and checks everything against
`reference_model.fold`, which knows nothing of the server's code:

* every changelog entry obeys every governance rule and the model's folding
  rules (seq gap-free, append-only, hash chain, versions, conflict marks);
* every refusal is one the model predicts, and nothing the model says must be
  refused is accepted;
* once everyone has synced, every cache, the server and the model agree on
  every memory, its open conflicts and every conflict's revisions, and each
  cache's full projection equals a fresh fold of the changelog;
* acknowledged and queued writes arrive exactly once and in order; offsets
  only move forward and never pass the head or what a cache durably applied;
* a restart in a fresh process and `mnemosync rebuild` change nothing.

Every strategy and precondition depends only on what the machine itself did
(memory ids are chosen by the machine, agents are fixed at start), so a
failure shrinks and prints a reproducible example.

The machine is composed of `harness.py` (the system and its reference),
`rules.py` (the steps) and `invariants.py` (what must hold).

Profiles: `HYPOTHESIS_PROFILE=ci` (the default: bounded for CI) or `thorough`
for long local runs.
"""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from mnemosync.v1 import memory_pb2 as pb

import reference_model as ref
from harness import NO_SHRINK, THOROUGH
from helpers import postgres_database
from invariants import ReplicationInvariants
from rules import ReplicationRules


class ReplicationMachine(ReplicationRules, ReplicationInvariants):
    """The rules and invariants over one harness (see the module docstring)."""


CONFORMANCE = True  # the machine runs once per store (conftest.STORE_KINDS)


@pytest.mark.timeout(1800)
def test_replicas_of_agents_with_different_authorities_converge_and_obey_governance(model_path, embedder, store_kind,
                                                                                    request):
    ReplicationMachine.embedder = embedder
    ReplicationMachine.model_path = model_path
    ReplicationMachine.new_store = None
    if store_kind == "postgresql":  # a fresh database per example, all dropped after
        databases = ExitStack()
        request.addfinalizer(databases.close)
        pg = request.getfixturevalue("postgres_server")
        ReplicationMachine.new_store = staticmethod(lambda: databases.enter_context(postgres_database(pg)))
    run_state_machine_as_test(ReplicationMachine, settings=settings(
        max_examples=100 if THOROUGH else 8,
        stateful_step_count=60 if THOROUGH else 30,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
        print_blob=True,
        phases=[Phase.explicit, Phase.generate] if NO_SHRINK else list(Phase),
    ))


def test_the_suite_catches_a_changelog_with_a_skipped_entry():
    """The reference fold must fail on a gap, or the suite could pass with a broken Sync."""
    first = pb.ChangelogEntry(seq=1, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="x", scope="user")))
    third = pb.ChangelogEntry(seq=3, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="y", scope="user")))
    with pytest.raises(AssertionError, match="seq 3 where 2 was expected"):
        ref.fold([first, third])
