"""The labelled retrieval sets are well formed: sizes, ids, evidence, categories, sessions and the dev/test split.

Reads only the files under ops/bench/data (no model, no server), so a broken
label is caught before any benchmark runs on it.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from ops.bench import datasets  # noqa: E402

CONVERSATIONS = datasets.DATA / "conversations"
TURN_ID = re.compile(r"^(c\d+):(s\d+):t\d+$")


@pytest.fixture(scope="module")
def conversations() -> datasets.LabelledSet:
    return datasets.conversations_set()


@pytest.fixture(scope="module")
def retrieval() -> datasets.LabelledSet:
    return datasets.retrieval_set()


@pytest.fixture(scope="module")
def records() -> dict[str, list[dict]]:
    return {name: datasets.read_jsonl(CONVERSATIONS / f"{name}.jsonl")
            for name in ("conversations", "turns", "questions")}


def test_the_conversational_set_is_big_and_chatty_enough_in_every_dimension(conversations, records):
    assert len(records["conversations"]) >= 8
    assert len(conversations.memories) >= 2300
    assert len(conversations.queries) >= 700
    per_category = Counter(q.category for q in conversations.queries)
    assert set(per_category) == set(datasets.CONVERSATION_CATEGORIES)
    assert min(per_category.values()) >= 170
    words_per_turn = [len(m.content.split()) - 1 for m in conversations.memories]  # minus the "Speaker:" prefix
    assert sum(words_per_turn) / len(words_per_turn) >= 20


def test_every_conversation_is_long_with_two_or_three_speakers_and_22_to_30_dated_sessions(records):
    turns_by_conversation: dict[str, list[dict]] = {}
    for turn in records["turns"]:
        turns_by_conversation.setdefault(turn["conversation"], []).append(turn)
    for conversation in records["conversations"]:
        sessions = conversation["sessions"]
        assert 22 <= len(sessions) <= 30, conversation["id"]
        assert 250 <= len(turns_by_conversation[conversation["id"]]) <= 350, conversation["id"]
        times = [datetime.fromisoformat(s["datetime"]) for s in sessions]
        assert times == sorted(times) and len(set(times)) == len(times), conversation["id"]
        speakers = {t["speaker"] for t in turns_by_conversation[conversation["id"]]}
        assert speakers == set(conversation["participants"]) and 2 <= len(speakers) <= 3


def test_every_turn_carries_its_sessions_id_and_datetime(records):
    session_time = {s["id"]: s["datetime"] for c in records["conversations"] for s in c["sessions"]}
    for turn in records["turns"]:
        conversation, session = TURN_ID.match(turn["id"]).groups()
        assert turn["conversation"] == conversation and turn["session"] == f"{conversation}:{session}"
        assert turn["session_datetime"] == session_time[turn["session"]]
        assert turn["text"].strip() and turn["speaker"]
    sessions_with_turns = {t["session"] for t in records["turns"]}
    assert sessions_with_turns == set(session_time)


def test_a_turn_is_stored_as_speaker_and_text_with_the_session_time_as_its_event_time(conversations, records):
    memories = {m.id: m for m in conversations.memories}
    for turn in records["turns"]:
        memory = memories[turn["id"]]
        assert memory.content == f"{turn['speaker']}: {turn['text']}"
        assert memory.event_time == turn["session_datetime"] and memory.session == turn["session"]


@pytest.mark.parametrize("name", ["retrieval", "conversations"])
def test_ids_are_unique_and_every_evidence_id_names_a_memory(name, request):
    labelled: datasets.LabelledSet = request.getfixturevalue(name)
    memory_ids = [m.id for m in labelled.memories]
    query_ids = [q.id for q in labelled.queries]
    assert len(set(memory_ids)) == len(memory_ids)
    assert len(set(query_ids)) == len(query_ids)
    assert len({m.content for m in labelled.memories}) == len(memory_ids)  # the server would dedup a repeat
    known = set(memory_ids)
    for query in labelled.queries:
        assert query.evidence and set(query.evidence) <= known, query.id
        assert len(set(query.evidence)) == len(query.evidence), query.id
        assert query.category in labelled.categories, query.id
        assert query.split in datasets.SPLITS, query.id


def test_a_conversational_question_draws_only_on_its_own_conversation(records):
    for question in records["questions"]:
        assert question["id"].startswith(question["conversation"] + ":q")
        assert {e.split(":")[0] for e in question["evidence"]} == {question["conversation"]}, question["id"]
        assert question["question"].strip().endswith("?") and question["answer"].strip()


def test_multi_hop_questions_need_two_or_more_sessions_and_single_hop_questions_one_turn(conversations):
    session_of = {m.id: m.session for m in conversations.memories}
    for query in conversations.queries:
        sessions = {session_of[e] for e in query.evidence}
        if query.category == "multi-hop":
            assert len(sessions) >= 2, query.id
        if query.category == "single-hop":
            assert len(query.evidence) == 1, query.id


@pytest.mark.parametrize("name", ["retrieval", "conversations"])
def test_the_recorded_split_is_the_one_assign_splits_makes(name, request, records):
    labelled: datasets.LabelledSet = request.getfixturevalue(name)
    group = {q["id"]: q["conversation"] for q in records["questions"]} if name == "conversations" else {}
    expected = datasets.assign_splits((q.id, q.category, group.get(q.id, name)) for q in labelled.queries)
    assert {q.id: q.split for q in labelled.queries} == expected


@pytest.mark.parametrize("name", ["retrieval", "conversations"])
def test_the_split_is_half_and_half_within_every_category(name, request):
    labelled: datasets.LabelledSet = request.getfixturevalue(name)
    for category in labelled.categories:
        dev = sum(q.category == category for q in labelled.split("dev"))
        test = sum(q.category == category for q in labelled.split("test"))
        assert dev + test > 0 and abs(dev - test) <= 1, category


def test_every_conversation_gives_dev_and_test_the_same_share_of_each_category(records):
    counts = Counter((q["conversation"], q["category"], q["split"]) for q in records["questions"])
    for conversation, category in {(c, k) for c, k, _ in counts}:
        assert abs(counts[conversation, category, "dev"] - counts[conversation, category, "test"]) <= 1


def test_assign_splits_alternates_within_a_category_across_groups_whatever_the_order_inside_a_group():
    items = [("a1", "x", "g1"), ("a2", "x", "g1"), ("a3", "x", "g1"), ("b1", "x", "g2"), ("b2", "y", "g2")]
    splits = datasets.assign_splits(items)
    assert Counter(splits[i] for i in ("a1", "a2", "a3", "b1")) == {"dev": 2, "test": 2}
    assert splits["b2"] == "dev"
    shuffled_within_groups = [items[2], items[0], items[1], items[4], items[3]]
    assert datasets.assign_splits(shuffled_within_groups) == splits


def test_asking_for_an_unknown_split_names_the_known_ones(retrieval):
    with pytest.raises(ValueError, match="unknown split 'train'; expected one of dev, test"):
        retrieval.split("train")


def test_the_public_recall_prompts_are_the_frozen_file_the_shims_readme_names():
    """Issue 38: the prompts were written and frozen before the decision was tried on them; `mcp_shim/README.md`
    gives the file's SHA-256, so a later edit of a prompt shows here."""
    import hashlib

    readme = (Path(__file__).resolve().parents[2] / "mcp_shim" / "README.md").read_text(encoding="utf-8")
    named = re.search(r"`prompts.json` has\s+SHA-256 `([0-9a-f]{64})`", readme)
    assert named, "mcp_shim/README.md names no SHA-256 of recall_public/prompts.json"
    assert hashlib.sha256((datasets.DATA / "recall_public" / "prompts.json").read_bytes()).hexdigest() == named[1]


def test_the_public_recall_set_has_ten_stores_of_different_stacks_split_by_store_with_their_sources():
    stores = datasets.public_recall_stores()
    assert len(stores) >= 10 and {s.split for s in stores} == set(datasets.PUBLIC_SPLITS)
    assert len({s.about for s in stores}) == len(stores)
    sources = json.loads((datasets.DATA / "recall_public" / "memories.json").read_text(encoding="utf-8"))["stores"]
    for store in sources:
        assert all(m["source"]["repo"] and m["source"]["path"] and len(m["source"]["commit"]) == 40
                   for m in store["memories"]), store["store"]
    for store in stores:
        kinds = {p.kind for p in store.prompts}
        assert kinds == set(datasets.RECALL_KINDS), store.name
        assert all(p.memories for p in store.prompts if p.kind in ("question", "instruction", "follow-up"))
