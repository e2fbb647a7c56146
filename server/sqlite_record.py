"""The embedded record: the changelog kept in the server's own SQLite file (WAL), beside its projections.

One file, one writer: a group of writes is one local transaction, made
durable by its COMMIT (`synchronous=full` survives power loss). The table's
SQL, triggers and chain check are `mnemosync.server.changelog`'s; the
transparency log's tree is `mnemosync.server.merkle_log`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.outcomes import AgentOffset
from mnemosync.server import changelog, merkle_log


class SqliteRecord:
    """The changelog in the ledger's SQLite file (see the module docstring)."""

    def begin(self, conn: Any, jobs: Sequence[Any]) -> None:
        conn.execute("BEGIN IMMEDIATE")

    def append(self, conn: Any, entries: Sequence[tuple[Entry, str]]) -> None:
        if len(entries) == 1:  # a single write: the leaf reads only the siblings it completes
            (entry, request_hash), = entries
            changelog.insert(conn, entry, request_hash)
            merkle_log.append_leaf(conn, entry.seq, entry.hash)
            return
        changelog.insert_many(conn, list(entries))
        merkle_log.append_leaves(conn, [(entry.seq, entry.hash) for entry, _ in entries])

    def commit(self, conn: Any) -> None:
        conn.execute("COMMIT")

    def abort(self, conn: Any) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")

    def read(self, conn: Any, since_seq: int, limit: int) -> list[Entry]:
        return changelog.read(conn, since_seq, limit)

    def head(self, conn: Any) -> tuple[int, str]:
        seq, hash_ = changelog.head(conn)
        return seq, hash_

    def acknowledge(self, conn: Any, agent_id: str, seq: int, at_ms: int) -> int:
        conn.execute(
            "INSERT INTO agent_offsets (agent_id, acked_seq, acked_at_ms) VALUES (?, ?, ?) "
            "ON CONFLICT (agent_id) DO UPDATE SET acked_seq = excluded.acked_seq, "
            "acked_at_ms = excluded.acked_at_ms WHERE excluded.acked_seq > acked_seq",
            (agent_id, seq, at_ms),
        )
        acked: int = conn.execute("SELECT acked_seq FROM agent_offsets WHERE agent_id = ?", (agent_id,)).fetchone()[0]
        return acked

    def offsets(self, conn: Any) -> list[AgentOffset]:
        return [AgentOffset(agent_id, acked, at) for agent_id, acked, at in conn.execute(
            "SELECT agent_id, acked_seq, acked_at_ms FROM agent_offsets ORDER BY agent_id")]
