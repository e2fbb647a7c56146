"""The re-ranking (issue 15) on the labelled sets with simulated use: does it behave as designed?

The labelled sets carry no access history, so on them the cognitive parts are
alike for every memory and the re-ranked order is the fused one. These
variants give the same server (same memories) a history, then ask every
question again, re-ranked (`hybrid`) and in the fused order (`fused`):

* `popular`: a fixed tenth of the memories, chosen at random without looking
  at any question, each used POPULAR_USES times. Relevance keeps 60 % of the
  score, so popular memories that do not answer a question should disturb
  the order little.
* `used-evidence` (on top of `popular`): the evidence of every other question
  used EVIDENCE_USES times, as if those answers had helped before. Those
  questions (category "evidence used") should rank their answers higher; the
  others ("evidence not used") show what that costs them.
"""

from __future__ import annotations

import random
from dataclasses import replace

from mnemosync.v1 import memory_pb2 as pb
from ops.bench.datasets import LabelledSet

POPULAR_SHARE = 0.1
POPULAR_USES = 20
EVIDENCE_USES = 5
USED, NOT_USED = "evidence used", "evidence not used"

DESCRIPTIONS = {
    "popular": f"the same memories after a random tenth of them was used {POPULAR_USES} times each (no question "
               "looked at)",
    "used-evidence": f"as popular, and the evidence of every other question used {EVIDENCE_USES} times; categories "
                     "split the questions by whether their evidence was used",
}


def record_uses(client, memory_ids: list[str], times: int) -> None:
    """RecordUse through the bench client, 100 ids a call."""
    ids = [i for i in memory_ids for _ in range(times)]
    for start in range(0, len(ids), 100):
        client.stub.RecordUse(pb.RecordUseRequest(memory_ids=ids[start:start + 100]), metadata=client.metadata,
                              timeout=60)


def popular(labelled: LabelledSet, memory_uuid) -> list[str]:
    """The memories the `popular` variant uses (the same every run)."""
    chosen = random.Random(15).sample(list(labelled.memories), max(1, int(len(labelled.memories) * POPULAR_SHARE)))
    return [memory_uuid(m.id) for m in chosen]


def evidence_used(labelled: LabelledSet) -> LabelledSet:
    """`labelled` with every other question's category set to USED (its evidence gets used), the rest NOT_USED."""
    queries = tuple(replace(q, category=USED if i % 2 == 0 else NOT_USED) for i, q in enumerate(labelled.queries))
    return replace(labelled, queries=queries, categories=(USED, NOT_USED))
