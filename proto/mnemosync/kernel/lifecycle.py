"""The memory lifecycle's arithmetic: strength, stability, levels, activation, the cognitive score, the archive rule.

Pure functions over plain numbers, shared by the server (its sweep and its
search), every cache (its offline search and core memories) and the tests,
so every replica computes the same values from the same inputs. The seeds'
models, with their defaults in `LifecycleSettings`:

* Retention (seed 000, CortexGraph's two-component decay):
  R(t) = W_FAST * exp(-ln2 * t / S) + (1 - W_FAST) * exp(-ln2 * t / (10 S)),
  t in days since the memory was last used (or created),
  S its stability in days (the fast half-life; the slow one is ten times it).
  A layer whose decay rate is 0 (constitutional) never fades: R = 1.
* Stability (seed 000, FSRS): starts at ln2 / the layer's per-day decay rate
  (governance's `LayerRule.decay_rate`: factual 0.10 -> 6.9 days, ephemeral
  0.25 -> 2.8 days, legislative 0.01 -> 69 days) times the trust factor
  (principle 4, pattern 1, inference 3/7: seed 000's 30 / 7 / 3 days), capped
  at `stability_cap_days` (365). Each use multiplies it by exp(1 - R) at the
  time of use, so a fading memory that is recalled gains more than a fresh one
  (R = 0.9 -> x1.11, R = 0.3 -> x2.01).
* Levels (seed 000, Benna-Fusi): 1 new; 2 verifying (used on 3 or more
  distinct days); 3 consolidated (14 days old and used 5 times); 4 core
  (constitutional, or used 50 times). A level never goes down; 3 and 4 are
  never archived.
* ACT-R activation (seed 002): base level B = ln((n + 1) / (1 - d)) - d ln(L),
  n uses (the creation counts as the first presentation, so an unused memory
  has a finite B), L hours since creation (at least 1); spreading activation
  from the search's context tags with the fan penalty:
  S = sum over shared tags j of (1 / |context|) * max(S_MAX - ln fan_j - delta ln(fan_j + 1), 0),
  fan_j the number of memories carrying tag j; A = max(B + S, layer floor)
  (protected memories: at least 0). The seed's logistic noise is left out:
  replicas and tests must rank alike.
* HaluMem (seed 002): a memory no agent has written (verified) for
  `stale_after_days` (90), or whose sources a verification found changed
  (`mnemosync.kernel.source_refs`), counts its confidence at `stale_factor`
  (0.7); one whose cited file or symbol is gone at `contradicted_factor` (0.3).
* Type weights (seed 004's decay model): the archive rule multiplies importance x R
  by the memory type's weight (`type_weights`: procedure 1.4, decision 1.3,
  insight 1.25, solution 1.2, code_pattern 1.1, configuration 1.1, fix 1.0,
  workflow 1.0, problem 0.9, error 0.8, general 0.8; any other type
  `type_weight_default`, 1.0, so mnemosync's own types such as fact keep the
  rule they had). A procedure is kept until its importance x R falls 1.4 times
  lower than a plain fact's would; a general note goes sooner.
* The final score (seed 002's 60/25/15):
  final = 0.60 * relevance + 0.25 * A / 10 + 0.15 * confidence + W_IMPORTANCE * (importance - 0.5),
  relevance the fused score over the best fused score of the search (1 for the
  best hit, so relevance keeps its 60 % whatever the channels' scales), A / 10
  clipped to [-1, 1]. The importance part is centred on the default importance,
  so a memory of default importance is scored by the seed's three weights
  exactly. Every part is returned with the hit and the parts add up to `final`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from mnemosync.kernel.memory import LAYERS, MemoryRow


@dataclass(frozen=True)
class LayerRule:
    """How one governance layer decays and may be archived (memory-v3's table).

    Attributes:
        number: 1 to 4.
        name: constitutional, legislative, factual or ephemeral.
        decay_rate: Per-day decay of activation (0: never decays).
        activation_floor: Activation never drops below this.
        fademem_beta: FadeMem's beta for the layer (None: does not fade).
        archivable: Whether decay may archive it automatically.
        archive_after_days: Minimum age before automatic archiving.
        archive_importance_below: Archived automatically only under this importance.
    """

    number: int
    name: str
    decay_rate: float
    activation_floor: float
    fademem_beta: float | None
    archivable: bool
    archive_after_days: int | None
    archive_importance_below: float | None


DEFAULT_LAYERS: Mapping[int, LayerRule] = {
    1: LayerRule(1, LAYERS[1], 0.0, 5.0, None, False, None, None),
    2: LayerRule(2, LAYERS[2], 0.01, 2.0, 0.5, False, None, None),
    3: LayerRule(3, LAYERS[3], 0.10, -0.5, 0.8, True, 30, 0.1),
    4: LayerRule(4, LAYERS[4], 0.25, -2.0, 1.2, True, 14, 0.15),
}


DEFAULT_TYPE_WEIGHTS: Mapping[str, float] = MappingProxyType({
    "procedure": 1.4, "decision": 1.3, "insight": 1.25, "solution": 1.2, "code_pattern": 1.1, "configuration": 1.1,
    "fix": 1.0, "workflow": 1.0, "problem": 0.9, "error": 0.8, "general": 0.8})
"""Seed 004's per-type decay weights (its `type_weight`)."""
MAX_TYPE_WEIGHT = 10.0


DAY_MS = 86_400_000
HOUR_MS = 3_600_000
LN2 = math.log(2)


@dataclass(frozen=True)
class LifecycleSettings:
    """The lifecycle's parameters (the server settings' `[server.lifecycle]`, seeds' defaults).

    Per-layer decay rates, activation floors and archive rules are governance's
    (`[layers.*]` of the policy file, `mnemosync.server.governance.LayerRule`).
    """

    w_fast: float = 0.7
    """Weight of the fast component of retention (the slow one gets the rest)."""
    slow_factor: float = 10.0
    """The slow component's half-life, in fast half-lives."""
    stability_cap_days: float = 365.0
    """Stability never grows past this (seed 000's overflow cap)."""
    actr_decay: float = 0.5
    """ACT-R's base-level decay d."""
    s_max: float = 1.6
    """ACT-R's maximum associative strength."""
    fan_delta: float = 0.3
    """The fan penalty's coefficient."""
    stale_after_days: float = 90.0
    """HaluMem: days without an agent's write after which confidence counts less."""
    stale_factor: float = 0.7
    """HaluMem: what a stale memory's confidence is multiplied by."""
    contradicted_factor: float = 0.3
    """HaluMem: what the confidence of a memory whose cited file or symbol is gone is multiplied by."""
    weight_relevance: float = 0.60
    weight_activation: float = 0.25
    weight_confidence: float = 0.15
    weight_importance: float = 0.10
    """Weight of (importance - 0.5); 0 gives the seed's three-part score."""
    level2_days: int = 3
    level3_age_days: float = 14.0
    level3_uses: int = 5
    level4_uses: int = 50
    sweep_interval_seconds: float = 3600.0
    """How often the server sweeps (0: only by hand, `mnemosync maintain decay`)."""
    type_weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_TYPE_WEIGHTS)
    """Seed 004's per-type decay weights (`[server.lifecycle.type_weights]`, laid over `DEFAULT_TYPE_WEIGHTS`):
    the archive rule's importance x R is multiplied by the memory type's weight."""
    type_weight_default: float = 1.0
    """The weight of a type `type_weights` does not name."""

    def __post_init__(self) -> None:
        """Lays the given type weights over the seed's and checks every weight.

        Raises:
            ValueError: naming the type and the bounds, for a weight that is not a number above 0 and at most 10.
        """
        given = dict(self.type_weights) if isinstance(self.type_weights, Mapping) else None
        if given is None:
            raise ValueError(f"type_weights must be a table of type = weight, got {self.type_weights!r}")
        for name, weight in [*given.items(), ("(type_weight_default)", self.type_weight_default)]:
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= MAX_TYPE_WEIGHT:
                raise ValueError(f"type_weights {name} must be a number above 0 and at most {MAX_TYPE_WEIGHT:g}, "
                                 f"got {weight!r}")
        object.__setattr__(self, "type_weights", MappingProxyType({**DEFAULT_TYPE_WEIGHTS, **given}))

    def type_weight(self, memory_type: str) -> float:
        """The decay weight of a memory type."""
        return float(self.type_weights.get(memory_type, self.type_weight_default))


