"""`mnemosync migrate-store`: a data directory's SQLite changelog into PostgreSQL, and back.

Both directions copy the changelog row for row (seq, hashes, signatures,
commitments, blanked texts as they are), the transparency log's id and Merkle
nodes, the pinned model and every agent's offset, so agents keep their offsets
and every checkpoint a client holds stays provable. The chain is verified on
the source before anything is written and on the target after, and the two
heads must be the same entry; a target that is not empty is refused. Run it with
the servers stopped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mnemosync.kernel import db, migrations, private_files, signing, vectors
from mnemosync.kernel.entry import ChainReport
from mnemosync.kernel.errors import ChainBroken, FailedPrecondition
from mnemosync.server import changelog, merkle_log, schema
from mnemosync.server.ledger import SERVER_FILES
from mnemosync.server.postgres_record import APPEND_LOCK, connect, copy_blanking, fold_entry

log = logging.getLogger(__name__)

PAGE = 1000


@dataclass(frozen=True)
class Migrated:
    """What a migration copied and found.

    Attributes:
        entries: Changelog entries copied.
        head_seq: The head on both sides.
        head_hash: Its hash on both sides.
        offsets: Agent offsets copied.
    """

    entries: int
    head_seq: int
    head_hash: str
    offsets: int


def sqlite_to_postgres(path: Path, url: str, progress: Callable[[int], None] | None = None) -> Migrated:
    """Copies the SQLite store at `path` into the empty PostgreSQL database at `url`.

    Raises:
        FailedPrecondition: the database already holds a changelog.
        ChainBroken: the source or, after copying, the target does not verify.
    """
    source = _open_sqlite(path)
    pg = connect(url)
    try:
        before = _verified(source, "the SQLite store")
        pg.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
        _require_empty(pg, f"the PostgreSQL database {url.rpartition('@')[2]}")
        count = 0
        for entry, request_hash in _pages(source):
            changelog.insert(pg, entry, request_hash)
            for blanked in entry.blanked:
                copy_blanking(source, pg, blanked.seq)
            count += 1
            if progress and count % 10_000 == 0:
                progress(count)
        pg.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)",
                       source.execute("SELECT level, idx, hash FROM merkle_nodes"))
        offsets = _copy_rest(source, pg)
        pg.conn.commit()
        after = _verified(pg, "PostgreSQL after copying")
        return _same(before, after, count, offsets)
    finally:
        pg.conn.close()
        source.close()


def postgres_to_sqlite(url: str, path: Path, progress: Callable[[int], None] | None = None) -> Migrated:
    """Copies the PostgreSQL store at `url` into a new SQLite store at `path` (folding its projections).

    Raises:
        FailedPrecondition: `path` exists already.
        ChainBroken: the source or, after copying, the target does not verify.
    """
    if path.exists():
        raise FailedPrecondition(f"{path} exists already; migrate into a new data directory")
    pg = connect(url)
    private_files.secure_folder(path.parent, path.name, patterns=SERVER_FILES)
    target = _open_sqlite(path)
    try:
        before = _verified(pg, "PostgreSQL")
        target.execute("BEGIN IMMEDIATE")
        target.execute("DELETE FROM meta WHERE key = 'log_id'")
        count = 0
        for entry, request_hash in _pages(pg):
            fold_entry(target, entry, request_hash, pg)
            count += 1
            if progress and count % 10_000 == 0:
                progress(count)
        offsets = _copy_rest(pg, target)
        target.execute("COMMIT")
        pg.conn.rollback()
        after = _verified(target, "the SQLite store after copying")
        return _same(before, after, count, offsets)
    finally:
        target.close()
        pg.conn.close()


def _open_sqlite(path: Path):
    """A plain connection to the SQLite store at `path`, its schema brought up to date."""
    conn = db.connect(path, synchronous="full").conn
    vectors.attach(conn, None)
    migrations.migrate(conn, schema.SERVER_STEPS)
    return conn


def _pages(conn):
    since = 0
    while page := changelog.read_with_request_hash(conn, since, PAGE):
        yield from page
        since = page[-1][0].seq


def _verified(conn, what: str) -> ChainReport:
    report = changelog.verify_chain(conn, signing.entry_check(None))
    tree = "" if report.stopped else merkle_log.check(conn)
    if not report.ok or tree:
        first = f"seq {report.first_bad_seq}: {report.problem}" if not report.ok else tree
        raise ChainBroken(f"{what} does not verify ({first}); nothing more was copied — run `mnemosync verify` "
                          "on it for every finding")
    return report


def _require_empty(conn, what: str) -> None:
    if changelog.head(conn)[0] or conn.execute("SELECT 1 FROM meta WHERE key = 'log_id'").fetchone():
        raise FailedPrecondition(f"{what} already holds a mnemosync changelog; migrate into an empty one")


def _copy_rest(source, target) -> int:
    """The log id, the pinned model and the agents' offsets; returns the offsets copied."""
    for key, value in source.execute("SELECT key, value FROM meta WHERE key IN ('log_id', 'embedding_model')"):
        target.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (key, value))
    offsets = source.execute("SELECT agent_id, acked_seq, acked_at_ms FROM agent_offsets").fetchall()
    target.executemany("INSERT INTO agent_offsets (agent_id, acked_seq, acked_at_ms) VALUES (?, ?, ?)", offsets)
    return len(offsets)


def _same(before: ChainReport, after: ChainReport, count: int, offsets: int) -> Migrated:
    if (before.head_seq, before.head_hash, before.entries) != (after.head_seq, after.head_hash, after.entries):
        raise ChainBroken(f"the copy ends at seq {after.head_seq} ({after.head_hash[:16]}), the source at "
                          f"{before.head_seq} ({before.head_hash[:16]})")
    return Migrated(count, after.head_seq, after.head_hash, offsets)

