"""`mnemosync.agent.transcript`: a Claude Code transcript read as episodes, tool noise and meta lines dropped."""

from __future__ import annotations

from pathlib import Path

from mnemosync.agent.transcript import clean, episodes, kinds_of

TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "claude_transcript.jsonl"


def test_each_user_turn_becomes_an_episode_with_the_assistants_last_words():
    found = list(episodes(TRANSCRIPT))
    assert [e.line_id for e in found] == ["u-2", "u-5", "u-7"]
    first, second, last = found
    assert first.user.startswith("Let's move the billing service from MySQL to PostgreSQL 15")
    assert first.conclusion == ("I switched config/db.yml to the postgresql adapter and wrote the migration "
                                "db/migrate/0007_billing_pg.sql.")
    assert first.kinds == ("decision",) and first.session_id.startswith("3f2a9c1b")
    assert first.timestamp == "2026-11-20T09:01:00.000Z"
    assert second.user == "No, keep the read replica on MySQL until the reporting team moves."
    assert second.kinds == ("correction",)
    assert second.conclusion == "Understood: the replica stays on MySQL; only the primary moves."
    assert (last.user, last.conclusion, last.kinds) == ("Add a runbook entry for the cut-over", "", ("instruction",))


def test_tool_calls_results_thinking_sub_agents_and_commands_never_reach_an_episode():
    text = " ".join(f"{e.user} {e.conclusion}" for e in episodes(TRANSCRIPT))
    for noise in ("grep -rn", "adapter: mysql2", "Plan the migration", "sub-agent chatter", "/model", "Caveat",
                  "Request interrupted", "system-reminder", "Auto-compact"):
        assert noise not in text


def test_reading_from_an_episodes_offset_starts_with_that_episode():
    found = list(episodes(TRANSCRIPT))
    assert [e.line_id for e in episodes(TRANSCRIPT, found[1].offset)] == ["u-5", "u-7"]
    assert found[0].end <= found[1].offset and found[1].end <= found[2].offset


def test_a_last_line_without_its_newline_is_still_being_written_and_waits(tmp_path):
    partial = tmp_path / "s.jsonl"
    data = TRANSCRIPT.read_bytes()
    partial.write_bytes(data.rstrip(b"\n"))
    assert [e.line_id for e in episodes(partial)] == ["u-2", "u-5"]


def test_kinds_and_cleaning():
    assert kinds_of("Actually, use port 8443") == ("correction",)
    assert kinds_of("From now on we deploy on Tuesdays") == ("decision",)
    assert kinds_of("Write the tests") == ("instruction",)
    assert clean("a<system-reminder>x\ny</system-reminder>\n\n\n\nb") == "a\n\nb"
