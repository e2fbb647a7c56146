"""Consolidation without an LLM: the pure decisions of the sleep cycle (seed 002), shared by the server and tests.

The server's consolidation (`mnemosync.server.consolidation`) reads the state, asks the
functions here what to do and writes the answers as changelog entries by the
system agent, so every replica folds the same result. Seed 002's four phases
map onto it like this:

* **REPLAY** (auto-links, zettelkasten): every memory created in the last
  `replay_hours` is linked (relation `semantic`, weight = cosine, a reason
  naming the score) to its nearest live neighbours in the same scope with
  cosine > `link_threshold` (0.5), at most `max_links` (10, seed 002) per
  memory. A pair already linked either way (any relation) is skipped, and so
  is a pair whose `semantic` link was ever removed (by an agent's unlink or
  by PRUNE): a removed link is never made again. A link never starts at a
  constitutional memory (`layer-1-human-only`: its links are a human's).
* **REORGANIZE** (topics and centroids, `mnemosync.kernel.topics`): a pure
  function of the replicated memories and vectors, computed on read by the
  server and by every cache alike, so nothing is written.
* **COMPRESS** (merges): near-duplicates with cosine > `merge_threshold`
  (0.85) in one scope become one survivor; each other member is archived
  (an ordinary archive entry saying "merged into ...", so `restore` undoes
  it) and the survivor gets a `supersedes` link to it. Nothing is deleted
  and nothing is rewritten: the survivor stays as its author wrote it.
  Authority and governance decide who survives and who may be absorbed
  (`choose_survivor`, `absorbable`).
* **PRUNE**: the decay sweep (issue 15) archives faded memories; here the
  associative edges (every type but `hierarchical` and `supersedes`,
  `mnemosync.kernel.links.decays`) fade too, by `edge_decay_per_day`
  (5 %, seed 003's per-cycle rate taken per day) for each day neither end was
  used, and an edge whose weight fell below `edge_prune_below` (0.15, seed
  003) is removed by an unlink entry. Only edges the system or an automated
  extractor made (authority 6) are pruned: an agent's own links are the
  agent's to remove. `hierarchical` and `supersedes` edges never decay.
  An edge's weight is the one its link entry recorded (a semantic
  auto-link's is the cosine; unset reads as 1).

Promotion (seed 003's consolidation/promotion): an ephemeral (layer 4)
memory, such as an episode from a transcript, that was used at least
`promote_uses` times on at least `promote_days` distinct days moves to the
factual layer (a set_layer entry); the rest are left to the decay sweep.

Every decision is a function of the state and the time, so a second run
for the same state and time decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mnemosync.kernel import links
from mnemosync.kernel.entry import LEGACY_AUTHORITY
from mnemosync.kernel.errors import SettingsError
from mnemosync.kernel.lifecycle import DAY_MS, PROTECTED_TAGS, Decision
from mnemosync.kernel.memory import MemoryRow

SEMANTIC = "semantic"
SUPERSEDES = "supersedes"
PRUNABLE_AUTHORITY = 6
"""Links made at this authority (the system, automated extractors) are the ones PRUNE removes."""


@dataclass(frozen=True)
class ConsolidationSettings:
    """Consolidation's parameters (the server settings' `[server.lifecycle]`, seeds' defaults)."""

    link_threshold: float = 0.5
    """REPLAY links a new memory to neighbours above this cosine (seed 002's zettel_link_threshold)."""
    max_links: int = 10
    """Neighbours one new memory is linked to at most (seed 002)."""
    replay_hours: float = 24.0
    """Memories created this recently are new to REPLAY and COMPRESS (seed 002: the last 24 hours)."""
    merge_threshold: float = 0.85
    """COMPRESS merges memories above this cosine (seed 002's consolidation_merge_threshold)."""
    edge_decay_per_day: float = 0.05
    """An associative edge loses this fraction of its weight per day neither end was used (seed 003)."""
    edge_prune_below: float = 0.15
    """PRUNE removes associative edges whose weight fell below this (seed 003)."""
    promote_uses: int = 3
    """An ephemeral memory used this many times ..."""
    promote_days: int = 2
    """... on this many distinct days is promoted to the factual layer."""
    interval_seconds: float = 3600.0
    """How often the server consolidates (0: only by hand, `mnemosync maintain consolidate`)."""

    def __post_init__(self) -> None:
        if not 0 < self.link_threshold < 1 or not 0 < self.merge_threshold < 1:
            raise SettingsError("link_threshold and merge_threshold must be between 0 and 1 (cosine), got "
                                f"{self.link_threshold} and {self.merge_threshold}")
        if self.max_links < 0 or self.replay_hours < 0 or self.interval_seconds < 0:
            raise SettingsError("max_links, replay_hours and interval_seconds must be >= 0")
        if not 0 <= self.edge_decay_per_day < 1:
            raise SettingsError(f"edge_decay_per_day must be in [0, 1), got {self.edge_decay_per_day}")


DEFAULT = ConsolidationSettings()


