"""Consolidation's pure decisions (proto/mnemosync/kernel/consolidation_rules.py): merge groups, survivors, edge decay,
promotion."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemosync.kernel import consolidation_rules as c
from mnemosync.kernel.lifecycle import DAY_MS

IDS = st.sampled_from([f"m{i}" for i in range(8)])
CANDIDATES = st.builds(c.Candidate, id=IDS, authority=st.integers(1, 6), layer=st.integers(1, 4),
                       protected=st.booleans(), tags=st.sampled_from([(), ("decision",), ("ops",)]),
                       importance=st.sampled_from([0.2, 0.5, 0.9]), created_at_ms=st.integers(0, 5),
                       level=st.integers(1, 4))


@given(st.lists(st.tuples(IDS, IDS), max_size=12), st.randoms())
def test_groups_do_not_depend_on_the_order_of_the_pairs(pairs, random):
    shuffled = list(pairs)
    random.shuffle(shuffled)
    assert c.groups(pairs) == c.groups(shuffled)
    for a, b in pairs:
        assert any(a in g and b in g for g in c.groups(pairs))


@given(st.lists(CANDIDATES, min_size=2, max_size=6, unique_by=lambda m: m.id))
def test_no_memory_is_absorbed_by_a_weaker_author_nor_ever_one_that_may_not_be_archived(group):
    merges = c.merges(group, lambda a, b: 0.9, 0.85)
    by_id = {m.id: m for m in group}
    survivors = {m.survivor for m in merges}
    assert len(survivors) <= 1 and not survivors & {m.absorbed for m in merges}
    for m in merges:
        gone, kept = by_id[m.absorbed], by_id[m.survivor]
        assert kept.authority <= gone.authority
        assert gone.layer >= 3 and not gone.protected and "decision" not in gone.tags and gone.level < 3


def test_only_members_above_the_threshold_to_the_survivor_are_absorbed():
    def member(name, authority=3):
        return c.Candidate(name, authority, 3, False, (), 0.5, 0)

    group = [member("a", 2), member("b"), member("c")]
    sims = {frozenset("ab"): 0.9, frozenset("ac"): 0.8}
    merges = c.merges(group, lambda x, y: sims[frozenset((x, y))], 0.85)
    assert [(m.survivor, m.absorbed) for m in merges] == [("a", "b")]


def test_an_edge_fades_five_percent_a_day_unused_and_is_pruned_below_the_floor():
    assert c.edge_weight(0.8, 10) == pytest.approx(0.8 * 0.95 ** 10)
    assert c.edge_weight(0.0, 0) == 1.0  # unset weight reads as 1
    assert c.prune_reason("semantic", 0.8, 0, 32 * DAY_MS) is None
    assert "faded to 0.147" in c.prune_reason("semantic", 0.8, 0, 33 * DAY_MS)
    assert c.prune_reason("hierarchical", 0.8, 0, 400 * DAY_MS) is None
    assert c.prune_reason("supersedes", 0.8, 0, 400 * DAY_MS) is None


def test_an_ephemeral_memory_is_promoted_after_enough_uses_on_enough_days():
    episode = SimpleNamespace(layer=4, archived=False)
    assert c.promotion_reason(episode, 3, 1) is None
    assert c.promotion_reason(episode, 2, 2) is None
    assert "promoted to factual" in c.promotion_reason(episode, 3, 2)
    assert c.promotion_reason(SimpleNamespace(layer=3, archived=False), 9, 9) is None


def test_bad_settings_are_refused_with_the_setting_named():
    from mnemosync.kernel.errors import SettingsError

    with pytest.raises(SettingsError, match="merge_threshold"):
        c.ConsolidationSettings(merge_threshold=1.5)
    with pytest.raises(SettingsError, match="edge_decay_per_day"):
        c.ConsolidationSettings(edge_decay_per_day=1.0)
