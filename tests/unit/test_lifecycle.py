"""`mnemosync.kernel.lifecycle`: the seeds' numbers, computed here independently."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from mnemosync.kernel import lifecycle
from mnemosync.kernel.lifecycle import NO_USE, Usage
from mnemosync.kernel.memory import MemoryRow

DAY = 86_400_000
NOW = 10_000 * DAY


def memory(layer=3, importance=0.5, age_days=0.0, tags=(), protected=False, trust="", written_days_ago=None):
    made = NOW - round(age_days * DAY)
    written = NOW - round((written_days_ago if written_days_ago is not None else age_days) * DAY)
    return MemoryRow(0, "m", "user", "fact", layer, list(tags), "text", importance, 0.9, protected, "a", "a", 1,
                     made, written, False, "", "", 0, trust=trust)


def test_retention_is_the_two_component_curve_and_constitutional_memories_never_fade():
    s = 7.0
    assert lifecycle.retention(0, s) == 1.0
    assert lifecycle.retention(7, s) == pytest.approx(0.7 * 0.5 + 0.3 * 0.5 ** 0.1)
    assert lifecycle.retention(70, s) == pytest.approx(0.7 * 0.5 ** 10 + 0.3 * 0.5)
    assert lifecycle.initial_stability(3, "") == pytest.approx(math.log(2) / 0.10)
    assert lifecycle.initial_stability(4, "inference") == pytest.approx(math.log(2) / 0.25 * 3 / 7)
    assert lifecycle.initial_stability(1, "") == math.inf
    assert lifecycle.strength(memory(layer=1, age_days=5000), NO_USE, NOW).retention == 1.0


def test_a_fading_memory_gains_more_stability_from_a_use_than_a_fresh_one():
    assert lifecycle.grown_stability(10, 0.9) / 10 == pytest.approx(1.105, abs=1e-3)  # seed 000: 1.11x
    assert lifecycle.grown_stability(10, 0.3) / 10 == pytest.approx(2.014, abs=1e-3)  # seed 000: 2.01x
    assert lifecycle.grown_stability(300, 0.0) == 365.0
    s0 = math.log(2) / 0.10
    fresh = lifecycle.used(memory(age_days=0.01), NO_USE, NOW)
    fading = lifecycle.used(memory(age_days=20), NO_USE, NOW)
    assert fading.stability_days > fresh.stability_days
    r20 = 0.7 * 0.5 ** (20 / s0) + 0.3 * 0.5 ** (20 / (10 * s0))
    assert fading.stability_days == pytest.approx(s0 * math.exp(1 - r20))
    assert (fading.uses, fading.last_used_ms, fading.use_days) == (1, NOW, 1)


def test_levels_grow_with_use_across_days_and_never_go_down():
    m = memory(age_days=30)
    usage = NO_USE
    for day in range(3):
        usage = lifecycle.used(m, usage, NOW - (2 - day) * DAY)
    assert usage.level == 2
    for _ in range(2):
        usage = lifecycle.used(m, usage, NOW)
    assert (usage.uses, usage.level) == (5, 3)
    assert lifecycle.level(m, Usage(uses=50), NOW) == 4
    assert lifecycle.level(memory(layer=1), NO_USE, NOW) == 4
    assert lifecycle.level(memory(age_days=1), Usage(uses=1, level=3), NOW) == 3


def test_activation_has_the_fan_effect_and_the_layers_floor():
    # seed 002's example: 12 uses, 720 hours, a shared tag carried by 8 memories (its spreading is floored at 0)
    base = math.log(13 / 0.5) - 0.5 * math.log(720)
    assert lifecycle.base_activation(12, NOW - 720 * 3_600_000, NOW) == pytest.approx(base)
    assert lifecycle.spreading(["auth"], {"auth": 8}) == 0.0
    assert lifecycle.spreading(["auth", "rs256"], {"rs256": 1, "jwt": 3}) == pytest.approx(
        0.5 * (1.6 - 0.3 * math.log(2)))
    old = memory(age_days=400)
    assert lifecycle.activation(old, NO_USE, NOW, {}) == -0.5
    assert lifecycle.activation(memory(layer=4, age_days=400), NO_USE, NOW, {}) == -2.0
    assert lifecycle.activation(memory(age_days=400, protected=True), NO_USE, NOW, {}) == 0.0
    assert lifecycle.activation(memory(layer=2, age_days=400), NO_USE, NOW, {}) == 2.0


def test_the_score_parts_add_up_and_stale_memories_count_less_confidence():
    m = memory(importance=0.8, age_days=100)
    s = lifecycle.score(m, Usage(uses=3), 0.5, NOW, {})
    assert s.final == pytest.approx(s.relevance_part + s.activation_part + s.confidence_part + s.importance_part)
    assert s.relevance_part == pytest.approx(0.30)
    assert s.confidence == pytest.approx(0.9 * 0.7)  # not written for 100 > 90 days
    assert s.importance_part == pytest.approx(0.10 * 0.3)
    assert lifecycle.score(memory(age_days=100, written_days_ago=10), NO_USE, 0.5, NOW, {}).confidence == 0.9


def test_the_archive_rule_names_why_it_keeps_or_archives():
    faded = memory(importance=0.3, age_days=40)
    verdict = lifecycle.archive_verdict(faded, NO_USE, NOW)
    assert verdict.archive and "factual threshold 0.1" in verdict.reason and "age 40.0 days > 30" in verdict.reason
    assert lifecycle.archive_verdict(memory(importance=0.01, age_days=29), NO_USE, NOW).reason.startswith("age 29.0")
    for kept, why in ((memory(layer=2, importance=0, age_days=900), "layer legislative is never archived"),
                      (memory(importance=0, age_days=900, protected=True), "protected"),
                      (memory(importance=0, age_days=900, tags=("person",)), "protected tag person")):
        verdict = lifecycle.archive_verdict(kept, NO_USE, NOW)
        assert not verdict.archive and verdict.reason == why
    assert not lifecycle.archive_verdict(memory(importance=0, age_days=900), Usage(uses=5, level=3), NOW).archive


def test_type_weights_scale_the_archive_rule_as_seed_004_says():
    # seed 004: decay_score = importance x e^(-lambda t) x usage x type_weight; here R stands for the time part
    r = lifecycle.strength(memory(age_days=40), NO_USE, NOW).retention
    importance = 0.1 / r / 1.0 + 0.001  # a plain fact (weight 1.0) just above the factual threshold 0.1
    verdicts = {}
    for kind in ("procedure", "decision", "fact", "problem", "general"):
        m = replace(memory(importance=importance, age_days=40), type=kind)
        verdicts[kind] = lifecycle.archive_verdict(m, NO_USE, NOW)
        weight = lifecycle.DEFAULT.type_weight(kind)
        assert verdicts[kind].effective_importance == pytest.approx(importance * r * weight)
    assert {k: v.archive for k, v in verdicts.items()} == {
        "procedure": False, "decision": False, "fact": False, "problem": True, "general": True}
    assert "x general weight 0.8" in verdicts["general"].reason
    assert lifecycle.DEFAULT.type_weights["insight"] == 1.25 and lifecycle.DEFAULT.type_weight("fact") == 1.0


def test_type_weights_come_from_the_lifecycle_table_over_the_seeds_and_a_bad_one_is_named(tmp_path):
    from mnemosync.kernel.errors import SettingsError
    from mnemosync.server import settings as server_settings
    good = tmp_path / "good.toml"
    good.write_text("[server.lifecycle]\ntype_weight_default = 0.9\n[server.lifecycle.type_weights]\nfact = 1.5\n")
    loaded = server_settings.load(settings_file=good, environ={}).lifecycle
    assert loaded.type_weight("fact") == 1.5 and loaded.type_weight("procedure") == 1.4
    assert loaded.type_weight("preference") == 0.9
    bad = tmp_path / "bad.toml"
    bad.write_text("[server.lifecycle.type_weights]\nprocedure = -1\n")
    with pytest.raises(SettingsError, match="type_weights procedure must be a number above 0 and at most 10, got -1"):
        server_settings.load(settings_file=bad, environ={})


def test_the_lifecycle_page_lists_every_lifecycle_setting_with_its_default():
    import dataclasses
    import re
    from pathlib import Path

    readme = (Path(__file__).parents[2] / "proto" / "mnemosync" / "kernel" / "LIFECYCLE.md").read_text()
    keys = readme[readme.index("`[server.lifecycle]` keys (defaults):"):]
    keys = keys[:keys.index("Per-layer decay rates")]
    listed = dict(re.findall(r"`(\w+)`\s+(\d+(?:\.\d+)?)", keys))
    for field in dataclasses.fields(lifecycle.LifecycleSettings):
        if field.name == "type_weights":  # a table of its own, documented under Type weights
            assert "[server.lifecycle.type_weights]" in readme
            continue
        assert field.name in listed, f"{field.name} is not among LIFECYCLE.md's [server.lifecycle] keys"
        assert float(listed[field.name]) == pytest.approx(field.default), field.name
