"""Making, keeping and serving snapshots of the projections (issue 30; the format is `mnemosync.kernel.snapshot`).

A snapshot is made on its own read connection to the store's SQLite file inside one read transaction: WAL gives
it one consistent position N (the head when the transaction began) while the writer goes on appending, so making
one never blocks an append. The image goes to `snapshots/<N>.img` in the data directory and its signed manifest to
`snapshots/<N>.json` (written last, each through a temporary file and a rename, so a half-made snapshot is never
listed). Only the newest `SnapshotSettings.keep` are kept.

Over PostgreSQL, each snapshot made is also published in the database, with a sealed copy of the replica file as of
its position, where a new server of that database starts from it (`mnemosync.server.published_snapshots`).

`Snapshots.start` runs the periodic maker: a snapshot once the log has grown by `every_entries` since the last
one, or `every_hours` after it (whichever setting is on). `mnemosync snapshot` makes one on demand.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from sqlite_utils.utils import sqlite3

from mnemosync.kernel import db, merkle, snapshot
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import InvalidArgument, NotFound, StorageUnavailable
from mnemosync.server import changelog, merkle_log, published_snapshots
from mnemosync.server.clock import SYSTEM_CLOCK, Clock
from mnemosync.server.published_snapshots import ReplicaFileSeal

log = logging.getLogger(__name__)

DIRECTORY = "snapshots"
"""The folder of the data directory that holds them."""
CHUNK_BYTES = 1 << 20
"""Bytes per GetSnapshot message."""


EVERY_ENTRIES = 10_000
"""The default cadence: a snapshot once the log has grown by this many entries. A new cache then replays at most
this many entries after installing the newest snapshot (a few seconds at the catch-up rates measured), and at
100,000 memories each snapshot costs about 9 s of niced CPU, under 1 ms per entry written. A store smaller than
this is replayed whole in about as long, and gets none."""


@dataclass(frozen=True)
class SnapshotSettings:
    """When the server makes snapshots and how many it keeps.

    Attributes:
        every_entries: Make one when the log has grown by this many entries since the last (0: not by count).
        every_hours: Make one this long after the last (0: not by time).
        keep: How many to keep (the newest).
        poll_seconds: How often the periodic maker looks.
    """

    every_entries: int = EVERY_ENTRIES
    every_hours: float = 0.0
    keep: int = 3
    poll_seconds: float = 30.0

    def __post_init__(self):
        if self.every_entries < 0 or self.every_hours < 0:
            raise InvalidArgument("snapshot_every_entries and snapshot_every_hours must be >= 0")
        if self.keep < 1:
            raise InvalidArgument(f"snapshot_keep must be at least 1, got {self.keep}")


def make_image(db_path: Path, directory: Path, key, *, now_ms: int, replica_copy: Path | None = None
               ) -> snapshot.Manifest:
    """Makes a snapshot of the store file `db_path` at its current head into `directory`, signed with `key`
    (an Ed25519 private key); returns its manifest. Runs beside the writer (see the module docstring).
    `replica_copy`: also copies the whole file there as of the same position (SQLite's backup API, in the same read
    transaction), for publishing over PostgreSQL (`mnemosync.server.published_snapshots.seal_replica_file`)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # every memory of every scope is in there
    conn = db.connect(db_path, synchronous="normal").conn
    try:
        conn.execute("BEGIN")  # one read transaction: every read below sees the same position
        size, last_hash = changelog.head(conn)
        nodes = merkle_log.nodes(conn)
        root = merkle.root(nodes, size)
        log_id = conn.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()[0]
        path = tuple(merkle.inclusion_proof(nodes, size - 1, size)) if size else ()
        frontier = tuple(merkle_log.frontier(nodes, size))
        partial = directory / f".{size}.img.part"
        with open(partial, "wb") as out:
            sections = snapshot.write_image(conn, out)
            out.flush()
            os.fsync(out.fileno())
        if replica_copy is not None:
            target = sqlite3.connect(replica_copy)
            try:
                conn.backup(target)
            finally:
                target.close()
        conn.execute("COMMIT")
    finally:
        conn.close()
    manifest = snapshot.sign(snapshot.Manifest(log_id, size, root.hex(), last_hash, path, frontier, now_ms,
                                               tuple(sections)), key)
    os.replace(partial, directory / f"{size}.img")
    _write_json(directory / f"{size}.json", manifest.to_json())
    return manifest


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _identity(path: Path) -> tuple[int, ...]:
    """What changes whenever a file's bytes change (its ctime cannot be set back by a user)."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _unlink_database(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _write_json(path: Path, doc: dict) -> None:
    partial = path.with_name(f".{path.name}.part")
    partial.write_text(json.dumps(doc))
    os.replace(partial, path)


class Snapshots:
    """The snapshots in a data directory, the periodic maker, and reads for GetSnapshot. Thread-safe.

    Args:
        db_path: The store's SQLite file (for PostgreSQL: its local replica).
        directory: Where snapshots live (`data_dir / DIRECTORY`).
        key: The checkpoint key (`mnemosync.server.notary.CheckpointKey`).
        head: The store's current head (for the periodic maker).
        settings: When to make them and how many to keep.
        clock: Manifest times and the periodic maker's.
    """

    def __init__(self, db_path: Path, directory: Path, key, head: Callable[[], int],
                 settings: SnapshotSettings = SnapshotSettings(), clock: Clock = SYSTEM_CLOCK):  # noqa: B008
        self.db_path, self.directory, self.key = Path(db_path), Path(directory), key
        self.settings, self._head, self._clock = settings, head, clock
        self._making = threading.Lock()
        self._building = threading.Lock()
        self._checked: dict[Path, tuple[int, ...]] = {}
        """Ready replica files hashed against their seals, by the identity of the version checked (`_identity`)."""
        self.data_dir: Path | None = None
        """The data directory (set by `snapshots_of`): the periodic maker then works in a process of its own."""
        self.tls_dir: Path | None = None
        self.publish: Callable[[snapshot.Manifest, Path, tuple[Path, ReplicaFileSeal]], object] | None = None
        """Publishes a snapshot made (its manifest, image file and sealed replica file) for other servers (over
        PostgreSQL), or None."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def make(self) -> snapshot.Manifest:
        """Makes a snapshot at the current head now (one at a time), then drops the oldest beyond `keep`."""
        with self._making:
            latest = self.latest()
            if latest is not None and latest.size == self._head():
                return latest
            copy = None
            if self.publish is not None:
                self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
                handle, name = tempfile.mkstemp(prefix=".server-replica-", suffix=".part", dir=self.directory)
                os.close(handle)
                copy = Path(name)
            try:
                made = make_image(self.db_path, self.directory, self.key.key, now_ms=self._clock.now_ms(),
                                  replica_copy=copy)
                self.replica(made)  # the replica of every scope, which most agents read, is ready before anyone asks
                if self.publish is not None and copy is not None:
                    try:
                        self.publish(made, self.directory / f"{made.size}.img",
                                     (copy, published_snapshots.seal_replica_file(copy, made, self.key.key)))
                    except StorageUnavailable as exc:  # it still serves agents; the next snapshot is published
                        log.error("could not publish the %s in PostgreSQL: %s", made.describe(), exc)
            finally:
                if copy is not None:
                    _unlink_database(copy)
            self._prune()
            self.drop_redacted()  # a redaction committed while it was being made: its text is in there
            log.info("made the %s (%d memories)", made.describe(), sum(s.memories for s in made.sections))
            return made

    def sizes(self) -> list[int]:
        """The positions of the snapshots kept, oldest first."""
        if not self.directory.is_dir():
            return []
        return sorted(int(p.stem) for p in self.directory.glob("*.json") if p.stem.isdigit()
                      and (self.directory / f"{p.stem}.img").exists())

    def get(self, size: int = 0) -> snapshot.Manifest:
        """The manifest of the snapshot at `size` (0: the newest).

        Raises:
            NotFound: there is none.
        """
        sizes = self._unredacted(self.sizes())
        if not sizes:
            raise NotFound("this server has no snapshot yet (an admin makes one with `mnemosync snapshot`)")
        size = size or sizes[-1]
        if size not in sizes:
            raise NotFound(f"no snapshot at entry {size}; the server keeps those at {sizes}")
        return snapshot.Manifest.from_json(json.loads((self.directory / f"{size}.json").read_text()))

    def latest(self) -> snapshot.Manifest | None:
        """The newest snapshot's manifest, or None."""
        try:
            return self.get()
        except NotFound:
            return None

    def read(self, manifest: snapshot.Manifest, offset: int, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The bytes of the sections `manifest` serves (see `Manifest.for_reader`) from `offset`, in chunks.

        Raises:
            InvalidArgument: `offset` is past the end.
        """
        served = manifest.served()
        total = sum(s.length for s in served)
        if not 0 <= offset <= total:
            raise InvalidArgument(f"offset must be 0 to {total} (the snapshot's size for this agent), got {offset}")
        with open(self.directory / f"{manifest.size}.img", "rb") as image:
            position = 0
            for section in served:
                begins, ends = position, position + section.length
                position = ends
                start = max(offset, begins)
                while start < ends:
                    image.seek(section.offset + start - begins)
                    data = image.read(min(chunk, ends - start))
                    yield data
                    start += len(data)

    def replica(self, manifest: snapshot.Manifest) -> tuple[Path, snapshot.ReplicaSeal]:
        """The ready replica file of the sections `manifest` serves (see `Manifest.for_reader`) and its signed seal,
        built on first use and kept beside the snapshot (`mnemosync.kernel.snapshot.ReplicaSeal`).

        Nothing is signed or handed out unchecked: the manifest must be signed by the checkpoint key, a ready file
        must hash to its signed seal (else it is built again), and the image's served sections must hash to the
        manifest's signed digests as the file is built from them.

        Raises:
            SnapshotRefused: the manifest or the image does not check out (the message says what).
        """
        problem = manifest.problem(self.key.public)
        if problem:
            raise snapshot.SnapshotRefused(problem)
        tag = hashlib.sha256(",".join(s.scope_hash for s in manifest.served()).encode()).hexdigest()[:16]
        path, seal_path = self.directory / f"{manifest.size}-{tag}.db", self.directory / f"{manifest.size}-{tag}.seal"
        with self._building:
            if path.exists() or seal_path.exists():
                found = self._ready(path, seal_path, manifest)
                if found is not None:
                    return path, found
            partial = self.directory / f".{path.name}.part"
            _unlink_database(partial)
            image = snapshot.Receiver(manifest)

            def checked() -> Iterator[bytes]:
                for data in self.read(manifest, 0):
                    image.feed(data)  # before any of its lines is installed
                    yield data
                image.finish()

            try:
                snapshot.build_replica(partial, snapshot.served_lines(checked()))
            except snapshot.SnapshotRefused as exc:
                _unlink_database(partial)
                raise snapshot.SnapshotRefused(f"its image does not match the digests its manifest signs: {exc}") \
                    from None
            seal = snapshot.ReplicaSeal(_file_sha256(partial), partial.stat().st_size)
            seal = replace(seal, signature=self.key.key.sign(seal.body(manifest)))
            os.replace(partial, path)
            _write_json(seal_path, {"sha256": seal.sha256, "length": seal.length, "signature": seal.signature.hex()})
            self._checked[path] = _identity(path)
        return path, seal

    def _ready(self, path: Path, seal_path: Path, manifest: snapshot.Manifest) -> snapshot.ReplicaSeal | None:
        """The seal of a ready replica file that matches it (hashed once per version of the file: a write changes
        its ctime, which nobody can set back), else None with the file and seal deleted (logged)."""
        try:
            doc = json.loads(seal_path.read_text())
            seal = snapshot.ReplicaSeal(doc["sha256"], doc["length"], bytes.fromhex(doc["signature"]))
            problem = seal.problem(manifest, self.key.public)
            if not problem and self._checked.get(path) != _identity(path):
                if (path.stat().st_size, _file_sha256(path)) != (seal.length, seal.sha256):
                    problem = "its bytes do not hash to the digest its seal signs"
                else:
                    self._checked[path] = _identity(path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problem = f"its seal cannot be read ({exc})"
        if not problem:
            return seal
        log.error("the replica file %s of the %s does not match its seal (%s): deleted, and built again from the "
                  "checked image", path.name, manifest.describe(), problem)
        self._checked.pop(path, None)
        _unlink_database(path)
        seal_path.unlink(missing_ok=True)
        return None

    def serve(self, size: int, granted: Callable[[str], bool]) -> tuple[snapshot.Manifest, Path,
                                                                          snapshot.ReplicaSeal]:
        """For GetSnapshot: the manifest of the snapshot at `size` (0: the newest) as a reader granted `granted`
        sees it, with its checked replica file and seal (`replica`). A snapshot that does not check out is deleted
        (logged with what did not match) and, when the newest was asked for, the next older one is tried.

        Raises:
            NotFound: there is none (left).
        """
        while True:
            manifest = self.get(size)
            reader = manifest.for_reader(granted)
            try:
                return (reader, *self.replica(reader))
            except snapshot.SnapshotRefused as exc:
                log.error("deleted the %s: %s; nothing of it was signed or served", manifest.describe(), exc)
                self._delete(manifest.size)
                if size:
                    raise NotFound(f"no snapshot at entry {size}: it did not check out and was deleted") from None

    def drop_redacted(self) -> None:
        """Deletes every kept snapshot (image, manifest and replica files) older than the newest redaction: called
        once a redaction is committed, so its text leaves the data directory with it."""
        self._unredacted(self.sizes())

    def _unredacted(self, sizes: list[int]) -> list[int]:
        """`sizes` without the snapshots made before a redaction, which are deleted: they still hold the text the
        redaction removed from every projection (`mnemosync.server.redaction`)."""
        if not sizes or not self.db_path.exists():
            return sizes
        conn = db.connect(self.db_path, synchronous="normal").conn
        try:
            last = conn.execute("SELECT coalesce(max(seq), 0) FROM changelog WHERE seq > ? AND op = 'redact'",
                                (sizes[0],)).fetchone()[0]
        finally:
            conn.close()
        for size in (s for s in sizes if s < last):
            log.info("deleting the snapshot at entry %d: the redaction at entry %d removed text it holds", size, last)
            self._delete(size)
        return [s for s in sizes if s >= last]

    def _prune(self) -> None:
        for size in self.sizes()[:-self.settings.keep]:
            self._delete(size)

    def _delete(self, size: int) -> None:
        for suffix in (".json", ".img"):
            (self.directory / f"{size}{suffix}").unlink(missing_ok=True)
        for replica in self.directory.glob(f"{size}-*"):
            replica.unlink(missing_ok=True)

    # -- the periodic maker -----------------------------------------------------------------------------

    def due(self) -> bool:
        """Whether a snapshot is due by the settings."""
        s, latest = self.settings, self.latest()
        grown = self._head() - (latest.size if latest else 0)
        if grown <= 0:
            return False
        if s.every_entries and grown >= s.every_entries:
            return True
        if s.every_hours:
            since = latest.made_at_ms if latest else 0
            return self._clock.now_ms() - since >= s.every_hours * 3_600_000
        return False

    def start(self) -> None:
        """Starts the periodic maker (nothing when neither setting is on)."""
        if not (self.settings.every_entries or self.settings.every_hours):
            return
        self._thread = threading.Thread(target=self._run, name="mnemosync-snapshots", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops the periodic maker and waits for a snapshot in progress."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.poll_seconds):
            try:
                if self.due():
                    self._make_aside()
            except Exception:  # the next round tries again; serving goes on
                log.exception("making a snapshot failed")

    def _make_aside(self) -> None:
        """`make` in a process of its own at a lower priority (`data_dir` known), so that encoding the image does
        not hold this process's interpreter lock while appends wait for it; else here."""
        if self.data_dir is None:
            self.make()
            return
        import multiprocessing

        with self._making:
            process = multiprocessing.get_context("spawn").Process(
                target=_make_nicely, args=(self.data_dir, self.tls_dir, self.settings.keep), daemon=True)
            process.start()
            process.join()
        if process.exitcode:
            log.error("the snapshot process failed with exit code %s", process.exitcode)


def _make_nicely(data_dir: Path, tls_dir: Path | None, keep: int) -> None:
    """The periodic maker's process: `make_in` at a lower CPU priority."""
    os.nice(10)
    make_in(data_dir, tls_dir, keep=keep)


async def snapshot_stream(servicer, request, context, caller) -> None:
    """GetSnapshot (see the proto): the manifest as `caller` may see it and the seal of its replica file, then the
    file from `request.offset`, each read in the servicer's thread pool (`Snapshots.serve` checks them first)."""
    from mnemosync.server import governance
    from mnemosync.v1 import memory_pb2 as pb

    if request.size < 0 or request.offset < 0:
        raise InvalidArgument(f"size and offset must be >= 0, got {request.size} and {request.offset}")
    if servicer.snapshots is None:
        raise NotFound("this server keeps no snapshots")
    manifest, path, seal = await servicer._blocking(servicer.snapshots.serve, request.size,
                                                    lambda scope: governance.scope_granted(caller, scope))
    if request.offset > seal.length:
        raise InvalidArgument(f"offset must be 0 to {seal.length} (the size of this snapshot's file for this "
                              f"agent), got {request.offset}")
    first = pb.SnapshotChunk(offset=request.offset, replica=pb.SnapshotReplica(
        sha256=seal.sha256, length=seal.length, signature=seal.signature))
    first.manifest.CopyFrom(snapshot.manifest_proto(manifest))
    with open(path, "rb") as f:
        f.seek(request.offset)
        offset, data = request.offset, await servicer._blocking(f.read, CHUNK_BYTES)
        first.data = data
        await context.write(first)
        while data:
            offset += len(data)
            data = await servicer._blocking(f.read, CHUNK_BYTES)
            if data:
                await context.write(pb.SnapshotChunk(offset=offset, data=data))


def snapshots_of(store, key, settings, clock: Clock = SYSTEM_CLOCK) -> Snapshots:
    """The snapshots of a running server's store (`ServerSettings`' snapshot_* settings; its data directory)."""
    made = Snapshots(store.path, Path(settings.data_dir) / DIRECTORY, key, store.head_seq,
                     SnapshotSettings(settings.snapshot_every_entries, settings.snapshot_every_hours,
                                      settings.snapshot_keep), clock)
    if not settings.store:  # PostgreSQL: the replica's file is not the data directory's mnemosync.db
        made.data_dir, made.tls_dir = Path(settings.data_dir), settings.tls_dir
    publish = getattr(store.record, "publish_snapshot", None)
    if publish is not None:
        made.publish = lambda manifest, image, replica: publish(manifest, image, certificate=key.certificate,
                                                                keep=made.settings.keep, replica=replica)
    return made


def make_in(data_dir: Path, tls_dir: Path | None = None, *, keep: int = 3, store: str = "",
            clock: Clock = SYSTEM_CLOCK) -> snapshot.Manifest:
    """`mnemosync snapshot`: makes a snapshot of the store in `data_dir` now (the server may be running:
    it serves the new snapshot from its next GetSnapshot), signed with its checkpoint key. Over PostgreSQL
    (`store`, a postgresql:// URL), of the server's local replica, and also published in the database."""
    from mnemosync.server import postgres_record
    from mnemosync.server.notary import load_key

    is_pg = postgres_record.is_postgres_url(store)
    db_path = postgres_record.replica_path(Path(data_dir), store) if is_pg else Path(data_dir) / "mnemosync.db"
    if not db_path.exists():
        raise NotFound(f"no store at {db_path}")

    def head() -> int:
        conn = db.connect(db_path, synchronous="normal").conn
        try:
            return changelog.head(conn)[0]
        finally:
            conn.close()

    key = load_key(Path(data_dir), tls_dir)
    kept = Snapshots(db_path, Path(data_dir) / DIRECTORY, key, head, SnapshotSettings(keep=keep), clock)
    if is_pg:
        def publish(manifest: snapshot.Manifest, image: Path, replica: tuple[Path, ReplicaFileSeal]) -> bool:
            pg = postgres_record.connect(store, autocommit=True)
            try:
                return published_snapshots.publish(pg, manifest, image, certificate=key.certificate, keep=keep,
                                                   now_ms=clock.now_ms(), replica=replica)
            finally:
                pg.conn.close()

        kept.publish = publish
    return kept.make()


def verify_kept(data_dir: Path, key_public: str, scratch: Path) -> list[tuple[int, str]]:
    """`mnemosync verify --snapshot`: for every snapshot kept in `data_dir`, folds the changelog up to its
    position afresh into `scratch` and compares the image it gives with the snapshot (manifest signature with
    `key_public`, the Merkle root of its first N entries, each section's digest, and the image file's bytes).

    Returns:
        (N, what does not match) for each problem; empty when every snapshot equals a replay.
    """
    from mnemosync.server.maintenance import fresh_fold

    db_path = Path(data_dir) / "mnemosync.db"
    kept = Snapshots(db_path, Path(data_dir) / DIRECTORY, None, lambda: 0)
    problems: list[tuple[int, str]] = []
    source = db.connect(db_path, synchronous="normal").conn
    try:
        for size in kept.sizes():
            manifest = kept.get(size)
            problem = manifest.problem(key_public)
            if not problem and size > changelog.head(source)[0]:
                problem = f"the changelog has fewer than {size} entries"
            if not problem and merkle.root(merkle_log.nodes(source), size).hex() != manifest.root:
                problem = f"the changelog's first {size} entries have another Merkle root: the log was forked"
            if not problem:
                problem = _image_problem(kept, manifest)
            if not problem:
                with fresh_fold(scratch, _first(changelog.iterate(source), size)) as fresh:
                    folded = {s.scope_hash: s for s in snapshot.image_sections(fresh)}
                stored = {s.scope_hash: s for s in manifest.sections}
                differ = sorted(s.scope or h for h, s in (stored | folded).items()
                                if folded.get(h, Section0).sha256 != stored.get(h, Section0).sha256)
                if differ:
                    problem = f"the sections of scopes {differ} differ from a fold of the first {size} entries"
            if problem:
                problems.append((size, problem))
                continue
            problems += [(size, found) for found in _replica_problems(kept, manifest, key_public, scratch)]
    finally:
        source.close()
    return problems


def _first(entries: Iterator[Entry], size: int) -> Iterator[Entry]:
    """The entries of `entries` up to and including seq `size`."""
    return itertools.takewhile(lambda entry: entry.seq <= size, entries)


def _replica_problems(kept: Snapshots, manifest: snapshot.Manifest, key_public: str, scratch: Path) -> list[str]:
    """What is wrong with the replica files kept for `manifest` (seal, digest, and content against the image's
    sections it was made of, memory by memory)."""
    from mnemosync.kernel import projections

    found = []
    for path in sorted(kept.directory.glob(f"{manifest.size}-*.db")):
        seal_path = path.with_suffix(".seal")
        copy = scratch.with_name(f"{scratch.name}.replica")  # opening a file rewrites its header: never the original
        shutil.copyfile(path, copy)
        conn = db.connect(copy, synchronous="normal").conn
        try:
            scopes = set(snapshot.scopes(conn))
            held: set[str] = scopes
            served = manifest.for_reader(held.__contains__)
            doc = json.loads(seal_path.read_text()) if seal_path.exists() else None
            seal = snapshot.ReplicaSeal(doc["sha256"], doc["length"], bytes.fromhex(doc["signature"])) if doc \
                else None
            digest = hashlib.sha256(path.read_bytes()).hexdigest()  # the original, as agents receive it
            if seal is None or seal.problem(served, key_public) or seal.sha256 != digest:
                found.append(f"the replica file {path.name} does not match its seal")
                continue
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)
            snapshot.build_replica(scratch, snapshot.served_lines(kept.read(served, 0)))
            fresh = db.connect(scratch, synchronous="normal").conn
            try:
                differences = projections.differences(conn, fresh)
                order = "SELECT num, id FROM memories ORDER BY num"
                if conn.execute(order).fetchall() != fresh.execute(order).fetchall():
                    differences.append("memory row numbers differ")
            finally:
                fresh.close()
            found += [f"the replica file {path.name}: {d}" for d in differences]
        finally:
            conn.close()
            for name in (scratch, copy):
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(f"{name}{suffix}").unlink(missing_ok=True)
    return found


Section0 = snapshot.Section("", "")


def _image_problem(kept: Snapshots, manifest: snapshot.Manifest) -> str:
    """Whether the stored image's bytes hash to the manifest's digests."""
    receiver = snapshot.Receiver(manifest)
    try:
        for data in kept.read(manifest, 0):
            receiver.feed(data)
        receiver.finish()
    except snapshot.SnapshotRefused as exc:
        return str(exc)
    return ""
