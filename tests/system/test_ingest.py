"""Transcript ingestion end to end (`mnemosync.agent.ingest`, `mnemosync ingest`): a real server, the real model,
real transcripts; every episode stored once, in time order, secrets never stored, safe to stop and run again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mnemosync.agent.ingest import Watermarks, ingest_transcript

from helpers import mnemosync, snapshot

TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "claude_transcript.jsonl"
SCOPE = "project:billing"
GITHUB_TOKEN = "ghp_" + "Q7x2Lm9Pz4Rt8Vb1Nc6Kd3Fg5Hj0Ws2Ye4Ua"


@pytest.fixture
def alice(server, make_client):
    return make_client(server.address, "alice", scope=SCOPE)


@pytest.fixture
def watermarks(alice):
    marks = Watermarks(alice.settings.resolved_cache_dir() / "ingest.db")
    yield marks
    marks.close()


def episodes_in(server) -> dict[str, dict]:
    """The server's live episode memories by id."""
    return {m_id: m for m_id, m in snapshot(server.store).items() if m["type"] == "episode" and not m["archived"]}


def line(record: dict) -> str:
    return json.dumps(record) + "\n"


def user_turn(uuid: str, text: str) -> str:
    return line({"type": "user", "uuid": uuid, "sessionId": "3f2a9c1b-5d1e-4c1a-9a57-5f0c2a8e9d10",
                 "message": {"role": "user", "content": text}})


def reply(text: str) -> str:
    return line({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})


def test_each_turn_is_stored_once_as_an_ephemeral_episode_linked_to_the_one_before(server, alice, watermarks,
                                                                                 tmp_path):
    path = shutil.copy(TRANSCRIPT, tmp_path / "session.jsonl")
    report = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert (report.stored, report.already, report.refused) == (3, 0, 0)
    stored = episodes_in(server)
    assert len(stored) == 3
    by_text = {m["content"].split("\n")[1]: m for m in stored.values()}
    decision = by_text["User: Let's move the billing service from MySQL to PostgreSQL 15; we need JSONB for invoice "
                       "metadata."]
    correction = by_text["User: No, keep the read replica on MySQL until the reporting team moves."]
    assert decision["layer"] == 4 and decision["scope"] == SCOPE
    assert set(decision["tags"]) == {"episode", "session:3f2a9c1b", "decision"}
    assert "Assistant: I switched config/db.yml to the postgresql adapter" in decision["content"]
    assert set(correction["tags"]) == {"episode", "session:3f2a9c1b", "correction"}
    decision_id = next(i for i, m in stored.items() if m is decision)
    assert [(target, relation) for target, relation, *_ in correction["links"]] == [(decision_id, "temporal")]

    again = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert (again.stored, again.already) == (0, 0) and len(episodes_in(server)) == 3


def test_what_is_appended_later_is_read_from_the_watermark_and_linked_on(server, alice, watermarks, tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text(user_turn("t-1", "Use port 8443 for the admin API") + reply("Set in config/admin.yml."))
    ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    first_mark = watermarks.get(str(path.resolve()))
    with open(path, "a") as f:
        f.write(user_turn("t-2", "Document the port in the runbook") + reply("Added to docs/runbook.md."))
    report = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert report.stored == 1 and report.offset == path.stat().st_size > first_mark.offset
    newest = next(m for m in episodes_in(server).values() if "runbook" in m["content"])
    assert [(t, r) for t, r, *_ in newest["links"]] == [(first_mark.last_memory_id, "temporal")]


def test_a_partial_run_leaves_the_last_turn_for_the_final_one(server, alice, watermarks, tmp_path):
    path = shutil.copy(TRANSCRIPT, tmp_path / "session.jsonl")
    partial = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE, final=False)
    assert partial.stored == 2 and partial.left_for_later
    assert not any("runbook entry" in m["content"] for m in episodes_in(server).values())
    final = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert final.stored == 1 and len(episodes_in(server)) == 3