@dataclass
class ConsolidationReport:
    """What a consolidation did (or would do): counts per phase and the first MAX_LISTED decisions."""

    as_of_ms: int
    dry_run: bool
    links_only: bool = False
    """Only the link work (REPLAY's links, PRUNE): `mnemosync maintain links`."""
    examined: int = 0
    """New memories REPLAY and COMPRESS looked at."""
    linked: int = 0
    merged: int = 0
    """Memories absorbed into a survivor."""
    pruned: int = 0
    promoted: int = 0
    entries_written: int = 0
    head_seq: int = 0
    decisions: list[Decision] = field(default_factory=list)


@dataclass(frozen=True)
class Candidate:
    """What COMPRESS needs of one memory."""

    id: str
    authority: int
    layer: int
    protected: bool
    tags: tuple[str, ...]
    importance: float
    created_at_ms: int
    level: int = 1


def of_memory(m: MemoryRow, level: int = 1) -> Candidate:
    """The candidate view of a `MemoryRow` at its memory level (`lifecycle.level`)."""
    return Candidate(m.id, m.authority or LEGACY_AUTHORITY, m.layer, m.protected, tuple(m.tags), m.importance,
                     m.created_at_ms, level)


def absorbable(c: Candidate) -> str | None:
    """None if `c` may be merged away; else why not.

    Constitutional and legislative memories (layers 1-2) and protected ones
    are never archived automatically (seed 002's layer immunity, governance's
    `layers-1-2-not-forgotten` and `protected-not-forgotten`), nor are memories
    with a protected tag (seed 002) or consolidated ones (level 3-4, like the
    decay sweep): they may survive a merge, never be absorbed.
    """
    if c.layer <= 2:
        return f"layer {c.layer} is never merged away"
    if c.protected:
        return "protected"
    if c.level >= 3:
        return f"level {c.level} is never archived"
    shared = sorted(PROTECTED_TAGS.intersection(c.tags))
    if shared:
        return f"protected tag {shared[0]}"
    return None


def survivor_key(c: Candidate) -> tuple[int, int, int, float, int, str]:
    """Orders a group: the strongest authority first, then a memory that may not be absorbed, the higher layer,
    the higher importance, the older, the smaller id. The first survives, so no member is ever absorbed by a
    weaker author's memory (`no-overwrite-higher-authority`)."""
    return c.authority, 0 if absorbable(c) else 1, c.layer, -c.importance, c.created_at_ms, c.id


def groups(pairs: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Connected components of the near-duplicate pairs, each sorted, in order of their smallest id."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    found: dict[str, list[str]] = {}
    for x in parent:
        found.setdefault(root(x), []).append(x)
    return sorted((sorted(g) for g in found.values()), key=lambda g: g[0])


@dataclass(frozen=True)
class Merge:
    """One memory absorbed into a survivor."""

    survivor: str
    absorbed: str
    similarity: float


def merges(group: Sequence[Candidate], similarity: Callable[[str, str], float], threshold: float) -> list[Merge]:
    """The merges of one group: every absorbable member above `threshold` to the survivor goes into it.

    Args:
        similarity: (id, id) -> cosine.
    """
    survivor = min(group, key=survivor_key)
    found: list[Merge] = []
    for c in sorted(group, key=lambda c: c.id):
        if c.id == survivor.id or absorbable(c) or c.authority < survivor.authority:
            continue
        s = similarity(survivor.id, c.id)
        if s > threshold:
            found.append(Merge(survivor.id, c.id, round(s, 4)))
    return found


def edge_weight(weight: float, idle_days: float, s: ConsolidationSettings = DEFAULT) -> float:
    """An associative edge's weight after `idle_days` without use of either end."""
    return float((weight or 1.0) * (1.0 - s.edge_decay_per_day) ** max(idle_days, 0.0))


def prune_reason(relation: str, weight: float, last_use_ms: int, now_ms: int,
                 s: ConsolidationSettings = DEFAULT) -> str | None:
    """Why PRUNE removes this edge at `now_ms`, or None to keep it."""
    if not links.decays(relation):
        return None
    idle = (now_ms - last_use_ms) / DAY_MS
    now_weight = edge_weight(weight, idle, s)
    if now_weight >= s.edge_prune_below:
        return None
    return (f"{relation} edge weight {weight or 1.0:.3f} faded to {now_weight:.3f} after {idle:.1f} days unused "
            f"(-{s.edge_decay_per_day:.0%} a day) < {s.edge_prune_below}")


def promotion_reason(m: MemoryRow, uses: int, use_days: int, s: ConsolidationSettings = DEFAULT) -> str | None:
    """Why an ephemeral memory is promoted to the factual layer, or None."""
    if m.layer != 4 or m.archived or uses < s.promote_uses or use_days < s.promote_days:
        return None
    return (f"ephemeral memory used {uses} times on {use_days} days (>= {s.promote_uses} on "
            f">= {s.promote_days}): promoted to factual")


def link_payload(target_id: str, relation: str, weight: float, reason: str) -> dict[str, Any]:
    """The payload of a link entry consolidation writes (as an agent's LinkOp would make it)."""
    return {"target_id": target_id, **links.link_payload({"relation": relation, "weight": weight, "reason": reason},
                                                         unlink=False)}