DEFAULT = LifecycleSettings()

TRUST_FACTOR = {"principle": 4.0, "pattern": 1.0, "inference": 3.0 / 7.0}


@dataclass(frozen=True)
class Usage:
    """What a memory's use so far says, the inputs of strength and activation.

    Attributes:
        uses: Uses recorded (Get, a reported use, a recall).
        last_used_ms: The latest use (0: none; strength then counts from the creation).
        stability_days: Stability S (0: not set yet, the initial value applies).
        use_days: Distinct days it was used on.
        level: Its memory level so far (levels never go down).
    """

    uses: int = 0
    last_used_ms: int = 0
    stability_days: float = 0.0
    use_days: int = 0
    level: int = 1


NO_USE = Usage()


def initial_stability(layer: int, trust: str, s: LifecycleSettings = DEFAULT,
                      layers: Mapping[int, LayerRule] = DEFAULT_LAYERS) -> float:
    """Stability of a memory never used: ln2 / its layer's decay rate times its trust factor (inf: never fades)."""
    rate = layers[layer].decay_rate
    if rate <= 0:
        return math.inf
    return min(LN2 / rate * TRUST_FACTOR.get(trust, 1.0), s.stability_cap_days)


def retention(days: float, stability: float, s: LifecycleSettings = DEFAULT) -> float:
    """R after `days` at stability `stability` (1 for infinite stability)."""
    if math.isinf(stability):
        return 1.0
    days = max(days, 0.0)
    return (s.w_fast * math.exp(-LN2 * days / stability)
            + (1 - s.w_fast) * math.exp(-LN2 * days / (s.slow_factor * stability)))


