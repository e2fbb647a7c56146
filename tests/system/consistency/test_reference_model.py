"""The consistency suite's reference model must itself refuse a changelog that bypasses a rule, or the state
machine could pass over a server that skips one.
"""

from __future__ import annotations

import uuid

import pytest

from mnemosync.v1 import memory_pb2 as pb

import reference_model as ref

POLICY = ref.Policy(authority={"human": 1, "bot": 5})


def _chain(*entries: pb.ChangelogEntry) -> list[pb.ChangelogEntry]:
    for seq, e in enumerate(entries, start=1):
        e.seq, e.op = seq, e.operation.WhichOneof("op")
        e.authority = POLICY.of(e.agent_id)
    return list(entries)


def _add(memory_id: str, agent: str, content: str, layer: int = 3) -> pb.ChangelogEntry:
    return pb.ChangelogEntry(memory_id=memory_id, agent_id=agent, version=1, operation=pb.Operation(
        memory_id=memory_id, add=pb.AddOp(scope="user", type="fact", content=content, layer=layer)))


def _update(memory_id: str, agent: str, base: int, content: str) -> pb.ChangelogEntry:
    return pb.ChangelogEntry(memory_id=memory_id, agent_id=agent, base_version=base, version=base + 1,
                             operation=pb.Operation(memory_id=memory_id, base_version=base,
                                                    update=pb.UpdateOp(content=content)))


def test_the_model_refuses_a_weaker_agent_overwriting_a_human():
    mid = str(uuid.uuid4())
    entries = _chain(_add(mid, "human", "Deploys need two approvals"), _update(mid, "bot", 1, "One is enough"))
    ref.fold(entries)  # without a policy only the folding rules apply
    with pytest.raises(ref.Violation, match="no-overwrite-higher-authority"):
        ref.fold(entries, POLICY)


def test_the_model_refuses_a_constitutional_memory_from_an_agent():
    with pytest.raises(ref.Violation, match="layer-1-human-only"):
        ref.fold(_chain(_add(str(uuid.uuid4()), "bot", "Never deploy on Fridays", layer=1)), POLICY)


def test_the_model_refuses_an_entry_recording_another_authority_than_the_policy():
    entries = _chain(_add(str(uuid.uuid4()), "bot", "Builds are cached"))
    entries[0].authority = 1
    with pytest.raises(AssertionError, match="records authority 1 for bot"):
        ref.fold(entries, POLICY)


def test_the_model_predicts_every_rule_a_write_breaks():
    mid = str(uuid.uuid4())
    folded = ref.fold(_chain(_add(mid, "human", "Releases are on Tuesdays", layer=2)), POLICY)
    assert ref.change_refusals(folded, POLICY, "bot", "forget", mid, 1) == {
        "no-overwrite-higher-authority", "layers-1-2-not-forgotten"}
    assert ref.change_refusals(folded, POLICY, "human", "forget", mid, 1) == set()
    assert ref.change_refusals(folded, POLICY, "human", "restore", mid, 1) == {"FAILED_PRECONDITION"}
    assert ref.change_refusals(folded, POLICY, "human", "update", str(uuid.uuid4()), 1) == {"NOT_FOUND"}


def _archive(memory_id: str, agent: str, base: int) -> pb.ChangelogEntry:
    return pb.ChangelogEntry(memory_id=memory_id, agent_id=agent, base_version=base, version=base + 1,
                             operation=pb.Operation(memory_id=memory_id, base_version=base,
                                                    archive=pb.ArchiveOp(as_of_ms=1, reason="faded")))


def _system(entries: list[pb.ChangelogEntry]) -> list[pb.ChangelogEntry]:
    for e in entries:
        if e.agent_id == ref.SYSTEM:
            e.authority = ref.SYSTEM_AUTHORITY
    return entries


def test_the_model_archives_a_faded_fact_but_refuses_archiving_a_constitutional_memory_or_an_agents_archive():
    fact, rule = str(uuid.uuid4()), str(uuid.uuid4())
    folded = ref.fold(_system(_chain(_add(fact, "bot", "The cache is warm"), _archive(fact, ref.SYSTEM, 1))), POLICY)
    assert folded.memories[fact].state["archived"] and folded.memories[fact].version == 2
    assert folded.memories[fact].state["authority"] == 5  # the visible text is still the bot's
    with pytest.raises(AssertionError, match="archived layer-1 memory"):
        ref.fold(_system(_chain(_add(rule, "human", "Never share keys", layer=1), _archive(rule, ref.SYSTEM, 1))))
    with pytest.raises(AssertionError, match="archive by bot, not the system agent"):
        ref.fold(_chain(_add(fact, "bot", "The cache is warm"), _archive(fact, "bot", 1)))


def _link(memory_id: str, agent: str, target: str, kind: str = "link") -> pb.ChangelogEntry:
    change = (pb.LinkOp(target_id=target, relation="semantic", weight=0.7, reason="cosine 0.700")
              if kind == "link" else pb.UnlinkOp(target_id=target, relation="semantic"))
    return pb.ChangelogEntry(memory_id=memory_id, agent_id=agent, version=1,
                             operation=pb.Operation(memory_id=memory_id, **{kind: change}))


def test_the_model_refuses_consolidation_linking_again_what_an_agent_unlinked():
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    added = [_add(a, "human", "The deploy pipeline runs on GitHub Actions"), _add(b, "bot", "Deploys use Actions")]
    folded = ref.fold(_system(_chain(*added, _link(a, ref.SYSTEM, b))), POLICY)
    assert (b, "semantic") in folded.memories[a].links
    with pytest.raises(AssertionError, match="linked .* again after their link was removed"):
        ref.fold(_system(_chain(*[_add(a, "human", "The deploy pipeline runs on GitHub Actions"),
                                  _add(b, "bot", "Deploys use Actions")],
                                _link(a, ref.SYSTEM, b), _link(a, "human", b, "unlink"), _link(b, ref.SYSTEM, a))),
                 POLICY)
