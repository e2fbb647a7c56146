"""Replication into the local cache: the boot catch-up and live updates.

`catch_up` (agent_sync) first checks the server's transparency log against
what this agent has seen (`mnemosync.agent.transparency.check_log`), then streams
every entry after the cache's offset, applies them in batches (each batch one
transaction, offset included, and closed by a signed checkpoint its entries
must match) and acknowledges the new offset to the server after each commit,
never before. `LiveUpdates` keeps a Subscribe stream open in the background
while the process runs, makes the same check at every (re)connection, and
reconnects with exponential backoff.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from mnemosync.agent.bootstrap import from_snapshot
from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import HistoryMismatch, TamperDetected
from mnemosync.agent.own_writes import Elided, OwnWrites, complete
from mnemosync.agent.remote import ReceivedPage, Remote, Subscription, SyncStream
from mnemosync.agent.transparency import check_log
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import CodedError

log = logging.getLogger(__name__)

BATCH = 2000
SNAPSHOT_GAP = 50_000
"""Entries a cache may be behind before a catch-up starts from the server's snapshot rather than replaying them."""
READ_AHEAD = 2
"""Pages a catch-up receives ahead of the one it applies."""
RELEASE_AFTER = 2000
"""Entries a catch-up applies (or a snapshot installed) before it gives back the memory it used
(`Cache.release_memory`): at 20,000 entries, about 60 MB of pages and buffers a live agent does not need again."""
Progress = Callable[[int, int, int], None]
"""progress(applied_so_far, offset, head) during a catch-up."""
MAX_BACKOFF = 1.0
"""Most seconds the live stream waits between two attempts during an outage. Its reconnection sends the outbox
(`on_connect`), and an idle agent has no other call to notice the server is back: waits that doubled up to 30 s
left queued writes unsent for 15-25 s after the server returned. An attempt is one call that fails at once while
the server is down (gRPC's own connection backoff, at most `mnemosync.agent.remote.RECONNECT_BACKOFF_MS`, spaces
the real connection attempts), so trying every second costs next to nothing."""


@dataclass(frozen=True)
class SyncSummary:
    """What a catch-up did."""

    applied: int
    offset: int
    head: int
    seconds: float
    rebuilt: bool = False
    conflicts_waiting: int = 0
    """Open conflicts with a revision by this agent, as of the new offset (set by `AgentClient.sync`)."""

    @property
    def rate(self) -> float:
        """Entries applied per second."""
        return self.applied / self.seconds if self.seconds > 0 else 0.0


def catch_up(cache: Cache, remote: Remote, *, progress: Progress | None = None,
             batch: int = BATCH, rebuilt: bool = False, snapshot_gap: int | None = SNAPSHOT_GAP) -> SyncSummary:
    """Brings the cache up to the server's head (agent_sync).

    An empty cache, or one more than `snapshot_gap` entries behind, first installs the server's newest snapshot
    when it has one and it checks out (`mnemosync.agent.bootstrap`), then catches up from its position; None:
    always replay.

    Raises:
        ServerUnavailable: the server cannot be reached (the cache keeps what it applied).
        HistoryMismatch: the server's history does not continue this cache's, or no longer
            holds the last entry this cache applied (see `mnemosync.agent.transparency.check_log`);
            TamperDetected when what it sends does not verify.
    """
    started = time.monotonic()
    head = remote.stats().head_seq
    check_log(cache, remote, head)
    installed = None
    if snapshot_gap is not None and (cache.offset == 0 or head - cache.offset > snapshot_gap) and head:
        installed = from_snapshot(cache, remote)
    applied = 0
    buffer = []
    for page in _read_ahead(remote.sync_pages(cache.offset, checkpoint_every=batch)):
        for entry in page.entries():
            buffer.append(entry)
            if entry.checkpoint is not None:
                applied += _commit(cache, remote, buffer)
                buffer = []
                if progress:
                    progress(applied, cache.offset, max(head, cache.offset))
    if applied > RELEASE_AFTER or installed:  # what the catch-up held is not needed any more
        cache.release_memory()
    if buffer:
        raise TamperDetected(f"the server at {remote.address} ended its stream at entry {buffer[-1].seq} without a "
                             f"checkpoint, so entries {buffer[0].seq} to {buffer[-1].seq} cannot be checked; none "
                             "of them was applied")
    offset = cache.offset
    if not applied and offset:
        remote.ack(offset)
    return SyncSummary(applied, offset, max(head, offset), time.monotonic() - started, rebuilt)


def _commit(cache: Cache, remote: Remote, entries) -> int:
    applied = cache.apply(entries)
    remote.ack(cache.offset)
    return applied