def grown_stability(stability: float, r: float, s: LifecycleSettings = DEFAULT) -> float:
    """Stability after a use at retention `r`: S * exp(1 - R), capped."""
    if math.isinf(stability):
        return stability
    return min(stability * math.exp(1.0 - r), s.stability_cap_days)


@dataclass(frozen=True)
class Strength:
    """A memory's strength at a time: retention, stability and the time it counts from."""

    retention: float
    stability_days: float
    since_ms: int


def strength(m: MemoryRow, usage: Usage, now_ms: int, s: LifecycleSettings = DEFAULT,
             layers: Mapping[int, LayerRule] = DEFAULT_LAYERS) -> Strength:
    """R of memory `m` (a MemoryRow) at `now_ms`, counting from its latest use, or its creation.

    Writes do not count: a restore must not make a faded memory look fresh before the recall that follows it
    is counted (that recall's growth depends on how far it had faded)."""
    stability = usage.stability_days or initial_stability(m.layer, m.trust, s, layers)
    if layers[m.layer].decay_rate <= 0:
        stability = math.inf
    since = max(usage.last_used_ms, m.created_at_ms)
    return Strength(retention(max(0, now_ms - since) / DAY_MS, stability, s), stability, since)


def used(m: MemoryRow, usage: Usage, at_ms: int, s: LifecycleSettings = DEFAULT,
         layers: Mapping[int, LayerRule] = DEFAULT_LAYERS) -> Usage:
    """The usage after one more use at `at_ms`: stability grown by exp(1 - R), the level updated."""
    st = strength(m, usage, at_ms, s, layers)
    new_day = usage.last_used_ms // DAY_MS != at_ms // DAY_MS or not usage.uses
    after = Usage(
        uses=usage.uses + 1, last_used_ms=max(at_ms, usage.last_used_ms),
        stability_days=grown_stability(st.stability_days, st.retention, s),
        use_days=usage.use_days + (1 if new_day else 0), level=usage.level,
    )
    return Usage(after.uses, after.last_used_ms, after.stability_days, after.use_days,
                 level(m, after, at_ms, s))


