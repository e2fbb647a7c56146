"""This agent's own entries on its live stream: sent as markers, filled in from its Append answers.

A writer gets the entries it wrote in its Append's answer (AppendRequest.return_entries), so its live Subscribe
stream asks the server not to send them again (SubscribeRequest.elide_own_entries): each arrives as an `Elided`
marker carrying only its seq, hashes and the batch's checkpoint. Before a batch is applied, `complete` puts the
full entry in each marker's place, so the cache still applies a gap-free, hash-checked run closed by a signed
checkpoint, exactly as without markers.

Where the full entry comes from:
- a marker at or below the cache's offset: nowhere, the Append's answer was applied already (it is dropped; the
  cache checks that the next entry it applies follows its own last one);
- `OwnWrites`, which holds the entries this process's Appends returned until the cache has them. The marker of an
  entry can arrive before its Append's answer (the server commits, wakes the stream, then answers), so `take`
  waits while an Append of this process is in flight;
- otherwise (another process of the same agent wrote it, or an Append's answer was lost) one Sync of the missing
  range.
The full entry must have the marker's hash and prev_hash, or the batch is refused as tamper.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from mnemosync.agent.errors import TamperDetected
from mnemosync.kernel.checkpoint import Checkpoint
from mnemosync.kernel.entry import Entry

WAIT_SECONDS = 5.0
"""How long `take` waits for an in-flight Append's answer before the stream fetches the entries itself."""


@dataclass(frozen=True)
class Elided:
    """A marker on the live stream in place of one of this agent's own entries (ChangelogEntry.elided)."""

    seq: int
    prev_hash: str
    hash: str
    checkpoint: Checkpoint | None = None


class OwnWrites:
    """The entries this process's Appends returned, kept until the live stream has had the chance to use them,
    and how many Appends are in flight (thread-safe)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._in_flight = 0
        self._entries: dict[int, Entry] = {}

    @contextmanager
    def sending(self) -> Iterator[Callable[[Iterable[Entry]], None]]:
        """Wraps one Append; call the value it yields with the entries the Append returned, before leaving."""
        with self._changed:
            self._in_flight += 1
        try:
            yield self._keep
        finally:
            with self._changed:
                self._in_flight -= 1
                self._changed.notify_all()

    def _keep(self, entries: Iterable[Entry]) -> None:
        with self._changed:
            for entry in entries:
                self._entries[entry.seq] = entry
            self._changed.notify_all()

    def forget_through(self, offset: int) -> None:
        """Drops what the cache already holds (up to `offset`)."""
        with self._changed:
            for seq in [s for s in self._entries if s <= offset]:
                del self._entries[seq]

    def take(self, seqs: Sequence[int], timeout: float = WAIT_SECONDS) -> dict[int, Entry]:
        """The held entries at `seqs`, waiting up to `timeout` seconds while some are missing and an Append of
        this process is in flight (its answer may hold them)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                missing = [s for s in seqs if s not in self._entries]
                left = deadline - time.monotonic()
                if not missing or not self._in_flight or left <= 0:
                    break
                self._changed.wait(left)
            return {s: self._entries[s] for s in seqs if s in self._entries}


def complete(page: Sequence[Entry | Elided], offset: Callable[[], int], own: OwnWrites,
             fetch: Callable[[int, int], Iterable[Entry]]) -> list[Entry]:
    """The page with each marker above the cache's offset replaced by its full entry (markers at or below it
    dropped).

    Args:
        page: A batch from the live stream, its last item closed by a checkpoint.
        offset: The cache's offset now (read again after waiting: the writer may have applied its answer).
        own: Where this process's Append answers are held.
        fetch: fetch(since_seq, count) yields the entries after since_seq (a Sync).

    Raises:
        TamperDetected: a full entry differs from its marker, or the server does not send it.
    """
    wanted = [m.seq for m in page if isinstance(m, Elided) and m.seq > offset()]
    found = own.take(wanted) if wanted else {}
    applied = offset()
    missing = [s for s in wanted if s not in found and s > applied]
    if missing:
        need = set(missing)
        found.update((e.seq, e) for e in fetch(missing[0] - 1, missing[-1] - missing[0] + 1) if e.seq in need)
    entries = []
    for item in page:
        if not isinstance(item, Elided):
            entries.append(item)
            continue
        if item.seq <= applied:
            continue
        full = found.get(item.seq)
        if full is None:
            raise TamperDetected(f"the server sent a marker for this agent's entry {item.seq} but not the entry")
        if (full.hash, full.prev_hash) != (item.hash, item.prev_hash):
            raise TamperDetected(f"this agent's entry {item.seq} does not match the live stream's marker for it "
                                 f"(hash {full.hash} vs {item.hash})")
        entries.append(replace(full, checkpoint=item.checkpoint))
    return entries
