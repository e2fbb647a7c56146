"""A new server over PostgreSQL starts from the snapshot another server published in the database, instead of
folding the whole changelog (issue 30; `mnemosync.server.published_snapshots`): from its sealed replica file
(issue 39), else from its entries and image: real PostgreSQL (pgserver), real servers on loopback."""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from contextlib import closing
from dataclasses import replace

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemosync.kernel import snapshot
from mnemosync.server import ca, published_snapshots, snapshots
from mnemosync.server.app import run_server
from mnemosync.server.boot_check import mark_path
from mnemosync.server.notary import load_key
from mnemosync.server.postgres_record import replica_path
from mnemosync.v1 import memory_pb2 as pb

from helpers import (
    TEST_MODEL_INFO,
    RawAgent,
    TlsAgent,
    add_op,
    dev_settings,
    ledger_snapshot,
    mnemosync,
    postgres_database,
    server_tls_dir,
    tls_settings,
    update_op,
    wait_until,
)

POLICY = """
[defaults]
authority = 3
scopes = ["*"]

[agents.root]
admin = true
"""


def _op(memory_id: str, base: int, **kind) -> pb.Operation:
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base, **kind)


def _history(writer: RawAgent, rival: RawAgent) -> list[str]:
    """Some hundreds of entries: adds in three scopes, updates, links, a conflict, a forget and a restore."""
    ids = []
    for batch in range(12):
        ops = [add_op(f"fact {batch * 20 + i} about the build", scope=("team", "private", "project:app")[i % 3],
                      tags=("build", f"n{i}")) for i in range(20)]
        ids += [r.memory_id for r in writer.append(*ops).results]
    writer.append(*(update_op(ids[i], 1, f"fact {i}, corrected") for i in range(0, 40, 2)))
    writer.append(*(_op(ids[i], 0, link=pb.LinkOp(target_id=ids[i + 1], relation="causal")) for i in range(50, 60)))
    writer.append(update_op(ids[100], 1, "the build takes 4 minutes"))
    assert rival.append(update_op(ids[100], 1, "the build takes 9 minutes")).results[0].conflict_id
    writer.append(_op(ids[7], 1, forget=pb.ForgetOp(reason="outdated")))
    writer.append(_op(ids[9], 1, forget=pb.ForgetOp()))
    writer.append(_op(ids[9], 2, restore=pb.RestoreOp()))
    return ids


def _changelog_rows(store) -> dict[str, list[tuple]]:
    with closing(sqlite3.connect(store.path)) as conn:
        return {sql: conn.execute(sql).fetchall() for sql in (
            "SELECT * FROM changelog ORDER BY seq", "SELECT * FROM merkle_nodes ORDER BY level, idx")}


@pytest.fixture
def database(postgres_server):
    with postgres_database(postgres_server) as url:
        yield url


@pytest.fixture
def served(tmp_path, database):
    """Server A over PostgreSQL with its history and a snapshot published (`mnemosync snapshot`'s code)."""
    settings = replace(dev_settings(tmp_path, name="a", policy=POLICY), store=database)
    with run_server(settings) as running:
        writer, rival = RawAgent(running.address, "writer"), RawAgent(running.address, "rival")
        ids = _history(writer, rival)
        made = snapshots.make_in(settings.data_dir, store=database)
        writer.append(add_op("written after the snapshot", scope="team"),
                      update_op(ids[1], 1, "fact 1, corrected after the snapshot"))
        yield running, settings, writer, made
        writer.close()
        rival.close()


def _server_b(tmp_path, settings, name="b"):
    return run_server(replace(settings, data_dir=tmp_path / name))


def _search(address: str, query: str) -> list[tuple[str, str]]:
    reader = RawAgent(address, "reader")
    try:
        return [(r.memory.id, r.memory.content) for r in reader.search(query, limit=10)]
    finally:
        reader.close()