def level(m: MemoryRow, usage: Usage, now_ms: int, s: LifecycleSettings = DEFAULT) -> int:
    """The Benna-Fusi level at `now_ms` (never below the level reached before)."""
    reached = 1
    if m.layer == 1 or usage.uses >= s.level4_uses:
        reached = 4
    elif (now_ms - m.created_at_ms) / DAY_MS >= s.level3_age_days and usage.uses >= s.level3_uses:
        reached = 3
    elif usage.use_days >= s.level2_days:
        reached = 2
    return max(reached, usage.level)


def is_stale(m: MemoryRow, now_ms: int, s: LifecycleSettings = DEFAULT) -> bool:
    """HaluMem: no agent has written the memory for `stale_after_days`."""
    return (now_ms - m.updated_at_ms) / DAY_MS > s.stale_after_days


def verification_factor(m: Any, now_ms: int, s: LifecycleSettings = DEFAULT) -> float:
    """What ranking multiplies the confidence of memory `m` by: `contradicted_factor` when its last verification
    found a cited file or symbol gone, `stale_factor` when it found one changed or no agent wrote it for
    `stale_after_days` (a verification that found it unchanged within that period counts as a write), else 1."""
    v = getattr(m, "verification", None)
    status = v.status if v is not None else ""
    if status == "contradicted":
        return s.contradicted_factor
    if v is not None and status == "verified" and (now_ms - v.checked_at_ms) / DAY_MS <= s.stale_after_days:
        return 1.0
    if status == "stale" or is_stale(m, now_ms, s):
        return s.stale_factor
    return 1.0


def base_activation(uses: int, created_ms: int, now_ms: int, s: LifecycleSettings = DEFAULT) -> float:
    """ACT-R base level: ln((n + 1) / (1 - d)) - d ln(L), L in hours since creation (at least 1)."""
    hours = max((now_ms - created_ms) / HOUR_MS, 1.0)
    return math.log((uses + 1) / (1 - s.actr_decay)) - s.actr_decay * math.log(hours)


def spreading(tags: Sequence[str], context: Mapping[str, int], s: LifecycleSettings = DEFAULT) -> float:
    """Spreading activation from the context tags (tag -> fan: memories carrying it) the memory shares."""
    if not context:
        return 0.0
    w = 1.0 / len(context)
    total = 0.0
    for tag in set(tags):
        fan = context.get(tag)
        if fan:
            total += w * max(s.s_max - math.log(fan) - s.fan_delta * math.log(fan + 1), 0.0)
    return total


def activation(m: MemoryRow, usage: Usage, now_ms: int, context: Mapping[str, int], s: LifecycleSettings = DEFAULT,
               layers: Mapping[int, LayerRule] = DEFAULT_LAYERS) -> float:
    """A = max(B + S, floor): the layer's activation floor, at least 0 for a protected memory."""
    floor = layers[m.layer].activation_floor
    if m.protected:
        floor = max(floor, 0.0)
    return max(base_activation(usage.uses, m.created_at_ms, now_ms, s) + spreading(m.tags, context, s), floor)


@dataclass(frozen=True)
class Score:
    """The cognitive score of one hit and its parts (the parts add up to `final`)."""

    relevance: float
    activation: float
    confidence: float
    relevance_part: float
    activation_part: float
    confidence_part: float
    importance_part: float
    final: float


