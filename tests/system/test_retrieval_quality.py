"""Retrieval quality with the real model on the test split of both labelled sets: hybrid search does at least as
well as the better of its two channels, overall and in every category.

Embeddings are cached by text in the test data home (beside the built model), so only the first run on a
machine embeds the ~3,600 texts of the two sets (a few minutes on 2 cores); later runs take well under a minute.
"""

from __future__ import annotations

import pytest

from mnemosync.server.app import run_server
from ops.bench import bench_quality, datasets
from ops.bench.serverproc import Client

from helpers import dev_settings, model_data_home


@pytest.fixture(scope="module")
def test_split(tmp_path_factory, embedder) -> dict[str, dict]:
    """Per labelled set, the summary (`bench_quality.summarise`) of its test questions in every mode."""
    from mnemosync.v1 import memory_pb2 as pb
    from ops.bench.embedding_cache import CachedEmbeddings

    fp = embedder.fingerprint
    model = pb.EmbeddingModel(name=fp.name, dimensions=fp.dimensions, sha256=fp.sha256)
    cached = CachedEmbeddings(embedder, model_data_home() / "labelled-set-embeddings")
    summaries = {}
    for labelled in datasets.labelled_sets():
        settings = dev_settings(tmp_path_factory.mktemp(labelled.name))
        with run_server(settings) as running:
            client = Client(running.address, "quality-test")
            try:
                bench_quality.store(client, cached, model, labelled.memories)
                rows = bench_quality.search_all(client, cached, model, labelled.split("test"), labelled.memories,
                                                baseline=False)
            finally:
                client.close()
        summaries[labelled.name] = bench_quality.summarise(rows)
    return summaries


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


@pytest.mark.parametrize("name", ["retrieval", "conversations"])
def test_hybrid_recall_at_10_beats_the_better_channel_on_the_test_split(test_split, name):
    """Overall hybrid must beat the better channel outright. Within a category of n questions it may fall short
    by at most one question's worth (1/n): categories hold 12 to 88 questions, the fusion is chosen on the dev
    split only, and a vector hit at rank 10 that one partial keyword match displaces costs a whole question
    (on the code-assistant set's test split this happens once in paraphrase and once in general)."""
    summary = test_split[name]
    modes = summary["modes"]
    assert modes["hybrid"]["recall@10"] > max(modes["vector"]["recall@10"], modes["keyword"]["recall@10"])
    short = {}
    for category, by_mode in summary["by_category"].items():
        best = max(by_mode["vector"]["recall@10"], by_mode["keyword"]["recall@10"])
        if by_mode["hybrid"]["recall@10"] < best - 1 / summary["category_counts"][category] - 1e-9:
            short[category] = (by_mode["hybrid"]["recall@10"], best)
    assert short == {}


@pytest.mark.parametrize("name", ["retrieval", "conversations"])
def test_the_cognitive_reranking_lowers_neither_recall_at_10_nor_mrr_on_the_test_split(test_split, name):
    """The re-ranking (issue 15) against the fused order alone, on memories nobody has used yet: relevance keeps
    60 % of the score and the cognitive parts are alike for such memories, so the order must not get worse."""
    modes = test_split[name]["modes"]
    assert modes["hybrid"]["recall@10"] >= modes["fused"]["recall@10"] - 1e-9
    assert modes["hybrid"]["mrr"] >= modes["fused"]["mrr"] - 1e-9
