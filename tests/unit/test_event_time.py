"""`mnemosync.kernel.event_time`: a memory records when what it says happened, apart from when it was stored."""

from __future__ import annotations

import pytest

from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.kernel import event_time
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.server import maintenance
from mnemosync.v1 import memory_pb2 as pb

from helpers import add_op, snapshot, update_op

MARCH_8 = 1_741_451_400_000  # 2025-03-08T16:30Z


def test_event_times_are_read_as_iso_8601_in_utc_unless_an_offset_is_given():
    assert event_time.parse("2025-03-08T16:30") == MARCH_8
    assert event_time.parse("2025-03-08T17:30+01:00") == MARCH_8
    assert event_time.parse(" 2025-03-08 ") == MARCH_8 - (16 * 60 + 30) * 60_000
    assert event_time.parse("1935-06-01") < 0
    assert event_time.text(MARCH_8) == "2025-03-08T16:30Z"
    assert event_time.text(event_time.RANGE_MS[0]) == "0001-01-01T00:00Z"


@pytest.mark.parametrize("text", ["last Sunday", "2025-13-01", "", "8/3/2025"])
def test_text_that_is_not_an_iso_8601_time_is_refused_with_an_example(text):
    with pytest.raises(InvalidArgument, match="^event_time must be an ISO 8601 date or date and time, such as "
                                              "2025-03-08 or 2025-03-08T16:20"):
        event_time.parse(text)


@pytest.mark.parametrize("value", [event_time.RANGE_MS[1] + 1, event_time.RANGE_MS[0] - 1, True, 1.5])
def test_an_event_time_outside_years_1_to_9999_is_refused_naming_the_field_and_the_range(value):
    with pytest.raises(InvalidArgument, match=r"^event_time_ms must be milliseconds since 1970-01-01 UTC from "
                                              r"-62135596800000 \(year 1\) to 253402300799999 \(year 9999\)"):
        event_time.validate(value)


def test_a_memory_keeps_its_event_time_through_get_search_update_sync_and_rebuild(server, agents, tmp_path):
    a = agents("agent-a")
    said = add_op("Maya: I start at Rumo on the first of April")
    said.add.event_time_ms = MARCH_8
    memory_id = a.append(said).results[0].memory_id
    undated = a.add("Theo: the Bath Half is on 16 March").memory_id

    stored = a.get(memory_id)
    assert stored.event_time_ms == MARCH_8 and stored.created_at_ms > MARCH_8
    assert not a.get(undated).HasField("event_time_ms")
    found = a.search("Rumo", limit=1, mode=pb.SEARCH_MODE_KEYWORD)[0].memory
    assert (found.id, found.event_time_ms) == (memory_id, MARCH_8)

    moved = update_op(memory_id, 1)
    moved.update.event_time_ms = MARCH_8 + 86_400_000
    assert a.append(moved).results[0].version == 2
    assert a.get(memory_id).event_time_ms == MARCH_8 + 86_400_000
    assert a.get(memory_id).content == stored.content

    cache, remote = Cache(tmp_path / "cache.db"), Remote(server.address, "agent-b", insecure=True, timeout=5)
    try:
        catch_up(cache, remote)  # every entry's hash is checked against its payload, event time included
        assert cache.get(memory_id).event_time_ms == MARCH_8 + 86_400_000
        assert cache.get(undated).event_time_ms is None
    finally:
        cache.close()
        remote.close()
    live = snapshot(server.store)
    maintenance.rebuild(server.store)
    assert snapshot(server.store) == live
