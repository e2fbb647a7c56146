"""The PostgreSQL record: the changelog kept in PostgreSQL, shared by any number of servers
(`mnemosync.server.record.SharedRecord`, under `mnemosync.server.ledger.Ledger.postgresql`).

PostgreSQL is the record. It holds the changelog (the same rows, the same
gap-free seq and hash chain as the SQLite store's), the transparency log's
Merkle nodes, the log id and pinned model (`meta`) and every agent's offset.
Each server process keeps a replica of it in a local SQLite file beside its
other state: the same changelog rows, Merkle nodes and the fold
(`mnemosync.kernel.projections`, with FTS5 and the vector index), which it reads and
searches exactly as over the SQLite record. So the two records answer every
read and search with the same ledger, and the conformance suite proves it.

Writes. The ledger's writer thread runs each group of requests inside one
local transaction; here that group also runs inside one PostgreSQL
transaction holding `pg_advisory_xact_lock(APPEND_LOCK)`, which serialises
appends across every server (`begin`). Under the lock the replica first folds
whatever other servers appended (`_catch_up`), so admission (versions,
conflicts, duplicates, governance) sees the whole changelog; the requests then
run as on SQLite; the new entries, their Merkle nodes, blanked texts and acks
are copied into PostgreSQL and committed there first (`commit`): an append is
acknowledged only once PostgreSQL has it. The local commit follows; if the
process dies between the two, the replica catches up on its next start.
A PostgreSQL trigger refuses any seq but head + 1, any delete, and any update
but the blanking a redaction makes, as SQLite's triggers do.

Delivery across servers. Every commit notifies the channel `mnemosync_head`
with the new head; each server LISTENs on its own connection and folds the new
entries at once, which wakes its Subscribe streams (`watch_head`). A poll of the
head every `POLL_SECONDS` backs up a lost notification.

Reading from a hot standby (`read_url`, `mnemosync serve --read-store`). A
server may fold other servers' entries from a streaming-replication hot
standby of the database instead of the primary, so that what its Sync,
Subscribe and Search streams need loads the standby. It still LISTENs on the
primary (a standby cannot), and while the primary's head is past its replica it
checks the standby's replayed head every `STANDBY_POLL_SECONDS` and folds what
the standby has. Its appends (and acks) still take the lock on the primary and
fold from the primary first, since admission needs the whole changelog. What a
client of such a server sees: a gap-free prefix of the changelog that never
goes back; every write it made through this server as soon as it is
acknowledged (the server commits it into its replica before answering); other
servers' writes once the standby has replayed them, plus up to
`STANDBY_POLL_SECONDS`. Stats reports the standby's lag (`read_store_status`).
When the standby stops answering, the server keeps serving from its replica,
which then grows only by its own appends, says so in Stats and its log, and
resumes folding when the standby answers again. It does not fall back to the
primary: the operator put the read load on the standby.

A new server's first fold of the whole changelog (a fresh replica) takes no
lock, so it holds up no other server's appends, and reads the standby when
there is one; the append lock is taken only for the remainder (`begin`). After a fold that reaches the
head, the server brings its vector mirror up to date, also outside the lock (`_refresh_mirror`).
When the database holds a published snapshot with its sealed replica file, a new server (no replica yet) installs
that file as its replica after checking it (`seed`) and folds only what came after. Without one (or a refused one),
when the database holds a published snapshot, a new server (empty replica) first copies the entries up to it
without folding them and installs its image, after checking both (`mnemosync.server.published_snapshots`), and
folds only what came after; a refused snapshot is logged and the whole changelog folded as before. Such a
replica is marked as verified up to the snapshot, so the start-up check, which runs after this fold and checks
the replica only, walks only the entries after it (`mnemosync.server.boot_check`).

The replica is derived data: deleting it makes the next start fold the whole
changelog again. It refuses to open against a database whose log id or entries
differ from its own.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sqlite_utils.utils import sqlite3

from mnemosync.kernel import signing
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import FailedPrecondition, StorageUnavailable
from mnemosync.kernel.outcomes import AgentOffset, ReadStoreStatus
from mnemosync.kernel.snapshot import Manifest, SnapshotRefused
from mnemosync.server import boot_check, changelog, merkle_log, published_snapshots
from mnemosync.server.record import LedgerPort
from mnemosync.server.sqlite_record import SqliteRecord

log = logging.getLogger(__name__)

APPEND_LOCK = 0x6D6E656D6F
"""The advisory lock every server's append takes (an arbitrary 64-bit key: "mnemo")."""
CHANNEL = "mnemosync_head"
"""The channel every commit notifies with the new head."""
POLL_SECONDS = 1.0
"""How often a server checks the head when no notification came."""
STANDBY_POLL_SECONDS = 0.02
"""How often a server reading a hot standby checks its replayed head while the primary is ahead of the replica."""
CONNECT_TIMEOUT_SECONDS = 5
"""How long a server waits for the hot standby to accept a connection before calling it unreachable."""
CATCH_UP_PAGE = 1000
FOLD_GROUP_ENTRIES = 10_000
"""The most entries a group that only folds takes in (a new server's whole changelog is folded in such groups),
so that no local transaction or WAL grows with the changelog and the server's own writes wait at most one."""

