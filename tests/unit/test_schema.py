"""`mnemosync.server.schema` and `mnemosync.kernel.migrations`: an older database is migrated with its hashes intact;
a newer one is refused, naming both versions.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from mnemosync.server import maintenance

from helpers import fake_vector


def test_a_version_1_database_is_refolded_with_its_hashes_intact_and_takes_stale_writes(tmp_path):
    from dataclasses import replace

    from mnemosync.kernel import db, migrations
    from mnemosync.kernel import entry as entry_module
    from mnemosync.kernel.entry import Entry
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.server import schema
    from mnemosync.server.identity import Caller
    from mnemosync.server.ledger import Ledger

    path = tmp_path / "v1.db"
    conn = db.connect(path, synchronous="normal").conn
    migrations.migrate(conn, schema.SERVER_STEPS[:1])
    memory_id, prev = str(uuid.uuid4()), entry_module.GENESIS_HASH
    v1_ops = [("add", 0, 1, {"scope": "user", "type": "fact", "layer": 3, "tags": [], "content": "Old note",
                             "importance": 0.5, "confidence": 0.9, "protected": False}),
              ("update", 1, 2, {"content": "Old note, revised"})]
    for seq, (kind, base, version, payload) in enumerate(v1_ops, 1):
        vector = np.asarray(fake_vector(payload["content"]), dtype="<f4").tobytes()
        entry = Entry(seq, str(uuid.uuid4()), "old-agent", memory_id, kind, base, version, payload, vector,
                      "test-vectors", 1000 + seq, prev)
        entry = replace(entry, hash=entry.computed_hash())
        conn.execute(
            "INSERT INTO changelog (seq, op_id, agent_id, memory_id, op, base_version, version, payload, embedding, "
            "embedding_model, server_time_ms, prev_hash, hash, request_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, '')",
            (entry.seq, entry.op_id, entry.agent_id, entry.memory_id, entry.op, entry.base_version, entry.version,
             entry_module.canonical_json(entry.payload), entry.embedding, entry.embedding_model, entry.server_time_ms,
             entry.prev_hash, entry.hash))
        prev = entry.hash
    conn.execute("INSERT INTO meta VALUES ('embedding_model', ?)",
                 (json.dumps({"name": "test-vectors", "dimensions": 16, "sha256": "ab" * 32}),))
    conn.close()
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.verify().ok
        memory = store.reads.get(memory_id)
        assert (memory.content, memory.version, memory.authority) == ("Old note, revised", 2, 0)
        model = ModelInfo("test-vectors", 16, "ab" * 32)
        stale = store.writes.append(Caller("new-agent"), [OpRequest(str(uuid.uuid4()), memory_id, "update", 1,
                                                             {"content": "Old note, disputed"},
                                                             fake_vector("Old note, disputed"))], model)
        conflict = store.reads.conflict(stale.results[0].conflict_id)
        assert [r.state["content"] for r in conflict.revisions] == ["Old note, revised", "Old note, disputed"]
        assert store.log.verify().ok


def _from_the_future(path) -> None:
    """A server database whose schema version is one this mnemosync does not know yet."""
    from mnemosync.kernel import db, migrations
    from mnemosync.server import schema

    path.parent.mkdir(parents=True, exist_ok=True)
    conn = db.connect(path, synchronous="normal").conn
    migrations.migrate(conn, schema.SERVER_STEPS)
    conn.execute(f"PRAGMA user_version = {len(schema.SERVER_STEPS) + 1}")
    conn.close()


def test_a_database_from_a_newer_mnemosync_is_refused_naming_both_versions(tmp_path):
    from mnemosync.kernel.errors import SchemaTooNew
    from mnemosync.server import schema
    from mnemosync.server.ledger import Ledger

    path = tmp_path / "future.db"
    _from_the_future(path)
    known = len(schema.SERVER_STEPS)
    with pytest.raises(SchemaTooNew) as refused:
        Ledger.sqlite(path)
    assert str(refused.value) == (f"the database {path} has schema version {known + 1}, but this mnemosync knows "
                                  f"versions up to {known}; upgrade mnemosync to open it")
    assert (refused.value.found, refused.value.known, refused.value.code) == (known + 1, known,
                                                                             "FAILED_PRECONDITION")


@pytest.mark.parametrize("command", [
    ("verify",), ("rebuild",), ("serve", "--insecure", "--listen", "127.0.0.1:0", "--embed-model", "none.gguf")])
def test_serve_verify_and_rebuild_say_so_without_a_traceback(tmp_path, command):
    from click.testing import CliRunner

    from mnemosync.cli import cli
    from mnemosync.server import schema

    data = tmp_path / "data"
    _from_the_future(data / "mnemosync.db")
    known = len(schema.SERVER_STEPS)
    result = CliRunner().invoke(cli, [*command, "--data-dir", str(data)], env={"MNEMOSYNC_CONFIG": None},
                                catch_exceptions=False)
    assert result.exit_code == 4
    assert result.stderr.splitlines()[-1] == (
        f"Error: the database {data / 'mnemosync.db'} has schema version {known + 1}, but this mnemosync knows "
        f"versions up to {known}; upgrade mnemosync to open it")
    assert "Traceback" not in result.output


def test_links_written_with_free_relation_names_before_the_edge_types_fold_as_their_types_and_verify(tmp_path):
    """A version 6 database whose changelog holds relation names from before issue 16: after the migration its
    chain still verifies, each old name reads as its nearest type (`follows` temporal, `caused_by` causal,
    `related` semantic), two old names of one type are one link (the first one made), an old unlink removes the
    typed link, and the projections equal a fresh fold."""
    from dataclasses import replace

    from mnemosync.kernel import entry as entry_module
    from mnemosync.kernel.model_identity import ModelInfo
    from mnemosync.kernel.operations import OpRequest
    from mnemosync.server.identity import Caller
    from mnemosync.server.ledger import Ledger

    from helpers import edit_database, rewrite_changelog

    path, model = tmp_path / "v6.db", ModelInfo("test-vectors", 16, "ab" * 32)
    ids = [str(uuid.uuid4()) for _ in range(3)]
    with Ledger.sqlite(path, synchronous="normal") as store:
        store.writes.append(Caller("old-agent"), [OpRequest(str(uuid.uuid4()), i, "add", 0, {"content": f"Old note {n}",
                                                                                       "scope": "user"},
                                                     fake_vector(f"Old note {n}")) for n, i in enumerate(ids)], model)
        links = [("link", ids[0], ids[1], "follows"), ("link", ids[0], ids[1], "related"),
                 ("link", ids[0], ids[1], "similar_to"), ("link", ids[1], ids[2], "caused_by"),
                 ("link", ids[2], ids[0], "precedes"), ("unlink", ids[2], ids[0], "precedes")]
        for op, source, target, _ in links:
            store.writes.append(Caller("old-agent"),
                                [OpRequest(str(uuid.uuid4()), source, op, 0, {"target_id": target})], model)
    for seq, (*_, relation) in enumerate(links, 4):
        def legacy(e, relation=relation):
            payload = {**e.payload, "relation": relation}
            return replace(e, payload=payload, payload_commit=entry_module.commit_payload(payload, e.payload_salt))
        rewrite_changelog(path, seq, legacy)
    for sql in ("DROP INDEX links_target", "DROP INDEX memories_event_time", "ALTER TABLE links DROP COLUMN weight",
                "ALTER TABLE links DROP COLUMN reason", "ALTER TABLE memories DROP COLUMN content_agent",
                "ALTER TABLE memories DROP COLUMN content_authority", "DROP TABLE use_quota", "DELETE FROM links",
                "INSERT INTO links (memory_id, target_id, relation, author_agent, seq) VALUES "
                f"('{ids[0]}', '{ids[1]}', 'follows', 'old-agent', 4)", "DROP TABLE memory_sources",
                "DROP TABLE memory_procedures", "PRAGMA user_version = 6"):
        edit_database(path, sql)
    with Ledger.sqlite(path, synchronous="normal") as store:
        assert store.log.verify().ok
        assert [(k.target_id, k.relation, k.weight, k.reason) for k in store.reads.get(ids[0]).links] == [
            (ids[1], "semantic", 1.0, ""), (ids[1], "temporal", 1.0, "")]
        assert [(k.target_id, k.relation) for k in store.reads.get(ids[1]).links] == [(ids[2], "causal")]
        assert store.reads.get(ids[2]).links == ()
        assert maintenance.compare_projections(store, tmp_path / "scratch.db") == []