def score(m: MemoryRow, usage: Usage, relevance: float, now_ms: int, context: Mapping[str, int],
          s: LifecycleSettings = DEFAULT, layers: Mapping[int, LayerRule] = DEFAULT_LAYERS) -> Score:
    """The final score of memory `m` whose normalised relevance is `relevance` (0 to 1)."""
    a = activation(m, usage, now_ms, context, s, layers)
    confidence = m.confidence * verification_factor(m, now_ms, s)
    parts = (s.weight_relevance * relevance, s.weight_activation * max(-1.0, min(1.0, a / 10.0)),
             s.weight_confidence * confidence, s.weight_importance * (m.importance - 0.5))
    return Score(relevance, a, confidence, *parts, final=math.fsum(parts))


@dataclass(frozen=True)
class Verdict:
    """What the sweep decides for one memory at a time, and why."""

    archive: bool
    retention: float
    effective_importance: float
    reason: str


PROTECTED_TAGS = frozenset({"correction", "decision", "identity", "emotional_anchor", "commitment", "exact_value",
                            "chain_of_command", "person"})
"""Tags that always keep a memory from being archived (seed 002)."""


def archive_verdict(m: MemoryRow, usage: Usage, now_ms: int, s: LifecycleSettings = DEFAULT,
                    layers: Mapping[int, LayerRule] = DEFAULT_LAYERS,
                    protected_tags: frozenset[str] = PROTECTED_TAGS) -> Verdict:
    """Seed 002's should_archive with decay: importance x R x the type's weight (seed 004) below the layer's
    threshold, older than its minimum age.

    Never for an archived memory, a protected one, a protected tag, a layer that
    is not archivable (1 and 2 by default), or level 3 and up.
    """
    rule = layers[m.layer]
    r = strength(m, usage, now_ms, s, layers).retention
    weight = s.type_weight(m.type)
    effective = m.importance * r * weight
    age_days = (now_ms - m.created_at_ms) / DAY_MS
    lvl = level(m, usage, now_ms, s)

    def keep(why: str) -> Verdict:
        return Verdict(False, r, effective, why)

    if m.archived:
        return keep("already archived")
    if m.protected:
        return keep("protected")
    shared = sorted(protected_tags.intersection(m.tags))
    if shared:
        return keep(f"protected tag {shared[0]}")
    if not rule.archivable:
        return keep(f"layer {rule.name} is never archived")
    if lvl >= 3:
        return keep(f"level {lvl} is never archived")
    weighed = f" x {m.type} weight {weight:g}" if weight != 1 else ""
    if effective >= (rule.archive_importance_below or 0.0):
        return keep(f"importance x strength{weighed} {effective:.3f} >= {rule.name} threshold "
                    f"{rule.archive_importance_below}")
    if age_days <= (rule.archive_after_days or 0):
        return keep(f"age {age_days:.1f} days <= {rule.name} minimum {rule.archive_after_days}")
    return Verdict(True, r, effective,
                   f"importance {m.importance:.2f} x strength {r:.3f}{weighed} = {effective:.3f} < {rule.name} "
                   f"threshold {rule.archive_importance_below}, age {age_days:.1f} days > {rule.archive_after_days}")


MAX_LISTED = 1000
"""Decisions a sweep's report lists at most (the counts cover all of them)."""


@dataclass(frozen=True)
class Decision:
    """One entry the sweep writes (or would write, in a dry run)."""

    memory_id: str
    op: str
    payload: dict[str, Any]
    reason: str
    base_version: int = 0


@dataclass
class SweepReport:
    """What a sweep did (or would do): counts, and the first MAX_LISTED decisions."""

    as_of_ms: int
    dry_run: bool
    examined: int = 0
    decayed: int = 0
    archived: int = 0
    entries_written: int = 0
    head_seq: int = 0
    decisions: list[Decision] = field(default_factory=list)
    after_num: int = 0
    done: bool = False