_SCHEMA_V1 = """
CREATE TABLE changelog (
    seq BIGINT PRIMARY KEY,
    op_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    op TEXT NOT NULL,
    base_version BIGINT NOT NULL,
    version BIGINT NOT NULL,
    payload TEXT NOT NULL,
    embedding BYTEA,
    embedding_model TEXT NOT NULL,
    server_time_ms BIGINT NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    authority INTEGER NOT NULL DEFAULT 0,
    conflict TEXT NOT NULL DEFAULT '',
    payload_commit TEXT NOT NULL DEFAULT '',
    payload_salt TEXT NOT NULL DEFAULT '',
    embedding_sha256 TEXT NOT NULL DEFAULT '',
    redacted_by BIGINT NOT NULL DEFAULT 0,
    signature BYTEA,
    signer_key TEXT NOT NULL DEFAULT '',
    blanked TEXT NOT NULL DEFAULT '',
    UNIQUE (agent_id, op_id)
);
CREATE INDEX changelog_memory ON changelog (memory_id, seq);
CREATE FUNCTION mnemosync_changelog_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.seq <> COALESCE((SELECT max(seq) FROM changelog), 0) + 1 THEN
            RAISE EXCEPTION 'the changelog is gap-free: seq % is not the head + 1', NEW.seq;
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.redacted_by = 0 AND OLD.payload_commit <> '' AND NEW.redacted_by > OLD.seq
        AND EXISTS (SELECT 1 FROM changelog WHERE seq = NEW.redacted_by AND op = 'redact')
        AND NEW.payload_salt = '' AND NEW.request_hash = ''
        AND (NEW.embedding IS NULL OR NEW.embedding = OLD.embedding)
        AND (NEW.seq, NEW.op_id, NEW.agent_id, NEW.memory_id, NEW.op, NEW.base_version, NEW.version,
             NEW.embedding_model, NEW.server_time_ms, NEW.prev_hash, NEW.hash, NEW.authority, NEW.conflict,
             NEW.payload_commit, NEW.embedding_sha256, NEW.signature, NEW.signer_key, NEW.blanked)
            IS NOT DISTINCT FROM
            (OLD.seq, OLD.op_id, OLD.agent_id, OLD.memory_id, OLD.op, OLD.base_version, OLD.version,
             OLD.embedding_model, OLD.server_time_ms, OLD.prev_hash, OLD.hash, OLD.authority, OLD.conflict,
             OLD.payload_commit, OLD.embedding_sha256, OLD.signature, OLD.signer_key, OLD.blanked)
    THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'the changelog is append-only (only a redaction may blank an entry''s text)';
END $$;
CREATE TRIGGER changelog_guard BEFORE INSERT OR UPDATE OR DELETE ON changelog
    FOR EACH ROW EXECUTE FUNCTION mnemosync_changelog_guard();
CREATE TABLE merkle_nodes (
    level INTEGER NOT NULL,
    idx BIGINT NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (level, idx)
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE agent_offsets (
    agent_id TEXT PRIMARY KEY,
    acked_seq BIGINT NOT NULL,
    acked_at_ms BIGINT NOT NULL
);
"""

STEPS: tuple[str, ...] = (_SCHEMA_V1, published_snapshots.SCHEMA_V2, published_snapshots.SCHEMA_V3)
"""The PostgreSQL schema's versions, in order (append-only: never edit a released step, add one)."""


def _psycopg():
    try:
        import psycopg
    except ImportError as exc:
        raise StorageUnavailable(
            "the PostgreSQL store needs psycopg: install it with `pip install 'mnemosync[postgresql]'`"
        ) from exc
    return psycopg


