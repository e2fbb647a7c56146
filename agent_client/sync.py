"""Replication into the local cache: the boot catch-up and live updates.

`catch_up` (agent_sync) streams every entry after the cache's offset, applies
them in batches (each batch one transaction, offset included) and
acknowledges the new offset to the server after each commit, never before.
`LiveUpdates` keeps a Subscribe stream open in the background while the
process runs and reconnects with exponential backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_client.cache import Cache
from agent_client.errors import ClientError, HistoryMismatch
from agent_client.remote import Remote, Subscription

log = logging.getLogger(__name__)

BATCH = 2000
Progress = Callable[[int, int, int], None]
"""progress(applied_so_far, offset, head) during a catch-up."""


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
             batch: int = BATCH, rebuilt: bool = False) -> SyncSummary:
    """Brings the cache up to the server's head (agent_sync).

    Raises:
        ServerUnavailable: the server cannot be reached (the cache keeps what it applied).
        HistoryMismatch: the server's history does not continue this cache's, or no longer
            holds the last entry this cache applied (see `check_history`).
    """
    started = time.monotonic()
    head = remote.stats().head_seq
    check_history(cache, remote, head)
    applied = 0
    buffer = []
    for entry in remote.sync(cache.offset):
        buffer.append(entry)
        if len(buffer) >= batch:
            applied += _commit(cache, remote, buffer)
            buffer = []
            if progress:
                progress(applied, cache.offset, max(head, cache.offset))
    if buffer:
        applied += _commit(cache, remote, buffer)
    offset = cache.offset
    if not applied and offset:
        remote.ack(offset)
    if progress and applied:
        progress(applied, offset, max(head, offset))
    return SyncSummary(applied, offset, max(head, offset), time.monotonic() - started, rebuilt)


def check_history(cache: Cache, remote: Remote, head: int | None = None) -> None:
    """Refuses a server whose changelog no longer holds the last entry this cache applied.

    The cache remembers (offset, last_hash). If the server has no entry at that
    seq (it was restored from an older backup) or the entry there has another
    hash (its history was rewritten), syncing on would silently fork this
    agent's memory from the server's, so nothing is applied and the operator
    has to look.

    Raises:
        HistoryMismatch: missing or different; the message says which and what to do.
        ServerUnavailable: the server cannot be reached.
    """
    offset, last_hash = cache.offset, cache.last_hash
    if offset == 0:
        return
    found = list(remote.sync(offset - 1, max_entries=1))
    advice = (f"Nothing was applied. The operator must check the server (mnemosync verify, and which backup "
              f"it was restored from); only if the server's present history is the one to keep, delete this "
              f"agent's cache {cache.path} so it is rebuilt from the server.")
    if not found or found[0].seq != offset:
        at = f" (its head is {head})" if head is not None else ""
        raise HistoryMismatch(
            f"the server at {remote.address} no longer has changelog entry {offset}, which this agent already "
            f"applied{at}: it was restored from an older backup or its history was cut. {advice}"
        )
    entry = found[0]
    if entry.hash != last_hash or (not entry.withheld and entry.computed_hash() != entry.hash):
        raise HistoryMismatch(
            f"the server at {remote.address} has a different changelog entry {offset} (hash {entry.hash[:16]}) "
            f"than the one this agent applied (hash {last_hash[:16]}): the server's history was rewritten. "
            f"{advice}"
        )


def _commit(cache: Cache, remote: Remote, entries) -> int:
    applied = cache.apply(entries)
    remote.ack(cache.offset)
    return applied


class LiveUpdates:
    """A background Subscribe stream that keeps the cache current.

    Args:
        cache: The cache to apply entries to.
        remote: The server connection.
        on_entries: Called with each applied batch (for news of other agents' writes).
        on_connect: Called each time the stream is (re)established, e.g. to send queued writes.
        ack_interval: Seconds between acknowledgements while entries flow.
    """

    def __init__(self, cache: Cache, remote: Remote, *, on_entries: Callable[[list], None] | None = None,
                 on_connect: Callable[[], None] | None = None, ack_interval: float = 1.0,
                 max_backoff: float = 30.0):
        self.cache = cache
        self.remote = remote
        self.on_entries = on_entries
        self.on_connect = on_connect
        self.ack_interval = ack_interval
        self.max_backoff = max_backoff
        self.connected = threading.Event()
        self.failure: ClientError | None = None
        self._stop = threading.Event()
        self._stream_now: Subscription | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mnemosync-live", daemon=True)

    def start(self) -> None:
        """Starts the background thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ends the stream and waits for the thread."""
        self._stop.set()
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
            except ClientError as exc:
                if self._stop.is_set():
                    return  # stop() cancelled the stream
                if self.connected.is_set():
                    backoff = 0.2  # it was connected: a new outage starts with a short wait again
                log.info("live updates interrupted (%s); retrying in %.1fs", exc, backoff)
            self.connected.clear()
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, self.max_backoff)

    def _stream(self) -> None:
        check_history(self.cache, self.remote)  # a restarted server may be an older backup
        with self._lock:
            if self._stop.is_set():
                return
            stream = self._stream_now = self.remote.subscribe(self.cache.offset)
        stream.wait_accepted()
        self.connected.set()
        if self.on_connect:
            self.on_connect()
        last_ack = time.monotonic()
        acked = self.cache.offset
        for entry in stream:
            if self.cache.apply([entry]) and self.on_entries:
                self.on_entries([entry])
            now = time.monotonic()
            if now - last_ack >= self.ack_interval and self.cache.offset > acked:
                acked = self.cache.offset
                self.remote.ack(acked)
                last_ack = now
