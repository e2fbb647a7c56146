"""The storage interface the gRPC service talks to: `Store`.

Everything the service (`mnemosync.server.service`), the server's commands and the
tests need from storage, and nothing of how it is kept. `mnemosync.server.sqlite_store`
implements it over one SQLite file (the embedded default); another engine
implements the same methods with the same contract, including that every
write runs the same admission (`mnemosync.server.admission`) and fold
(`mnemosync.kernel.projections`), and that a request is answered only after its
write is durable. Errors are the core's typed errors (`mnemosync.kernel.errors`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from mnemosync.kernel.conflict_projection import Conflict
from mnemosync.kernel.consolidation_rules import ConsolidationReport
from mnemosync.kernel.entry import ChainReport, Entry
from mnemosync.kernel.graph import Step, Timeline, Walk
from mnemosync.kernel.lifecycle import SweepReport, Usage
from mnemosync.kernel.memory import MemoryRow
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import OpRequest
from mnemosync.kernel.outcomes import AppendOutcome, Stats
from mnemosync.kernel.overview import Activity, ChangelogRow, MemoryHistory
from mnemosync.kernel.search import Filter, Hit
from mnemosync.kernel.signing import IssuedKey
from mnemosync.kernel.topics import Topics
from mnemosync.server.governance import Rules
from mnemosync.server.identity import Caller


class Store(Protocol):
    """The server's storage: the changelog, its projections and every agent's offset. Thread-safe.

    Calls made on an agent's behalf take its `Caller`: writes are admitted
    for it, reads are limited to its scopes. None means unrestricted (the
    server's own commands and tests).
    """

    def append(self, caller: Caller, ops: list[OpRequest], model: ModelInfo | None, *,
               rules: Rules | None = None) -> AppendOutcome:
        """Validates and applies a batch of operations atomically, as `caller`; answers after the commit.

        Raises:
            MnemosyncError: a subclass naming what was refused; nothing is written.
        """

    def ack(self, agent_id: str, seq: int) -> tuple[int, int]:
        """Records an agent's offset (an older one is ignored); returns (acked_seq, head_seq).

        Raises:
            OutOfRange: `seq` is past the head.
        """

    def get(self, memory_id: str, caller: Caller | None = None) -> MemoryRow:
        """A memory by id, archived or not.

        Raises:
            NotFound: it never existed.
            PermissionDenied: it is in a scope `caller` is not granted.
        """

    def search(self, *, query: str, vector: list[float] | None, model: ModelInfo | None, limit: int,
               filter: Filter, mode: str, caller: Caller | None = None) -> list[Hit]:
        """Hybrid search over the projections (see `mnemosync.kernel.search.search`), in `caller`'s scopes."""

    def traverse(self, memory_id: str, *, caller: Caller | None = None, edge_types=(), direction: str = "out",
                 depth: int = 0, limit: int = 0, include_archived: bool = False) -> Walk:
        """The memories within `depth` links of one memory, in `caller`'s scopes (`mnemosync.kernel.graph`)."""

    def causal_chain(self, memory_id: str, *, caller: Caller | None = None, direction: str = "both",
                     depth: int = 0, limit: int = 0) -> Walk:
        """Causes and effects of one memory along causal links, in `caller`'s scopes."""

    def timeline(self, *, caller: Caller | None = None, memory_id: str = "", **window) -> Timeline:
        """Memories by their own event time, around one memory or in a window, in `caller`'s scopes."""

    def neighbours(self, memory_ids: list[str], count: int, caller: Caller | None = None) -> dict[str, list[Step]]:
        """Up to `count` graph neighbours of each memory, in `caller`'s scopes."""

    def graph_search(self, seed_ids: list[str], *, caller: Caller | None = None, **options):
        """Personalized PageRank from `seed_ids`, in `caller`'s scopes (`mnemosync.kernel.graph_rank`)."""

    def read(self, since_seq: int, limit: int = 1000, caller: Caller | None = None) -> list[Entry]:
        """Up to `limit` changelog entries after `since_seq`, in seq order; entries of scopes `caller` is not
        granted come back withheld (`mnemosync.kernel.entry.withheld`), so its hash chain stays whole."""

    def conflicts(self, caller: Caller | None = None, *, include_resolved: bool = False, memory_id: str = "",
                  limit: int = 100) -> list[Conflict]:
        """Conflicts in the caller's scopes: open ones oldest first, then resolved ones newest first."""

    def conflict(self, conflict_id: int, caller: Caller | None = None) -> Conflict:
        """One conflict with its revisions.

        Raises:
            NotFound: no such conflict.
            PermissionDenied: it is in a scope the caller is not granted.
        """

    def memory_version(self, memory_id: str) -> int:
        """The memory's current version (0 if it does not exist)."""

    def head_seq(self) -> int:
        """The seq of the newest committed entry."""

    def watch_head(self, listener: Callable[[int], None]) -> Callable[[], None]:
        """Calls `listener(head)` after every commit (from the writer's thread; it must return at once);
        returns the call that stops it."""

    def model(self) -> ModelInfo | None:
        """The pinned embedding model, if any."""

    def stats(self, caller: Caller | None = None) -> Stats:
        """Counts, per-agent offsets and the pinned model; for a caller that is not admin, only its own
        scopes' counts and its own offset."""

    def rebuild(self) -> int:
        """Recomputes every projection from the changelog; returns the entries folded."""

    def verify(self, issued: list[IssuedKey] | None = None,
               progress: Callable[[int], None] | None = None) -> ChainReport:
        """Walks the hash chain, blanked entries and signatures (against the CA's records when given), then
        the transparency log's tree; reports every problem by seq (the tree's at seq 0)."""

    def compare_projections(self, scratch: Path) -> list[str]:
        """Every difference between the projections and a fresh fold of the changelog (made in `scratch`)."""

    def log_id(self) -> str:
        """The id of this store's transparency log."""

    def entry(self, seq: int) -> Entry | None:
        """The changelog entry at `seq`, or None."""

    def tree_root(self, size: int) -> bytes:
        """The Merkle root over entries 1 to `size` (`mnemosync.kernel.merkle`); `size` at most the head."""

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """The proof that the tree of `old` entries is a prefix of the tree of `new` entries."""

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        """The audit path of entry `seq` in the tree of `size` entries."""

    def snapshot(self) -> dict[str, Any]:
        """The projections as plain data (for comparing replicas and rebuilds)."""

    def changelog_page(self, caller: Caller | None = None, *, before_seq: int = 0, after_seq: int = 0,
                       limit: int = 0, agent_id: str = "", scope: str = "", op: str = "",
                       memory_id: str = "") -> list[ChangelogRow]:
        """Changelog entries newest first (texts masked, embeddings dropped) with their memories' scopes, filtered,
        only in the caller's scopes (see ListChangelog in memory.proto).

        Raises:
            InvalidArgument: a bad limit, seq or operation name.
            PermissionDenied: `scope` is not granted to the caller.
        """

    def history(self, memory_id: str, caller: Caller | None = None) -> MemoryHistory:
        """The memory and every entry that changed it, oldest first, with the state it showed after each.

        Raises:
            NotFound: it never existed.
            PermissionDenied: it is in a scope `caller` is not granted.
        """

    def activity(self, caller: Caller | None = None, *, minutes: int = 0) -> Activity:
        """Entries written per minute and operation over the last `minutes` (default 60), and memory counts, in
        the caller's scopes (searches are counted by the servicer, not here).

        Raises:
            InvalidArgument: minutes out of range.
        """

    # -- the memory lifecycle (issue 15; see mnemosync.server.usage_stats and mnemosync.server.sweep) --

    def record_uses(self, memory_ids: list[str], kind: str = "used", *, at_ms: int | None = None) -> None:
        """Notes uses of memories, buffered until the next `flush_uses`."""

    def flush_uses(self, layers=None) -> int:
        """Writes the buffered uses into the access statistics; returns how many counted."""

    def use(self, caller: Caller | None, memory_ids: list[str], kind: str = "used", layers=None) -> int:
        """Records uses an agent reports, at once; returns how many counted.

        Raises:
            InvalidArgument: no ids, or a bad kind.
            ResourceExhausted: more ids than a batch may hold.
            PermissionDenied: a memory outside the caller's scopes.
        """

    def usage(self, memory_id: str) -> Usage:
        """A memory's use as ranking and the sweep see it now."""

    def sweep(self, *, now_ms: int | None = None, dry_run: bool = False, layers=None) -> SweepReport:
        """Runs the lifecycle sweep as of `now_ms` (default now), or reports what it would write."""

    def consolidate(self, *, now_ms: int | None = None, dry_run: bool = False, links_only: bool = False,
                    layers=None) -> ConsolidationReport:
        """Runs consolidation as of `now_ms` (default now), or reports what it would write
        (`mnemosync.server.consolidation`)."""

    def list_topics(self, caller: Caller | None, *, scopes: tuple[str, ...] = (), limit: int = 20,
                    novel_since_ms: int = 0) -> Topics:
        """Topic clusters of the live memories `caller` may read (`mnemosync.kernel.topics`)."""

    def close(self) -> None:
        """Finishes queued writes, then releases everything. Idempotent."""

    def __enter__(self) -> Store: ...

    def __exit__(self, *exc) -> None: ...