def is_postgres_url(store: str) -> bool:
    """Whether a `--store` value names a PostgreSQL database (rather than the data directory's SQLite file)."""
    return store.startswith(("postgresql://", "postgres://"))


class PgConn:
    """A psycopg connection that takes the `?` placeholders the changelog's and Merkle log's SQL is written with.

    Only for that SQL (`mnemosync.server.changelog`, `mnemosync.server.merkle_log`): it holds no `?` or `%` but
    placeholders.
    """

    def __init__(self, conn):
        self.conn = conn

    def execute(self, sql: str, params=()):
        return self.conn.execute(sql.replace("?", "%s"), params)

    def executemany(self, sql: str, rows) -> None:
        rows = list(rows)
        if rows:
            self.conn.cursor().executemany(sql.replace("?", "%s"), rows)


def connect(url: str, *, autocommit: bool = False) -> PgConn:
    """Opens `url` and brings its schema up to date (`STEPS`, tracked in `mnemosync_schema`).

    Raises:
        StorageUnavailable: psycopg is missing or the database cannot be reached (the message says which).
        FailedPrecondition: the database was written by a newer mnemosync.
    """
    psycopg = _psycopg()
    try:
        raw = psycopg.connect(url, autocommit=True)
    except psycopg.Error as exc:
        raise StorageUnavailable(f"cannot reach PostgreSQL at {_safe(url)}: {exc}".strip()) from exc
    if _schema_version(raw, url) != len(STEPS):  # a current schema needs no lock: no waiting behind appends
        with raw.transaction():
            raw.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
            raw.execute("CREATE TABLE IF NOT EXISTS mnemosync_schema (version INTEGER NOT NULL)")
            current = _schema_version(raw, url)
            for step in STEPS[current:]:
                raw.execute(step)
            if current == 0:
                raw.execute("INSERT INTO mnemosync_schema (version) VALUES (%s)", (len(STEPS),))
            else:
                raw.execute("UPDATE mnemosync_schema SET version = %s", (len(STEPS),))
    raw.autocommit = autocommit
    return PgConn(raw)


def _schema_version(raw, url: str) -> int:
    """The database's mnemosync schema version (0: none yet).

    Raises:
        FailedPrecondition: it is newer than this mnemosync's.
    """
    if raw.execute("SELECT to_regclass('mnemosync_schema')").fetchone()[0] is None:
        return 0
    row = raw.execute("SELECT version FROM mnemosync_schema").fetchone()
    current = row[0] if row else 0
    if current > len(STEPS):
        raise FailedPrecondition(
            f"the PostgreSQL database at {_safe(url)} has mnemosync schema version {current}, newer than this "
            f"mnemosync's {len(STEPS)}; upgrade mnemosync")
    return current


def _safe(url: str) -> str:
    """The URL without its password, for messages."""
    head, at, tail = url.rpartition("@")
    if not at:
        return url
    scheme, _, credentials = head.partition("://")
    return f"{scheme}://{credentials.partition(':')[0]}@{tail}"


def pins_model(url: str) -> bool:
    """Whether the database at `url` already pins an embedding model (False when it cannot be read: opening the
    store then says why)."""
    try:
        psycopg = _psycopg()
    except StorageUnavailable:
        return False
    try:
        with psycopg.connect(url, autocommit=True) as raw:
            if raw.execute("SELECT to_regclass('meta')").fetchone()[0] is None:
                return False
            return raw.execute("SELECT 1 FROM meta WHERE key = 'embedding_model'").fetchone() is not None
    except psycopg.Error:
        return False


def replica_path(data_dir: Path, url: str) -> Path:
    """The local replica's file for database `url` in a server's data directory."""
    digest = hashlib.sha256(url.encode()).hexdigest()[:12]
    return Path(data_dir) / f"postgres-replica-{digest}.db"


