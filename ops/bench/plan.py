"""What one benchmark run measures: its sizes, durations and sections (`ops.bench.run` carries it out)."""

from __future__ import annotations

from dataclasses import dataclass, field

SECTIONS = ("append", "search", "memory", "catchup", "e2e", "concurrency", "recall", "quality", "tools", "graph",
            "consolidation", "external")


@dataclass
class Plan:
    """Sizes and durations of one run."""

    mode: str
    small: int
    large: int
    chunk: int
    batch: int
    search_queries: int
    e2e_queries: int
    agent_counts: tuple[int, ...] = (1, 4, 8)
    concurrency_seconds: float = 4.0
    concurrency_rounds: int = 3
    sections: tuple[str, ...] = SECTIONS
    synchronous: str = "full"
    external: bool = False
    extras: dict = field(default_factory=dict)

    @classmethod
    def full(cls) -> Plan:
        """10k and 100k memories, 200 timed queries per size, 3 rounds of 4 s per concurrency level."""
        return cls(mode="full", small=10_000, large=100_000, chunk=5_000, batch=500, search_queries=200,
                   e2e_queries=100)

    @classmethod
    def quick(cls) -> Plan:
        """Small sizes and short runs: the same figures, for smoke tests."""
        return cls(mode="quick", small=500, large=2_000, chunk=500, batch=250, search_queries=25, e2e_queries=10,
                   concurrency_seconds=0.4, concurrency_rounds=1)


def label(n: int) -> str:
    """A size as the report names it: 10k, 100k, 500."""
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)
