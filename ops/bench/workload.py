"""Synthetic memories and queries for the speed benchmarks.

Deterministic for a seed. Content is sentences of pseudo-words drawn from a
Zipf distribution (so, as in real text, a few words are in many memories and
most are rare), with tags, types and scopes in agent-like proportions.
Vectors are random 384-dim unit vectors: the exhaustive scans being measured
cost the same whatever the vectors say.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

DIMS = 384
TYPES = ("fact", "decision", "preference", "fix", "person", "event", "config")
TAGS = tuple(f"tag{i}" for i in range(40))
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "de", "pa", "xo", "zu", "bre", "tan", "gil", "mor")


# Real English function words take the top ranks, as they do in real text (the
# keyword channel drops them); pseudo-words fill the long tail.
_FUNCTION_WORDS = """the to and a of in is for on with we that it as be at by this from are was not
or use uses used when if should after before has have its our all but can so than then into""".split()


def vocabulary(size: int = 20_000) -> list[str]:
    """Distinct words, most frequent first: function words, then pseudo-words."""
    words, n = list(_FUNCTION_WORDS), 0
    while len(words) < size:
        parts, k = [], n
        while True:
            parts.append(_SYLLABLES[k % len(_SYLLABLES)])
            k //= len(_SYLLABLES)
            if k == 0:
                break
        word = "".join(parts)
        n += 1
        if len(word) > 2 and word not in words:
            words.append(word)
    return words


@dataclass(frozen=True)
class Memory:
    """One synthetic memory (the fields of an add operation)."""

    memory_id: str
    op_id: str
    scope: str
    type: str
    tags: tuple[str, ...]
    content: str


class Workload:
    """Generates memories, vectors and queries for one benchmark run.

    Args:
        seed: Everything generated follows from it.
    """

    def __init__(self, seed: int = 6):
        self.seed = seed
        self.words = vocabulary()
        ranks = np.arange(1, len(self.words) + 1, dtype=np.float64)
        weights = 1.0 / ranks**1.07
        self._p = weights / weights.sum()

    def memories(self, start: int, count: int) -> list[Memory]:
        """Memories number start .. start+count-1 (the same numbers always give the same memories)."""
        rng = np.random.default_rng([self.seed, start, count])
        lengths = rng.integers(10, 36, size=count)
        picks = rng.choice(len(self.words), size=int(lengths.sum()), p=self._p)
        out, at = [], 0
        for i in range(count):
            n = start + i
            words = [self.words[w] for w in picks[at:at + lengths[i]]]
            at += lengths[i]
            kind = TYPES[n % len(TYPES)]
            tags = tuple(sorted({TAGS[int(t)] for t in rng.integers(0, len(TAGS), size=n % 4)}))
            scope = "user" if n % 5 else f"project:p{n % 7}"
            ident = uuid.UUID(int=(self.seed << 96) | n)
            out.append(Memory(str(ident), str(uuid.UUID(int=(self.seed << 96) | (1 << 80) | n)), scope, kind,
                              tags, f"{kind} {n}: " + " ".join(words)))
        return out

    def vectors(self, start: int, count: int) -> np.ndarray:
        """Unit vectors (float32, count x DIMS) for memories start .. start+count-1."""
        rng = np.random.default_rng([self.seed, 1, start, count])
        v = rng.standard_normal((count, DIMS), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v

    def queries(self, count: int, salt: int = 0) -> list[tuple[str, np.ndarray]]:
        """(text, unit vector) pairs: 2 to 5 words, as agents' short queries are."""
        rng = np.random.default_rng([self.seed, 2, salt, count])
        out = []
        for _ in range(count):
            words = rng.choice(len(self.words), size=int(rng.integers(2, 6)), p=self._p)
            v = rng.standard_normal(DIMS).astype(np.float32)
            out.append((" ".join(self.words[w] for w in words), v / np.linalg.norm(v)))
        return out