class PostgresRecord:
    """The changelog in a PostgreSQL database shared with other servers, each folding it into its local replica.

    The rows of this server's own appends go into the replica first, exactly as over the SQLite record
    (`SqliteRecord`), and reach PostgreSQL at commit; other servers' rows are folded in at `begin`.

    Args:
        url: The database (postgresql://user:password@host:port/name).
        read_url: A hot standby of `url` to fold other servers' entries from instead of `url` (see the module
            docstring); empty: fold from `url`.
        snapshot_trust: Gives the keys a published snapshot may be signed with, for starting an empty replica
            from one (`mnemosync.server.published_snapshots`); None: an empty replica folds the whole changelog.
        checkpoint_key: Gives this server's checkpoint key (`mnemosync.server.notary.CheckpointKey`), which signs
            the start-up check's mark at N a replica started from a snapshot at N leaves
            (`mnemosync.server.boot_check`); None: no mark, the first start walks the whole replica.

    Raises:
        StorageUnavailable: PostgreSQL cannot be reached, or psycopg is not installed.
    """

    def __init__(self, url: str, *, read_url: str = "",
                 snapshot_trust: Callable[[], published_snapshots.SnapshotTrust] | None = None,
                 checkpoint_key: Callable[[], Any] | None = None):
        self.url = url
        self._snapshot_trust = snapshot_trust
        self._checkpoint_key = checkpoint_key
        self.standby = Standby(read_url) if read_url else None
        self._local = SqliteRecord()
        self._from_standby = self._writes = self._adopting = self._more = False
        self._pg = connect(url)
        self._pg_head = 0
        self._pg_read_lock = threading.Lock()
        self._pg_read = connect(url, autocommit=True)
        self._stop = threading.Event()
        self._adopted = False
        self._ledger: LedgerPort | None = None
        self._listener: threading.Thread | None = None

    # -- the part every record has (`mnemosync.server.record.ChangelogRecord`) --------------

    def append(self, conn: Any, entries: Sequence[tuple[Entry, str]]) -> None:
        self._local.append(conn, entries)

    def read(self, conn: Any, since_seq: int, limit: int) -> list[Entry]:
        return self._local.read(conn, since_seq, limit)

    def head(self, conn: Any) -> tuple[int, str]:
        return self._local.head(conn)

    def acknowledge(self, conn: Any, agent_id: str, seq: int, at_ms: int) -> int:
        acked = self._local.acknowledge(conn, agent_id, seq, at_ms)
        self._pg.execute(
            "INSERT INTO agent_offsets (agent_id, acked_seq, acked_at_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET acked_seq = excluded.acked_seq, "
            "acked_at_ms = excluded.acked_at_ms WHERE excluded.acked_seq > agent_offsets.acked_seq",
            (agent_id, acked, at_ms),
        )
        return acked

    def offsets(self, conn: Any) -> list[AgentOffset]:
        """Every agent's offset as PostgreSQL has it (acks may reach any server)."""
        with self._pg_read_lock:
            rows = self._pg_read.execute(
                "SELECT agent_id, acked_seq, acked_at_ms FROM agent_offsets ORDER BY agent_id").fetchall()
        return [AgentOffset(agent_id, acked, at) for agent_id, acked, at in rows]

    # -- shared by servers (`mnemosync.server.record.SharedRecord`) ---------------------------

    def seed(self, replica: Path) -> None:
        """Before the replica is opened: when there is none yet, installs the replica file published in PostgreSQL
        with the newest snapshot, after checking its seal, digest and position
        (`mnemosync.server.published_snapshots.install_replica`), and marks it as verified up to that snapshot for
        the start-up check (`mnemosync.server.boot_check`); `start` then folds only what came after. A refused or
        missing file leaves no replica: `start` tries the snapshot's entries and image, then the whole fold."""
        replica = Path(replica)
        if self._snapshot_trust is None or replica.exists():
            return
        psycopg = _psycopg()
        replica.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        mark = boot_check.mark_path(replica.parent, replica)
        boot_check.forget(mark)
        try:
            pg = connect(self.url)
            try:
                pg.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
                with pg.conn.transaction():
                    started = published_snapshots.install_replica(pg, replica, self._snapshot_trust())
            finally:
                pg.conn.close()
        except SnapshotRefused as exc:
            log.warning("refused the replica file published in PostgreSQL: %s. Nothing of it was kept; starting "
                        "from the published snapshot's entries and image instead", exc)
            return
        except (psycopg.Error, StorageUnavailable, OSError) as exc:
            log.warning("could not start the replica from the published replica file (%s); starting from the "
                        "published snapshot's entries and image instead", exc)
            return
        if started is not None and self._checkpoint_key is not None:
            boot_check.write_mark(mark, replica, started.size, self._checkpoint_key(),
                                  "vouched for by the seal of the replica file")

    def start(self, ledger: LedgerPort) -> None:
        """Folds the replica up to the database (without the append lock first, then under it to tie the replica
        to the database), then listens for the other servers' commits. An empty replica first drops any old
        start-up check mark beside it and tries the newest published snapshot; one started from a snapshot at N
        is marked as verified up to N (see `mnemosync.server.boot_check`)."""
        self._ledger = ledger
        if ledger.head_seq() == 0:
            boot_check.forget(boot_check.mark_path(ledger.path.parent, ledger.path))
        if self._snapshot_trust is not None and ledger.head_seq() == 0:
            try:
                started = ledger.submit(self._bootstrap)
                if started is not None and self._checkpoint_key is not None:
                    boot_check.write_mark(boot_check.mark_path(ledger.path.parent, ledger.path), ledger.path,
                                          started.size, self._checkpoint_key())
            except SnapshotRefused as exc:
                log.warning("refused the snapshot published in PostgreSQL: %s. Nothing of it was kept; folding the "
                            "whole changelog instead", exc)
            except (StorageUnavailable, FailedPrecondition) as exc:
                log.warning("could not start the replica from a published snapshot (%s); folding the whole "
                            "changelog instead", exc)
        try:
            while ledger.submit(self._fold_only):
                pass
        except (StorageUnavailable, FailedPrecondition) as exc:
            log.warning("could not fold the replica before taking the append lock (%s); folding under it", exc)
        ledger.submit(self._open)
        if self.standby is not None:
            self.standby.log_id = ledger.log_id()
        self._listener = threading.Thread(target=self._listen, name="mnemosync-listen", daemon=True)
        self._listener.start()

    def stop(self) -> None:
        """Stops listening (the ledger's writer then finishes what is queued)."""
        self._stop.set()
        if self._listener is not None:
            self._listener.join()

    def close(self) -> None:
        """Closes both PostgreSQL connections and the standby's."""
        self._stop.set()
        self._pg.conn.close()
        self._pg_read.conn.close()
        if self.standby is not None:
            self.standby.close()

    # -- the write group, inside one PostgreSQL transaction -----------------

    def begin(self, conn: Any, jobs: Sequence[Any]) -> None:
        """Opens the group's transactions. A group of writes takes the append lock and folds from the primary
        first. A group that only folds (`_fold_only`) takes no lock and folds from the standby if there is one:
        so does a new server's first fold of the whole changelog, which would otherwise hold every server's
        appends up for as long as it takes."""
        self._local.begin(conn, jobs)
        self._writes = any(job.work not in (self._fold_only, self._bootstrap) for job in jobs)
        self._adopting = self._from_standby = self._more = False
        try:
            if not self._writes and any(job.work == self._bootstrap for job in jobs):
                if self._pg.conn.closed:
                    self._pg = connect(self.url)
                if not self._adopted and _meta(self._pg, "log_id") is not None:
                    self._adopt(conn)
                    self._adopting = True
                    if self.standby is not None:  # the standby must hold this log, as the adopting fold says
                        self.standby.log_id = _meta(conn, "log_id")
                return  # the bootstrap copies the entries up to its snapshot itself: no fold first
            if self.standby is not None and self._adopted and not self._writes:
                self._from_standby = True
                self._catch_up(conn, self.standby.fold_source(), FOLD_GROUP_ENTRIES)
                return
            if self._pg.conn.closed:
                self._pg = connect(self.url)
            if self._writes:
                self._pg.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
            if not self._adopted:
                if not self._writes and _meta(self._pg, "log_id") is None:
                    return  # a new database: the first group of writes names its log, under the lock
                self._adopt(conn)
                self._adopting = True
                if not self._writes and self.standby is not None:
                    self.standby.log_id = _meta(conn, "log_id")
                    self._from_standby = True
                    self._catch_up(conn, self.standby.fold_source(), FOLD_GROUP_ENTRIES)
                    return
            self._catch_up(conn, self._pg, None if self._writes else FOLD_GROUP_ENTRIES)
        except _psycopg().Error as exc:
            raise _unavailable(exc) from exc

    def commit(self, conn: Any) -> None:
        psycopg = _psycopg()
        if not self._writes:  # only folded: nothing of this group is PostgreSQL's news
            self._end_primary_reads()
            conn.execute("COMMIT")
            self._adopted = self._adopted or self._adopting
            if not self._more:
                self._refresh_mirror()
            return
        try:
            self._push(conn)
            self._pg.conn.commit()
        except psycopg.Error as exc:
            raise _unavailable(exc) from exc
        self._adopted = True
        conn.execute("COMMIT")

    def _refresh_mirror(self) -> None:
        """Brings the vector mirror up to the replica after a fold that reached the source's head, outside the
        append lock. Otherwise the next append's near-duplicate check would do it under the lock: for a new
        server's first fold, a read of the whole index (seconds at 100k memories) that stalls every server's
        appends. A failure is only logged: the fold is committed, and the next search or append retries."""
        if self._ledger is None:
            return
        try:
            with self._ledger.mirror.lock:
                self._ledger.mirror.refresh()
        except sqlite3.Error as exc:
            log.warning("could not refresh the vector mirror after a fold (%s); the next search will", exc)

    def abort(self, conn: Any) -> None:
        if self._from_standby and self.standby is not None:
            self.standby.drop_fold_source()
        self._end_primary_reads()
        self._local.abort(conn)

    def _end_primary_reads(self) -> None:
        """Ends the primary connection's transaction, if any, without writing (closed if that fails: the next
        group reconnects)."""
        try:
            self._pg.conn.rollback()
        except _psycopg().Error:
            self._pg.conn.close()

    def _catch_up(self, conn, source: PgConn, limit: int | None = None) -> None:
        """Folds into the replica every entry `source` (the primary, or its hot standby) has past it (other
        servers' appends), or the first `limit` of them; `_more` says whether it stopped short."""
        local, folded = changelog.head(conn)[0], 0
        self._more = False
        while True:
            page = changelog.read_with_request_hash(source, local, CATCH_UP_PAGE)
            for entry, request_hash in page:
                fold_entry(conn, entry, request_hash, source)
            folded += len(page)
            if len(page) < CATCH_UP_PAGE:
                break
            local = page[-1][0].seq
            if limit is not None and folded >= limit:
                self._more = True
                break
        pinned = _meta(source, "embedding_model")
        if pinned is not None and _meta(conn, "embedding_model") != pinned:  # the database's pin wins
            conn.execute("INSERT INTO meta (key, value) VALUES ('embedding_model', ?) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (pinned,))
        self._pg_head = changelog.head(conn)[0]

    def _push(self, conn) -> None:
        """Copies the group's new entries (with their Merkle nodes and blankings) and the pinned model into
        PostgreSQL, and notifies the other servers."""
        new = changelog.read_with_request_hash(conn, self._pg_head, 1 << 30)
        if new:  # in batches: one round trip per entry and tree node made big groups slow
            changelog.insert_many(self._pg, new)
            self._pg.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)",
                                 merkle_log.nodes_between(conn, self._pg_head, new[-1][0].seq))
        for entry, _ in new:
            for blanked in entry.blanked:
                copy_blanking(conn, self._pg, blanked.seq)
            if entry.op == "redact":  # published snapshots older than it still hold the text it removes
                published_snapshots.delete_before(self._pg, entry.seq)
        if (pinned := _meta(conn, "embedding_model")) is not None:
            self._pg.execute("INSERT INTO meta (key, value) VALUES ('embedding_model', ?) "
                             "ON CONFLICT (key) DO NOTHING", (pinned,))
        if new:
            self._pg.execute("SELECT pg_notify(?, ?)", (CHANNEL, str(new[-1][0].seq)))

    def _adopt(self, conn) -> None:
        """Ties the replica to the database at open: one log id for both, and the replica a prefix of it."""
        local_id = _meta(conn, "log_id")
        shared = _meta(self._pg, "log_id")
        local_head, local_hash = changelog.head(conn)
        if shared is None:
            if changelog.head(self._pg)[0]:
                raise FailedPrecondition("the PostgreSQL database has entries but no log id; it was not written "
                                         "by mnemosync migrate-store or mnemosync serve")
            self._pg.execute("INSERT INTO meta (key, value) VALUES ('log_id', ?)", (local_id,))
        elif shared != local_id:
            if local_head:
                raise FailedPrecondition(
                    f"the local replica {self._replica()} belongs to another database (log {local_id}, not {shared}); "
                    "delete it and start again: it is folded afresh from PostgreSQL")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'log_id'", (shared,))
        if local_head:
            remote = changelog.get(self._pg, local_head)
            if remote is None or remote.hash != local_hash:
                raise FailedPrecondition(
                    f"the local replica {self._replica()} has entry {local_head}, which the PostgreSQL database "
                    f"{'lacks' if remote is None else 'holds with another hash'}; delete the replica and start again")

    def _now_ms(self) -> int:
        return self._ledger.now_ms() if self._ledger is not None else 0

    def _replica(self) -> Path | str:
        return self._ledger.path if self._ledger is not None else "of this server"

    def _bootstrap(self, conn) -> Manifest | None:
        """A write job that fills the empty replica from the newest snapshot published in PostgreSQL
        (`mnemosync.server.published_snapshots.bootstrap`); its group folds nothing first (`begin`)."""
        if self._snapshot_trust is None or not self._adopting:
            return None
        try:
            return published_snapshots.bootstrap(conn, self._pg, self._snapshot_trust(), copy_blanking)
        except _psycopg().Error as exc:
            raise _unavailable(exc) from exc

    def publish_snapshot(self, manifest: Manifest, image: Path, *, certificate: bytes, keep: int,
                         replica: tuple[Path, published_snapshots.ReplicaFileSeal] | None = None) -> bool:
        """Stores a snapshot this server made in PostgreSQL, with its sealed replica file, for new servers to start
        from (`mnemosync.server.published_snapshots.publish`), on a connection of its own (any thread)."""
        pg = connect(self.url, autocommit=True)
        try:
            return published_snapshots.publish(pg, manifest, image, certificate=certificate, keep=keep,
                                               now_ms=self._now_ms(), replica=replica)
        except _psycopg().Error as exc:
            raise _unavailable(exc) from exc
        finally:
            pg.conn.close()

    def _fold_only(self, conn) -> bool:
        """A write job that does nothing: its group folds other servers' entries (`_begin`, at most
        FOLD_GROUP_ENTRIES) and wakes streams. Returns whether the source had more."""
        return self._more

    @staticmethod
    def _open(conn) -> None:
        """The first write job: its group, under the append lock, ties the replica to the database (`_adopt`)
        and folds what the replica still lacks after the first fold without the lock."""

    # -- delivery across servers --------------------------------------------

    def _listen(self) -> None:
        """LISTENs for other servers' commits (and polls the head every POLL_SECONDS) and folds them; reading a
        hot standby, it folds once the standby has replayed them (checked every STANDBY_POLL_SECONDS meanwhile)."""
        psycopg = _psycopg()
        listener = None
        primary_head = 0
        while not self._stop.is_set():
            try:
                if listener is None:
                    listener = psycopg.connect(self.url, autocommit=True)
                    listener.execute(f"LISTEN {CHANNEL}")
                head = self._ledger.head_seq() if self._ledger is not None else 0
                waiting = self.standby is not None and not self.standby.error and primary_head > head
                heads = [int(n.payload) for n in listener.notifies(
                    timeout=STANDBY_POLL_SECONDS if waiting else POLL_SECONDS, stop_after=1)]
                if not heads and not waiting:
                    heads = [listener.execute("SELECT COALESCE(max(seq), 0) FROM changelog").fetchone()[0]]
                primary_head = max([primary_head, *heads])
                if primary_head <= head or self._stop.is_set() or self._ledger is None:
                    continue
                if self.standby is not None and self.standby.replayed_head() <= head:
                    continue
                self._ledger.submit(self._fold_only)
            except psycopg.Error as exc:
                log.warning("lost the PostgreSQL notification connection (%s); reconnecting", exc)
                if listener is not None:
                    listener.close()
                listener = None
                self._stop.wait(POLL_SECONDS)
            except Exception:  # noqa: BLE001 - a closing store refuses the fold; the loop then ends
                if not self._stop.is_set():
                    log.exception("folding other servers' entries failed")
                    self._stop.wait(POLL_SECONDS)
        if listener is not None:
            listener.close()

    # -- checks that must see every server's writes --------------------------

    def verify(self, issued: list[signing.IssuedKey] | None) -> tuple[list[tuple[int, str]], int]:
        """The same checks as over the replica, over PostgreSQL's own changelog and Merkle nodes; its problems are
        named so."""
        with self._pg_read_lock:
            remote = changelog.verify_chain(self._pg_read, signing.entry_check(issued))
            tree = "" if remote.stopped else merkle_log.check(self._pg_read)
        found = [(seq, f"in PostgreSQL: {problem}") for seq, problem in remote.problems]
        if tree:
            found.append((0, f"in PostgreSQL: {tree}"))
        return found, remote.problem_count + bool(tree)

    def read_store_status(self, show_source: bool = True) -> ReadStoreStatus | None:
        """How far the hot standby this server reads is behind the primary, measured now (None without one)."""
        if self.standby is None:
            return None
        replayed, error = self.standby.replayed_head(), self.standby.error
        try:
            with self._pg_read_lock:
                primary = changelog.head(self._pg_read)[0]
                waiting = changelog.get(self._pg_read, replayed + 1) if primary > replayed else None
        except _psycopg().Error as exc:
            primary, waiting = 0, None
            error = error or f"the primary did not answer: {exc}".strip()
        return ReadStoreStatus(
            source=_safe(self.standby.url) if show_source else "", reachable=not self.standby.error, error=error,
            replayed_seq=replayed, primary_seq=primary, lag_entries=max(0, primary - replayed),
            lag_ms=max(0, self._now_ms() - waiting.server_time_ms) if waiting else 0)


