"""`mnemosync.kernel.wording`: counts, values and texts as people read them."""

from __future__ import annotations

from mnemosync.kernel.wording import counted, one_line, plural, shown


def test_a_count_of_one_takes_the_singular_and_any_other_the_plural():
    assert [counted(n, "entry") for n in (0, 1, 2, 1200)] == ["0 entries", "1 entry", "2 entries", "1,200 entries"]
    assert counted(1, "memory") == "1 memory" and counted(3, "memory") == "3 memories"
    assert counted(2, "day") == "2 days" and counted(2, "queued write") == "2 queued writes"
    assert counted(2, "new changelog entry", "new changelog entries") == "2 new changelog entries"
    assert (plural(1, "waits", "wait"), plural(2, "waits", "wait")) == ("waits", "wait")


def test_values_read_as_people_write_them_not_as_python_prints_them():
    assert shown(["db", "staging"]) == "db, staging" and shown([]) == "none" and shown(("db",)) == "db"
    assert (shown(True), shown(False), shown(None), shown(""), shown(0.5), shown("fact")) == (
        "yes", "no", "none", "none", "0.5", "fact")


def test_a_text_of_several_lines_becomes_one_line_cut_to_its_width():
    assert one_line("user: how do we deploy?\n\nassistant:  with ops/deploy.sh", 80) == (
        "user: how do we deploy? assistant: with ops/deploy.sh")
    assert one_line("a" * 10, 5) == "aaaa…"
