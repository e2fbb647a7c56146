"""`mnemosync.server.boot_check`: the start-up check walks only what came after the last check, and falls back to
the whole walk when its mark does not match."""

from __future__ import annotations

import json
import logging

import pytest

from mnemosync.kernel.errors import ChainBroken
from mnemosync.server.app import run_server
from mnemosync.server.boot_check import MARK_FILE

from helpers import dev_settings, edit_database, rewrite_changelog, write_facts


def test_a_restart_walks_only_the_entries_written_since_the_last_check(tmp_path, caplog):
    settings = dev_settings(tmp_path)
    write_facts(settings, 3)
    write_facts(settings, 2, start=3)  # this start checked 1-3 from the empty mark
    with caplog.at_level(logging.INFO), run_server(settings):
        pass
    assert "start-up check: entries 4 to 5 verified (the 3 before were at the last start)" in caplog.text
    assert json.loads((settings.data_dir / MARK_FILE).read_text())["size"] == 5


def test_an_entry_changed_after_the_mark_stops_the_start(tmp_path):
    settings = dev_settings(tmp_path)
    write_facts(settings, 3)
    write_facts(settings, 3, start=3)
    edit_database(settings.db_path, "UPDATE changelog SET server_time_ms = server_time_ms + 1 WHERE seq = 5")
    with pytest.raises(ChainBroken, match="at seq 5: entry 5 was changed after it was written"):
        with run_server(settings):
            pass


def test_a_history_rewritten_before_the_mark_gets_the_whole_walk(tmp_path, caplog):
    settings = dev_settings(tmp_path)
    write_facts(settings, 3)
    write_facts(settings, 1, start=3)
    rewrite_changelog(settings.db_path, 2, lambda e: e.__class__(**{**e.__dict__, "server_time_ms": 1}), tree=False)
    with pytest.raises(ChainBroken, match="at seq 2: "):
        with run_server(settings):
            pass
    assert "does not match the log: walking the whole chain" in caplog.text


def test_a_mark_not_signed_by_the_checkpoint_key_is_ignored(tmp_path, caplog):
    settings = dev_settings(tmp_path)
    write_facts(settings, 3)
    write_facts(settings, 1, start=3)
    mark = json.loads((settings.data_dir / MARK_FILE).read_text())
    (settings.data_dir / MARK_FILE).write_text(json.dumps({**mark, "size": 4}))
    with run_server(settings):
        pass
    assert "is not signed by the checkpoint key: walking the whole chain" in caplog.text
