"""A commit group of small add-only Appends shares its reads and writes its changelog rows together
(`mnemosync.server.writes.Writes.shares`): each request still gets the answer, the seq and the refusal it gets one
group job at a time, in the order it was queued, and a row SQLite refuses fails only its own request."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from mnemosync.kernel.errors import AlreadyExists
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest
from mnemosync.server import maintenance
from mnemosync.server.identity import Caller
from mnemosync.server.ledger import Ledger

from helpers import TEST_MODEL, fake_vector, wait_until

MODEL = ModelInfo(TEST_MODEL.name, TEST_MODEL.dimensions, TEST_MODEL.sha256)


def _add(content: str, *, op_id: str | None = None, memory_id: str | None = None) -> OpRequest:
    return OpRequest(op_id or str(uuid.uuid4()), memory_id or str(uuid.uuid4()), "add", 0,
                     {"scope": "user", "content": content}, fake_vector(content))


def _one_group(store: Ledger, requests: list[tuple[str, list[OpRequest]]]) -> list[Any]:
    """Queues every request behind a job that holds the writer, so that they run as one group in this order;
    returns each one's results or error."""
    release, holding = threading.Event(), threading.Event()
    holder = threading.Thread(target=store.submit, args=(lambda conn: holding.set() or release.wait(20),))
    holder.start()
    assert holding.wait(20)
    answers: list[Any] = [None] * len(requests)

    def append(i: int, agent: str, ops: list[OpRequest]) -> None:
        try:
            answers[i] = store.writes.append(Caller(agent), ops, MODEL).results
        except Exception as exc:  # noqa: BLE001 - the answer under test
            answers[i] = exc

    threads = []
    for i, (agent, ops) in enumerate(requests):
        threads.append(threading.Thread(target=append, args=(i, agent, ops)))
        threads[-1].start()
        wait_until(lambda queued=i + 1: store._writes.waiting == queued, message="the Append never queued")
    release.set()
    for t in [holder, *threads]:
        t.join(timeout=30)
    return answers


def _traced(store: Ledger) -> list[str]:
    """Every statement the writer runs from now on."""
    statements: list[str] = []
    store.submit(lambda conn: conn.set_trace_callback(statements.append))
    statements.clear()
    return statements


def test_a_group_of_single_adds_answers_as_one_job_at_a_time_and_writes_its_rows_together(tmp_path):
    with Ledger.sqlite(tmp_path / "shared.db", synchronous="normal") as store:
        earlier = _add("written before the group")
        [before] = store.writes.append(Caller("agent-a"), [earlier], MODEL).results
        taken = _add("a memory id taken before the group")
        store.writes.append(Caller("agent-b"), [taken], MODEL)
        first = _add("the first add of the group")
        statements = _traced(store)
        answers = _one_group(store, [
            ("agent-a", [first]),
            ("agent-b", [_add("refused: its memory id exists", memory_id=taken.memory_id)]),
            ("agent-a", [earlier]),  # a replay of an op_id committed before the group
            ("agent-c", [_add("the second add of the group")]),
            ("agent-a", [first]),  # a replay of an op_id the group wrote earlier
            ("agent-a", [_add("another operation", op_id=first.op_id)]),  # refused: the op_id is taken
            ("agent-d", [_add("the first add of the group")]),  # a copy of an add the group wrote earlier
            ("agent-b", [_add("the third add of the group"), _add("and the fourth")]),
        ])
        store.submit(lambda conn: conn.set_trace_callback(None))
        head = before.seq + 1
        [a], [c], [b3, b4] = answers[0], answers[3], answers[7]
        assert [a.seq, c.seq, b3.seq, b4.seq] == [head + 1, head + 2, head + 3, head + 4]  # in the order queued
        assert isinstance(answers[1], AlreadyExists) and isinstance(answers[5], AlreadyExists)
        [replayed_before], [replayed_in_group] = answers[2], answers[4]
        assert replayed_before.replayed and replayed_before.seq == before.seq
        assert replayed_in_group.replayed and replayed_in_group.seq == a.seq
        [copy] = answers[6]
        assert copy.deduplicated and copy.memory_id == first.memory_id
        assert store.head_seq() == head + 4
        assert store.log.verify().ok
        assert maintenance.compare_projections(store, tmp_path / "scratch.db") == []
        inserts = [i for i, s in enumerate(statements) if s.lstrip().startswith("INSERT INTO changelog")]
        released = [i for i, s in enumerate(statements) if s == "RELEASE job"]
        assert len(inserts) == 4 and min(inserts) > max(released)  # the group's rows together, after its last job
        lookups = [s for s in statements if "FROM changelog WHERE agent_id" in s]
        assert len(lookups) == 1  # every op_id of the group looked up at once


