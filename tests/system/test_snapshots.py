"""Snapshots (issue 30): a cache started from the server's snapshot holds exactly what a replay gives it, and a
snapshot that does not check out is refused with what did not match, the cache replaying instead."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import sqlite3
import uuid
from contextlib import closing
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemosync.agent import bootstrap
from mnemosync.agent.cache import Cache
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.kernel import db, snapshot
from mnemosync.kernel.errors import NotFound
from mnemosync.kernel.snapshot import SnapshotRefused
from mnemosync.server import snapshots
from mnemosync.server.app import run_server
from mnemosync.server.notary import load_key
from mnemosync.server.settings import ServerSettings
from mnemosync.v1 import memory_pb2 as pb

from helpers import RawAgent, add_op, dev_settings, mnemosync, update_op, wait_until

POLICY = """
[defaults]
authority = 3
scopes = ["*"]

[agents.root]
admin = true

[agents.reader]
authority = 3
scopes = ["team", "project:*"]
"""

TABLES = ("SELECT * FROM memories ORDER BY num", "SELECT * FROM links ORDER BY memory_id, target_id, relation",
          "SELECT * FROM memory_history ORDER BY memory_id, version", "SELECT * FROM memory_lifecycle ORDER BY 1",
          "SELECT * FROM conflicts ORDER BY id", "SELECT * FROM conflict_revisions ORDER BY 1, 2",
          "SELECT rowid, content, tags FROM memory_fts ORDER BY rowid", "SELECT * FROM memory_tags ORDER BY 1, 2",
          "SELECT rowid, embedding, scope, type, layer, author, archived, created_ms FROM memory_vec ORDER BY rowid")


def _rows(cache: Cache) -> dict[str, list[tuple]]:
    return {sql: [tuple(r) for r in cache.read(lambda conn, sql=sql: conn.execute(sql).fetchall())]
            for sql in TABLES}


def _op(memory_id: str, base: int, **kind) -> pb.Operation:
    return pb.Operation(op_id=str(uuid.uuid4()), memory_id=memory_id, base_version=base, **kind)


def _history(agent: RawAgent) -> list[str]:
    """Adds in three scopes, then updates, links (within and across scopes), a forget and a restore."""
    ids = []
    for i in range(30):
        scope = ("team", "private", "project:app")[i % 3]
        op = add_op(f"fact {i} about the build", scope=scope, tags=("build", f"n{i}"))
        ids.append(agent.append(op).results[0].memory_id)
    agent.append(update_op(ids[0], 1, "fact 0, corrected"),
                 update_op(ids[1], 1, replace_tags=True, tags=["changed"], importance=0.9))
    agent.append(_op(ids[3], 0, link=pb.LinkOp(target_id=ids[6], relation="causal")),
                 _op(ids[4], 0, link=pb.LinkOp(target_id=ids[3], relation="semantic")))
    agent.append(_op(ids[6], 1, forget=pb.ForgetOp(reason="outdated")))
    agent.append(_op(ids[6], 2, restore=pb.RestoreOp()), _op(ids[9], 1, forget=pb.ForgetOp()))
    return ids


@pytest.fixture
def served(tmp_path):
    settings = dev_settings(tmp_path, policy=POLICY)
    with run_server(settings) as running:
        writer = RawAgent(running.address, "writer")
        _history(writer)
        yield running, settings, writer
        writer.close()


@pytest.mark.parametrize("agent", ["writer", "reader"])
def test_a_cache_started_from_a_snapshot_holds_row_for_row_what_a_replay_gives(served, tmp_path, agent):
    running, settings, writer = served
    made = snapshots.make_in(settings.data_dir)
    writer.append(add_op("written after the snapshot", scope="team"))
    remote = Remote(running.address, agent)
    from_snapshot, replayed = Cache(tmp_path / "snap.db"), Cache(tmp_path / "replay.db")
    summary = catch_up(from_snapshot, remote)
    catch_up(replayed, remote, snapshot_gap=None)
    assert summary.applied == 1 and from_snapshot.offset == replayed.offset == made.size + 1
    assert _rows(from_snapshot) == _rows(replayed)
    assert (from_snapshot.last_hash, from_snapshot.root(), from_snapshot.checkpoint) == \
        (replayed.last_hash, replayed.root(), replayed.checkpoint)
    scopes = {m["scope"] for m in from_snapshot.snapshot().values()}
    assert scopes == ({"team", "project:app"} if agent == "reader" else {"team", "private", "project:app"})
    remote.close()


def test_a_scoped_agent_receives_no_section_of_a_scope_it_may_not_read(served, tmp_path):
    running, settings, _ = served
    snapshots.make_in(settings.data_dir)
    remote = Remote(running.address, "reader")
    manifest = next(remote.snapshot()).manifest
    private = snapshot.scope_hash("private")
    hidden = [s for s in manifest.sections if s.scope_hash == private]
    assert hidden and hidden[0].scope == "" and hidden[0].length == 0
    (tmp_path / "received.db").write_bytes(b"".join(chunk.data for chunk in remote.snapshot()))
    with closing(sqlite3.connect(tmp_path / "received.db")) as received:
        scopes = received.execute("SELECT scope, count(*) FROM memories GROUP BY scope ORDER BY scope").fetchall()
    assert scopes == [("project:app", 10), ("team", 10)]
    remote.close()


def test_a_download_broken_midway_resumes_where_it_stopped(served, tmp_path, monkeypatch):
    running, settings, _ = served
    snapshots.make_in(settings.data_dir)
    monkeypatch.setattr(snapshots, "CHUNK_BYTES", 1000)
    remote = Remote(running.address, "writer")
    whole = b"".join(chunk.data for chunk in remote.snapshot())
    resumed = b"".join(chunk.data for chunk in remote.snapshot(offset=4321))
    assert resumed == whole[4321:]
    remote.close()


def _tampered(settings, change) -> None:
    """Rewrites the newest snapshot's manifest or image in place with `change(manifest, image_path)`."""
    directory = settings.data_dir / snapshots.DIRECTORY
    size = max(int(p.stem) for p in directory.glob("*.json"))
    manifest = snapshot.Manifest.from_json(json.loads((directory / f"{size}.json").read_text()))
    changed = change(manifest, directory / f"{size}.img")
    if changed is not None:
        (directory / f"{size}.json").unlink()
        (directory / f"{size}.img").rename(directory / f"{changed.size}.img")
        (directory / f"{changed.size}.json").write_text(json.dumps(changed.to_json()))


