"""The prompt hook's recall decision on issue 28's project prompt set, with the real model and real servers.

The decision (`mnemosync.kernel.recall_decision`, fitted on the dev stores by `ops/bench/fit_recall.py`) is run
over the held-out stores, whose prompts and memories the fit never read, each through a real server and the
agent client as the warm process searches. Issue 38 refitted it on stores of every size; on these stores it must
meet the precision, noise and token aims and not recall less than issue 28's decision did in a way that matters
(`RECALL_SLACK`); the recall aim itself is reported by `python -m ops.bench.bench_recall`.
"""

from __future__ import annotations

import pytest

from mnemosync.kernel.recall_decision import Decision
from ops.bench import datasets, recall_prompts
from ops.bench.legacy_recall import legacy_decision

RECALL_SLACK = 0.05
"""How much less than issue 28's decision today's may recall on these stores (3 prompts in 100)."""


def test_the_prompt_set_has_several_project_stores_split_by_store_with_every_kind_of_prompt():
    stores = datasets.recall_stores()
    assert len(stores) >= 4 and {s.split for s in stores} == set(datasets.RECALL_SPLITS)
    assert len({s.name for s in stores}) == len(stores)
    for store in stores:
        assert 30 <= len(store.memories) <= 150 and len(store.prompts) >= 80, store.name
        assert {p.kind for p in store.prompts} == set(datasets.RECALL_KINDS), store.name
        related = [p for p in store.prompts if p.kind in ("question", "instruction", "follow-up")]
        assert all(p.memories for p in related) and not any(p.memories for p in store.prompts if p not in related)
    fitted_on = Decision.load().about["fitted_on"]
    assert all(s.name in fitted_on for s in stores if s.split == "dev")
    assert not any(s.name in fitted_on for s in stores if s.split == "heldout")
    public = datasets.public_recall_stores()
    assert all(s.name in fitted_on for s in public if s.split == "dev")
    assert not any(s.name in fitted_on for s in public if s.split == "test")


@pytest.fixture(scope="module")
def held_out(model_path, tmp_path_factory) -> dict[str, float]:
    """The shipped decision's figures on the held-out stores (see `ops.bench.recall_prompts.evaluate`), and issue
    28's decision's on the same hits under `before`."""
    stores = [s for s in datasets.recall_stores() if s.split == "heldout"]
    rows = recall_prompts.collect(model_path, tmp_path_factory.mktemp("prompts"), lambda _: None, stores)
    return {**recall_prompts.evaluate(rows, recall_prompts.decision_selector(Decision.load())),
            "before": recall_prompts.evaluate(rows, recall_prompts.decision_selector(legacy_decision()))}


def test_the_decision_gets_related_prompts_their_memory_on_stores_it_never_saw(held_out):
    assert held_out["related"] >= 200 and held_out["negatives"] >= 80
    assert held_out["recall"] >= held_out["before"]["recall"] - RECALL_SLACK, held_out


def test_what_the_decision_injects_is_wanted_and_brief_on_stores_it_never_saw(held_out):
    assert held_out["precision"] >= recall_prompts.AIMS["precision"], held_out
    assert held_out["tokens"] <= recall_prompts.AIMS["tokens"], held_out


def test_at_most_one_unrelated_prompt_in_twenty_gets_anything_on_stores_it_never_saw(held_out):
    assert held_out["unrelated"] <= recall_prompts.AIMS["unrelated"], held_out
