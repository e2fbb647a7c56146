"""The background audit: the whole chain walked again while the server serves (issue 37, item 4).

The start-up check (`mnemosync.server.boot_check`) walks only the entries after its mark, so an old entry edited
behind a stopped server (entry 1 rewritten, entries 2 and 3 swapped, entry 3 deleted, a forged redaction mark, a
corrupt Merkle leaf) was served as if nothing had happened. `ChainAudit` closes that: `after_seconds` once the
server serves, and then every `every_hours`, it walks the whole changelog and recomputes the transparency log's
tree (`walk`: what `mnemosync verify` checks of them) in a process of its own at a lower CPU priority (nice 10),
on its own read connection to the SQLite file (for a PostgreSQL store, the local replica it serves), so appends
and reads go on meanwhile and the walk holds nobody's interpreter lock. A broken chain is handed to `on_broken`,
which stops the server serving it (`mnemosync.server.app`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from mnemosync.kernel import db, signing
from mnemosync.kernel.entry import ChainReport
from mnemosync.server import changelog, merkle_log

log = logging.getLogger(__name__)

NICENESS = 10


def walk(conn, issued: list[signing.IssuedKey] | None = None,
         progress: Callable[[int], None] | None = None) -> ChainReport:
    """The hash chain (blanked entries and signatures included, see `changelog.verify_chain`) and the transparency
    log's tree recomputed (`merkle_log.check`, a tree that differs reported at seq 0), read through `conn`."""
    report = changelog.verify_chain(conn, signing.entry_check(issued), progress)
    tree = "" if report.stopped else merkle_log.check(conn)  # a broken chain: the tree cannot be judged
    if tree:
        report = replace(report, problems=(*report.problems, (0, tree)), problem_count=report.problem_count + 1)
    return report


def _walk_file(db_path: Path) -> ChainReport:
    conn = db.connect(db_path, synchronous="normal").conn
    try:
        conn.execute("BEGIN")  # one position for the chain and the tree
        report = walk(conn)
        conn.execute("COMMIT")
        return report
    finally:
        conn.close()


def _walk_nicely(db_path: Path, answer) -> None:
    """The audit's process: the walk at a lower CPU priority, its report sent back through the pipe `answer`."""
    os.nice(NICENESS)
    try:
        answer.send(_walk_file(db_path))
    except Exception as exc:  # noqa: BLE001 - reported to the server, which logs it and tries again next time
        answer.send(exc)
    finally:
        answer.close()


class ChainAudit:
    """Walks the chain of the SQLite file `db_path` in the background (see the module docstring).

    Args:
        db_path: The store's file (a PostgreSQL store's local replica).
        on_broken: Called (on the audit's thread) with the report of a walk that found problems.
        after_seconds: When the first walk starts once `start` is called.
        every_hours: How long after each walk the next starts (0: only the first).
    """

    def __init__(self, db_path: Path, on_broken: Callable[[ChainReport], None], *, after_seconds: float = 60.0,
                 every_hours: float = 24.0):
        self.db_path = Path(db_path)
        self.on_broken = on_broken
        self.after_seconds = after_seconds
        self.every_hours = every_hours
        self.walks = 0
        """Walks finished."""
        self._stop = threading.Event()
        self._process: multiprocessing.process.BaseProcess | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mnemosync-chain-audit", daemon=True)

    def start(self) -> None:
        """Starts the schedule."""
        self._thread.start()

    def stop(self) -> None:
        """Stops the schedule and ends a walk in progress (it only reads)."""
        self._stop.set()
        with self._lock:
            if self._process is not None and self._process.is_alive():
                self._process.kill()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        wait = self.after_seconds
        while not self._stop.wait(wait):
            try:
                report = self._walk()
            except Exception:  # the next walk tries again; serving goes on
                log.exception("the background audit of the changelog failed")
                report = None
            if report is not None:
                self.walks += 1
                if report.ok:
                    log.info("background audit: the changelog (%d entries) and its transparency log verify",
                             report.entries)
                else:
                    self.on_broken(report)
            if not self.every_hours:
                return
            wait = self.every_hours * 3600

    def _walk(self) -> ChainReport | None:
        """One walk in a process of its own; None when `stop` ended it."""
        context = multiprocessing.get_context("spawn")
        receiving, sending = context.Pipe(duplex=False)
        with self._lock:
            if self._stop.is_set():
                return None
            self._process = context.Process(target=_walk_nicely, args=(self.db_path, sending), daemon=True,
                                            name="mnemosync-chain-audit")
            self._process.start()
        sending.close()
        try:
            answer = receiving.recv()
        except EOFError:
            answer = None  # killed by stop(), or it died
        finally:
            receiving.close()
            self._process.join()
        if isinstance(answer, Exception):
            raise answer
        if answer is None and not self._stop.is_set():
            raise RuntimeError(f"the audit process ended with exit code {self._process.exitcode}")
        return answer
