"""`mnemosync.server.admission`: how a validated write enters the changelog against the current state (stale writes,
exact duplicates, and the hole in no-overwrite-higher-authority the consistency suite found).
"""

from __future__ import annotations

import uuid

import grpc
import numpy as np
import pytest

from mnemosync.server.app import run_server
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, fake_vector, update_op


def test_a_write_from_a_stale_version_is_recorded_as_a_conflict_and_the_first_write_stays_visible(agents):
    a, b = agents("agent-a"), agents("agent-b")
    added = a.add("The cache TTL is 60s")
    a.append(update_op(added.memory_id, 1, "The cache TTL is 120s"))
    stale = b.append(update_op(added.memory_id, 1, "The cache TTL is 30s")).results[0]
    assert stale.conflict_id == stale.seq == 3 and stale.version == 3
    memory = a.get(added.memory_id)
    assert memory.content == "The cache TTL is 120s" and memory.version == 3
    assert list(memory.open_conflicts) == [3]
    assert len(a.sync(0)) == 3


def test_a_stale_restore_or_set_layer_is_still_refused_with_the_current_version(agents):
    a = agents("agent-a")
    added = a.add("The cache TTL is 60s")
    a.append(update_op(added.memory_id, 1, "The cache TTL is 120s"))
    with pytest.raises(grpc.RpcError) as err:
        a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=added.memory_id, base_version=1,
                              set_layer=pb.SetLayerOp(layer=pb.LAYER_LEGISLATIVE)))
    assert err.value.code() == grpc.StatusCode.ABORTED
    assert "is at version 2" in err.value.details() and "base_version=2" in err.value.details()


def test_an_exact_duplicate_in_the_same_scope_is_answered_with_the_existing_memory(agents):
    a, b = agents("agent-a"), agents("agent-b")
    first = a.add("The build cache lives in S3")
    again = b.add("The build cache lives in S3")
    assert again.deduplicated and again.memory_id == first.memory_id
    assert (again.seq, again.version) == (0, 1)
    assert len(a.sync(0)) == 1
    elsewhere = a.add("The build cache lives in S3", scope="project:ci")
    assert not elsewhere.deduplicated and elsewhere.memory_id != first.memory_id


def test_duplicates_within_one_batch_and_of_forgotten_memories(agents):
    a = agents("agent-a")
    results = a.append(add_op("Use uv"), add_op("Use uv")).results
    assert [r.deduplicated for r in results] == [False, True] and results[1].memory_id == results[0].memory_id
    a.append(pb.Operation(op_id=str(uuid.uuid4()), memory_id=results[0].memory_id, base_version=1,
                          forget=pb.ForgetOp()))
    revived = a.add("Use uv")
    assert not revived.deduplicated and revived.memory_id != results[0].memory_id


def test_a_stale_repeat_of_a_stronger_authoritys_forget_does_not_take_the_memory_over(tmp_path):
    policy = '[agents.human]\nauthority = 1\n\n[agents.bot]\nauthority = 5\n'
    with run_server(dev_settings(tmp_path, policy=policy)) as running:
        human, bot = RawAgent(running.address, "human"), RawAgent(running.address, "bot")
        try:
            mid = bot.add("The bot's note about flaky builds").memory_id

            def op(base: int, **kind) -> pb.Operation:
                return pb.Operation(op_id=str(uuid.uuid4()), memory_id=mid, base_version=base, **kind)

            human.append(op(1, forget=pb.ForgetOp(reason="wrong")))  # the human forgets it: version 2
            head = running.store.head_seq()
            with pytest.raises(grpc.RpcError, match="no-overwrite-higher-authority"):
                bot.append(op(1, forget=pb.ForgetOp()))  # the bot forgot it too, from version 1 (stale)
            assert running.store.head_seq() == head
            memory = human.get(mid)
            assert memory.authority == 1, (
                f"the bot's stale repeat of the human's forget made the memory authority {memory.authority}")
            with pytest.raises(Exception, match="no-overwrite-higher-authority"):
                bot.append(op(memory.version, restore=pb.RestoreOp()))  # so the bot could undo the human
        finally:
            human.close()
            bot.close()


def test_a_batch_of_adds_flags_exactly_the_adds_close_to_another_agents_memory_packed_or_not(agents):
    from mnemosync.server.governance import DEFAULT_SEMANTIC_THRESHOLD

    a, b = agents("agent-a"), agents("agent-b")
    originals = [np.array(fake_vector(f"original {i}")) for i in range(6)]
    a.append(*(add_op(f"original {i}", vector=v.tolist()) for i, v in enumerate(originals)))
    rng = np.random.default_rng(7)
    ops, expected = [], []
    for i in range(24):
        v = originals[i % 6] + rng.normal(scale=0.04, size=16) if i % 3 == 0 else np.array(fake_vector(f"new {i}"))
        if i % 3 == 1:  # close to this batch's own previous add only: its own memories never count
            v = ops[-1][1] + rng.normal(scale=0.01, size=16)
        v = v / np.linalg.norm(v)
        op = add_op(f"new {i}", vector=v.tolist())
        if i % 2:  # the packed form of the same vector
            op.add.ClearField("embedding")
            op.add.embedding_f32 = v.astype("<f4").tobytes()
        ops.append((op, v))
        expected.append(max(float(np.dot(v, o)) for o in originals) >= DEFAULT_SEMANTIC_THRESHOLD + 1e-3)
    results = b.append(*(op for op, _ in ops)).results
    assert any(expected) and not all(expected)
    assert [bool(r.conflict_id) for r in results] == expected
    one_by_one = [b.append(add_op(f"again {i}", vector=v.tolist())).results[0] for i, (_, v) in enumerate(ops)]
    assert [bool(r.conflict_id) for r in one_by_one] == expected
