"""The changelog record's contract (`mnemosync.server.record.ChangelogRecord`), one suite run against both records.

As pyeventsourcing's persistence tests do for its recorders, `RecordContract` states what every record must do and
a subclass per record supplies one: the SQLite record (the embedded default) and the PostgreSQL record (shared by
several servers, each serving from a local replica). Rows are written the way the ledger writes them (`append` in
the writer's transaction) and read back through the record's own calls.
"""

from __future__ import annotations

import uuid
from contextlib import closing
from pathlib import Path

import pytest

from mnemosync.kernel import db
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest
from mnemosync.server.identity import Caller
from mnemosync.server.ledger import Ledger
from mnemosync.server.record import SharedRecord
from mnemosync.server.sqlite_record import SqliteRecord

from helpers import fake_vector

MODEL = ModelInfo("test-vectors", 16, "ab" * 32)


def _requests(count: int, start: int = 0) -> list[OpRequest]:
    return [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                      {"scope": "user", "content": f"note {start + i} about the record"},
                      fake_vector(f"note {start + i}")) for i in range(count)]


class RecordContract:
    """What every changelog record does. Subclasses open a ledger over their record (`opened`)."""

    def opened(self, tmp_path: Path, name: str = "one") -> Ledger:
        raise NotImplementedError

    def written(self, ledger: Ledger, count: int, start: int = 0) -> list[int]:
        outcome = ledger.writes.append(Caller("writer"), _requests(count, start), MODEL)
        return [r.seq for r in outcome.results]

    def test_appended_rows_are_read_back_in_order_from_any_position(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            seqs = self.written(ledger, 5)
            record, conn = ledger.record, ledger.context.reader()
            assert [e.seq for e in record.read(conn, 0, 100)] == seqs == [1, 2, 3, 4, 5]
            assert [e.seq for e in record.read(conn, 2, 2)] == [3, 4]
            assert record.read(conn, 5, 100) == [] and record.read(conn, 50, 10) == []

    def test_the_head_is_the_newest_rows_seq_and_hash(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            record, conn = ledger.record, ledger.context.reader()
            empty_seq, genesis = record.head(conn)
            assert empty_seq == 0
            self.written(ledger, 3)
            last = record.read(conn, 2, 1)[0]
            assert record.head(conn) == (3, last.hash) and last.prev_hash != genesis

    def test_an_aborted_transaction_leaves_no_row(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            self.written(ledger, 2)
            record, reader = ledger.record, ledger.context.reader()
            seq, prev = record.head(reader)
            entry = Entry(seq + 1, str(uuid.uuid4()), "writer", str(uuid.uuid4()), "forget", 1, 2, {"reason": ""},
                          None, "", 1, prev, authority=3)
            entry = Entry(**{**entry.__dict__, "hash": entry.computed_hash()})

            def abandoned(conn):
                record.append(conn, [(entry, "request")])
                assert record.head(conn)[0] == seq + 1  # visible inside the transaction
                raise RuntimeError("the group fails after its append")

            with closing(db.connect(ledger.path, synchronous="normal").conn) as conn:
                record.begin(conn, [])
                with pytest.raises(RuntimeError):
                    abandoned(conn)
                record.abort(conn)
            assert record.head(reader) == (seq, prev)
            assert [e.seq for e in record.read(reader, 0, 100)] == [1, 2]
            assert self.written(ledger, 1, start=2) == [3]  # the seq it did not keep is the next one's

    def test_an_offset_only_moves_forward(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            self.written(ledger, 4)
            assert ledger.writes.ack("agent-a", 3) == (3, 4)
            assert ledger.writes.ack("agent-a", 1) == (3, 4)  # a late, older acknowledgement changes nothing
            assert ledger.writes.ack("agent-b", 4) == (4, 4)
            offsets = {o.agent_id: o.acked_seq for o in ledger.record.offsets(ledger.context.reader())}
            assert offsets == {"agent-a": 3, "agent-b": 4}

    def test_a_ledger_opened_again_over_the_record_reads_the_same_rows_and_offsets(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            self.written(ledger, 3)
            ledger.writes.ack("agent-a", 2)
            before = [(e.seq, e.hash) for e in ledger.record.read(ledger.context.reader(), 0, 100)]
        with self.opened(tmp_path, "again") as again:
            assert [(e.seq, e.hash) for e in again.record.read(again.context.reader(), 0, 100)] == before
            assert [(o.agent_id, o.acked_seq) for o in again.record.offsets(again.context.reader())] == [("agent-a", 2)]
            assert self.written(again, 1, start=3) == [4]


class TestSqliteRecord(RecordContract):
    def opened(self, tmp_path: Path, name: str = "one") -> Ledger:
        return Ledger.sqlite(tmp_path / "store.db", synchronous="normal")  # the file is the record: one name

    def test_it_is_the_plain_record_no_other_server_shares(self, tmp_path):
        with self.opened(tmp_path) as ledger:
            assert type(ledger.record) is SqliteRecord and not isinstance(ledger.record, SharedRecord)


class TestPostgresRecord(RecordContract):
    @pytest.fixture(autouse=True)
    def _database(self, postgres_url):
        self.url = postgres_url

    def opened(self, tmp_path: Path, name: str = "one") -> Ledger:
        return Ledger.postgresql(self.url, tmp_path / f"replica-{name}.db", synchronous="normal")

    def test_it_is_shared_and_a_second_server_reads_the_first_ones_rows(self, tmp_path):
        with self.opened(tmp_path) as one, self.opened(tmp_path, "two") as two:
            assert isinstance(one.record, SharedRecord)
            self.written(one, 2)
            written = [(e.seq, e.hash) for e in one.record.read(one.context.reader(), 0, 100)]
            two.submit(lambda conn: None)  # a write group folds what the others appended first
            assert [(e.seq, e.hash) for e in two.record.read(two.context.reader(), 0, 100)] == written
