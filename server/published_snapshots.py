"""Snapshots published in PostgreSQL, and a new server's replica started from one (issue 30).

Publishing. A server over PostgreSQL that makes a snapshot (`mnemosync.server.snapshots`, periodic or
`mnemosync snapshot`) also stores it in the database: its signed manifest (with the signing server's certificate
under mTLS) in `snapshot_manifests`, its image in `snapshot_chunks` (CHUNK_BYTES each), in one transaction, so a
half-published snapshot is never seen. Only the newest `keep` are kept. A redaction deletes every published
snapshot older than it in the same transaction that commits the redaction (`PostgresRecord._push`): they still
hold the text it removed. A snapshot is not published when the database already holds a redaction after it, and
a server never starts from one that is older than a redaction (whatever raced).

The replica file (issue 39). With each snapshot, a server also publishes its local replica as of the snapshot's
position: a copy of the SQLite file made with SQLite's backup API inside the snapshot's read transaction
(`mnemosync.server.snapshots.make_image`), with the tables of its own server state emptied (`LOCAL_STATE`), as one
file, sealed by the checkpoint key that signs the manifest (`ReplicaFileSeal`: its SHA-256 and size bound to the
manifest's log id, position, root and entry hash), in `replica_files` / `replica_file_chunks`, in the same
transaction as the snapshot. Only the newest is kept (each publication replaces it); it goes with its snapshot
(a redaction, or dropped beyond `keep`).

Starting from the replica file (`install_replica`, before the replica is opened: `PostgresRecord.seed`). A server
with no replica file takes the newest published one, inside one repeatable-read transaction: its snapshot's
manifest must pass the checks below (trust rule, signature, log id, no redaction after it), the seal must be
signed by the manifest's key, PostgreSQL's entry N must have the manifest's hash; the file is fetched beside the
replica, its SHA-256 and size must be the sealed ones, its schema no newer than this server's, its log id, head
entry and Merkle root the manifest's; then it is moved into place. It is marked verified up to N for the
start-up check (`mnemosync.server.boot_check`), and the server folds the entries after N as any restart does. Any
failed check is logged ("refused the replica file published in PostgreSQL: ..."), nothing of it is kept, and the
server starts from the snapshot's entries and image as below (or, failing that, the whole fold).

Starting from the entries and image (`bootstrap`). A server whose local replica is empty (head 0), instead of
folding the whole changelog entry by entry, takes the newest published snapshot at N and, inside one local
transaction:

1. checks the manifest's signature (the trust rule below), its Merkle frontier and audit path, and its log id
   against the database's;
2. copies entries 1..N from PostgreSQL into the replica's changelog as rows, without folding them (batches of
   COPY_PAGE), walking the hash chain as it goes (`mnemosync.kernel.entry.walk_chain`: links, hashes, payload
   commitments) and computing the Merkle nodes of each entry from its hash (the replica's tree is computed here,
   never copied); blanked entries are copied as PostgreSQL holds them, as the fold copies them;
3. requires the chain's entry N to have the manifest's hash and the computed root of the first N entries to be
   the manifest's root;
4. streams the image from PostgreSQL, checking each section's bytes against its signed digest as it arrives, and
   installs it into the replica's projections (`mnemosync.kernel.snapshot.install`).

Any failed check raises `SnapshotRefused` with what did not match; the transaction is rolled back (the replica
is empty again) and the caller folds the whole changelog as before. Then the server folds from N + 1 exactly as
today. Progress is logged every PROGRESS_SECONDS. Since steps 2 and 3 checked entries 1..N as the start-up check
would, the caller (`PostgresRecord.start`) marks them verified for it (`mnemosync.server.boot_check.write_mark`):
the check before serving walks only the entries folded after N.

Trust rule for the signature (`SnapshotTrust.key_for`): the snapshot is used only when its checkpoint key is

* this server's own checkpoint key (it made the snapshot itself, e.g. its replica was deleted); or
* under mTLS, the key named by the server certificate published beside the snapshot, when that certificate is a
  server certificate issued by this server's own CA (every server of a deployment is vouched for by one CA, as
  agents trust them); or
* in development mode (no TLS) only, a key the database names: `snapshot_signers` lists the checkpoint key of
  every server that published a snapshot there, and such a key is trusted on first use with a loud warning, as
  an agent in development mode trusts a server's key. A manifest re-signed with any other key is refused. This
  guards against a mis-signed or mixed-up snapshot, not against whoever can write the database: they can add a
  key to that table, but in development mode they can also write the changelog itself.

Under mTLS a snapshot signed by any other key (a server whose certificate predates checkpoints, or of another
CA) is refused, and the server folds the whole changelog.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from sqlite_utils.utils import sqlite3

from mnemosync.kernel import certificates, db, merkle, snapshot
from mnemosync.kernel.entry import Entry, walk_chain
from mnemosync.kernel.snapshot import Manifest, SnapshotRefused
from mnemosync.server import changelog, merkle_log

log = logging.getLogger(__name__)

SCHEMA_V2 = """
CREATE TABLE snapshot_manifests (
    size BIGINT PRIMARY KEY,
    manifest TEXT NOT NULL,
    certificate BYTEA NOT NULL DEFAULT ''::bytea,
    image_bytes BIGINT NOT NULL,
    published_at_ms BIGINT NOT NULL
);
CREATE TABLE snapshot_chunks (
    size BIGINT NOT NULL REFERENCES snapshot_manifests (size) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (size, idx)
);
CREATE TABLE snapshot_signers (key TEXT PRIMARY KEY, first_published_ms BIGINT NOT NULL);
"""
"""Version 2 of the PostgreSQL schema (`mnemosync.server.postgres_record.STEPS`): published snapshots."""

SCHEMA_V3 = """
CREATE TABLE replica_files (
    size BIGINT PRIMARY KEY REFERENCES snapshot_manifests (size) ON DELETE CASCADE,
    sha256 TEXT NOT NULL,
    length BIGINT NOT NULL,
    signature BYTEA NOT NULL
);
CREATE TABLE replica_file_chunks (
    size BIGINT NOT NULL REFERENCES replica_files (size) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (size, idx)
);
ALTER TABLE replica_file_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
"""
"""Version 3 of the PostgreSQL schema: the sealed replica file published beside a snapshot (one at a time; its
pages are mostly vectors, which do not compress, so they are stored as they are)."""

CHUNK_BYTES = 1 << 20
"""Bytes of image per row of snapshot_chunks."""
COPY_PAGE = 5000
"""Entries read from PostgreSQL and written into the replica per batch."""
PROGRESS_SECONDS = 5.0
"""How often a long bootstrap logs how far it got."""


@dataclass(frozen=True)
class SnapshotTrust:
    """Which checkpoint keys a server accepts a published snapshot from (see the module docstring).

    Attributes:
        own_key: This server's checkpoint key, lower-case hex.
        ca_cert: This server's CA certificate (PEM) under mTLS; None in development mode.
    """

    own_key: str
    ca_cert: bytes | None = None

    def key_for(self, manifest: Manifest, certificate: bytes, named: Callable[[str], bool]) -> str:
        """The key to check `manifest` against (published with the signer's `certificate`, DER or empty;
        `named(key)`: whether the database lists `key` among the servers that published snapshots).

        Raises:
            SnapshotRefused: its key is none this server trusts.
        """
        if manifest.key == self.own_key:
            return self.own_key
        if self.ca_cert is None:
            if not named(manifest.key):
                raise SnapshotRefused(f"the {manifest.describe()} is signed by checkpoint key {manifest.key[:16]}…, "
                                      "which is neither this server's nor one of a server that published a snapshot "
                                      "in this database")
            log.warning("TRUST ON FIRST USE: starting from a snapshot signed by checkpoint key %s…, which the "
                        "database names as a publisher's and nothing vouches for (development mode, no TLS); with "
                        "mTLS only keys named by a server certificate of this server's CA are trusted",
                        manifest.key[:16])
            return manifest.key
        if not certificate:
            raise SnapshotRefused(f"the {manifest.describe()} is signed by checkpoint key {manifest.key[:16]}…, "
                                  "which is not this server's and no server certificate was published beside it")
        try:
            cert = x509.load_der_x509_certificate(certificate)
            cert.verify_directly_issued_by(x509.load_pem_x509_certificate(self.ca_cert))
            usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            vouched = certificates.checkpoint_key(cert)
        except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound) as exc:
            raise SnapshotRefused(f"the certificate published beside the {manifest.describe()} is not a server "
                                  f"certificate issued by this server's CA naming a checkpoint key ({exc})") from None
        if x509.oid.ExtendedKeyUsageOID.SERVER_AUTH not in usage:
            raise SnapshotRefused(f"the certificate published beside the {manifest.describe()} is not a server "
                                  "certificate")
        if vouched != manifest.key:
            raise SnapshotRefused(f"the {manifest.describe()} is signed by key {manifest.key[:16]}…, but the "
                                  f"server certificate published beside it names {vouched[:16]}…")
        return vouched


REPLICA_FORMAT = "mnemosync-server-replica/v1"
LOCAL_STATE = ("memory_access", "use_quota", "agent_offsets")
"""Tables of a replica that hold its own server's state, not the changelog's (access statistics, the acks it saw):
emptied in the published copy, so that a server started from it holds what a fold of the changelog gives."""


@dataclass(frozen=True)
class ReplicaFileSeal(snapshot.ReplicaSeal):
    """A server's replica file as of a snapshot, signed with the checkpoint key that signed the snapshot's manifest:
    an agent cache's sealed file (`mnemosync.kernel.snapshot.ReplicaSeal`) of another kind, under its own format
    line so that neither seal is taken for the other. The signature binds the file's SHA-256 and size to the
    manifest's log id, position, root and entry hash, over::

        mnemosync-server-replica/v1
        <log id>
        <N>
        <root>
        <hash of entry N>
        <SHA-256 of the file>
        <size of the file>
    """

    def body(self, manifest: Manifest) -> bytes:
        """The signed text for the replica file as of `manifest`."""
        return (f"{REPLICA_FORMAT}\n{manifest.log_id}\n{manifest.size}\n{manifest.root}\n{manifest.last_hash}\n"
                f"{self.sha256}\n{self.length}\n").encode()


def seal_replica_file(path: Path, manifest: Manifest, key) -> ReplicaFileSeal:
    """Readies `path`, a copy of a replica made in the read transaction of the snapshot `manifest`
    (`mnemosync.server.snapshots.make_image`), for publishing: LOCAL_STATE emptied (freed pages zeroed: the copy
    is opened with secure_delete), one file without WAL, sealed with `key` (an Ed25519 private key)."""
    conn = db.connect(path, synchronous="normal").conn
    try:
        conn.execute("BEGIN")
        for table in LOCAL_STATE:
            conn.execute(f"DELETE FROM {table}")
        conn.execute("COMMIT")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()
    digest, length = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while data := f.read(CHUNK_BYTES):
            digest.update(data)
            length += len(data)
    seal = ReplicaFileSeal(digest.hexdigest(), length)
    return replace(seal, signature=key.sign(seal.body(manifest)))


# -- publishing -----------------------------------------------------------------------------------------------


def publish(pg, manifest: Manifest, image: Path, *, certificate: bytes, keep: int, now_ms: int,
            replica: tuple[Path, ReplicaFileSeal] | None = None) -> bool:
    """Stores the snapshot (`manifest`, its image file `image`) in the database behind `pg` (a
    `mnemosync.server.postgres_record.PgConn` outside a transaction), with `replica` (the sealed copy of the
    replica at its position, `seal_replica_file`) in place of the one published before, then drops the oldest
    beyond `keep`. Returns False when it was not published: the database holds a redaction after it, or it is
    there already."""
    with pg.conn.transaction():
        later = pg.execute("SELECT coalesce(max(seq), 0) FROM changelog WHERE seq > ? AND op = 'redact'",
                           (manifest.size,)).fetchone()[0]
        if later:
            log.info("not publishing the %s: the redaction at entry %d removed text it holds", manifest.describe(),
                     later)
            return False
        if pg.execute("SELECT 1 FROM snapshot_manifests WHERE size = ?", (manifest.size,)).fetchone():
            return False
        pg.execute("INSERT INTO snapshot_manifests (size, manifest, certificate, image_bytes, published_at_ms) "
                   "VALUES (?, ?, ?, ?, ?)", (manifest.size, json.dumps(manifest.to_json()), certificate,
                                              image.stat().st_size, now_ms))
        with open(image, "rb") as f:
            index = 0
            while data := f.read(CHUNK_BYTES):
                pg.execute("INSERT INTO snapshot_chunks (size, idx, data) VALUES (?, ?, ?)",
                           (manifest.size, index, data))
                index += 1
        if replica is not None:
            _store_replica_file(pg, manifest.size, *replica)
        pg.execute("INSERT INTO snapshot_signers (key, first_published_ms) VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
                   (manifest.key, now_ms))
        pg.execute("DELETE FROM snapshot_manifests WHERE size NOT IN "
                   "(SELECT size FROM snapshot_manifests ORDER BY size DESC LIMIT ?)", (keep,))
    log.info("published the %s in PostgreSQL for new servers%s", manifest.describe(),
             " with its replica file" if replica is not None else "")
    return True


def _store_replica_file(pg, size: int, path: Path, seal: ReplicaFileSeal) -> None:
    """Replaces the published replica file with `path` (the caller holds the transaction)."""
    pg.execute("DELETE FROM replica_files")
    pg.execute("INSERT INTO replica_files (size, sha256, length, signature) VALUES (?, ?, ?, ?)",
               (size, seal.sha256, seal.length, seal.signature))
    with open(path, "rb") as f:
        index = 0
        while data := f.read(CHUNK_BYTES):
            pg.execute("INSERT INTO replica_file_chunks (size, idx, data) VALUES (?, ?, ?)", (size, index, data))
            index += 1


def delete_before(pg, seq: int) -> None:
    """Deletes the published snapshots older than entry `seq` (a redaction; the caller holds the transaction)."""
    pg.execute("DELETE FROM snapshot_manifests WHERE size < ?", (seq,))


def published(pg) -> list[int]:
    """The positions of the published snapshots, oldest first."""
    return [size for (size,) in pg.execute("SELECT size FROM snapshot_manifests ORDER BY size").fetchall()]


def _chunks(pg, size: int) -> Iterator[bytes]:
    index = 0
    while True:
        row = pg.execute("SELECT data FROM snapshot_chunks WHERE size = ? AND idx = ?", (size, index)).fetchone()
        if row is None:
            return
        yield bytes(row[0])
        index += 1


# -- starting a replica from one --------------------------------------------------------------------------------


def bootstrap(conn, pg, trust: SnapshotTrust, copy_blanking: Callable[[Any, Any, int], None]) -> Manifest | None:
    """Fills the empty replica `conn` (the caller holds its transaction) from the newest snapshot published in
    `pg` (see the module docstring); returns its manifest, or None when none is published.

    Raises:
        SnapshotRefused: a check failed (the message says what did not match); the caller rolls back.
    """
    row = pg.execute("SELECT size, manifest, certificate FROM snapshot_manifests ORDER BY size DESC LIMIT 1"
                     ).fetchone()
    if row is None:
        return None
    started = time.monotonic()
    manifest = _trusted_manifest(pg, row, trust)
    if changelog.head(conn)[0]:
        raise SnapshotRefused("the replica already holds entries: a snapshot starts only an empty one")
    log.info("starting the replica from the %s published in PostgreSQL: copying its %d entries", manifest.describe(),
             manifest.size)
    frontier = _copy_entries(conn, pg, manifest, copy_blanking)
    if frontier.root().hex() != manifest.root:
        raise SnapshotRefused(f"the first {manifest.size} entries in PostgreSQL have Merkle root "
                              f"{frontier.root().hex()[:16]}…, but the {manifest.describe()} names another: it "
                              "belongs to a fork of the log or names the wrong position")
    copied = time.monotonic()
    log.info("starting the replica from the snapshot: %d entries copied and checked in %.1f s; installing its image "
             "(%d bytes)", manifest.size, copied - started, sum(s.length for s in manifest.sections))
    receiver = snapshot.Receiver(manifest)
    if len(manifest.served()) != len(manifest.sections):
        raise SnapshotRefused(f"the {manifest.describe()} has sections without a scope name")

    def checked() -> Iterator[bytes]:
        for data in _chunks(pg, manifest.size):
            receiver.feed(data)
            yield data

    memories = snapshot.install(conn, snapshot.served_lines(checked()))
    receiver.finish()
    log.info("started the replica from the %s: %d entries copied and checked in %.1f s, %d memories installed in "
             "%.1f s; folding from entry %d", manifest.describe(), manifest.size, copied - started, memories,
             time.monotonic() - copied, manifest.size + 1)
    return manifest


def _trusted_manifest(pg, row: tuple, trust: SnapshotTrust) -> Manifest:
    """The manifest of a published snapshot (`row`: its size, manifest text and certificate) once it checks out:
    signed by a key `trust` accepts, of this database's log, and no redaction after it.

    Raises:
        SnapshotRefused: it does not (the message says what).
    """
    try:
        manifest = Manifest.from_json(json.loads(row[1]))
    except (ValueError, KeyError, TypeError) as exc:
        raise SnapshotRefused(f"the manifest published for the snapshot at entry {row[0]} is malformed ({exc!r})"
                              ) from None

    def named(key: str) -> bool:
        return pg.execute("SELECT 1 FROM snapshot_signers WHERE key = ?", (key,)).fetchone() is not None

    problem = manifest.problem(trust.key_for(manifest, bytes(row[2] or b""), named))
    if problem:
        raise SnapshotRefused(problem)
    if manifest.size != row[0]:
        raise SnapshotRefused(f"the {manifest.describe()} is published as the snapshot at entry {row[0]}")
    log_row = pg.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
    if log_row is None or log_row[0] != manifest.log_id:
        raise SnapshotRefused(f"the {manifest.describe()} belongs to log {manifest.log_id}, but the database holds "
                              f"log {log_row[0] if log_row else None}")
    later = pg.execute("SELECT coalesce(max(seq), 0) FROM changelog WHERE seq > ? AND op = 'redact'",
                       (manifest.size,)).fetchone()[0]
    if later:
        raise SnapshotRefused(f"the {manifest.describe()} is older than the redaction at entry {later}: it still "
                              "holds the text that redaction removed")
    return manifest


def _copy_entries(conn, pg, manifest: Manifest, copy_blanking) -> merkle.Frontier:
    """Copies entries 1..N (see the module docstring, step 2); returns the Merkle frontier they give.

    Raises:
        SnapshotRefused: the chain breaks, an entry does not verify, or entry N is not the manifest's.
    """
    size, frontier = manifest.size, merkle.Frontier()
    last_log = time.monotonic()

    def entries() -> Iterator[Entry]:
        nonlocal last_log
        after = 0
        while after < size:
            page = changelog.read_with_request_hash(pg, after, min(COPY_PAGE, size - after))
            if not page:
                return
            changelog.insert_many(conn, page)
            nodes = []
            for entry, _ in page:
                nodes += frontier.append(merkle.leaf_hash(entry.hash))
            conn.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", nodes)
            for entry, _ in page:
                for blanked in entry.blanked:
                    copy_blanking(pg, conn, blanked.seq)
                yield entry
            after = page[-1][0].seq
            if time.monotonic() - last_log >= PROGRESS_SECONDS:
                last_log = time.monotonic()
                log.info("starting the replica from the snapshot: %d of %d entries copied", after, size)

    report = walk_chain(entries())
    if report.problems:
        seq, problem = report.problems[0]
        raise SnapshotRefused(f"entry {seq} in PostgreSQL does not verify ({problem}); not starting from the "
                              f"{manifest.describe()}")
    if report.head_seq != size or report.head_hash != manifest.last_hash:
        raise SnapshotRefused(f"entry {size} in PostgreSQL has hash {report.head_hash[:16]}… (after {report.head_seq}"
                              f" entries), but the {manifest.describe()} names {manifest.last_hash[:16]}…")
    return frontier


# -- installing the published replica file ----------------------------------------------------------------------


def install_replica(pg, path: Path, trust: SnapshotTrust) -> Manifest | None:
    """Installs the newest replica file published in `pg` (read inside one repeatable-read transaction the caller
    holds) as the replica `path`, which does not exist yet; returns its snapshot's manifest, or None when none is
    published. See the module docstring.

    Raises:
        SnapshotRefused: a check failed (the message says what did not match); nothing is left at `path`.
    """
    row = pg.execute("SELECT r.size, m.manifest, m.certificate, r.sha256, r.length, r.signature "
                     "FROM replica_files r JOIN snapshot_manifests m USING (size) ORDER BY r.size DESC LIMIT 1"
                     ).fetchone()
    if row is None:
        return None
    started = time.monotonic()
    manifest = _trusted_manifest(pg, row[:3], trust)
    seal = ReplicaFileSeal(row[3], row[4], bytes(row[5]))
    if seal.problem(manifest, manifest.key):
        raise SnapshotRefused(f"the replica file published with the {manifest.describe()} is not sealed by its "
                              f"checkpoint key {manifest.key[:16]}…")
    entry = changelog.get(pg, manifest.size)
    if entry is None or entry.hash != manifest.last_hash:
        raise SnapshotRefused(f"entry {manifest.size} in PostgreSQL is not the one the {manifest.describe()} names")
    partial = path.with_name(f".{path.name}.part")
    try:
        digest, length = hashlib.sha256(), 0
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
            for data in _file_chunks(pg, manifest.size):
                digest.update(data)
                length += len(data)
                out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if (length, digest.hexdigest()) != (seal.length, seal.sha256):
            raise SnapshotRefused(f"the replica file published with the {manifest.describe()} does not match the "
                                  f"digest its seal signs ({length:,} bytes with SHA-256 {digest.hexdigest()[:16]}…, "
                                  f"sealed {seal.length:,} bytes with {seal.sha256[:16]}…)")
        problem = _replica_file_problem(partial, manifest)
        if problem:
            raise SnapshotRefused(f"the replica file published with the {manifest.describe()} {problem}")
        for suffix in ("-wal", "-shm", "-journal"):  # a deleted replica's leftovers would be replayed into it
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.replace(partial, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{partial}{suffix}").unlink(missing_ok=True)
    log.info("started the replica from the replica file of the %s published in PostgreSQL: %d bytes fetched and "
             "checked in %.1f s; folding from entry %d", manifest.describe(), length, time.monotonic() - started,
             manifest.size + 1)
    return manifest


def _file_chunks(pg, size: int) -> Iterator[bytes]:
    cursor = pg.conn.cursor(binary=True)
    index = 0
    while True:
        row = cursor.execute("SELECT data FROM replica_file_chunks WHERE size = %s AND idx = %s", (size, index)
                             ).fetchone()
        if row is None:
            return
        yield bytes(row[0])
        index += 1


def _replica_file_problem(path: Path, manifest: Manifest) -> str:
    """What in the replica file at `path` does not agree with `manifest` (its sealed snapshot), or ""."""
    from mnemosync.server import schema

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(schema.SERVER_STEPS):
            return f"has schema version {version}, newer than this server's {len(schema.SERVER_STEPS)}"
        log_row = conn.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()
        if log_row is None or log_row[0] != manifest.log_id:
            return f"belongs to log {log_row[0] if log_row else None}"
        if changelog.head(conn) != (manifest.size, manifest.last_hash):
            return f"ends at entry {changelog.head(conn)[0]} with another hash"
        if merkle.root(merkle_log.nodes(conn), manifest.size).hex() != manifest.root:
            return "has another Merkle root"
    except (sqlite3.Error, LookupError) as exc:
        return f"cannot be read as a replica ({exc})"
    finally:
        conn.close()
    return ""