def _read_ahead(stream: SyncStream, depth: int = READ_AHEAD) -> Iterator[ReceivedPage]:
    """The stream's pages, received by a thread up to `depth` pages ahead, so the server reads and encodes the
    next pages while this one is decoded, checked and committed (decoding stays on the applying thread: see
    `ReceivedPage`).

    Pages and the stream's error arrive in order. Leaving early (an error while applying) cancels the stream and
    waits for the thread.
    """
    pages: queue.Queue = queue.Queue(depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                pages.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for page in stream:
                if not put((page, None)):
                    return
        except BaseException as exc:  # handed to the applying thread, which raises it there
            put((None, exc))
            return
        put((None, None))

    reader = threading.Thread(target=read, name="mnemosync-sync-read", daemon=True)
    reader.start()
    try:
        while True:
            page, error = pages.get()
            if error is not None:
                raise error
            if page is None:
                return
            yield page
    finally:
        stop.set()
        stream.cancel()
        reader.join()


class LiveUpdates:
    """A background Subscribe stream that keeps the cache current.

    Args:
        cache: The cache to apply entries to.
        remote: The server connection.
        on_entries: Called with each applied batch (for news of other agents' writes).
        on_connect: Called each time the stream is (re)established, e.g. to send queued writes.
        own: This process's Append answers: given, the stream asks the server not to resend this agent's own
            entries and fills their markers in from here (`mnemosync.agent.own_writes`).
        ack_interval: Seconds between acknowledgements while entries flow.
        max_backoff: The longest wait between two attempts during an outage (`MAX_BACKOFF`).

    During an outage the waits double up to `max_backoff`; `retry_now` (the
    agent calls it when another of its calls reached the server) cuts the
    wait short, so the stream is back as soon as the server is.
    """

    def __init__(self, cache: Cache, remote: Remote, *, on_entries: Callable[[list], None] | None = None,
                 on_connect: Callable[[], None] | None = None, ack_interval: float = 1.0,
                 max_backoff: float = MAX_BACKOFF, own: OwnWrites | None = None):
        self.cache = cache
        self.remote = remote
        self.own = own
        self.markers = 0
        """Markers of this agent's own entries received (with `own`), in place of the entries themselves."""
        self.fetched = 0
        """This agent's own entries the stream had to fetch (a Sync) because no Append answer here held them."""
        self.on_entries = on_entries
        self.on_connect = on_connect
        self.ack_interval = ack_interval
        self.max_backoff = max_backoff
        self.connected = threading.Event()
        self.outage = False
        """The last attempt to (re)connect failed: the server is unreachable or refused, as far as this stream
        knows (a warm agent's hooks need not wait for it to be live)."""
        self.failure: CodedError | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._stream_now: Subscription | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mnemosync-live", daemon=True)

    def start(self) -> None:
        """Starts the background thread."""
        self._thread.start()

    def retry_now(self) -> None:
        """The server answered another call: if the stream is waiting out a backoff, it reconnects at once."""
        if not self.connected.is_set():
            self._wake.set()

    def stop(self) -> None:
        """Ends the stream and waits for the thread."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            if self._stream_now is not None:
                self._stream_now.cancel()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            try:
                self._stream()
                backoff = 0.2
            except HistoryMismatch as exc:
                self.failure = exc
                log.error("live updates stopped: %s", exc)
                return
            except CodedError as exc:
                if self._stop.is_set():
                    return  # stop() cancelled the stream
                if self.connected.is_set():
                    backoff = 0.2  # it was connected: a new outage starts with a short wait again
                # said while the waits grow, not every second of a long outage
                log.log(logging.INFO if backoff < self.max_backoff else logging.DEBUG,
                        "live updates interrupted (%s); retrying in %.1fs", exc, backoff)
                self.outage = True
            self.connected.clear()
            woken = self._wake.wait(backoff)
            self._wake.clear()
            if self._stop.is_set():
                return
            if woken:
                log.info("live updates: the server answered another call; reconnecting now")
            backoff = 0.2 if woken else min(backoff * 2, self.max_backoff)

    def _stream(self) -> None:
        check_log(self.cache, self.remote)  # a restarted server may be an older backup, or rewritten
        with self._lock:
            if self._stop.is_set():
                return
            stream = self._stream_now = self.remote.subscribe(self.cache.offset, elide_own=self.own is not None)
        stream.wait_accepted()
        self.outage = False
        self.connected.set()
        if self.on_connect:
            self.on_connect()
        last_ack = time.monotonic()
        acked = self.cache.offset
        page: list = []
        for entry in stream:
            page.append(entry)
            if entry.checkpoint is None:
                continue  # the server closes every batch it sends with a checkpoint
            if self.own is not None:
                self.markers += sum(isinstance(item, Elided) for item in page)
                page = complete(page, lambda: self.cache.offset, self.own, self._fetch)
            if page and self.cache.apply(page) and self.on_entries:
                self.on_entries(page)
            if self.own is not None:
                self.own.forget_through(self.cache.offset)
            page = []
            now = time.monotonic()
            if now - last_ack >= self.ack_interval and self.cache.offset > acked:
                acked = self.cache.offset
                self.remote.ack(acked)
                last_ack = now

    def _fetch(self, since: int, count: int) -> list[Entry]:
        fetched = list(self.remote.sync(since, max_entries=count, checkpoint_every=count))
        self.fetched += len(fetched)
        return fetched