def _drop_replica_files(url: str) -> None:
    """Leaves the published snapshots without their replica files (as a server before them published them)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DELETE FROM replica_files")


def test_a_new_server_starts_from_the_published_replica_file_and_equals_a_full_fold(served, tmp_path, caplog):
    a, settings, writer, made = served
    assert made.size > 250
    queries = ("corrected after the snapshot", "the build takes", "fact 12 about the build")
    with caplog.at_level(logging.INFO), _server_b(tmp_path, settings) as b:
        assert f"started the replica from the replica file of the {made.describe()}" in caplog.text
        n = made.size  # vouched for by the file's seal: the start-up check walks only the two folded after
        assert f"start-up check: entries 1 to {n} marked as verified (vouched for by the seal" in caplog.text
        assert f"start-up check: entries {n + 1} to {n + 2} verified (the {n} before were at the last start)" \
            in caplog.text
        assert b.store.head_seq() == a.store.head_seq() == made.size + 2
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        assert _changelog_rows(b.store) == _changelog_rows(a.store)
        assert not b.store.log.verify().problems  # `mnemosync verify`: replica and PostgreSQL walked whole
        assert _search(b.address, queries[0])[0][1] == "fact 1, corrected after the snapshot"
        from_file = [_search(b.address, q) for q in queries]
    caplog.clear()
    _drop_replica_files(settings.store)
    with caplog.at_level(logging.INFO), _server_b(tmp_path, settings, "rows") as rows:
        assert f"started the replica from the {made.describe()}" in caplog.text  # entries copied, image installed
        assert f"start-up check: entries 1 to {made.size} marked as verified (checked as they were copied)" \
            in caplog.text
        assert ledger_snapshot(rows.store) == ledger_snapshot(a.store)
    caplog.clear()
    with psycopg.connect(settings.store, autocommit=True) as conn:
        conn.execute("DELETE FROM snapshot_manifests")
    with caplog.at_level(logging.INFO), _server_b(tmp_path, settings, "full") as full:
        assert "started the replica" not in caplog.text  # nothing published: today's full fold
        assert "start-up check: entries" not in caplog.text  # no mark: the whole walk of the replica
        assert ledger_snapshot(full.store) == ledger_snapshot(a.store)
        assert [_search(full.address, q) for q in queries] == from_file
    assert json.loads(mark_path(tmp_path / "full", replica_path(tmp_path / "full", settings.store)).read_text()
                      )["size"] == a.store.head_seq()


def test_the_new_server_goes_on_folding_what_the_other_appends(served, tmp_path):
    a, settings, writer, _ = served
    with _server_b(tmp_path, settings) as b:
        ids = [r.memory_id for r in writer.append(*(add_op(f"later fact {i}", scope="team") for i in range(30)))
               .results]
        writer.append(update_op(ids[0], 1, "later fact 0, corrected"), _op(ids[1], 1, forget=pb.ForgetOp()))
        wait_until(lambda: b.store.head_seq() == a.store.head_seq())
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        assert _changelog_rows(b.store) == _changelog_rows(a.store)
        own = RawAgent(b.address, "b-writer")
        own.add("written through the new server", scope="team")
        wait_until(lambda: a.store.head_seq() == b.store.head_seq())
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        own.close()


def _rewrite(url: str, change) -> None:
    """Applies `change(conn, size, manifest)` to the newest published snapshot (as someone who can write the
    database would)."""
    with psycopg.connect(url, autocommit=True) as conn:
        size, text = conn.execute("SELECT size, manifest FROM snapshot_manifests ORDER BY size DESC LIMIT 1"
                                  ).fetchone()
        change(conn, size, snapshot.Manifest.from_json(json.loads(text)))


def _set_manifest(conn, size, manifest) -> None:
    conn.execute("UPDATE snapshot_manifests SET manifest = %s WHERE size = %s",
                 (json.dumps(manifest.to_json()), size))


def _one_memory_changed(conn, size, manifest):
    (data,) = conn.execute("SELECT data FROM snapshot_chunks WHERE size = %s AND idx = 0", (size,)).fetchone()
    assert b"fact 12 about the build" in data
    conn.execute("UPDATE snapshot_chunks SET data = %s WHERE size = %s AND idx = 0",
                 (bytes(data).replace(b"fact 12 about the build", b"fact 12 about the BUILD", 1), size))


def _wrong_position(conn, size, manifest):
    _set_manifest(conn, size, replace(manifest, size=manifest.size - 1))


def _wrong_root(conn, size, manifest):
    _set_manifest(conn, size, replace(manifest, root="ab" * 32))


def _malformed(conn, size, manifest):
    conn.execute("UPDATE snapshot_manifests SET manifest = %s WHERE size = %s",
                 (json.dumps({"format": snapshot.FORMAT, "size": size}), size))


def _another_key(conn, size, manifest):
    _set_manifest(conn, size, snapshot.sign(manifest, Ed25519PrivateKey.generate()))


@pytest.mark.parametrize(("tamper", "expected"), [
    (_one_memory_changed, "does not match its digest"),
    (_wrong_position, "is not signed by the server's checkpoint key"),
    (_wrong_root, "is not signed by the server's checkpoint key"),
    (_another_key, "which is neither this server's nor one of a server that published"),
    (_malformed, "is malformed"),
])
def test_a_tampered_published_snapshot_is_refused_and_the_new_server_folds_the_whole_changelog(
        served, tmp_path, caplog, tamper, expected):
    a, settings, _, _ = served
    _drop_replica_files(settings.store)
    _rewrite(settings.store, tamper)
    with caplog.at_level(logging.WARNING), _server_b(tmp_path, settings) as b:
        assert "refused the snapshot published in PostgreSQL" in caplog.text and expected in caplog.text
        assert "started the replica" not in caplog.text
        assert b.store.head_seq() == a.store.head_seq()
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        assert _changelog_rows(b.store) == _changelog_rows(a.store)


def _file_byte_changed(conn):
    (data,) = conn.execute("SELECT data FROM replica_file_chunks WHERE idx = 0").fetchone()
    data = bytearray(data)
    data[len(data) // 2] ^= 1
    conn.execute("UPDATE replica_file_chunks SET data = %s WHERE idx = 0", (bytes(data),))


def _file_and_digest_changed(conn):
    import hashlib

    _file_byte_changed(conn)
    whole = b"".join(bytes(d) for (d,) in conn.execute("SELECT data FROM replica_file_chunks ORDER BY idx"))
    conn.execute("UPDATE replica_files SET sha256 = %s", (hashlib.sha256(whole).hexdigest(),))


def _file_cut_short(conn):
    conn.execute("DELETE FROM replica_file_chunks WHERE idx = (SELECT max(idx) FROM replica_file_chunks)")


def _sealed_by_another_key(conn):
    conn.execute("UPDATE replica_files SET signature = %s", (Ed25519PrivateKey.generate().sign(b"anything"),))


@pytest.mark.parametrize(("tamper", "expected"), [
    (_file_byte_changed, "does not match the digest its seal signs"),
    (_file_cut_short, "does not match the digest its seal signs"),
    (_file_and_digest_changed, "is not sealed by its checkpoint key"),
    (_sealed_by_another_key, "is not sealed by its checkpoint key"),
])
def test_a_tampered_replica_file_is_refused_and_the_new_server_starts_from_the_snapshot_rows(
        served, tmp_path, caplog, tamper, expected):
    a, settings, _, made = served
    with psycopg.connect(settings.store, autocommit=True) as conn:
        tamper(conn)
    with caplog.at_level(logging.INFO), _server_b(tmp_path, settings) as b:
        assert "refused the replica file published in PostgreSQL" in caplog.text and expected in caplog.text
        assert "started the replica from the replica file" not in caplog.text
        assert f"started the replica from the {made.describe()}" in caplog.text
        assert b.store.head_seq() == a.store.head_seq()
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        assert _changelog_rows(b.store) == _changelog_rows(a.store)
    assert not list(tmp_path.glob("b/.postgres-replica-*.part*"))  # nothing of the refused file is left


def test_the_published_replica_file_is_sealed_and_holds_none_of_its_servers_own_state(tmp_path, database):
    settings = replace(dev_settings(tmp_path, name="a"), store=database)
    with run_server(settings) as running:
        writer = RawAgent(running.address, "writer")
        ids = [r.memory_id for r in writer.append(*(add_op(f"fact {i}", scope="team") for i in range(12))).results]
        writer.close()
        running.store.lifecycle.use(None, ids[:3])
        running.store.writes.ack("writer", 12)
        with closing(sqlite3.connect(running.store.path)) as own:
            assert own.execute("SELECT count(*) FROM memory_access").fetchone()[0] == 3
            assert own.execute("SELECT count(*) FROM agent_offsets").fetchone()[0] == 1
        made = snapshots.make_in(settings.data_dir, store=database)
    with psycopg.connect(database, autocommit=True) as conn:
        sha256, length, signature = conn.execute("SELECT sha256, length, signature FROM replica_files").fetchone()
        data = b"".join(bytes(d) for (d,) in conn.execute("SELECT data FROM replica_file_chunks ORDER BY idx"))
    seal = published_snapshots.ReplicaFileSeal(sha256, length, bytes(signature))
    assert not seal.problem(made, load_key(settings.data_dir, None).public)
    assert snapshot.ReplicaSeal(sha256, length, bytes(signature)).problem(made, made.key)  # no agent cache's seal
    copy = tmp_path / "published.db"
    copy.write_bytes(data)
    with closing(sqlite3.connect(copy)) as published:
        assert published.execute("SELECT max(seq) FROM changelog").fetchone()[0] == made.size
        for table in published_snapshots.LOCAL_STATE:
            assert published.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table
        assert published.execute("SELECT count(*) FROM memories").fetchone()[0] == 12


def test_a_snapshot_of_another_log_is_refused(served, tmp_path, postgres_server, caplog):
    a, settings, _, made = served
    _drop_replica_files(settings.store)
    with postgres_database(postgres_server) as other:
        other_settings = replace(dev_settings(tmp_path, name="other"), store=other)
        with run_server(other_settings) as running:
            agent = RawAgent(running.address, "writer")
            agent.append(*(add_op(f"another log's fact {i}") for i in range(made.size + 5)))
            foreign = snapshots.make_in(other_settings.data_dir, store=other)
            agent.close()
        from mnemosync.server.postgres_record import connect

        pg = connect(settings.store, autocommit=True)
        published_snapshots.publish(pg, foreign, other_settings.data_dir / snapshots.DIRECTORY /
                                    f"{foreign.size}.img", certificate=b"", keep=3, now_ms=1)
        pg.conn.close()
    with caplog.at_level(logging.WARNING), _server_b(tmp_path, settings) as b:
        assert "belongs to log" in caplog.text
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)


def _published(url) -> list[int]:
    from mnemosync.server.postgres_record import connect

    pg = connect(url, autocommit=True)
    try:
        return published_snapshots.published(pg)
    finally:
        pg.conn.close()


def test_a_redaction_deletes_the_published_snapshots_it_is_newer_than(served, tmp_path):
    a, settings, writer, made = served
    assert _published(settings.store) == [made.size]
    with psycopg.connect(settings.store, autocommit=True) as conn:
        assert conn.execute("SELECT size FROM replica_files").fetchall() == [(made.size,)]
    target = writer.sync(0)[0].memory_id
    root = RawAgent(a.address, "root")
    root.append(_op(target, writer.get(target).version, redact=pb.RedactOp(reason="a secret")))
    root.close()
    assert _published(settings.store) == []
    with psycopg.connect(settings.store, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM replica_file_chunks").fetchone() == (0,)
    from mnemosync.server.postgres_record import connect

    pg = connect(settings.store, autocommit=True)  # a server whose replica lagged tries to publish the old one
    image = settings.data_dir / snapshots.DIRECTORY / f"{made.size}.img"
    assert not published_snapshots.publish(pg, made, image, certificate=b"", keep=3, now_ms=1)
    pg.conn.close()
    assert _published(settings.store) == []


def test_the_server_publishes_the_snapshots_it_makes_and_one_whose_replica_was_deleted_starts_from_them(
        tmp_path, database, caplog):
    settings = replace(dev_settings(tmp_path, name="a"), store=database, snapshot_keep=2)
    with run_server(settings) as running:
        writer = RawAgent(running.address, "writer")
        kept = snapshots.snapshots_of(running.store, load_key(settings.data_dir, None), settings)
        for round_ in range(3):
            writer.append(*(add_op(f"round {round_} fact {i}", scope="team") for i in range(25)))
            kept.make()
        writer.close()
        expected = ledger_snapshot(running.store)
    assert _published(database) == [50, 75]
    replica_path(settings.data_dir, database).unlink()
    with psycopg.connect(database, autocommit=True) as conn:  # the newest only: each replaces the one before
        assert conn.execute("SELECT size FROM replica_files").fetchall() == [(75,)]
    with caplog.at_level(logging.INFO), run_server(settings) as again:
        assert "started the replica from the replica file of the snapshot at entry 75" in caplog.text
        assert "TRUST ON FIRST USE" not in caplog.text  # signed with its own key
        assert ledger_snapshot(again.store) == expected


def _der(tls_dir) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    return x509.load_pem_x509_certificate((tls_dir / "server.crt").read_bytes()).public_bytes(
        serialization.Encoding.DER)


@pytest.mark.parametrize(("certificate", "expected"), [
    ("published", ""),
    ("of another CA", "is not a server certificate issued by this server's CA"),
    ("none", "no server certificate was published beside it"),
])
def test_under_mtls_a_snapshot_is_trusted_through_a_server_certificate_of_the_same_ca_only(
        tmp_path, database, pki, foreign, caplog, certificate, expected):
    tls_a = server_tls_dir(tmp_path / "tls-a", pki)
    tls_b = tmp_path / "tls-b"  # another server certificate of the same CA, with its own checkpoint key
    ca.issue_server(pki, ["127.0.0.1"], out_dir=tls_b, overwrite=True)
    settings_a = replace(tls_settings(tmp_path, tls_a), data_dir=tmp_path / "a", store=database)
    with run_server(settings_a, pin_model=TEST_MODEL_INFO) as a:
        alice = TlsAgent(a.address, pki / ca.AGENTS / "alice")
        alice.append(*(add_op(f"fact {i} under mTLS", scope="user") for i in range(30)))
        alice.close()
        made = snapshots.make_in(settings_a.data_dir, tls_a, store=database)
        expected_state = ledger_snapshot(a.store)
    assert load_key(tmp_path / "b", tls_b).public != made.key
    if certificate != "published":
        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("UPDATE snapshot_manifests SET certificate = %s",
                         (_der(foreign / ca.SERVER_DIR) if certificate == "of another CA" else b"",))
    settings_b = replace(tls_settings(tmp_path, tls_b), data_dir=tmp_path / "b", store=database)
    with caplog.at_level(logging.INFO), run_server(settings_b) as b:
        if expected:
            assert "refused the snapshot published in PostgreSQL" in caplog.text and expected in caplog.text
            assert "started the replica" not in caplog.text
        else:
            assert f"started the replica from the replica file of the {made.describe()}" in caplog.text
        assert "TRUST ON FIRST USE" not in caplog.text
        assert ledger_snapshot(b.store) == expected_state


def test_a_published_snapshot_older_than_a_redaction_is_never_started_from(served, tmp_path, caplog):
    a, settings, writer, made = served
    with psycopg.connect(settings.store, autocommit=True) as conn:
        kept = conn.execute("SELECT size, manifest, certificate, image_bytes, published_at_ms FROM snapshot_manifests"
                            ).fetchone()
        chunks = conn.execute("SELECT size, idx, data FROM snapshot_chunks ORDER BY idx").fetchall()
        file = conn.execute("SELECT size, sha256, length, signature FROM replica_files").fetchone()
        file_chunks = conn.execute("SELECT size, idx, data FROM replica_file_chunks ORDER BY idx").fetchall()
    target = writer.sync(0)[0].memory_id
    root = RawAgent(a.address, "root")
    root.append(_op(target, writer.get(target).version, redact=pb.RedactOp(reason="a secret")))
    root.close()
    with psycopg.connect(settings.store, autocommit=True) as conn:  # as a publish racing the redaction leaves it
        conn.execute("INSERT INTO snapshot_manifests VALUES (%s, %s, %s, %s, %s)", kept)
        conn.cursor().executemany("INSERT INTO snapshot_chunks VALUES (%s, %s, %s)", chunks)
        conn.execute("INSERT INTO replica_files VALUES (%s, %s, %s, %s)", file)
        conn.cursor().executemany("INSERT INTO replica_file_chunks VALUES (%s, %s, %s)", file_chunks)
    with caplog.at_level(logging.WARNING), _server_b(tmp_path, settings) as b:
        assert "refused the replica file published in PostgreSQL" in caplog.text
        assert "refused the snapshot published in PostgreSQL" in caplog.text
        assert f"is older than the redaction at entry {made.size + 3}" in caplog.text
        assert ledger_snapshot(b.store) == ledger_snapshot(a.store)
        assert _changelog_rows(b.store) == _changelog_rows(a.store)


def test_mnemosync_snapshot_on_a_postgresql_server_publishes_in_the_database(tmp_path, database):
    settings = replace(dev_settings(tmp_path, name="a"), store=database)
    with run_server(settings) as running:
        writer = RawAgent(running.address, "writer")
        writer.append(*(add_op(f"fact {i}", scope="team") for i in range(12)))
        writer.close()
        done = mnemosync("snapshot", "--data-dir", str(settings.data_dir), env={"MNEMOSYNC_STORE": database})
    assert done.returncode == 0, done.stderr
    assert "made the snapshot at entry 12" in done.stdout
    assert _published(database) == [12]
