"""`mnemosync.server.changelog` and the hash chain (`mnemosync.kernel.entry`): append-only, and verify finds every
change
made behind the server's back.
"""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from mnemosync.kernel.entry import REDACTED_TEXT
from mnemosync.server.identity import Caller
from mnemosync.server.ledger import Ledger

from helpers import TEST_MODEL, RawAgent, add_op, fake_vector


def test_the_store_keeps_the_changelog_append_only(tmp_path):
    with Ledger.sqlite(tmp_path / "db.sqlite", synchronous="normal") as store:
        from mnemosync.kernel.model_identity import ModelInfo
        from mnemosync.kernel.operations import OpRequest

        model = ModelInfo(TEST_MODEL.name, 16, TEST_MODEL.sha256)
        store.writes.append(Caller("a"), [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                     {"scope": "user", "content": "x"}, fake_vector("x"))], model)
        with pytest.raises(Exception, match="append-only"):
            store._writer.execute("UPDATE changelog SET payload = '{}'")
        with pytest.raises(Exception, match="append-only"):
            store._writer.execute("DELETE FROM changelog")


SECRET = "31-41-59-26-53"


def test_the_changelog_refuses_any_other_change_and_verify_finds_a_blanking_without_a_redaction(server):
    alice = RawAgent(server.address, "alice")
    alice.append(add_op(f"The vault combination is {SECRET}"))
    alice.append(add_op("Releases happen on Tuesdays"))
    path = server.store.path
    server.store.close()
    with sqlite3.connect(path) as conn:
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            conn.execute("UPDATE changelog SET payload = '{}', payload_salt = '', request_hash = '', "
                         "redacted_by = 2 WHERE seq = 1")  # seq 2 is not a redact entry
        conn.execute("DROP TRIGGER changelog_no_update")
        conn.execute("UPDATE changelog SET payload = replace(payload, 'Tuesdays', 'Fridays') WHERE seq = 2")
        conn.execute("UPDATE changelog SET payload = replace(payload, ?, ?), redacted_by = 2 WHERE seq = 1",
                     (SECRET, REDACTED_TEXT))
    with Ledger.sqlite(path) as store:
        report = store.log.verify()
    assert (report.ok, report.first_bad_seq) == (False, 1)
    assert "blanked without a redaction" in report.problem


def test_verify_finds_a_payload_changed_under_an_unchanged_hash(tmp_path):
    path = tmp_path / "server" / "mnemosync.db"
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest

    with Ledger.sqlite(path) as store:
        store.writes.append(Caller("alice"), [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                                 {"scope": "user", "content": "Releases happen on Tuesdays"},
                                                 [1.0] + [0.0] * 15)], ModelInfo("test", 16, "0" * 64))
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER changelog_no_update")
        conn.execute("UPDATE changelog SET payload = replace(payload, 'Tuesdays', 'Fridays') WHERE seq = 1")
    with Ledger.sqlite(path) as store:
        report = store.log.verify()
    assert not report.ok and report.problem == "entry 1's payload does not match its commitment"
