"""Property-based consistency: many agents of different authorities and scopes, random interleavings, faults.

A Hypothesis state machine drives 3 to 6 real AgentClients (real caches, the
real GGUF model) against a real `mnemosync serve` subprocess started with a
policy file that gives them every authority from 1 (a human) to 6, different
scopes and one weak admin, through a proxy that breaks the network on demand.
It adds, updates every field and forgets from current and stale versions,
restores, moves layers, links and unlinks, resolves conflicts, redacts,
searches online and offline, syncs, takes the server down (SIGTERM with a
rebuild, or kill -9), loses caches, kills agents inside an apply, loses
Appends and replies, cuts agents off, redelivers live entries, tampers with
entries and checkpoints, forges redaction marks, rewrites a copy of the
server's history, meets every threshold exactly, has weaker agents challenge
stronger ones (and every guarded operation on a memory the human governs),
writes stale versions across a stronger agent's change, and checks everything
against `reference_model.fold`, which knows nothing of the server's code (the
invariants are listed in `invariants.py`).

Every strategy and precondition depends only on what the machine itself did
(memory ids are chosen by the machine, agents are fixed at start), so a
failure shrinks and prints a reproducible example.

The machine is composed of `harness.py` (the system and its reference),
`rules.py`, `rules_faults.py`, `rules_search.py`, `rules_boundaries.py` (the
steps) and `invariants.py` (what must hold). Any new rule moves the derandomized runs, and their reach, for
every other rule, so typed links and walks (`rules_graph.py`) with Sync's harder paths (`rules_sync.py`), and
consolidation (`rules_consolidation.py`) run in machines of their own, `GraphMachine` and `ConsolidationMachine`;
snapshots (`rules_snapshots.py`) and sessions of different scopes on one local agent (`rules_session_scopes.py`)
in `SnapshotMachine`.
`reach.py` counts what a run reached; the test prints that summary and fails if a rule, an invariant or a
fault never happened.

Profiles (`HYPOTHESIS_PROFILE`): `ci` (the default) and `thorough` for long
local runs, registered below as `consistency-ci` and `consistency-thorough`;
each gives the example and step counts. Both replay the same examples every
run (derandomized); `MNEMOSYNC_CONSISTENCY_EXPLORE=1` draws new ones instead,
for nightly or local runs (a failure prints the blob that reproduces it).
`MNEMOSYNC_CONSISTENCY_NO_SHRINK=1` reports the first failing example as is and
stops there, without looking for other failures (the fault-injection harness,
`python -m ops.faults`, sets it: one failure kills a fault).
"""

from __future__ import annotations

import os
import uuid
from contextlib import ExitStack

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from rules_reach import OWN_TOPICS, REDACTED_EVERYWHERE, ReachRules
from rules_session_scopes import SESSION_SCOPES, SessionScopeRules
from rules_sessions import CONFLICT_KEPT, LOST_UPDATE_CHECKED, SessionRules
from rules_snapshots import SnapshotRules

from mnemosync.v1 import memory_pb2 as pb

import reach
import reference_model as ref
from helpers import postgres_database
from invariants import ReplicationInvariants
from rules import ELIGIBLE, REDACTED_QUOTE, ReplicationRules
from rules_boundaries import BoundaryRules
from rules_consolidation import BATCH_PREFILTER, LINKED, MERGED, UNLINKED, ConsolidationRules
from rules_faults import TAMPERED_FIELDS, FaultRules
from rules_graph import GraphRules
from rules_search import SearchRules
from rules_sync import OLDER_CHECKPOINT, SYNC_WHILE_COMMITTING, SyncRules

PROFILE = "thorough" if os.environ.get("HYPOTHESIS_PROFILE") == "thorough" else "ci"
EXPLORE = os.environ.get("MNEMOSYNC_CONSISTENCY_EXPLORE") == "1"
NO_SHRINK = os.environ.get("MNEMOSYNC_CONSISTENCY_NO_SHRINK") == "1"

_COMMON = dict(deadline=None, suppress_health_check=list(HealthCheck), database=None, print_blob=True)
settings.register_profile("consistency-ci", max_examples=12, stateful_step_count=50, **_COMMON)
settings.register_profile("consistency-ci-postgresql", max_examples=5, stateful_step_count=40, **_COMMON)
settings.register_profile("consistency-thorough", max_examples=100, stateful_step_count=80, **_COMMON)
settings.register_profile("consistency-ci-consolidation", max_examples=4, stateful_step_count=40, **_COMMON)