def _one_memory_changed(manifest, image):
    data = image.read_bytes()
    image.write_bytes(data.replace(b"fact 12 about the build", b"fact 12 about the BUILD", 1))


def _one_memory_changed_in_the_file(manifest, image):
    for replica in image.parent.glob(f"{manifest.size}-*.db"):
        data = replica.read_bytes()
        assert b"fact 12 about the build" in data
        replica.write_bytes(data.replace(b"fact 12 about the build", b"fact 12 about the BUILD", 1))


def _wrong_position(manifest, image):
    return replace(manifest, size=manifest.size - 1)


def _another_key(manifest, image):
    return snapshot.sign(manifest, Ed25519PrivateKey.generate())


def _image_changed_and_replicas_deleted(manifest, image):
    _one_memory_changed(manifest, image)
    for made in image.parent.glob(f"{manifest.size}-*"):
        made.unlink()


@pytest.mark.parametrize(("tamper", "expected"), [
    (_image_changed_and_replicas_deleted, "its image does not match the digests its manifest signs"),
    (_one_memory_changed_in_the_file, "does not match its seal"),
    (_wrong_position, "is not signed by the server's checkpoint key"),
    (_another_key, "is not signed by the server's checkpoint key"),
])
def test_a_tampered_snapshot_is_neither_signed_nor_served_and_the_cache_replays_instead(
        served, tmp_path, caplog, tamper, expected):
    """Issue 37 item 3: with the image edited on disk and its ready replica files deleted, the server rebuilt the
    replica from the unchecked image and signed it, and a new cache installed the forged text. The server now
    checks a manifest, a ready file and an image against what the checkpoint key signed before it signs or
    serves anything (a replica file that does not match its seal is built again from the checked image)."""
    running, settings, _ = served
    snapshots.make_in(settings.data_dir)
    _tampered(settings, tamper)
    remote = Remote(running.address, "writer")
    cache, replayed = Cache(tmp_path / "cache.db"), Cache(tmp_path / "replay.db")
    with caplog.at_level(logging.INFO):
        catch_up(cache, remote)
    assert expected in caplog.text and "refused the server's snapshot" not in caplog.text
    catch_up(replayed, remote, snapshot_gap=None)
    assert _rows(cache) == _rows(replayed)
    assert "fact 12 about the BUILD" not in repr(_rows(cache))
    for seal in (settings.data_dir / snapshots.DIRECTORY).glob("*.seal"):  # what the server signs now is sound
        assert b"fact 12 about the BUILD" not in seal.with_suffix(".db").read_bytes()
    remote.close()


