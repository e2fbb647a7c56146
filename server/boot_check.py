"""The start-up check in time that does not grow with the history (issue 30).

Before serving, the server used to walk the whole hash chain and recompute the whole Merkle tree: 0.97 s at
10,500 entries, minutes at millions. Now a successful check leaves a mark (`mark_path`: `verified.json` in the data
directory for the SQLite store, `postgres-replica-<digest>.verified.json` beside a PostgreSQL store's replica): the
log id, the position N it verified up to, the hash of entry N, the Merkle root of the first N entries and the
Merkle frontier at N, signed with the checkpoint key. The next start checks only what came after: entry N must
still have the marked hash and the stored tree the marked root; the chain is walked from N + 1 (hashes, links,
signatures' form, blanked entries), the tree nodes of the new entries are recomputed from the frontier, and every
blanking a new redaction made in older entries is checked against it. Then the mark moves to the head.

A PostgreSQL store is checked the same way, on the server's local replica (a SQLite file with the same changelog
and tree): the replica is what this server serves, searches and signs checkpoints of. At open, before the
check, the replica is tied to the database (`PostgresRecord._adopt`: one log id, the replica's head entry
held by PostgreSQL with the same hash) and folds what other servers appended meanwhile; those entries come after
the mark, so this check walks them. PostgreSQL's own copy of the changelog is not walked at start-up: only
`mnemosync verify` walks it (beside the replica's, whole). A replica started from a published snapshot at N
(`mnemosync.server.published_snapshots`) checked entries 1..N as it copied them (chain, tree, the signed
manifest's root and entry-N hash), so it leaves a mark at N (`write_mark`) and its first start walks N + 1 onwards;
a replica installed from the replica file published with a snapshot at N is marked at N too: the file's seal, signed
by a checkpoint key the snapshot trust rule accepts, vouches for entries 1..N as that server's replica held them,
and its head and Merkle root are the signed manifest's; they are not walked at start-up (the background audit and
`mnemosync verify` walk them, as for any entry before a mark); a replica that folded the whole changelog has no
mark and gets the whole walk of the replica at its first start.
An empty replica's old mark is deleted before it is filled again (`forget`): the database keeps its log id, so
the old mark would otherwise vouch for entries never walked.

What this gives up: a row of an entry before N changed behind the server's back while it was stopped (in the
SQLite store or the replica; or in PostgreSQL, for any entry this server already holds), with the tree left
alone, is not found at start-up. It is found by the background audit soon after (`mnemosync.server.chain_audit`,
which then stops the server serving it), by `mnemosync verify` (the full walk of both, unchanged), and by the
agents that hold that entry when their spot checks draw it (`mnemosync.agent.transparency`). A missing, unsigned
or mismatching mark means the full walk of the local file, as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mnemosync.kernel import blanking, db, merkle, private_files, signing
from mnemosync.kernel.entry import ChainReport
from mnemosync.server import changelog, merkle_log

log = logging.getLogger(__name__)

MARK_FILE = "verified.json"
FORMAT = "mnemosync-verified/v1"


@dataclass(frozen=True)
class Mark:
    """How far the start-up check has verified the log (see the module docstring)."""

    log_id: str
    size: int
    last_hash: str
    root: str
    frontier: tuple[str, ...]
    key: str = ""
    signature: str = ""

    def body(self) -> bytes:
        """The signed text."""
        return f"{FORMAT}\n{self.log_id}\n{self.size}\n{self.last_hash}\n{self.root}\n{','.join(self.frontier)}\n" \
            .encode()


def mark_path(data_dir: Path, replica: Path | None = None) -> Path:
    """The mark's file: `MARK_FILE` in `data_dir` for the SQLite store, else beside the PostgreSQL store's
    `replica` (a data directory holds one replica per database it served)."""
    return Path(data_dir) / MARK_FILE if replica is None else Path(replica).with_suffix(".verified.json")


def check(store, path: Path, key, progress: Callable[[int], None] | None = None) -> ChainReport:
    """The start-up check of `store` (a `mnemosync.server.ledger.Ledger`, whose local SQLite file is checked),
    from the mark at `path` when it holds one signed by `key` (a `mnemosync.server.notary.CheckpointKey`), else
    the full walk of that file (`store.log.verify(local_only=True)`); a clean result moves the mark to the head."""
    path = Path(path)
    mark = _read(path, key.public)
    conn = db.connect(store.path, synchronous="normal").conn
    try:
        conn.execute("BEGIN")
        log_id = conn.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()[0]
        report = _since(conn, mark, progress) if mark is not None and mark.log_id == log_id else None
        if report is None:
            report = store.log.verify(progress=progress, local_only=True)
        elif report.ok and mark is not None:
            log.info("start-up check: entries %d to %d verified (the %d before were at the last start)",
                     mark.size + 1, report.head_seq, mark.size)
        if report.ok:
            _write(path, conn, log_id, report.head_seq, key)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return report


def _since(conn, mark: Mark, progress) -> ChainReport | None:
    """The check of the entries after `mark`, or None when the log no longer matches the mark (full walk then)."""
    entry = changelog.get(conn, mark.size) if mark.size else None
    head = changelog.head(conn)[0]
    nodes = merkle_log.nodes(conn)
    try:
        if mark.size > head or (mark.size and (entry is None or entry.hash != mark.last_hash)) \
                or merkle.root(nodes, mark.size).hex() != mark.root:
            log.warning("the start-up check's mark (entry %d) does not match the log: walking the whole chain",
                        mark.size)
            return None
    except LookupError:
        return None
    report = changelog.verify_chain(conn, progress=progress, after=(mark.size, mark.last_hash))
    if report.stopped:
        return report
    problems = list(report.problems)
    frontier = merkle.Frontier(mark.size, [bytes.fromhex(h) for h in mark.frontier])
    for later in changelog.iterate(conn, mark.size):
        for level, index, h in frontier.append(merkle.leaf_hash(later.hash)):
            try:
                kept = nodes(level, index)
            except LookupError:
                kept = None
            if kept != h:
                problems.append((0, f"the transparency log's node at level {level}, index {index} (covering entry "
                                    f"{later.seq}) is not the one the changelog gives: the tree was changed"))
                break
        for blanked in later.blanked if later.op == "redact" else ():
            if blanked.seq <= mark.size:
                older = changelog.get(conn, blanked.seq)
                problem = blanking.problem(older, later, lambda cid: changelog.conflict_of(conn, cid)) \
                    if older is not None else f"entry {blanked.seq} is missing"
                if problem:
                    problems.append((blanked.seq, problem))
    expected = 2 * frontier.size - bin(frontier.size).count("1")
    found = conn.execute("SELECT count(*) FROM merkle_nodes").fetchone()[0]
    if found != expected:
        problems.append((0, f"the transparency log has {found} nodes where {frontier.size} entries give {expected}"))
    if len(problems) == len(report.problems):
        return report
    return replace(report, problems=tuple(problems), problem_count=report.problem_count + len(problems)
                   - len(report.problems))


def write_mark(path: Path, db_path: Path, size: int, key, how: str = "checked as they were copied") -> None:
    """Marks entries 1..`size` of the SQLite file `db_path` as verified, signed with `key`: for a caller that
    checked them by other means (`how`, for the log: a replica started from a published snapshot)."""
    conn = db.connect(db_path, synchronous="normal").conn
    try:
        conn.execute("BEGIN")
        log_id = conn.execute("SELECT value FROM meta WHERE key = 'log_id'").fetchone()[0]
        _write(Path(path), conn, log_id, size, key)
        conn.execute("COMMIT")
    finally:
        conn.close()
    log.info("start-up check: entries 1 to %d marked as verified (%s)", size, how)


def forget(path: Path) -> None:
    """Deletes the mark at `path`, if any (its file is being filled afresh)."""
    Path(path).unlink(missing_ok=True)


def _read(path: Path, key_hex: str) -> Mark | None:
    try:
        mark = Mark(**{**json.loads(path.read_text()), "frontier": tuple(json.loads(path.read_text())["frontier"])})
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if mark.key != key_hex or not signing.valid(key_hex, bytes.fromhex(mark.signature), mark.body()):
        log.warning("the start-up check's mark %s is not signed by the checkpoint key: walking the whole chain", path)
        return None
    return mark


def _write(path: Path, conn, log_id: str, size: int, key) -> None:
    nodes = merkle_log.nodes(conn)
    entry = changelog.get(conn, size) if size else None
    last = entry.hash if entry is not None else changelog.head(conn)[1]
    frontier, start = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            frontier.append(nodes(level, start >> level).hex())
            start += 1 << level
    mark = Mark(log_id, size, last, merkle.root(nodes, size).hex(), tuple(frontier), key.public)
    mark = replace(mark, signature=key.key.sign(mark.body()).hex())
    private_files.write_private(path, json.dumps(mark.__dict__).encode())