class Standby:
    """A PostgreSQL hot standby a server folds its replica from: its replayed head, and whether it answers.

    Two connections, opened on demand and dropped when they fail: one for the writer's folds
    (`fold_source`), one for the listener's and Stats' head checks (`replayed_head`, under a lock).
    """

    def __init__(self, url: str):
        self.url = url
        self.log_id: str | None = None
        """The log the standby must hold (the server's; set once the replica is tied to the primary)."""
        self.error = ""
        """Why the standby did not answer the last check ("" when it did)."""
        self.replayed = 0
        """The changelog head the standby had replayed at the last check that it answered."""
        self._lock = threading.Lock()
        self._probe: PgConn | None = None
        self._fold: PgConn | None = None

    def _connect(self) -> PgConn:
        """A connection to the standby, once it is seen to hold this server's log.

        Raises:
            FailedPrecondition: the standby holds another database's changelog.
        """
        conn = PgConn(_psycopg().connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS))
        theirs = _meta(conn, "log_id")
        if theirs != self.log_id:
            conn.conn.close()
            raise FailedPrecondition(f"it holds log {theirs}, not this server's {self.log_id}: give --read-store "
                                     "a hot standby of --store")
        return conn

    def replayed_head(self) -> int:
        """The standby's changelog head now, or the last one seen when it does not answer (then `error` says why;
        the change of state is logged once)."""
        psycopg = _psycopg()
        with self._lock:
            try:
                if self._probe is None:
                    self._probe = self._connect()
                self.replayed = changelog.head(self._probe)[0]
            except (psycopg.Error, FailedPrecondition) as exc:
                if self._probe is not None:
                    self._probe.conn.close()
                    self._probe = None
                error = (f"the read store is no standby of this server's database: {exc}"
                         if isinstance(exc, FailedPrecondition) else f"the hot standby does not answer: {exc}".strip())
                if not self.error:
                    log.warning("%s (%s); serving from the local replica, which now grows only by this server's own "
                                "appends", error, _safe(self.url))
                self.error = error
                return self.replayed
            if self.error:
                log.warning("the hot standby %s answers again; folding from it", _safe(self.url))
                self.error = ""
            return self.replayed

    def fold_source(self) -> PgConn:
        """The writer's connection to the standby (see `_connect`)."""
        if self._fold is None or self._fold.conn.closed:
            self._fold = self._connect()
        return self._fold

    def drop_fold_source(self) -> None:
        """Closes the writer's connection after a failed fold (the next fold reconnects)."""
        if self._fold is not None:
            self._fold.conn.close()
            self._fold = None

    def close(self) -> None:
        self.drop_fold_source()
        with self._lock:
            if self._probe is not None:
                self._probe.conn.close()
                self._probe = None