def test_a_snapshot_of_a_forked_log_is_refused(tmp_path, caplog):
    """Two servers with the same checkpoint key and log id but different histories: the second one's snapshot,
    served by the first, does not match the first one's signed log at the same position."""
    first = dev_settings(tmp_path, name="first")
    with run_server(first) as running:
        RawAgent(running.address, "writer").append(*[add_op(f"one {i}") for i in range(5)])
    fork = tmp_path / "fork"
    shutil.copytree(first.data_dir, fork)
    forked = replace(first, data_dir=fork)
    with run_server(forked) as running:
        RawAgent(running.address, "writer").append(*[add_op(f"other {i}") for i in range(5)])
    with run_server(first) as running:
        RawAgent(running.address, "writer").append(*[add_op(f"two {i}") for i in range(5)])
        snapshots.make_in(forked.data_dir)
        shutil.copytree(fork / snapshots.DIRECTORY, first.data_dir / snapshots.DIRECTORY)
        remote = Remote(running.address, "writer")
        cache = Cache(tmp_path / "cache.db")
        with pytest.raises(SnapshotRefused, match="belongs to a fork of the log"):
            bootstrap.install(cache, remote)
        assert cache.offset == 0
        catch_up(cache, remote)
        assert cache.offset == 10 and "refused the server's snapshot" in caplog.text
        remote.close()


def test_an_agent_that_holds_entries_checks_the_snapshot_extends_its_checkpoint(served, tmp_path):
    running, settings, writer = served
    remote = Remote(running.address, "writer")
    cache = Cache(tmp_path / "cache.db")
    catch_up(cache, remote, snapshot_gap=None)
    held = cache.offset
    for i in range(10):
        writer.append(add_op(f"later {i}", scope="team"))
    snapshots.make_in(settings.data_dir)
    writer.append(add_op("latest", scope="team"))
    assert catch_up(cache, remote, snapshot_gap=5).applied == 1
    assert cache.offset == held + 11
    replayed = Cache(tmp_path / "replay.db")
    catch_up(replayed, remote, snapshot_gap=None)
    assert _rows(cache) == _rows(replayed)
    remote.close()


def test_verify_snapshot_folds_the_log_up_to_each_snapshot_and_names_one_that_differs(served, tmp_path):
    running, settings, writer = served
    snapshots.make_in(settings.data_dir)
    writer.append(add_op("one more", scope="team"))
    snapshots.make_in(settings.data_dir)
    key = load_key(settings.data_dir, None).public
    assert snapshots.verify_kept(settings.data_dir, key, tmp_path / "scratch.db") == []
    _tampered(settings, _one_memory_changed_in_the_file)
    (problem,) = snapshots.verify_kept(settings.data_dir, key, tmp_path / "scratch.db")
    assert problem == (38, "the replica file 38-" + problem[1].split("38-")[1].split(" ")[0]
                       + " does not match its seal")
    _tampered(settings, _one_memory_changed)
    (problem,) = snapshots.verify_kept(settings.data_dir, key, tmp_path / "scratch.db")
    assert problem[0] == 38 and "does not match its digest" in problem[1]


def test_mnemosync_snapshot_and_verify_snapshot_on_a_data_directory(served):
    _, settings, _ = served
    made = mnemosync("snapshot", "--data-dir", str(settings.data_dir))
    assert made.returncode == 0 and "made the snapshot at entry 37" in made.stdout
    checked = mnemosync("verify", "--snapshot", "--data-dir", str(settings.data_dir))
    assert checked.returncode == 0, checked.stderr
    assert "ok: every snapshot (1) equals a fold of the changelog" in checked.stdout


def test_verify_snapshot_on_an_mtls_data_directory_finds_the_checkpoint_key_or_says_what_to_pass(served, pki,
                                                                                                  tmp_path):
    """Issue 37 item 12: without MNEMOSYNC_TLS_DIR, `verify --snapshot` made itself a new key in the data
    directory and called an untouched snapshot "not signed by the server's checkpoint key"."""
    running, settings, _ = served
    (settings.data_dir / "checkpoint.key").unlink()  # as on a server that always ran under mTLS
    tls = str(pki / "server")
    made = mnemosync("snapshot", "--data-dir", str(settings.data_dir), env={"MNEMOSYNC_TLS_DIR": tls})
    assert made.returncode == 0, made.stderr
    alone = {"XDG_DATA_HOME": str(tmp_path / "nowhere")}  # no CA in the default place either

    lost = mnemosync("verify", "--snapshot", "--data-dir", str(settings.data_dir), env=alone, clean_env=True)
    assert lost.returncode == 4  # FAILED_PRECONDITION
    assert lost.stderr.strip().splitlines()[-1] == (
        f"Error: the snapshots in {settings.data_dir / 'snapshots'} are signed by checkpoint key "
        f"{load_key(settings.data_dir, pki / 'server').public[:16]}…, which is not in the data directory: under "
        "mTLS the server signs with checkpoint.key in its TLS directory (beside server.key); pass --tls-dir DIR "
        "(or MNEMOSYNC_TLS_DIR), the folder `mnemosync serve --tls-dir` uses, or --ca-dir CA for the CA that "
        "issued it")
    assert not (settings.data_dir / "checkpoint.key").exists()  # verifying makes no key
    for how in (["--tls-dir", tls], ["--ca-dir", str(pki)]):
        found = mnemosync("verify", "--snapshot", "--data-dir", str(settings.data_dir), *how, env=alone,
                          clean_env=True)
        assert found.returncode == 0, found.stderr
        assert "ok: every snapshot (1) equals a fold of the changelog" in found.stdout
    by_default = mnemosync("verify", "--snapshot", "--data-dir", str(settings.data_dir), clean_env=True,
                           env={"MNEMOSYNC_CA_DIR": str(pki)})
    assert by_default.returncode == 0, by_default.stderr
    assert f"checking the snapshots with the checkpoint key in {pki / 'server'}" in by_default.stderr


