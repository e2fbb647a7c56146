"""Captures the hooks hand over (`mnemosync.agent.captures`): recorded before anything else, stored by the
agent, and a failed one kept, shown and tried again until it is stored."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from click.testing import CliRunner

from mnemosync.agent import captures
from mnemosync.agent.captures import CaptureWorker
from mnemosync.agent.doctor import run_checks
from mnemosync.agent.ingest import Watermarks
from mnemosync.cli import cli
from mnemosync.server.app import run_server

from helpers import dev_settings, free_port, wait_until

TRANSCRIPT = Path(__file__).resolve().parents[1] / "data" / "claude_transcript.jsonl"
ONLY_USER = """
[agents.carol]
scopes = ["user"]
"""


def test_a_capture_asked_for_again_joins_the_waiting_one_and_a_stored_one_is_asked_for_anew(tmp_path):
    marks = Watermarks(tmp_path / "ingest.db")
    first = marks.want(tmp_path / "s.jsonl", "project:web", final=False)
    again = marks.want(tmp_path / "s.jsonl", "project:web", final=True)  # SessionEnd after PreCompact
    assert [c.final for c in marks.waiting()] == [True] and again.key == first.key
    marks.failed(again, "PERMISSION_DENIED: scope-not-granted")
    assert marks.waiting()[0].attempts == 1
    marks.stored(first)  # a request came after this try started: it still waits
    assert len(marks.waiting()) == 1
    marks.stored(marks.waiting()[0])
    assert marks.waiting() == []
    fresh = marks.want(tmp_path / "s.jsonl", "project:web", final=False)
    assert (fresh.final, fresh.attempts, fresh.error) == (False, 0, "")


def test_a_failed_capture_is_kept_said_and_tried_again_until_it_is_stored(tmp_path, make_client):
    """carol may not write project:billing: the capture fails, says why and waits; granted the scope (the server
    restarted with another policy), the next try stores it."""
    settings = dataclasses.replace(dev_settings(tmp_path, policy=ONLY_USER), listen=f"127.0.0.1:{free_port()}")
    transcript = Path(shutil.copy(TRANSCRIPT, tmp_path / "3f2a9c1b.jsonl"))
    with run_server(settings) as server:
        carol = make_client(server.address, "carol")
        worker = CaptureWorker(carol, lambda scope, cwd: "project:billing", retry_seconds=3600).start()
        assert worker.request({"op": "capture", "transcript_path": str(transcript), "cwd": "/src/billing"}) == {
            "ok": True}
        wait_until(lambda: captures.waiting(carol.settings.resolved_cache_dir())[0].attempts == 1,
                   timeout=60, message="the capture was never tried")
        [failed] = captures.waiting(carol.settings.resolved_cache_dir())
        assert "scope" in failed.error and failed.scope == "project:billing"
        line = captures.summary([failed])
        assert line.startswith("1 capture waiting to be stored, 1 failed (last: 3f2a9c1b.jsonl, 1 attempt: ")
        [finding] = [f for f in run_checks(carol.settings) if f.check == "captures"]
        assert (finding.status, finding.summary) == ("warn", line)
        status = CliRunner().invoke(cli, ["status", "--server", server.address, "--agent-id", "carol", "--insecure",
                                          "--cache-dir", str(carol.settings.resolved_cache_dir())])
        assert f"captures {line}" in status.stdout
    Path(settings.policy_file).write_text("[defaults]\nscopes = [\"*\"]\n")
    with run_server(settings):
        wait_until(lambda: carol.status().online, message="carol never reached the restarted server")
        worker.wake()  # as its retry timer would
        wait_until(lambda: not captures.waiting(carol.settings.resolved_cache_dir()), timeout=60,
                   message="the capture was never stored")
        found = carol.search("billing replica runbook PostgreSQL", scopes=["project:billing"], types=["episode"])
        assert len(found.hits) == 3  # the whole session: a request without "partial" is final
    worker.stop()


def test_a_bad_capture_request_names_the_field(tmp_path, make_client):
    with run_server(dev_settings(tmp_path)) as server:
        worker = CaptureWorker(make_client(server.address, "carol"), lambda scope, cwd: "user")
        assert worker.request({"op": "capture"}) == {
            "error": "transcript_path must be a path of at most 4096 characters"}
        assert worker.request({"op": "capture", "transcript_path": "/x", "cwd": 7}) == {
            "error": "cwd must be text of at most 4096 characters"}
        worker.stop()