FAULTS = [
    "an agent was killed inside an apply",
    "a reply was lost after the server committed",
    "an Append was lost before it reached the server",
    "an outbox flush failed partway",
    "the live stream delivered entries the cache had",
    "a late acknowledgement",
    "an acknowledgement past the head",
    *(f"an entry tampered with in transit ({field}) was refused" for field in TAMPERED_FIELDS),
    "a server whose history was rewritten was refused",
]
"""Every fault a run must have injected for real."""

OUTCOMES = [
    "a Sync crossed page boundaries",
    "a keyword search on the server found what it looked for",
    "a vector search on the server found what it looked for",
    "a hybrid search on the server found what it looked for",
    "a keyword search offline found what it looked for",
    "a vector search offline found what it looked for",
    "a hybrid search offline found what it looked for",
    "a queued write was found offline",
    *(f"a near duplicate {where} the threshold of another's memory" for where in ("below", "at", "above")),
    "an agent's acknowledgement was checked against its cache",
    "a stale update after a stronger agent rewrote the memory (repeating it)",
]
"""Paths a run must have taken."""


class ReplicationMachine(ReplicationRules, FaultRules, SearchRules, BoundaryRules, ReplicationInvariants):
    """The rules and invariants over one harness (see the module docstring)."""


class ConsolidationMachine(ReplicationRules, SearchRules, ConsolidationRules, ReplicationInvariants):
    """The basic rules (adds, updates, links, uses, decay sweeps) and searches with consolidation, on SQLite: a
    machine of its own so that the main machine's examples stay as they were."""


class GraphMachine(ReplicationRules, SearchRules, GraphRules, SyncRules, ReplicationInvariants):
    """The basic rules and searches with typed links and walks on the server and the cache, and Sync's harder
    paths (`rules_sync.py`), on SQLite (see ConsolidationMachine for why it is a machine of its own)."""


class SessionMachine(ReplicationRules, SearchRules, SessionRules, SessionScopeRules, ReplicationInvariants):
    """The basic rules and searches with two sessions of the live agent and a person at a command line, each
    changing what it was shown (`rules_sessions.py`), and sessions of different scopes on one local agent
    (`rules_session_scopes.py`), on SQLite (see ConsolidationMachine for why it is a machine of its own)."""


class SnapshotMachine(ReplicationRules, SearchRules, SnapshotRules, ReachRules, ReplicationInvariants):
    """The basic rules and searches with new replicas started from snapshots mid-run, redactions that must reach
    every projected field, file and snapshot, and every agent's own topics (`rules_reach.py`), on SQLite (see
    ConsolidationMachine for why it is a machine of its own)."""


CONFORMANCE = True  # the machine runs once per store (conftest.STORE_KINDS)


@pytest.mark.timeout(3600)
def test_replicas_of_agents_with_different_authorities_converge_and_obey_governance(model_path, embedder, store_kind,
                                                                                    request, capsys):
    """On PostgreSQL the machine runs a smaller profile (`consistency-ci-postgresql` unless thorough) and its
    reach is reported but not required: the SQLite run proves the reach, this one that the second store
    keeps every invariant."""
    ReplicationMachine.embedder = embedder
    ReplicationMachine.model_path = model_path
    ReplicationMachine.new_store = None
    profile = f"consistency-{PROFILE}"
    if store_kind == "postgresql":  # a fresh database per example, all dropped after
        databases = ExitStack()
        request.addfinalizer(databases.close)
        pg = request.getfixturevalue("postgres_server")
        ReplicationMachine.new_store = staticmethod(lambda: databases.enter_context(postgres_database(pg)))
        profile = "consistency-ci-postgresql" if PROFILE == "ci" else profile
    reach.reset()
    try:
        run_state_machine_as_test(ReplicationMachine, settings=settings(
            settings.get_profile(profile),
            derandomize=not EXPLORE,
            phases=[Phase.explicit, Phase.generate] if NO_SHRINK else list(Phase),
            report_multiple_bugs=not NO_SHRINK,
        ))
    finally:
        with capsys.disabled():
            print(f"\nconsistency suite on {store_kind}, profile {profile}{' (exploring)' if EXPLORE else ''}: "
                  f"what it reached\n{reach.summary()}")
    if store_kind == "postgresql":
        return
    rules = sorted({r.function.__name__ for r in ReplicationMachine.setup_state().rules})
    invariants = sorted({i.function.__name__ for i in ReplicationMachine.setup_state().invariants})
    never = {
        "rules": reach.missing(reach.RULE, rules),
        "invariants": reach.missing(reach.INVARIANT, invariants),
        "faults": reach.missing(reach.FAULT, FAULTS),
        "paths": reach.missing(reach.OUTCOME, OUTCOMES),
    }
    assert not any(never.values()), f"the run never reached these: {never}"


