"""Retrieval quality on the labelled set with the real model: hybrid search does at least as well as
each channel.
"""

from __future__ import annotations

import pytest

from ops.bench import bench_quality  # noqa: E402
from ops.bench.serverproc import Client  # noqa: E402
from server.app import run_server


@pytest.fixture(scope="module")
def quality(tmp_path_factory, embedder):
    from mnemosync.v1 import memory_pb2 as pb
    from server.settings import ServerSettings

    memories, queries = bench_quality.load_labelled_set()
    settings = ServerSettings(data_dir=tmp_path_factory.mktemp("quality"), listen="127.0.0.1:0", insecure=True,
                              synchronous="normal")
    with run_server(settings) as running:
        fp = embedder.fingerprint
        model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
        client = Client(running.address, "quality-test")
        try:
            bench_quality.load_into(client, embedder, model, memories)
            yield bench_quality.evaluate(client, embedder, model, queries, memories)
        finally:
            client.close()


def test_the_labelled_set_is_big_enough_and_covers_every_kind_of_question():
    memories, queries = bench_quality.load_labelled_set()
    assert len(memories) >= 300 and len(queries) >= 100
    assert {"decision", "fix", "preference", "person", "event", "config"} <= {m["type"] for m in memories}
    kinds = {q["category"] for q in queries}
    assert {"paraphrase", "identifier", "temporal"} <= kinds
    known = {m["id"] for m in memories}
    assert all(q["relevant"] and set(q["relevant"]) <= known for q in queries)


def test_paraphrase_queries_share_no_searchable_word_with_their_answers():
    memories, queries = bench_quality.load_labelled_set()
    by_id = {m["id"]: m for m in memories}
    sharing = [q["query"] for q in queries if q["category"] == "paraphrase" and bench_quality.shares_keywords(
        q["query"], [by_id[r]["content"] + " " + " ".join(by_id[r]["tags"]) for r in q["relevant"]])]
    assert sharing == []


def test_hybrid_recall_at_10_is_at_least_each_single_channel(quality):
    modes = quality["modes"]
    assert modes["hybrid"]["recall@10"] >= modes["vector"]["recall@10"]
    assert modes["hybrid"]["recall@10"] >= modes["keyword"]["recall@10"]


def test_hybrid_keeps_what_keyword_search_is_for_and_what_vector_search_is_for(quality):
    by = quality["by_category"]
    assert by["identifier"]["hybrid"]["recall@10"] >= by["identifier"]["keyword"]["recall@10"]
    assert by["paraphrase"]["keyword"]["recall@10"] == 0.0  # by construction of the set
    assert by["paraphrase"]["hybrid"]["recall@10"] >= 0.8 * by["paraphrase"]["vector"]["recall@10"]
