"""The labelled retrieval sets, as typed objects: what is stored, what is asked, what answers it.

Two sets live under `ops/bench/data/`:

* `retrieval/`: short code-assistant memories (decisions, fixes, preferences,
  people, dates, configuration) and questions about them;
* `conversations/`: long multi-session conversations between people who know
  each other, one memory per dialog turn, and questions whose evidence is the
  turns that hold the answer (see `ops/bench/data/conversations/README.md`).

Each query belongs to the `dev` or the `test` split. Retrieval changes are
tuned on dev and reported on test; `assign_splits` is the rule that made the
recorded splits, and the tests check the files still follow it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"
SPLITS = ("dev", "test")
RETRIEVAL_CATEGORIES = ("paraphrase", "identifier", "temporal", "general")
CONVERSATION_CATEGORIES = ("single-hop", "multi-hop", "temporal", "open-domain")
CONVERSATION_TYPE = "conversation"


@dataclass(frozen=True)
class Memory:
    """One labelled memory, as the benchmark stores it.

    Attributes:
        id: The label id, stable across versions of the set (`m001`, `c2:s5:t14`).
        content: The text stored on the server (for a dialog turn: "Speaker: text").
        type: The memory type it is stored with.
        tags: Its tags.
        speaker: Who said it (dialog turns only).
        session: The id of the session it belongs to (dialog turns only), e.g. `c2:s5`.
        event_time: When it happened, as ISO 8601 local time (the session's date
            and time for a dialog turn), which is not when it was stored.
    """

    id: str
    content: str
    type: str
    tags: tuple[str, ...] = ()
    speaker: str | None = None
    session: str | None = None
    event_time: str | None = None


@dataclass(frozen=True)
class Query:
    """One labelled question.

    Attributes:
        id: Stable id (`q001`, `c2:q17`).
        text: The question as a user would ask it.
        evidence: Ids of every memory that holds (part of) the answer.
        category: The kind of question (see the set's categories).
        split: "dev" (tune on it) or "test" (report it).
        answer: A short reference answer, when the set has one.
    """

    id: str
    text: str
    evidence: tuple[str, ...]
    category: str
    split: str
    answer: str | None = None


@dataclass(frozen=True)
class LabelledSet:
    """A labelled set: its memories, its queries and the names of its categories."""

    name: str
    memories: tuple[Memory, ...]
    queries: tuple[Query, ...]
    categories: tuple[str, ...]

    def split(self, name: str) -> tuple[Query, ...]:
        """The queries of one split ("dev" or "test").

        Raises:
            ValueError: for any other split name.
        """
        if name not in SPLITS:
            raise ValueError(f"unknown split {name!r}; expected one of {', '.join(SPLITS)}")
        return tuple(q for q in self.queries if q.split == name)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON Lines file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def retrieval_memory(record: dict[str, Any]) -> Memory:
    """A memory of the code-assistant set from its `memories.jsonl` record."""
    return Memory(id=record["id"], content=record["content"], type=record["type"], tags=tuple(record["tags"]))


def retrieval_query(record: dict[str, Any]) -> Query:
    """A query of the code-assistant set from its `queries.jsonl` record."""
    return Query(id=record["id"], text=record["query"], evidence=tuple(record["relevant"]),
                 category=record["category"], split=record["split"])


def retrieval_set(directory: Path = DATA / "retrieval") -> LabelledSet:
    """The code-assistant set (`memories.jsonl`, `queries.jsonl`)."""
    memories = tuple(retrieval_memory(m) for m in read_jsonl(directory / "memories.jsonl"))
    queries = tuple(retrieval_query(q) for q in read_jsonl(directory / "queries.jsonl"))
    return LabelledSet("retrieval", memories, queries, RETRIEVAL_CATEGORIES)


def conversations_set(directory: Path = DATA / "conversations") -> LabelledSet:
    """The conversational set (`turns.jsonl`, `questions.jsonl`): one memory per dialog turn.

    A turn's content is "Speaker: text"; the session's date and time is its
    event time. All conversations form one memory, as an agent's shared store
    would: a question about one conversation has the others as distractors.
    """
    memories = tuple(
        Memory(id=t["id"], content=f"{t['speaker']}: {t['text']}", type=CONVERSATION_TYPE, speaker=t["speaker"],
               session=t["session"], event_time=t["session_datetime"])
        for t in read_jsonl(directory / "turns.jsonl"))
    queries = tuple(
        Query(id=q["id"], text=q["question"], evidence=tuple(q["evidence"]), category=q["category"],
              split=q["split"], answer=q["answer"])
        for q in read_jsonl(directory / "questions.jsonl"))
    return LabelledSet("conversations", memories, queries, CONVERSATION_CATEGORIES)


def labelled_sets() -> tuple[LabelledSet, ...]:
    """Every labelled set, in report order."""
    return retrieval_set(), conversations_set()


def assign_splits(items: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """The dev/test split of labelled questions: stratified by category, balanced across groups.

    Within each category the questions are taken group by group (a group is a
    conversation, or one group for a set without conversations, in first-seen
    order) and, inside a group, in the order of the SHA-256 of their id; they
    alternate dev, test, dev, ... with one alternation per category that runs
    on across groups. So each category is split 50/50 (±1), each group's share
    of a category is split 50/50 (±1), and adding a question moves few others.

    Args:
        items: (question id, category, group) for every question.

    Returns:
        question id -> "dev" or "test".
    """
    by_category: dict[str, dict[str, list[str]]] = {}
    for qid, category, group in items:
        by_category.setdefault(category, {}).setdefault(group, []).append(qid)
    splits: dict[str, str] = {}
    for groups in by_category.values():
        turn = 0
        for ids in groups.values():
            for qid in sorted(ids, key=lambda i: hashlib.sha256(i.encode()).hexdigest()):
                splits[qid] = SPLITS[turn % 2]
                turn += 1
    return splits


@dataclass(frozen=True)
class Prompt:
    """One labelled prompt of the recall set, as a developer would type it into Claude Code.

    Attributes:
        id: Stable id (`wp01`).
        text: The prompt.
        kind: question, instruction, follow-up (related), or chit-chat, generic, unrelated-task (negatives).
        memories: Ids of the memories it needs injected (empty for a negative).
    """

    id: str
    text: str
    kind: str
    memories: tuple[str, ...]


@dataclass(frozen=True)
class PromptStore:
    """One project's memory store and the prompts typed in its sessions; `split` is "dev" (fit on it) or
    "heldout" (report on it): the split is by store, so the decision is proven on vocabulary it never saw."""

    name: str
    split: str
    about: str
    memories: tuple[Memory, ...]
    prompts: tuple[Prompt, ...]


RECALL_SPLITS = ("dev", "heldout")
RECALL_KINDS = ("question", "instruction", "follow-up", "chit-chat", "generic", "unrelated-task")


def recall_stores(directory: Path = DATA / "recall") -> tuple[PromptStore, ...]:
    """The labelled prompt set (`recall/<store>.json`), one store per file, in name order.

    Raises:
        ValueError: a prompt names a memory its store does not hold, or a split or kind is unknown.
    """
    stores = []
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        memories = tuple(Memory(id=m["id"], content=m["content"], type=m["type"], tags=tuple(m["tags"]))
                         for m in data["memories"])
        prompts = tuple(Prompt(id=p["id"], text=p["text"], kind=p["kind"], memories=tuple(p["memories"]))
                        for p in data["prompts"])
        known = {m.id for m in memories}
        for p in prompts:
            if p.kind not in RECALL_KINDS or not set(p.memories) <= known:
                raise ValueError(f"{path.name}: prompt {p.id} has kind {p.kind!r} or memories {p.memories} "
                                 f"not in the store")
        if data["split"] not in RECALL_SPLITS:
            raise ValueError(f"{path.name}: split must be one of {', '.join(RECALL_SPLITS)}")
        stores.append(PromptStore(data["store"], data["split"], data["about"], memories, prompts))
    return tuple(stores)


PUBLIC_SPLITS = ("dev", "test")


def public_recall_stores(directory: Path = DATA / "recall_public") -> tuple[PromptStore, ...]:
    """The recall set built from public projects' rules (`recall_public/memories.json` and the frozen
    `prompts.json`), one store per project, in name order; `split` is "dev" or "test".

    Raises:
        ValueError: a prompt names a memory its store does not hold, a kind or split is unknown, or a store has
            no prompts.
    """
    stores = json.loads((directory / "memories.json").read_text(encoding="utf-8"))["stores"]
    prompts = json.loads((directory / "prompts.json").read_text(encoding="utf-8"))["prompts"]
    out = []
    for data in stores:
        name = data["store"]
        memories = tuple(Memory(id=m["id"], content=m["content"], type=m["type"]) for m in data["memories"])
        asked = tuple(Prompt(id=p["id"], text=p["text"], kind=p["kind"], memories=tuple(p["memories"]))
                      for p in prompts.get(name, ()))
        known = {m.id for m in memories}
        bad = [p.id for p in asked if p.kind not in RECALL_KINDS or not set(p.memories) <= known]
        if bad or not asked or data["split"] not in PUBLIC_SPLITS:
            raise ValueError(f"recall_public: store {name} has split {data['split']!r}, {len(asked)} prompts, "
                             f"and prompts with an unknown kind or memory: {bad}")
        out.append(PromptStore(name, data["split"], data["stack"], memories, asked))
    return tuple(out)
