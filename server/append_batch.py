"""What one Append writes, gathered so that a batch costs one statement per table and not one per operation.

The writer (`mnemosync.server.ledger`) admits an Append's operations one by one, in order, inside the Append's
savepoint. Two things it writes for each can wait until the last one is admitted when every operation is an add:

* the changelog rows and their transparency-log leaves (`Entries`): nothing an add's admission reads is in them
  (op_id replays are looked up once, before the first; the fold never reads the changelog), so they go in with one
  insert of every row and one of every Merkle node (`ChangelogRecord.append`);
* the fold into the projections (`Folds`), until an add would read what a waiting fold changes (see `Folds`).

The chain's head is kept here as entries are made (seq, hash, time), so each operation does not read it back.
From an Append's first operation that is not an add on, each entry is written and folded as it is made, as
before (`Entries.now` and `Folds.now` flush what waits first).

A large Append is validated in chunks while the writer already admits the chunks before (`Feed`): the writer's
SQLite work runs without the interpreter lock, so the validation and secret scan of the next chunk run beside it.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from mnemosync.kernel import db, projections
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.memory import content_hash
from mnemosync.kernel.operations import ValidOp
from mnemosync.server.record import ChangelogRecord


class Entries:
    """The changelog's head as this Append moves it, and the rows it has not written yet.

    Args:
        record: Where the changelog is kept.
        conn: The writer's connection, inside the Append's savepoint.
        deferred: Write the rows together at `flush` (an Append of adds only) instead of one by one.
        head: The head as (seq, hash, server_time_ms) when the caller knows it (an earlier Append of the same
            commit group left it so), else it is read.
    """

    def __init__(self, record: ChangelogRecord, conn: db.Conn, *, deferred: bool = True,
                 head: tuple[int, str, int] | None = None) -> None:
        self._record, self._conn, self._deferred = record, conn, deferred
        if head is not None:
            self.seq, self.hash, self.last_time_ms = head
        else:
            self.seq, self.hash = record.head(conn)
            row = conn.execute("SELECT server_time_ms FROM changelog WHERE seq = ?", (self.seq,)).fetchone()
            self.last_time_ms = row[0] if row else 0
        self._waiting: list[tuple[Entry, str]] = []

    def add(self, entry: Entry, request_hash: str) -> None:
        """Appends `entry` (the next seq, chained to the head) now or at `flush`."""
        if self._deferred:
            self._waiting.append((entry, request_hash))
        else:
            self._record.append(self._conn, [(entry, request_hash)])
        self.seq, self.hash, self.last_time_ms = entry.seq, entry.hash, entry.server_time_ms

    def flush(self) -> None:
        """Writes every waiting row (one statement per table)."""
        if self._waiting:
            self._record.append(self._conn, self._waiting)
            self._waiting = []

    def now(self) -> None:
        """Writes what waits, and each entry as it is made from here on."""
        self.flush()
        self._deferred = False

    def mark(self) -> tuple[int, int, str, int]:
        """Where the head and the waiting rows are now, for `undo`."""
        return len(self._waiting), self.seq, self.hash, self.last_time_ms

    def since(self, mark: tuple[int, int, str, int]) -> list[tuple[Entry, str]]:
        """The entries added since `mark` and not written yet, each with its request hash."""
        return self._waiting[mark[0]:]

    def undo(self, mark: tuple[int, int, str, int]) -> None:
        """Takes back every entry added since `mark` (none of them written yet)."""
        waiting, self.seq, self.hash, self.last_time_ms = mark
        del self._waiting[waiting:]


class Folds:
    """Folds one Append's entries into the projections. In a batch of adds only, the folds wait and go in together
    (`projections.apply_many`), and only until an add would read what they change: its own memory id or its exact
    content in its scope (`mnemosync.server.admission`'s existence and duplicate checks). Every other read of an add's
    admission ignores the caller's own memories, so its decisions are those of folding one by one."""

    def __init__(self, conn: db.Conn, *, deferred: bool = True) -> None:
        self._conn, self._deferred = conn, deferred
        self._waiting: list[Entry] = []
        self._keys: set[object] = set()

    def before(self, op: ValidOp) -> None:
        """Folds what waits when `op`'s admission would read it."""
        if self._waiting and ({op.memory_id, (content_hash(op.payload.get("content", "")), op.payload.get("scope"))}
                              & self._keys):
            self.flush()

    @property
    def fold(self) -> Callable[[Entry], None]:
        """Folds one entry now, or when it is its turn."""
        return self._fold

    def _fold(self, entry: Entry) -> None:
        if not self._deferred:
            projections.apply(self._conn, entry)
            return
        self._waiting.append(entry)
        self._keys |= {entry.memory_id, (content_hash(entry.payload["content"]), entry.payload["scope"])}

    def flush(self) -> None:
        """Folds every waiting entry."""
        projections.apply_many(self._conn, self._waiting)
        self._waiting, self._keys = [], set()

    def now(self) -> None:
        """Folds what waits, and each entry as it is made from here on."""
        self.flush()
        self._deferred = False


class FeedStopped(Exception):
    """The request thread stopped feeding an Append (its validation refused an operation): the writer undoes what
    it wrote of it, and the request reports its own error."""


class Feed:
    """An Append's operations handed from the request thread to the writer a chunk at a time (see the module
    docstring). The writer iterates over it; the request thread puts chunks, then `end` or `stop`."""

    def __init__(self) -> None:
        self._chunks: queue.SimpleQueue[Sequence[Any] | None | BaseException] = queue.SimpleQueue()

    def put(self, chunk: Sequence[Any]) -> None:
        """Hands over the next chunk."""
        self._chunks.put(chunk)

    def end(self) -> None:
        """Every chunk was handed over."""
        self._chunks.put(None)

    def stop(self) -> None:
        """No more chunks will come, and the Append must not be written."""
        self._chunks.put(FeedStopped("the Append was refused while it was being validated"))

    def __iter__(self) -> Iterator[Sequence[Any]]:
        while (chunk := self._chunks.get()) is not None:
            if isinstance(chunk, BaseException):
                raise chunk
            yield chunk
