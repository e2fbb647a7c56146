"""The changelog record: where the changelog is kept, behind the ledger (`mnemosync.server.ledger`).

The ledger decides what is written (admission, governance, scopes, the fold);
a record keeps the rows. Its interface is the one event-sourcing libraries draw
between an application and its event store: open a transaction, append rows,
commit or abort, read a range, the head, and the agents' acknowledged offsets.
Every call runs on the ledger's connection to its local SQLite file, which
holds the projections in either case.

Two records exist side by side, neither derived from the other:
`mnemosync.server.sqlite_record.SqliteRecord` (the embedded default: the file is
the record) and `mnemosync.server.postgres_record.PostgresRecord` (PostgreSQL is
the record, shared by several servers; the file is this server's replica of
it). A record shared by servers also folds the others' entries and tells how far
its read source lags: `SharedRecord`. `tests/unit/test_changelog_record.py` runs
one conformance suite against both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.outcomes import AgentOffset, ReadStoreStatus
from mnemosync.kernel.signing import IssuedKey
from mnemosync.kernel.vector_mirror import Mirror


class ChangelogRecord(Protocol):
    """Where the changelog is kept. Called only by the ledger's writer thread (begin to commit or abort) and its
    readers (read, head, offsets)."""

    def begin(self, conn: Any, jobs: Sequence[Any]) -> None:
        """Opens the transaction of a group of writer jobs (`mnemosync.server.group_commit.Job`).

        Raises:
            StorageUnavailable: the record cannot be reached; nothing of the group is written.
        """

    def append(self, conn: Any, entries: Sequence[tuple[Entry, str]]) -> None:
        """Appends consecutive entries (the next seqs, each with its request hash) and their transparency-log leaves
        inside the open transaction."""

    def commit(self, conn: Any) -> None:
        """Makes the group durable; once it returns every append of the group is acknowledged.

        Raises:
            StorageUnavailable: the record failed; the caller aborts and nothing counts.
        """

    def abort(self, conn: Any) -> None:
        """Undoes the open transaction after a failure."""

    def read(self, conn: Any, since_seq: int, limit: int) -> list[Entry]:
        """Up to `limit` entries after `since_seq`, in seq order."""

    def head(self, conn: Any) -> tuple[int, str]:
        """The newest entry's seq and hash ((0, the genesis hash) when empty)."""

    def acknowledge(self, conn: Any, agent_id: str, seq: int, at_ms: int) -> int:
        """Records an agent's offset inside the open transaction; an older one never replaces a newer one.
        Returns the offset now recorded."""

    def offsets(self, conn: Any) -> list[AgentOffset]:
        """Every agent's acknowledged offset, by agent id (`lag` left 0: the ledger knows the head)."""


class LedgerPort(Protocol):
    """What a shared record uses of its ledger: the writer, the head, the vector mirror, the replica's path."""

    path: Path
    mirror: Mirror

    def submit(self, work: Callable[[Any], Any]) -> Any: ...

    def head_seq(self) -> int: ...

    def log_id(self) -> str: ...

    def now_ms(self) -> int: ...


@runtime_checkable
class SharedRecord(ChangelogRecord, Protocol):
    """A record several servers append to: this server folds the others' entries into its replica, from the record
    or a hot standby of it."""

    def start(self, ledger: LedgerPort) -> None:
        """Folds what the replica lacks and starts following the others' appends (call once, after opening).

        Raises:
            FailedPrecondition: the replica belongs to another log.
        """

    def stop(self) -> None:
        """Stops following the others' appends (before the writer stops)."""

    def close(self) -> None:
        """Closes the record's connections (after the writer stopped)."""

    def verify(self, issued: list[IssuedKey] | None) -> tuple[list[tuple[int, str]], int]:
        """The record's own chain and tree checked: (problems as (seq, text), how many)."""

    def read_store_status(self, show_source: bool = True) -> ReadStoreStatus | None:
        """How far the source this server folds from lags behind the record (None: it folds from the record)."""