@pytest.mark.timeout(3600)
def test_consolidation_keeps_replicas_converged_and_governed(model_path, embedder, capsys):
    """Consolidation's entries obey the model's rules, a second run writes nothing, a merge never goes to a weaker
    author, and a replica's topics equal the server's (`rules_consolidation.py`); the run must have merged, linked
    sent an Append big enough for the batched near-duplicate pre-filter, and consolidated again after a link of its
    own was removed, and a sweep must have archived a memory the model knew to be eligible."""
    _run_on_the_side(ConsolidationMachine, "the_admin_consolidates", model_path, embedder, capsys,
                     outcomes=[BATCH_PREFILTER, MERGED, LINKED, UNLINKED, ELIGIBLE])


@pytest.mark.timeout(3600)
def test_typed_links_and_walks_agree_with_the_model_on_the_server_and_every_cache(model_path, embedder, capsys):
    """Links refused or accepted as the model predicts, and every walk (server and cache) equal to the model's walk
    over the same state (`rules_graph.py`); a proof from an older checkpoint and a Sync during another agent's
    commits must have happened (`rules_sync.py`), and a redaction of a memory with a quote."""
    _run_on_the_side(GraphMachine, "link_and_walk", model_path, embedder, capsys,
                     outcomes=[OLDER_CHECKPOINT, SYNC_WHILE_COMMITTING, REDACTED_QUOTE])


def _run_on_the_side(machine, required_rule: str, model_path, embedder, capsys, outcomes=()) -> None:
    """Runs a machine of its own on SQLite (the `consistency-ci-consolidation` profile under ci), prints what it
    reached and fails if `required_rule` never ran or one of `outcomes` never happened."""
    machine.embedder = embedder
    machine.model_path = model_path
    machine.new_store = None
    profile = "consistency-ci-consolidation" if PROFILE == "ci" else f"consistency-{PROFILE}"
    reach.reset()
    try:
        run_state_machine_as_test(machine, settings=settings(
            settings.get_profile(profile), derandomize=not EXPLORE,
            phases=[Phase.explicit, Phase.generate] if NO_SHRINK else list(Phase)))
    finally:
        with capsys.disabled():
            print(f"\n{machine.__name__}, profile {profile}: what it reached\n{reach.summary()}")
    assert not reach.missing(reach.RULE, [required_rule]), f"{required_rule} never ran"
    assert not reach.missing(reach.OUTCOME, list(outcomes)), f"never reached: {reach.missing(reach.OUTCOME, outcomes)}"


@pytest.mark.timeout(3600)
def test_a_replica_started_from_a_snapshot_mid_run_converges_with_a_replay(model_path, embedder, capsys):
    """A new cache of any agent started from a snapshot made at any point of a run equals a replay of the same
    entries (`rules_snapshots.py`); a redaction must have reached every projected field, file and snapshot, and
    agents of different grants must have listed their own topics at one position (`rules_reach.py`)."""
    _run_on_the_side(SnapshotMachine, "a_new_replica_starts_from_a_snapshot", model_path, embedder, capsys,
                     outcomes=[REDACTED_EVERYWHERE, OWN_TOPICS])


@pytest.mark.timeout(3600)
def test_no_session_or_person_replaces_a_version_it_was_not_shown_without_a_conflict(model_path, embedder, capsys):
    """No acknowledged write of a session or a person replaced a version they had not seen without a conflict,
    and the case where what they saw had moved must have happened (`rules_sessions.py`); sessions on one local
    agent write to their own scopes, not the scope of the session that started it (`rules_session_scopes.py`),
    which must have happened."""
    _run_on_the_side(SessionMachine, "two_sessions_and_a_person_write_after_what_they_saw_moved", model_path,
                     embedder, capsys, outcomes=[LOST_UPDATE_CHECKED, CONFLICT_KEPT, SESSION_SCOPES])


def test_the_suite_catches_a_changelog_with_a_skipped_entry():
    """The reference fold must fail on a gap, or the suite could pass with a broken Sync."""
    first = pb.ChangelogEntry(seq=1, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="x", scope="user")))
    third = pb.ChangelogEntry(seq=3, op="add", memory_id=str(uuid.uuid4()), version=1, agent_id="a",
                              operation=pb.Operation(add=pb.AddOp(content="y", scope="user")))
    with pytest.raises(AssertionError, match="seq 3 where 2 was expected"):
        ref.fold([first, third])
