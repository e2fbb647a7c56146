"""An Append's adds are checked against the memories that exist and the live contents of their scopes, read for a
chunk of adds at once (`mnemosync.server.admission.LiveMemories`): every decision must be the one made add by add.
A model of those rules (a taken id refuses the whole Append; an add whose content a live memory of its scope has
is that memory, the first written if a restore made two; a forgotten memory is not live) is run beside a real
ledger on random Appends, small ones and ones large enough to be validated and admitted a chunk at a time, with
ids, contents and scopes from small pools so that they collide within a chunk, across chunks and across Appends.
"""

from __future__ import annotations

import sqlite3
import tempfile
import uuid
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mnemosync.kernel.errors import AlreadyExists
from mnemosync.kernel.operations import OpRequest
from mnemosync.server.identity import Caller
from mnemosync.server.ledger import Ledger
from mnemosync.server.writes import FEED_CHUNK

from helpers import TEST_MODEL_INFO, fake_vector

IDS = [str(uuid.UUID(int=i)) for i in range(1, 9)]
CONTENTS = ["the deploy runs on Fridays", "staging is on port 5432", "ask Ana before a release"]
SCOPES = ["user", "project:x"]

_ADD = st.tuples(st.just("add"), st.sampled_from(IDS + [""]), st.sampled_from(CONTENTS), st.sampled_from(SCOPES))
_FORGET = st.tuples(st.sampled_from(["forget", "restore"]), st.sampled_from(IDS), st.just(""), st.just(""))
_SMALL = st.lists(st.one_of(_ADD, _ADD, _FORGET), min_size=1, max_size=6)
_LARGE = st.lists(_ADD, min_size=2 * FEED_CHUNK, max_size=2 * FEED_CHUNK + 20).map(
    lambda ops: [(op, "" if i % 7 else memory_id, content, scope) for i, (op, memory_id, content, scope) in
                 enumerate(ops)])  # mostly fresh ids, so that most large Appends are written


def _request(op: str, memory_id: str, content: str, scope: str, versions: dict[str, int]) -> OpRequest:
    if op != "add":
        return OpRequest(str(uuid.uuid4()), memory_id, op, versions.get(memory_id, 1), {})
    return OpRequest(str(uuid.uuid4()), memory_id or str(uuid.uuid4()), "add", 0,
                     {"scope": scope, "content": content}, fake_vector(f"{content} {memory_id}"))


def _model(state: dict, requests: list[OpRequest]) -> list[tuple[str, bool]] | str:
    """The decisions made add by add: (memory id, deduplicated) for each operation, or "taken" when the Append is
    refused (and `state` is left as it was). `state["memories"]`: id -> [scope, content, archived], in the order
    written; `state["versions"]`: id -> version."""
    memories = {mid: list(m) for mid, m in state["memories"].items()}
    versions = dict(state["versions"])
    out = []
    for r in requests:
        if r.op != "add":
            memories[r.memory_id][2] = r.op == "forget"
            versions[r.memory_id] += 1
            out.append((r.memory_id, False))
            continue
        if r.memory_id in memories:
            return "taken"
        copy = next((mid for mid, (scope, content, archived) in memories.items()
                     if (scope, content) == (r.fields["scope"], r.fields["content"]) and not archived), None)
        if copy is not None:
            out.append((copy, True))
            continue
        memories[r.memory_id] = [r.fields["scope"], r.fields["content"], False]
        versions[r.memory_id] = 1
        out.append((r.memory_id, False))
    state.update(memories=memories, versions=versions)
    return out


@given(st.lists(st.one_of(_SMALL, _SMALL, _SMALL, _LARGE), min_size=1, max_size=6))
@example([[("add", IDS[0], CONTENTS[0], "user")], [("forget", IDS[0], "", "")], [("add", IDS[1], CONTENTS[0], "user")],
          [("restore", IDS[0], "", "")], [("add", "", CONTENTS[0], "user"), ("add", IDS[2], CONTENTS[1], "user")]])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_every_add_of_every_append_is_decided_as_one_by_one_whether_its_chunk_was_looked_up_at_once(appends):
    state: dict = {"memories": {}, "versions": {}}
    with tempfile.TemporaryDirectory() as work:
        with Ledger.sqlite(Path(work) / "m.db", synchronous="normal") as ledger:
            for ops in appends:
                _check_append(ledger, state, ops)
        with sqlite3.connect(Path(work) / "m.db") as conn:
            stored = [(memory_id, [scope, content, bool(archived)]) for memory_id, scope, content, archived in
                      conn.execute("SELECT id, scope, content, archived FROM memories ORDER BY num")]
        assert stored == list(state["memories"].items())


def _check_append(ledger: Ledger, state: dict, ops: list[tuple[str, str, str, str]]) -> None:
    memories = state["memories"]
    ops = [op for i, op in enumerate(ops)  # a forget of a live memory, a restore of a forgotten one, once each
           if op[0] == "add" or (op[1] in memories and memories[op[1]][2] == (op[0] == "restore")
                                 and op[1] not in [o[1] for o in ops[:i] if o[0] != "add"])]
    if not ops:
        return
    requests = [_request(*op, state["versions"]) for op in ops]
    expected = _model(state, requests)
    try:
        results = ledger.writes.append(Caller("agent-a"), requests, TEST_MODEL_INFO).results
        got: list[tuple[str, bool]] | str = [(r.memory_id, r.deduplicated) for r in results]
    except AlreadyExists:
        got = "taken"
    assert got == expected


def test_the_group_pre_filter_flags_an_add_near_an_earlier_appends_add_and_none_within_one_append():
    """`admission.near_earlier` looks only at adds of earlier Appends of the group: within one Append (an Append alone
    in its group) nothing is flagged and no product of its vectors is made."""
    from mnemosync.kernel.operations import ValidOp
    from mnemosync.server import admission
    from mnemosync.server.governance import Rules

    vector = np.asarray(fake_vector("the deploy runs on Fridays"), dtype="<f4").tobytes()

    def adds(agent: str, count: int) -> tuple[Caller, list[ValidOp]]:
        return Caller(agent), [ValidOp(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                       {"scope": "user", "content": f"note {i}"}, vector) for i in range(count)]

    rules = Rules()
    assert admission.near_earlier([adds("agent-a", 3)], rules) == [[False, False, False]]
    assert admission.near_earlier([adds("agent-a", 2), adds("agent-b", 2)], rules) == [[False, False], [True, True]]
    assert admission.near_earlier([adds("agent-a", 2), adds("agent-a", 1)], rules) == [[False, False], [False]]
