"""The single writer: every write of a server runs on one thread, in groups committed together.

Requests queue up as jobs; the writer takes what is waiting (up to `GROUP_MAX`)
and runs the group in one transaction of the changelog record
(`mnemosync.server.record`): the record opens it, each job runs in a savepoint
of its own (a refused job leaves nothing behind, the others still go), the
record commits it, and only then is every job answered. So a write is
acknowledged only once it is durable, and one commit (one fsync, one PostgreSQL
round trip) serves every write that arrived meanwhile.

What a group needs before and after its jobs (the near-duplicate pre-filter of
its adds, emptying the WAL after a redaction, waking Subscribe streams) is the
ledger's, given as `Hooks`; so is whether its jobs share rows written once for
the whole group before the commit (`Hooks.shares`, `Hooks.flush`).
"""

from __future__ import annotations

import asyncio
import ctypes
import glob
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from mnemosync.kernel.errors import StoreClosed
from mnemosync.server.record import ChangelogRecord

log = logging.getLogger(__name__)

GROUP_MAX = 256
"""The most jobs one group commits together."""
LINGER_S = 0.002
"""How long the writer waits for more jobs after the first of a group when the group before held several (writers
are busy) and fewer wait now: the jobs of a group share its transaction, its commit and its near-duplicate
pre-filter. With 8 agents sending single adds at 5,000 memories, in one pair of runs, it raised the rate from ~205
to ~260/s (groups of 4 became the most common size after 1; `ops/bench/README.md` has the alternating runs); a lone
writer never waits."""


@dataclass
class Job:
    """One piece of work for the writer: `work(conn)` runs inside the group's transaction; `future` gets what it
    returns or raises. `adds` is for an Append: what the group's near-duplicate pre-filter needs; the writer sets
    its `after` to the `adds` of every earlier job of the group that wrote (None for a job without: what a
    pre-filter run before the group could not see)."""

    work: Callable[[Any], Any]
    future: Future[Any] = field(default_factory=Future)
    adds: Any = None
    waiter: asyncio.Future[Any] | None = None
    """Set for a job submitted from an event loop (`GroupCommit.submit_async`): answered on that loop too."""


@dataclass(frozen=True)
class Hooks:
    """The ledger's part of a group: `before(conn, jobs, shared)` once the transaction is open, `after(conn)` once it
    is committed, `failed()` once it is given up.

    A group may share writes: when `shares(jobs)` says so, its jobs may leave rows for `flush(conn)` to write once,
    after the last of them and before the commit (one statement per table for the whole group, not per job). A job
    refused in such a group must take back what it left (its savepoint cannot). Should that flush fail, the group is
    undone and run again without sharing, so that the job whose row failed gets the error alone."""

    before: Callable[[Any, list[Job], bool], None]
    after: Callable[[Any], None]
    failed: Callable[[], None]
    shares: Callable[[list[Job]], bool] = lambda jobs: False
    flush: Callable[[Any], None] = lambda conn: None


def one_blas_thread() -> None:
    """Asks NumPy's OpenBLAS to run the calling thread's products on that thread alone (best effort: nothing
    happens where the library has no such call). The writer's near-duplicate pre-filter is one matrix product per
    commit group; split over two cores that other work keeps busy, its second thread's waits made it 3-4 times
    slower than one thread (measured at 100k memories with 8 agents writing)."""
    import numpy

    for path in glob.glob(os.path.join(os.path.dirname(numpy.__file__), os.pardir, "numpy.libs", "*openblas*.so*")):
        try:
            set_threads = getattr(ctypes.CDLL(path), "openblas_set_num_threads_local", None)
        except OSError:
            continue
        if set_threads is not None:
            set_threads(1)
            return


def _closed() -> StoreClosed:
    return StoreClosed("the server is shutting down; retry shortly")


