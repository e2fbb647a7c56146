"""What each reader was shown, and the base its writes default to (`mnemosync.agent.shown`)."""

from __future__ import annotations

from types import SimpleNamespace

from mnemosync.agent import shown
from mnemosync.agent.shown import Base, Reader, Shown, session_reader


def test_a_reader_keeps_the_newest_version_it_was_shown_and_what_showed_it(tmp_path):
    store = Shown(tmp_path / "shown.db")
    store.record("session:a", {"m1": 2, "m2": 1}, "MCP get")
    store.record("session:a", {"m1": 1}, "MCP list")  # a lagging cache's older copy: it has still seen 2
    store.record("session:b", {"m1": 5}, "MCP search")
    assert store.seen("session:a") == {"m1": 2, "m2": 1}
    assert store.get("session:a", "m1").via == "MCP get" and store.get("session:a", "m3") is None
    assert store.seen("session:b") == {"m1": 5}  # two sessions of one agent are apart


def test_the_record_outlives_the_process_in_a_private_file(tmp_path):
    Shown(tmp_path / "shown.db").record("session:a", {"m1": 2}, "session start")
    again = Shown(tmp_path / "shown.db")
    assert again.seen("session:a") == {"m1": 2}  # a restarted agent still knows what the session was shown
    assert (tmp_path / "shown.db").stat().st_mode & 0o777 == 0o600


def test_only_the_most_recently_active_readers_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(shown, "MAX_READERS", 2)
    store = Shown(tmp_path / "shown.db")
    clock = iter(range(1000, 2000, 10))
    monkeypatch.setattr(shown.time, "time", lambda: next(clock))
    store.record("a", {"m1": 1}, "get")
    store.record("b", {"m2": 1}, "get")
    store.record("a", {"m3": 1}, "get")
    store.record("c", {"m4": 1}, "get")  # "b" was the least recently active
    assert store.seen("b") == {} and store.seen("a") == {"m1": 1, "m3": 1} and store.seen("c") == {"m4": 1}


def test_a_write_is_made_from_the_given_version_else_the_shown_one_else_blind(tmp_path):
    reader = Reader(Shown(tmp_path / "shown.db"), session_reader("s1"))
    assert reader.base("m1") == Base(None, "blind")
    reader.saw({"m1": 3}, "MCP get")
    assert reader.base("m1") == Base(3, "shown", "MCP get")
    assert reader.base("m1", 1) == Base(1, "given")


def test_a_write_that_opened_a_conflict_leaves_what_the_reader_saw_as_it_was(tmp_path):
    reader = Reader(Shown(tmp_path / "shown.db"), "cli")
    reader.saw({"m1": 1}, "get")
    reader.wrote(SimpleNamespace(memory_id="m1", version=3, conflict_id=7, deduplicated=False), "update")
    assert reader.base("m1").version == 1  # the memory may show the other writer's text now, unseen
    reader.wrote(SimpleNamespace(memory_id="m1", version=4, conflict_id=0, deduplicated=False), "update")
    assert reader.base("m1").version == 4
