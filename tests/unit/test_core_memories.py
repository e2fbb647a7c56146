"""`mcp_shim.core_memories`: how core memories are ranked."""

from __future__ import annotations

import pytest

SCOPE = "project:demo"


def test_core_ranking_puts_constitutional_rules_first_then_weighs_importance_and_recency():
    from mcp_shim.core_memories import rank
    from server.core.memory import MemoryRow

    day = 86_400_000
    now = 1000 * day

    def memory(name, layer, importance, age_days):
        at = now - age_days * day
        return MemoryRow(0, name, SCOPE, "fact", layer, [], name, importance, 0.9, False, "a", "a", 1, at, at, False,
                         "", "", 0)

    ranked = rank([memory("old-rule", 1, 0.0, 400), memory("fresh-fact", 3, 1.0, 0), memory("decision", 2, 0.5, 31),
                   memory("stale-fact", 3, 1.0, 120), memory("note", 4, 1.0, 0)], now)
    assert [r.memory.id for r in ranked] == ["old-rule", "fresh-fact", "decision", "note", "stale-fact"]
    assert ranked[1].score == pytest.approx(0.5 + 1.0 + 1.0)
    assert ranked[2].score == pytest.approx(1.5 + 0.5 + 0.5 ** (31 / 30))
