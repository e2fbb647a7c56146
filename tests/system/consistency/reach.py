"""What the consistency suite reached: every rule that did its work, every invariant checked, every fault that
actually happened, every refusal seen, counted over a whole run.

`reached(kind, name)` records one occurrence through Hypothesis' `event()` (so
`--hypothesis-show-statistics` shows the share of examples) and in a counter
that lives as long as the test process, so the test can print a summary at the
end and fail when something it promises to exercise never happened. A rule
that returned early without doing its work does not count.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import event

RULE, INVARIANT, FAULT, OUTCOME = "rule", "invariant", "fault", "outcome"

COUNTS: Counter[tuple[str, str]] = Counter()


def reached(kind: str, name: str) -> None:
    """Records that `name` (a rule, invariant, fault or outcome) happened once."""
    COUNTS[(kind, name)] += 1
    event(f"{kind}: {name}")


def reset() -> None:
    COUNTS.clear()


def missing(kind: str, names: list[str]) -> list[str]:
    """The names of `kind` that never happened."""
    return [name for name in names if not COUNTS[(kind, name)]]


def summary() -> str:
    """A table of everything counted, by kind, most frequent first."""
    lines = []
    for kind in (RULE, INVARIANT, FAULT, OUTCOME):
        rows = sorted(((n, name) for (k, name), n in COUNTS.items() if k == kind), key=lambda r: (-r[0], r[1]))
        if rows:
            lines.append(f"{kind}s ({len(rows)}):")
            lines += [f"  {n:6d}  {name}" for n, name in rows]
    return "\n".join(lines)