def test_a_redaction_deletes_the_snapshots_that_still_hold_the_removed_text(served, tmp_path):
    running, settings, writer = served
    secret = writer.append(add_op("the vault code is zebra-quartz", scope="team")).results[0]
    snapshots.make_in(settings.data_dir)
    RawAgent(running.address, "root").append(_op(secret.memory_id, 1, redact=pb.RedactOp(reason="leaked")))
    remote = Remote(running.address, "writer")
    with pytest.raises(NotFound, match="no snapshot yet"):
        next(remote.snapshot())
    assert not list((settings.data_dir / snapshots.DIRECTORY).glob("*.img"))
    snapshots.make_in(settings.data_dir)
    assert b"zebra-quartz" not in b"".join(chunk.data for chunk in remote.snapshot())
    remote.close()


def test_the_periodic_maker_snapshots_every_k_entries_in_its_own_process_and_keeps_the_newest(served):
    running, settings, writer = served
    key = load_key(settings.data_dir, None)
    kept = snapshots.Snapshots(settings.db_path, settings.data_dir / snapshots.DIRECTORY, key,
                               running.store.head_seq, snapshots.SnapshotSettings(every_entries=10, keep=2,
                                                                                  poll_seconds=0.02))
    kept.data_dir = settings.data_dir  # each snapshot in a process of its own, as the server makes them
    kept.start()
    try:
        for burst in range(3):
            for i in range(15):
                writer.append(add_op(f"steady write {burst}.{i}", scope="team"))
            wait_until(lambda: kept.sizes() and kept.sizes()[-1] >= running.store.head_seq() - 10)
    finally:
        kept.stop()
    sizes = kept.sizes()
    assert len(sizes) == 2 and sizes[0] < sizes[1] and sizes[1] > 37 + 30
    for size in sizes:
        assert kept.get(size).problem(key.public) == ""


def test_a_server_makes_a_snapshot_every_ten_thousand_entries_without_an_operator(served):
    running, settings, _ = served
    key = load_key(settings.data_dir, None)
    default = snapshots.snapshots_of(running.store, key, ServerSettings(data_dir=settings.data_dir, insecure=True))
    assert default.settings.every_entries == 10_000
    for head, due in ((9_999, False), (10_000, True)):
        kept = snapshots.Snapshots(settings.db_path, settings.data_dir / "none-yet", key, lambda head=head: head,
                                   default.settings)
        assert kept.due() is due


def test_a_replica_file_holding_anything_but_projections_is_refused_even_when_signed(served, tmp_path, caplog):
    running, settings, _ = served
    snapshots.make_in(settings.data_dir)
    directory = settings.data_dir / snapshots.DIRECTORY
    (replica,) = directory.glob("*-*.db")
    conn = db.connect(replica).conn
    conn.execute("CREATE TRIGGER sneaky AFTER INSERT ON memory_history BEGIN DELETE FROM memories; END")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.close()
    key = load_key(settings.data_dir, None)
    manifest = snapshots.Snapshots(settings.db_path, directory, key, lambda: 0).get()
    data = replica.read_bytes()
    seal = snapshot.ReplicaSeal(hashlib.sha256(data).hexdigest(), len(data))
    seal = replace(seal, signature=key.key.sign(seal.body(manifest)))
    replica.with_suffix(".seal").write_text(json.dumps({"sha256": seal.sha256, "length": seal.length,
                                                        "signature": seal.signature.hex()}))
    remote = Remote(running.address, "writer")
    cache = Cache(tmp_path / "cache.db")
    catch_up(cache, remote)
    assert "refused the server's snapshot: the replica holds a trigger sneaky that no projection has" in caplog.text
    assert cache.offset == running.store.head_seq()
    assert not cache.read(lambda conn: conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' "
                                                    "AND name = 'sneaky'").fetchall())
    remote.close()
