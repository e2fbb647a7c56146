"""Core memories: the most important memories of a session's scopes, within a token budget.

Like memory-v3's CORE.md, this is what a session should know before it starts
(loaded by the SessionStart hook and served as the `memory://core` resource),
grouped by type. It reads only the agent's local cache (`AgentClient.local`),
so it costs no server round trip and works offline.

Ranking (documented here because people tune it):

    score = LAYER_WEIGHT[layer] + importance + RECENCY_WEIGHT * 0.5 ** (age_days / HALF_LIFE_DAYS)

* `LAYER_WEIGHT`: constitutional 4, legislative 1.5, factual 0.5, ephemeral 0.
  Constitutional rules always come first (4 beats 1.5 + 1 + 1); legislative
  decisions outrank facts of equal importance.
* `importance`: the memory's own 0–1 value (default 0.5).
* recency: age since the last change, halving every 30 days, weighted 1.
  (The server's ACT-R access statistics are not replicated to caches, so
  access frequency does not count here.)

Memories are taken in score order until the budget (tokens estimated as
characters / 4, as in the seeds' "~3K tokens ≈ 12,000 chars") is used; each
shows at most `max_chars` characters of content and its 8-character id
prefix, which `get` accepts.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from agent_client.local_reads import LocalReads
from server.core.memory import MemoryRow

LAYER_WEIGHT = {1: 4.0, 2: 1.5, 3: 0.5, 4: 0.0}
RECENCY_WEIGHT = 1.0
HALF_LIFE_DAYS = 30.0
CHARS_PER_TOKEN = 4
DEFAULT_BUDGET_TOKENS = 1500

# Headings for common types, in the order they are shown; other types follow by their best score.
HEADINGS = {
    "rule": "Rules", "principle": "Principles", "decision": "Decisions", "solution": "Solutions",
    "fix": "Fixes", "config": "Configuration", "configuration": "Configuration", "pattern": "Patterns",
    "workflow": "Workflows", "preference": "Preferences", "pitfall": "Pitfalls", "fact": "Facts",
}
RULES_HEADING = "Ground rules (constitutional)"


@dataclass(frozen=True)
class Ranked:
    """A memory with its core score."""

    score: float
    memory: MemoryRow


def score(memory, now_ms: int) -> float:
    """The core score of one memory (see the module docstring)."""
    age_days = max(0.0, (now_ms - memory.updated_at_ms) / 86_400_000)
    recency = 0.5 ** (age_days / HALF_LIFE_DAYS)
    return LAYER_WEIGHT.get(memory.layer, 0.0) + memory.importance + RECENCY_WEIGHT * recency


def rank(memories: Sequence, now_ms: int | None = None) -> list[Ranked]:
    """Memories by descending core score (ties: newer first, then id, so the order is stable)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    ranked = [Ranked(score(m, now_ms), m) for m in memories]
    ranked.sort(key=lambda r: (-r.score, -r.memory.updated_at_ms, r.memory.id))
    return ranked


def _line(memory, max_chars: int) -> str:
    content = " ".join(memory.content.split())
    if len(content) > max_chars:
        content = content[:max_chars].rstrip() + "…"
    tags = f" ({', '.join(memory.tags)})" if memory.tags else ""
    return f"- {content}{tags} [{memory.id[:8]} v{memory.version} {memory.author_agent}]"


def _heading(memory) -> str:
    if memory.layer == 1:
        return RULES_HEADING
    return HEADINGS.get(memory.type, memory.type.replace("_", " ").capitalize())


@dataclass(frozen=True)
class Core:
    """Core memories rendered as markdown, and what was left out."""

    markdown: str
    shown: int
    total: int
    tokens: int


def build(local: LocalReads, scopes: Sequence[str], *, budget_tokens: int = DEFAULT_BUDGET_TOKENS,
          max_chars: int = 280, now_ms: int | None = None, title: str = "Memory core") -> Core:
    """Renders the core memories of `scopes` from the agent's cache within `budget_tokens`.

    Args:
        local: The agent client's local reads.
        scopes: Scopes to draw from (the session's scope and `user`).
        budget_tokens: Upper bound for the whole text (estimated at 4 characters a token).
        max_chars: Most content characters shown per memory.
        now_ms: The time recency is measured from (tests pin it).
        title: The top heading.
    """
    ranked = rank(local.core_candidates(scopes=scopes), now_ms)
    header = f"# {title} ({', '.join(scopes)})"
    if not ranked:
        text = f"{header}\n\nNo memories in these scopes yet."
        return Core(text, 0, 0, len(text) // CHARS_PER_TOKEN)
    budget = budget_tokens * CHARS_PER_TOKEN
    summary_room = 200  # the summary line is written last but must fit
    used = len(header) + summary_room
    chosen: list[tuple[Ranked, str]] = []
    for item in ranked:
        line = _line(item.memory, max_chars)
        cost = len(line) + 1 + (len(_heading(item.memory)) + 5 if not any(
            _heading(c.memory) == _heading(item.memory) for c, _ in chosen) else 0)
        if used + cost > budget:
            continue  # a shorter, lower-ranked memory may still fit
        chosen.append((item, line))
        used += cost
    groups: dict[str, list[tuple[Ranked, str]]] = {}
    for item, line in chosen:
        groups.setdefault(_heading(item.memory), []).append((item, line))
    order = [RULES_HEADING, *dict.fromkeys(HEADINGS.values())]
    known = [h for h in order if h in groups]
    others = sorted((h for h in groups if h not in order), key=lambda h: -groups[h][0][0].score)
    parts = [header, "",
             f"> {len(chosen)} of {len(ranked)} live memories, ranked by layer, importance and recency; "
             "[id-prefix version author] — `get` takes the id prefix; `search` finds the rest."]
    for heading in known + others:
        parts += ["", f"## {heading}", *(line for _, line in groups[heading])]
    text = "\n".join(parts)
    return Core(text, len(chosen), len(ranked), -(-len(text) // CHARS_PER_TOKEN))

