"""Harder variants of the labelled sets, to check that retrieval quality does not hang on how the sets happen to be.

* `dated`: the conversations stored with the session's date and time in
  front of every turn ("[2025-03-08 16:20] Maya: ..."), as some importers
  format turns; the questions and evidence are unchanged.
* weak vector channel: every query vector pushed off course by random noise
  (`weakened`, sigma 2.5), so the vector channel recalls far less than the
  keyword channel. On a public conversational benchmark the vector channel is
  that weak, and rank fusion then fell below keyword search alone; on our sets
  as they are it is not, so this variant is how the benchmark shows whether
  hybrid search still holds up when one channel fails.

Fusion choices are made on the dev split of every variant, reported on test.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np

from ops.bench.datasets import LabelledSet

WEAK_SIGMA = 2.5
"""Noise length relative to the unit query vector (2.5 takes conversations' vector recall@10 from ~0.66 to ~0.43)."""

DESCRIPTIONS = {
    "conversations-dated": "the conversations with \"[session date and time] \" in front of every turn",
    "retrieval-weak-vector": f"the code-assistant set with every query vector weakened by noise (sigma {WEAK_SIGMA})",
    "conversations-weak-vector": f"the conversations with every query vector weakened by noise (sigma {WEAK_SIGMA})",
}
"""What each variant is, by its name in the report."""


def dated(labelled: LabelledSet) -> LabelledSet:
    """`labelled` (memories with an event time) with "[YYYY-MM-DD HH:MM] " in front of each memory's content."""
    memories = tuple(replace(m, content=f"[{m.event_time.replace('T', ' ')}] {m.content}") for m in labelled.memories)
    return replace(labelled, name=f"{labelled.name}-dated", memories=memories)


def weakened(vector, query_id: str, sigma: float = WEAK_SIGMA) -> list[float]:
    """The unit query vector plus a random direction of length `sigma`, normalised; the same for the same query."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(query_id.encode()).digest()[:8], "little"))
    v = np.asarray(vector, dtype=np.float64)
    noise = rng.standard_normal(v.shape)
    out = v / np.linalg.norm(v) + sigma * noise / np.linalg.norm(noise)
    return (out / np.linalg.norm(out)).astype(np.float32).tolist()