def test_a_row_sqlite_refuses_in_a_shared_group_fails_only_its_own_append(tmp_path):
    with Ledger.sqlite(tmp_path / "shared.db", synchronous="normal") as store:
        bad = _add("its changelog row is refused")
        store.submit(lambda conn: conn.execute(
            "CREATE TEMP TRIGGER refuse_row BEFORE INSERT ON changelog WHEN NEW.op_id = "
            f"'{bad.op_id}' BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"))
        answers = _one_group(store, [("agent-a", [_add("first")]), ("agent-b", [bad]),
                                     ("agent-c", [_add("third")])])
        assert isinstance(answers[1], Exception) and "refused by the test" in str(answers[1])
        [a], [c] = answers[0], answers[2]
        assert (a.seq, c.seq) == (1, 2)
        assert store.log.verify().ok
        assert maintenance.compare_projections(store, tmp_path / "scratch.db") == []


@pytest.mark.parametrize("refused_at", [0, 1])
def test_a_refused_append_in_a_shared_group_leaves_no_gap_in_the_chain(tmp_path, refused_at):
    with Ledger.sqlite(tmp_path / "shared.db", synchronous="normal") as store:
        taken = _add("taken")
        store.writes.append(Caller("agent-x"), [taken], MODEL)
        # the refused Append's first add is admitted before its second is refused: both are taken back
        refused = [_add("admitted, then taken back"), _add("refused", memory_id=taken.memory_id)]
        requests = [("agent-a", [_add("kept one")]), ("agent-b", [_add("kept two")])]
        requests.insert(refused_at, ("agent-c", refused))
        answers = _one_group(store, requests)
        assert isinstance(answers[refused_at], AlreadyExists)
        kept = [r.seq for i, answer in enumerate(answers) if i != refused_at for r in answer]
        assert kept == [2, 3]
        assert store.log.verify().ok
        assert maintenance.compare_projections(store, tmp_path / "scratch.db") == []


def test_a_busy_writer_lingers_for_the_next_job_so_that_it_joins_the_group():
    """After a group of several jobs the writer waits `linger_s` for more before it runs the next one; after a
    lone job it does not wait."""
    import sqlite3
    from concurrent.futures import Future

    from mnemosync.server.group_commit import GroupCommit, Hooks
    from mnemosync.server.sqlite_record import SqliteRecord

    sizes: list[int] = []
    writer = GroupCommit(sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None), SqliteRecord(),
                         Hooks(lambda conn, jobs, shared: sizes.append(len(jobs)), lambda conn: None, lambda: None),
                         linger_s=2.0)
    try:
        release, holding = threading.Event(), threading.Event()
        held = writer.submit_nowait(lambda conn: holding.set() or release.wait(20))
        assert holding.wait(20)
        pair = [writer.submit_nowait(lambda conn: 1), writer.submit_nowait(lambda conn: 2)]
        release.set()
        assert held.result(20) and [f.result(20) for f in pair] == [1, 2]  # a group of two: the writer is busy
        later: list[Future] = []
        first = writer.submit_nowait(lambda conn: 3)
        timer = threading.Timer(0.2, lambda: later.append(writer.submit_nowait(lambda conn: 4)))
        timer.start()
        assert first.result(20) == 3
        timer.join()
        assert later[0].result(20) == 4
        assert sizes == [1, 2, 2]  # the job sent 0.2 s after the first joined its group
    finally:
        writer.close()
