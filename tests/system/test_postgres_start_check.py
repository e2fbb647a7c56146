"""The start-up check of a server over PostgreSQL runs on its local replica from the signed mark of the last check
(`mnemosync.server.boot_check`), as over SQLite; PostgreSQL's own copy is walked by `mnemosync verify` only: real
PostgreSQL (pgserver), real servers on loopback."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

import psycopg
import pytest

from mnemosync.kernel.errors import ChainBroken
from mnemosync.server.app import run_server
from mnemosync.server.boot_check import mark_path
from mnemosync.server.postgres_record import replica_path

from helpers import dev_settings, edit_database, mnemosync, write_facts


@pytest.fixture
def settings(tmp_path, postgres_url):
    return replace(dev_settings(tmp_path), store=postgres_url)


def _replica(settings):
    return replica_path(settings.data_dir, settings.store)


def _mark(settings):
    return mark_path(settings.data_dir, _replica(settings))


def test_a_restarted_postgresql_server_checks_only_the_entries_since_its_last_start(settings, caplog):
    write_facts(settings, 3)
    write_facts(settings, 2, start=3)  # this start checked 1-3 from the mark its first start left at 0
    with caplog.at_level(logging.INFO), run_server(settings):
        pass
    assert "start-up check: entries 4 to 5 verified (the 3 before were at the last start)" in caplog.text
    assert json.loads(_mark(settings).read_text())["size"] == 5
    assert not (settings.data_dir / "verified.json").exists()  # the SQLite store's mark is another file


def test_entries_other_servers_appended_while_it_was_stopped_are_checked_at_its_next_start(settings, tmp_path,
                                                                                            caplog):
    write_facts(settings, 3)
    write_facts(settings, 0)  # its mark now at 3
    write_facts(replace(settings, data_dir=tmp_path / "other"), 4, start=3)  # folded here at the next start
    with caplog.at_level(logging.INFO), run_server(settings) as running:
        assert running.store.head_seq() == 7
    assert "start-up check: entries 4 to 7 verified (the 3 before were at the last start)" in caplog.text


def test_a_replica_entry_changed_after_the_mark_stops_the_start(settings):
    write_facts(settings, 3)
    write_facts(settings, 3, start=3)
    edit_database(_replica(settings), "UPDATE changelog SET server_time_ms = server_time_ms + 1 WHERE seq = 5")
    with pytest.raises(ChainBroken, match="at seq 5: entry 5 was changed after it was written"):
        with run_server(settings):
            pass


def test_an_entry_changed_before_the_mark_is_not_seen_at_start_up_but_mnemosync_verify_finds_it(settings, caplog):
    write_facts(settings, 3)
    write_facts(settings, 1, start=3)
    edit_database(_replica(settings), "UPDATE changelog SET server_time_ms = server_time_ms + 1 WHERE seq = 2")
    with psycopg.connect(settings.store, autocommit=True) as conn:
        conn.execute("ALTER TABLE changelog DISABLE TRIGGER changelog_guard")
        conn.execute("UPDATE changelog SET payload = replace(payload, 'number 0', 'number X') WHERE seq = 1")
    with caplog.at_level(logging.INFO), run_server(settings):  # the price of a check from the mark
        pass
    assert "start-up check: entries 4 to 4 verified (the 3 before were at the last start)" in caplog.text
    report = mnemosync("verify", "--data-dir", str(settings.data_dir), "--store", settings.store)
    assert report.returncode == 1
    assert "BROKEN at seq 2: entry 2 was changed after it was written" in report.stdout
    assert "BROKEN at seq 1: in PostgreSQL" in report.stdout


def test_a_tampered_mark_gets_the_whole_walk_of_the_replica(settings, caplog):
    write_facts(settings, 3)
    write_facts(settings, 1, start=3)
    mark = json.loads(_mark(settings).read_text())
    _mark(settings).write_text(json.dumps({**mark, "size": 2}))
    with caplog.at_level(logging.INFO), run_server(settings):
        pass
    assert "is not signed by the checkpoint key: walking the whole chain" in caplog.text
    assert "start-up check: entries" not in caplog.text
    assert json.loads(_mark(settings).read_text())["size"] == 4  # the whole walk leaves a good one


def test_a_replica_deleted_behind_the_server_drops_its_old_mark_and_gets_the_whole_walk(settings, caplog):
    write_facts(settings, 3)
    write_facts(settings, 1, start=3)
    assert json.loads(_mark(settings).read_text())["size"] == 3
    for suffix in ("", "-wal", "-shm"):  # its mark would vouch for entries the new fold never walked
        _replica(settings).with_name(_replica(settings).name + suffix).unlink(missing_ok=True)
    with caplog.at_level(logging.INFO), run_server(settings) as running:
        assert running.store.head_seq() == 4
    assert "start-up check: entries" not in caplog.text
    assert json.loads(_mark(settings).read_text())["size"] == 4