def fold_entry(conn, entry, request_hash: str, source: PgConn) -> None:
    """Writes one entry copied from `source` into a SQLite store's changelog, Merkle log and projections, with the
    blanking it records (copied as `source` has it); the caller holds the transaction."""
    from mnemosync.kernel import projections

    changelog.insert(conn, entry, request_hash)
    merkle_log.append_leaf(conn, entry.seq, entry.hash)
    for blanked in entry.blanked:
        copy_blanking(source, conn, blanked.seq)
    projections.apply(conn, entry)


def copy_blanking(source, target, seq: int) -> None:
    """Blanks entry `seq` in `target` as it is blanked in `source` (the redact entry is in both already)."""
    payload, embedding, redacted_by = source.execute(
        "SELECT payload, embedding, redacted_by FROM changelog WHERE seq = ?", (seq,)).fetchone()
    target.execute(
        "UPDATE changelog SET payload = ?, embedding = ?, payload_salt = '', request_hash = '', redacted_by = ? "
        "WHERE seq = ?", (payload, embedding, redacted_by, seq))


def _meta(conn, key: str) -> str | None:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def _unavailable(exc: Exception) -> StorageUnavailable:
    return StorageUnavailable(f"PostgreSQL failed: {exc}; the write was not made, retry shortly".strip())
