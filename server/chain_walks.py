"""VerifyChain's walk of the hash chain, one at a time, shared by whoever asked while it ran.

Walking the chain reads every entry, so a dashboard left open on several
screens must not start one walk each. `SharedWalk.check` runs at most one walk
at a time; a caller that arrives while one runs waits, and is then answered by
the next walk that started after it asked (often one another waiting caller
started), never by a walk that began before it asked, so its answer covers
every entry committed before its call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mnemosync.kernel.entry import ChainReport
from mnemosync.kernel.overview import ChainCheck


class SharedWalk:
    """One chain walk at a time, its result shared with the callers that waited for it.

    Args:
        walk: Walks the chain (`LogReads.verify`, `mnemosync.server.log_reads`).
        now_ms: The server's wall clock, to stamp each walk.
    """

    def __init__(self, walk: Callable[[], ChainReport], now_ms: Callable[[], int]):
        self._walk = walk
        self._now_ms = now_ms
        self._state = threading.Condition()
        self._walking = False
        self._started = 0
        self._last: tuple[int, ChainCheck] | None = None

    def check(self) -> ChainCheck:
        """The result of a walk that started no earlier than this call."""
        with self._state:
            asked_after = self._started
            while True:
                if self._last is not None and self._last[0] > asked_after:
                    return self._last[1]
                if not self._walking:
                    break
                self._state.wait()
            self._walking = True
            self._started += 1
            number = self._started
        done = None
        try:
            done = ChainCheck(self._walk(), self._now_ms())
        finally:
            with self._state:
                self._walking = False
                if done is not None:
                    self._last = (number, done)
                self._state.notify_all()
        return done
