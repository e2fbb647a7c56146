"""`mnemosync.kernel.projections`: the fold of entries into the memory's versions and links."""

from __future__ import annotations

import uuid

from mnemosync.v1 import memory_pb2 as pb

from helpers import update_op


def test_versions_grow_with_each_change_and_links_do_not_change_them(agents):
    a = agents("agent-a")
    m1, m2 = a.add("one").memory_id, a.add("two").memory_id
    assert a.append(update_op(m1, 1, tags=["x"], replace_tags=True)).results[0].version == 2
    forget = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, base_version=2, forget=pb.ForgetOp())
    assert a.append(forget).results[0].version == 3
    restore = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, base_version=3, restore=pb.RestoreOp())
    assert a.append(restore).results[0].version == 4
    link = pb.Operation(op_id=str(uuid.uuid4()), memory_id=m1, link=pb.LinkOp(target_id=m2, relation="causal"))
    assert a.append(link).results[0].version == 4
    memory = a.get(m1)
    assert memory.version == 4 and not memory.archived and memory.tags == ["x"]
    assert [(lk.target_id, lk.relation) for lk in memory.links] == [(m2, "causal")]
