"""The changelog as followers and the notary read it: entries in order, one entry, the transparency log's tree
and proofs, and the check of the whole chain.

Entries of scopes a caller is not granted come back withheld (`mnemosync.kernel.entry.withheld`), so its hash chain
stays whole; the tree is `mnemosync.server.merkle_log`'s, the chain walk `mnemosync.server.chain_audit`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from mnemosync.kernel import merkle, signing
from mnemosync.kernel.entry import ChainReport, Entry, withheld
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.server import chain_audit, changelog, governance, merkle_log
from mnemosync.server.identity import Caller
from mnemosync.server.ledger_context import LedgerContext


class LogReads:
    """The ledger's changelog reads and proofs (`ledger.log`). Thread-safe."""

    def __init__(self, context: LedgerContext):
        self._ctx = context

    def read(self, since_seq: int, limit: int = 1000, caller: Caller | None = None) -> list[Entry]:
        """Up to `limit` changelog entries after `since_seq`, in seq order.

        With a `caller`, entries of memories in scopes it is not granted come
        back withheld (see `Entry.withheld`), so its hash chain stays whole.
        """
        if since_seq < 0:
            raise InvalidArgument(f"since_seq must be >= 0, got {since_seq}")
        conn = self._ctx.reader()
        entries = self._ctx.record.read(conn, since_seq, limit)
        if caller is None or caller.scopes is None or not entries:
            return entries
        ids = sorted({e.memory_id for e in entries})
        scope_of = dict(conn.execute(
            f"SELECT id, scope FROM memories WHERE id IN ({', '.join('?' for _ in ids)})", ids))
        return [e if governance.scope_granted(caller, scope_of.get(e.memory_id, "")) else withheld(e)
                for e in entries]

    def entry(self, seq: int) -> Entry | None:
        """The entry at `seq`, or None."""
        return changelog.get(self._ctx.reader(), seq)

    def tree_root(self, size: int) -> bytes:
        """The Merkle root over entries 1 to `size` (`size` at most the head)."""
        return merkle.root(merkle_log.nodes(self._ctx.reader()), size)

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """The proof that the tree of `old` entries is a prefix of the tree of `new` (new at most the head)."""
        return merkle.consistency_proof(merkle_log.nodes(self._ctx.reader()), old, new)

    def inclusion_proof(self, seq: int, size: int) -> list[bytes]:
        """The audit path of entry `seq` in the tree of `size` entries."""
        return merkle.inclusion_proof(merkle_log.nodes(self._ctx.reader()), seq - 1, size)

    def verify(self, issued: list[signing.IssuedKey] | None = None,
               progress: Callable[[int], None] | None = None, *, local_only: bool = False) -> ChainReport:
        """Walks the hash chain (blanked entries and signatures included, see `mnemosync.server.changelog.verify_chain`
        and `mnemosync.kernel.signing.entry_check`), then recomputes the transparency log's tree
        (`mnemosync.server.merkle_log.check`); a tree that differs is reported at seq 0. A PostgreSQL record's own
        changelog and tree are walked too, unless `local_only` (the start-up check: the replica only, see
        `mnemosync.server.boot_check`)."""
        report = chain_audit.walk(self._ctx.reader(), issued, progress)
        if self._ctx.shared is not None and not local_only:
            found, count = self._ctx.shared.verify(issued)
            if found:
                report = replace(report, problems=(*report.problems, *found),
                                 problem_count=report.problem_count + count)
        return report