class GroupCommit:
    """The writer thread over one SQLite connection (the server's file, or its replica of PostgreSQL) and a record.

    Args:
        conn: The writer's connection; only the writer thread uses it once started.
        record: Where the changelog is kept: it opens, commits and undoes each group's transaction.
        hooks: The ledger's work before and after each group.
        linger_s: How long to wait for more jobs when writers are busy (`LINGER_S`).
    """

    def __init__(self, conn: Any, record: ChangelogRecord, hooks: Hooks, *, linger_s: float = LINGER_S):
        self.conn = conn
        self._record = record
        self._hooks = hooks
        self._linger_s = linger_s
        self._last_size = 1
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="mnemosync-writer", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        """True once `close` has begun: new work is refused."""
        return self._closed

    @property
    def waiting(self) -> int:
        """Jobs queued behind the group that runs now."""
        return self._queue.qsize()

    def submit(self, work: Callable[[Any], Any], adds: Any = None) -> Any:
        """Runs `work(conn)` in the next group and returns its result once the group is committed.

        Raises:
            StoreClosed: the writer is closing.
            Exception: whatever `work` raised (its savepoint was rolled back), or the group's commit failure.
        """
        return self.submit_nowait(work, adds).result()

    def submit_nowait(self, work: Callable[[Any], Any], adds: Any = None) -> Future[Any]:
        """`submit` without waiting: the future of `work`'s result (or exception), set once its group is committed.

        Raises:
            StoreClosed: the writer is closing.
        """
        if self._closed:
            raise _closed()
        job = Job(work, adds=adds)
        self._queue.put(job)
        return job.future

    def submit_async(self, work: Callable[[Any], Any], adds: Any = None) -> asyncio.Future[Any]:
        """`submit_nowait` for a caller on a running event loop (call it there): an asyncio future of `work`'s
        result, set on that loop once the group is committed. The answers of one group to one loop are handed over
        with one wake-up of the loop, not one per job: each wake-up is a write to the loop's socket, and the writer
        waits for the interpreter lock again after each.

        Raises:
            StoreClosed: the writer is closing.
        """
        waiter = asyncio.get_running_loop().create_future()
        if self._closed:
            raise _closed()
        self._queue.put(Job(work, adds=adds, waiter=waiter))
        return waiter

    def close(self) -> None:
        """Runs what is queued, refuses what comes after, and stops the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()

    def _loop(self) -> None:
        one_blas_thread()
        stopping = False
        while not stopping:
            job = self._queue.get()
            if job is None:
                break
            jobs = [job]
            if self._last_size > 1 and self._queue.qsize() < self._last_size - 1:
                time.sleep(self._linger_s)  # the rest of a busy moment's jobs are on their way (`LINGER_S`)
            while len(jobs) < GROUP_MAX:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                jobs.append(more)
            self._last_size = len(jobs)
            self._run(jobs)
        while True:  # refuse anything that raced in behind the stop signal
            try:
                late = self._queue.get_nowait()
            except queue.Empty:
                break
            if late is not None:
                _answer([(late, None, _closed())])

    def _run(self, jobs: list[Job]) -> None:
        if not (self._hooks.shares(jobs) and self._attempt(jobs, shared=True)):
            self._attempt(jobs, shared=False)

    def _attempt(self, jobs: list[Job], *, shared: bool) -> bool:
        """Runs and commits the group, then answers every job; False (nothing written, nobody answered) when the
        shared rows' flush failed, for the group to run again without sharing."""
        conn = self.conn
        outcomes: list[tuple[Job, Any, BaseException | None]] = []
        try:
            self._record.begin(conn, jobs)
            self._hooks.before(conn, jobs, shared)
            wrote: list[Any] = []
            for job in jobs:
                if job.adds is not None:
                    job.adds.after = list(wrote)
                conn.execute("SAVEPOINT job")
                try:
                    result = job.work(conn)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    outcomes.append((job, None, exc))
                else:
                    conn.execute("RELEASE job")
                    outcomes.append((job, result, None))
                    wrote.append(job.adds)
            if shared:
                try:
                    self._hooks.flush(conn)
                except BaseException:  # noqa: BLE001 - whose row failed is found by running it again
                    log.warning("a commit group's shared rows failed; running the group again job by job",
                                exc_info=True)
                    self._hooks.failed()
                    self._record.abort(conn)
                    return False
            self._record.commit(conn)
        except BaseException as exc:  # noqa: BLE001 - commit failed: nobody's write counts
            self._hooks.failed()
            self._record.abort(conn)
            _answer([(job, None, exc) for job in jobs])
            return True
        try:
            self._hooks.after(conn)
        except Exception:  # noqa: BLE001 - the group is committed: its answers stand
            log.exception("after a commit")
        _answer(outcomes)
        return True


def _answer(outcomes: list[tuple[Job, Any, BaseException | None]]) -> None:
    """Sets each job's future, and its waiter on its loop: one call onto each loop for all of its jobs."""
    on_loops: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]] = {}
    for job, result, error in outcomes:
        if error is None:
            job.future.set_result(result)
        else:
            job.future.set_exception(error)
        if job.waiter is not None:
            on_loops.setdefault(job.waiter.get_loop(), []).append((job.waiter, result, error))
    for loop, answers in on_loops.items():
        try:
            loop.call_soon_threadsafe(_settle, answers)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass


def _settle(answers: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    """On the waiters' loop: each gets its result or error, unless its caller went away (cancelled)."""
    for waiter, result, error in answers:
        if waiter.cancelled():
            continue
        if error is None:
            waiter.set_result(result)
        else:
            waiter.set_exception(error)
