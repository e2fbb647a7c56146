"""Every search path ranks the same data the same: the server, an agent's offline cache, and its pending writes.

The real model embeds real conversational turns (the first sessions of the
labelled set in `ops/bench/data/conversations`); each question runs in every
mode, and the offline answers must equal the server's, result by result.
"""

from __future__ import annotations

import pytest

from ops.bench import datasets

from helpers import ServeProcess, free_port, wait_until

QUESTIONS = ("Who did Maya have her first proper Rumo interview with?", "How is Theo's half marathon training going?",
             "What did Biscuit do to the Christmas tree?", "Where is the Rumo office?", "Lisbon flat hunting")


def ranking(client, modes=("hybrid", "vector", "keyword")) -> dict:
    """(memory id, final score) of the top 10 per question and mode, and whether any answer came from offline."""
    found, offline = {}, set()
    for question in QUESTIONS:
        for mode in modes:
            outcome = client.search(question, limit=10, mode=mode)
            offline.add(outcome.offline)
            found[question, mode] = [(h.memory.id, h.final) for h in outcome.hits]
    return {"results": found, "offline": offline}


def assert_same(got: dict, expected: dict) -> None:
    for key, hits in expected.items():
        assert [i for i, _ in got[key]] == [i for i, _ in hits], key
        assert [s for _, s in got[key]] == pytest.approx([s for _, s in hits], rel=1e-6), key


def test_the_server_the_offline_cache_and_pending_writes_rank_the_same_data_the_same(tmp_path, make_client):
    turns = [m for m in datasets.conversations_set().memories if m.session in ("c1:s1", "c1:s2", "c1:s3", "c1:s4")]
    stored, pending = turns[:-12], turns[-12:]
    port, data = free_port(), tmp_path / "server"
    server = ServeProcess(data, listen=f"127.0.0.1:{port}").start()
    agent = make_client(server.address, "agent-a")
    ids = [agent.add(t.content, type=t.type).memory_id for t in stored]
    online = ranking(agent)
    assert online["offline"] == {False} and all(online["results"].values())

    server.kill()
    offline = ranking(agent)
    assert offline["offline"] == {True}
    assert_same(offline["results"], online["results"])

    written = [agent.add(t.content, type=t.type) for t in pending]
    rewritten = agent.update(ids[1], content="Theo: Quiet mostly. I have started training for the Lisbon half "
                                             "marathon instead, it is in March and the flat route suits me.")
    forgotten = agent.forget(ids[4])
    assert all(w.pending for w in (*written, rewritten, forgotten))
    overlaid = ranking(agent)
    assert overlaid["offline"] == {True}
    assert any(i == ids[1] for hits in overlaid["results"].values() for i, _ in hits[:3])
    assert not any(i == ids[4] for hits in overlaid["results"].values() for i, _ in hits)

    with ServeProcess(data, listen=f"127.0.0.1:{port}"):
        wait_until(lambda: agent.status().online, message="the agent never came back online")
        assert agent.flush() == (len(pending) + 2, 0)
        agent.sync()
        sent = ranking(agent)
    assert sent["offline"] == {False}
    assert_same(sent["results"], overlaid["results"])
