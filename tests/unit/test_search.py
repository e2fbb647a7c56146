"""`mnemosync.kernel.search`: hybrid search by keyword and vector, safe keyword queries, and every filter."""

from __future__ import annotations

import uuid
from dataclasses import replace

import numpy as np
import pytest

from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.kernel import search
from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import ManualClock, RawAgent, dev_settings, fake_vector


def test_search_finds_a_memory_by_keyword_and_by_vector(agents):
    a = agents("agent-a")
    target = a.add("Postgres connection pool exhausted: raise max_connections to 200").memory_id
    for i in range(20):
        a.add(f"unrelated memory number {i} about gardening")
    by_keyword = a.search("max_connections", limit=3)
    assert by_keyword[0].memory.id == target and by_keyword[0].score.keyword_rank == 1
    assert by_keyword[0].score.vector_rank == 0
    vector = fake_vector("Postgres connection pool exhausted: raise max_connections to 200")
    by_vector = a.search(vector=vector, limit=3)
    assert by_vector[0].memory.id == target and by_vector[0].score.vector_rank == 1
    assert by_vector[0].score.vector_distance == pytest.approx(0.0, abs=1e-5)
    hybrid = a.search("connection pool", vector=vector, limit=3)
    top = hybrid[0].score
    assert hybrid[0].memory.id == target
    assert top.rrf == pytest.approx(1 / 61 + 1 / 61)
    assert (top.vector_score, top.keyword_coverage) == (1.0, 1.0)
    assert top.keyword_score == pytest.approx(search.KEYWORD_WEIGHT)
    assert top.fused == pytest.approx(top.vector_score + top.keyword_score)
    assert top.final == pytest.approx(top.relevance_part + top.activation_part + top.confidence_part
                                      + top.importance_part)


@pytest.mark.parametrize(
    "query",
    ['"unbalanced', "NEAR(a b)", "a* OR b:c", "content:secret", "-x AND (y", "^start", "'; DROP TABLE memories; --",
     "ümlaut café", "日本語のテキスト", "*", "\"\"\"", "a\tb\nc"],
)
def test_any_user_text_is_a_safe_keyword_query(agents, query):
    a = agents("agent-a")
    a.add("café NEAR the station; DROP TABLE is text here")
    a.search(query)  # must not raise


@pytest.fixture
def clocked(tmp_path):
    """A server on a clock the test moves, and two agents of it."""
    clock = ManualClock()
    with run_server(dev_settings(tmp_path), clock=clock.clock) as running:
        a, b = RawAgent(running.address, "agent-a"), RawAgent(running.address, "agent-b")
        yield clock, a, b
        a.close()
        b.close()


def test_search_filters_each_restrict_the_results(clocked):
    clock, a, b = clocked
    text = "release checklist for the mobile app"
    ids = {
        "user": a.add(text, scope="user", type="fact", tags=["release"]).memory_id,
        "project": a.add(text + " v2", scope="project:app", type="decision", tags=["release", "mobile"],
                         layer=2).memory_id,
        "by_b": b.add(text + " v3", scope="user", type="fact", tags=["mobile"]).memory_id,
    }
    cutoff = clock.now_ms + 1
    clock.advance(0.01)
    ids["late"] = a.add(text + " v4", scope="user", type="fact").memory_id
    vector = fake_vector(text)

    def found(**filter_fields) -> set[str]:
        hits = a.search("release checklist", vector=vector, filter=pb.SearchFilter(**filter_fields), limit=20)
        return {h.memory.id for h in hits}

    assert found() == set(ids.values())
    assert found(scopes=["project:app"]) == {ids["project"]}
    assert found(types=["decision"]) == {ids["project"]}
    assert found(tags=["release", "mobile"]) == {ids["project"]}
    assert found(tags=["mobile"]) == {ids["project"], ids["by_b"]}
    assert found(authors=["agent-b"]) == {ids["by_b"]}
    assert found(layers=[pb.LAYER_LEGISLATIVE]) == {ids["project"]}
    assert found(created_after_ms=cutoff) == {ids["late"]}
    assert found(created_before_ms=cutoff) == set(ids.values()) - {ids["late"]}
    forget = pb.Operation(op_id=str(uuid.uuid4()), memory_id=ids["late"], base_version=1, forget=pb.ForgetOp())
    a.append(forget)
    assert ids["late"] not in found()
    assert ids["late"] in found(include_archived=True)


def test_an_overlay_is_searched_in_place_of_what_it_replaces_and_leaves_nothing_behind(server, agents, tmp_path):
    a = agents("agent-a")
    ids = [a.add(f"note {i}: the staging database runs Postgres 16").memory_id for i in range(6)]
    cache, remote = Cache(tmp_path / "cache.db"), Remote(server.address, "agent-a", insecure=True, timeout=5)
    try:
        catch_up(cache, remote)
        before = cache.snapshot()
        moved = "the staging database moved to Frankfurt"
        rewritten = replace(cache.get(ids[0]), content=moved, version=2)
        added = replace(cache.get(ids[1]), num=0, id=str(uuid.uuid4()), content=f"{moved}, said the on-call notes")
        overlay = [(m, np.asarray(fake_vector(m.content), dtype="<f4").tobytes()) for m in (rewritten, added)]
        hits = cache.search(overlay, query="Frankfurt staging", limit=10, mode="keyword")
        assert [(h.memory.id, h.memory.content) for h in hits[:2]] == [
            (ids[0], rewritten.content), (added.id, added.content)]
        assert len(hits) == 7
        assert cache.search(query="Frankfurt", limit=10, mode="keyword") == []
        assert cache.snapshot() == before
    finally:
        cache.close()
        remote.close()
