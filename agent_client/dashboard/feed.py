"""The live feed: one Subscribe stream that wakes every open live view when the server commits an entry.

A background thread follows the changelog from its head with the dashboard's
identity (entries of scopes it is not granted arrive withheld and still move
the head, which is all the feed uses them for). Live views do not read
entries from it: each one, when woken, asks the server for what it shows
(`ListChangelog` after its last seq, `ListAgents`), so filters and scopes are
the server's. Waiters are asyncio tasks on the web server's loop; the thread
wakes them with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from mnemosync.agent.remote import Remote, Subscription
from mnemosync.kernel.errors import CodedError

log = logging.getLogger(__name__)


class LiveFeed:
    """Follows the changelog head in a background thread and wakes asyncio waiters.

    Args:
        remote: The dashboard's connection.
        max_backoff: Most seconds between reconnection attempts.
    """

    def __init__(self, remote: Remote, max_backoff: float = 10.0):
        self.remote = remote
        self.max_backoff = max_backoff
        self.head = 0
        self.connected = threading.Event()
        self.stopped = threading.Event()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._lock = threading.Lock()
        self._stream: Subscription | None = None
        self._thread = threading.Thread(target=self._run, name="mnemosync-dashboard-feed", daemon=True)

    def start(self) -> None:
        """Starts following."""
        self._thread.start()

    def stop(self) -> None:
        """Stops following and wakes every waiter (so live views end)."""
        self.stopped.set()
        with self._lock:
            if self._stream is not None:
                self._stream.cancel()
        self._wake()
        self._thread.join(timeout=5)

    async def changed(self, timeout: float) -> bool:
        """Waits until the head moves, the feed stops or `timeout` passes; True when the head moved."""
        event = asyncio.Event()
        key = (asyncio.get_running_loop(), event)
        head = self.head
        with self._lock:
            self._waiters.add(key)
        try:
            if self.head == head and not self.stopped.is_set():
                await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(key)
        return self.head != head

    def _wake(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    def _run(self) -> None:
        backoff = 0.2
        while not self.stopped.is_set():
            try:
                self._follow()
                backoff = 0.2
            except CodedError as exc:
                if self.stopped.is_set():
                    return
                log.info("dashboard live feed interrupted (%s); retrying in %.1fs", exc, backoff)
            self.connected.clear()
            if self.stopped.wait(backoff):
                return
            backoff = min(backoff * 2, self.max_backoff)

    def _follow(self) -> None:
        head = self.remote.stats().head_seq
        with self._lock:
            if self.stopped.is_set():
                return
            stream = self._stream = self.remote.subscribe(head)
        stream.wait_accepted()
        self.head = max(self.head, head)
        self.connected.set()
        self._wake()
        for entry in stream:
            self.head = entry.seq
            self._wake()
