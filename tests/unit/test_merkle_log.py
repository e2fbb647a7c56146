"""`mnemosync.server.merkle_log`: the tree kept in the append transaction, built for older databases, and checked."""

from __future__ import annotations

import logging
import uuid

from mnemosync.kernel import db, merkle, migrations
from mnemosync.kernel.codec import model_info
from mnemosync.kernel.operations import OpRequest
from mnemosync.server import maintenance, merkle_log, schema
from mnemosync.server.identity import Caller
from mnemosync.server.ledger import Ledger

from helpers import TEST_MODEL, edit_database, fake_vector, snapshot


def _store_with(path, n: int) -> list[str]:
    with Ledger.sqlite(path, synchronous="normal") as store:
        for i in range(n):
            store.writes.append(Caller("alice"), [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                                     {"scope": "user", "content": f"fact {i}"},
                                                     fake_vector(f"fact {i}"))], model_info(TEST_MODEL))
        return [e.hash for e in store.log.read(0, n)]


def _root(hashes: list[str]) -> bytes:
    frontier = merkle.Frontier()
    for h in hashes:
        frontier.append(merkle.leaf_hash(h))
    return frontier.root()


def test_every_append_keeps_the_tree_equal_to_the_one_the_changelog_gives(tmp_path):
    path = tmp_path / "s.db"
    hashes = _store_with(path, 11)
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.tree_root(11) == _root(hashes) and store.log.tree_root(6) == _root(hashes[:6])
        assert store.log.verify().ok
        proof = store.log.consistency_proof(6, 11)
        assert merkle.verify_consistency(6, store.log.tree_root(6), 11, store.log.tree_root(11), proof)


def test_batched_appends_from_any_size_leave_the_tree_one_leaf_at_a_time_would(tmp_path):
    path = tmp_path / "s.db"
    with Ledger.sqlite(path, synchronous="normal") as store:
        for size in (1, 2, 3, 5, 8, 13):  # runs that start at every alignment: odd, even, powers of two
            requests = [OpRequest(str(uuid.uuid4()), str(uuid.uuid4()), "add", 0,
                                  {"scope": "user", "content": f"fact {size}.{i}"}, fake_vector(f"fact {size}.{i}"))
                        for i in range(size)]
            store.writes.append(Caller("alice"), requests, model_info(TEST_MODEL))
        hashes = [e.hash for e in store.log.read(0, 100)]
        assert len(hashes) == 32 and store.log.tree_root(32) == _root(hashes)
        assert store.log.tree_root(19) == _root(hashes[:19])
        assert merkle_log.check(store.context.reader()) == "" and store.log.verify().ok


def test_a_changed_missing_or_extra_node_is_named_by_the_check(tmp_path):
    path = tmp_path / "s.db"
    _store_with(path, 4)
    edit_database(path, "UPDATE merkle_nodes SET hash = zeroblob(32) WHERE level = 1 AND idx = 1")
    with Ledger.sqlite(path, synchronous="normal") as store:
        report = store.log.verify()
    assert report.problems == ((0, "the transparency log's node at level 1, index 1 (covering entry 4) is not the "
                                   "one the changelog gives: the tree was changed"),)
    with Ledger.sqlite(path, synchronous="normal") as store:
        maintenance.rebuild(store)
        assert store.log.verify().ok
    edit_database(path, "DELETE FROM merkle_nodes WHERE level = 2")
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.verify().problem == "the transparency log has no node for entry 4 (level 2, index 0)"
        maintenance.rebuild(store)
    edit_database(path, "INSERT INTO merkle_nodes VALUES (0, 99, zeroblob(32))")
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.verify().problem == "the transparency log has 8 nodes where 4 entries give 7"


def test_the_migration_builds_the_tree_for_entries_written_before_it_and_says_how_far_it_got(tmp_path, caplog):
    written = tmp_path / "v4.db"
    hashes = _store_with(written, 5)
    path = tmp_path / "v3.db"  # the same entries, as a version-3 server kept them: no tree, no log id
    old = db.connect(path, synchronous="normal").conn
    migrations.migrate(old, schema.SERVER_STEPS[:3])
    new = db.connect(written, synchronous="normal").conn
    columns = [c for (c,) in new.execute("SELECT name FROM pragma_table_info('changelog')") if c != "blanked"]
    rows = new.execute(f"SELECT {', '.join(columns)} FROM changelog ORDER BY seq").fetchall()
    meta = new.execute("SELECT key, value FROM meta WHERE key = 'embedding_model'").fetchall()
    new.close()
    with old:
        old.executemany(f"INSERT INTO changelog ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                        rows)
        old.executemany("INSERT INTO meta VALUES (?, ?)", meta)
    old.close()
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.tree_root(5) == _root(hashes) and store.log.verify().ok and store.log_id()
        assert len(snapshot(store)) == 5  # folded again by the step
    conn = db.connect(path, synchronous="normal").conn
    conn.execute("BEGIN")
    with caplog.at_level(logging.INFO, logger="mnemosync.server.merkle_log"):
        conn.execute("DELETE FROM merkle_nodes")
        assert merkle_log.build(conn, every_seconds=0) == 5
    conn.execute("ROLLBACK")
    conn.close()
    assert "building the transparency log: 5 of 5 entries" in caplog.text