def test_a_secret_is_never_stored_and_the_rest_of_the_transcript_is(server, alice, watermarks, tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text(user_turn("s-1", "Deploys go through ops/deploy.sh") + reply("Noted.")
                    + user_turn("s-2", f"Use the token {GITHUB_TOKEN} for the release job") + reply("Done.")
                    + user_turn("s-3", "Releases are cut on Tuesdays") + reply("Noted."))
    report = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert (report.stored, report.masked, report.refused) == (3, 1, 0)
    contents = [m["content"] for m in episodes_in(server).values()]
    assert any("Use the token [secret: a GitHub token] for the release job" in c for c in contents)
    everything = json.dumps(snapshot(server.store), default=str)
    assert GITHUB_TOKEN not in everything and "Q7x2Lm9Pz4Rt8Vb1" not in everything
    on_disk = b"".join(p.read_bytes() for p in Path(server.store.path).parent.iterdir() if p.is_file())
    assert b"Q7x2Lm9Pz4Rt8Vb1" not in on_disk  # the changelog never saw it either


def test_a_run_that_stopped_before_its_watermark_moved_stores_nothing_twice(server, alice, watermarks, tmp_path):
    path = shutil.copy(TRANSCRIPT, tmp_path / "session.jsonl")
    ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    before = episodes_in(server)
    watermarks.advance(watermarks.get(str(Path(path).resolve())).__class__(str(Path(path).resolve())), path)
    again = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert (again.stored, again.already) == (0, 3)
    assert episodes_in(server) == before


def test_episodes_written_offline_wait_in_the_outbox(tmp_path, make_client):
    from helpers import free_port

    offline = make_client(f"127.0.0.1:{free_port()}", "dora", scope=SCOPE)
    marks = Watermarks(offline.settings.resolved_cache_dir() / "ingest.db")
    try:
        report = ingest_transcript(offline, TRANSCRIPT, watermarks=marks, scope=SCOPE)
    finally:
        marks.close()
    assert (report.stored, report.pending) == (3, 3)
    assert offline.local.queued() == 5  # three adds and two links


def test_the_ingest_command_reports_each_transcript_as_json(server, tmp_path, model_path):
    path = shutil.copy(TRANSCRIPT, tmp_path / "session.jsonl")
    args = ["ingest", str(path), "--project-dir", "/home/me/src/billing", "--json", "--server", server.address,
            "--insecure", "--agent-id", "erin", "--cache-dir", str(tmp_path / "erin"), "--embed-model",
            str(model_path)]
    done = mnemosync(*args, clean_env=True)
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)
    assert (report["stored"], report["offset"]) == (3, Path(path).stat().st_size)
    assert {m["scope"] for m in episodes_in(server).values()} == {SCOPE}
    assert json.loads(mnemosync(*args, clean_env=True).stdout)[0]["stored"] == 0


def test_episodes_are_embedded_in_packed_passes_and_each_add_finds_its_vector_ready(server, alice, watermarks,
                                                                                   tmp_path):
    path = tmp_path / "session.jsonl"
    path.write_text("".join(user_turn(f"p-{i}", f"Step {i} of the migration: move table t{i} to PostgreSQL")
                            + reply(f"Moved t{i}; the job ran in {i + 2} minutes.") for i in range(10)))
    before = alice.embedder.stats()
    report = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    after = alice.embedder.stats()
    assert report.stored == 10 and len(episodes_in(server)) == 10
    assert after.misses - before.misses == 10 and after.hits - before.hits == 10  # the adds hit the cache
    assert after.model_calls - before.model_calls < 10


def test_a_line_nested_thousands_deep_or_a_session_id_with_a_space_is_skipped_and_the_rest_is_stored(
        server, alice, watermarks, tmp_path):
    """One line nested about 2,000 deep, or a session id with a space, stopped `ingest` for the whole transcript on
    every retry, breaking "nothing lost at compaction or session end"."""
    path = tmp_path / "session.jsonl"
    deep = "[" * 3000 + "]" * 3000
    path.write_text(line({"type": "user", "uuid": "s-2", "sessionId": "a b c",
                          "message": {"role": "user", "content": "Releases are cut on Tuesdays"}})
                    + reply("Noted.") + '{"type": "user", "message": ' + deep + "}\n"
                    + user_turn("s-1", "Deploys go through ops/deploy.sh") + reply("Noted.") + "[1, 2, 3]\n"
                    + user_turn("s-3", "The billing service owns the invoices table") + reply("Noted."))
    report = ingest_transcript(alice, path, watermarks=watermarks, scope=SCOPE)
    assert report.stored == 3 and report.skipped_lines == 1
    contents = " ".join(m["content"] for m in episodes_in(server).values())
    assert "ops/deploy.sh" in contents and "Tuesdays" in contents and "invoices table" in contents
    assert "skipped 1 unreadable line" in report.summary()


def test_the_watermark_file_is_private(tmp_path):
    """`ingest.db` (which transcripts were read, to where) was created 0644."""
    import stat

    marks = Watermarks(tmp_path / "agent" / "ingest.db")
    try:
        assert stat.S_IMODE((tmp_path / "agent" / "ingest.db").stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "agent").stat().st_mode) == 0o700
    finally:
        marks.close()
