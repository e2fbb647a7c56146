"""The durable outbox: writes made while the server cannot be reached.

Each pending operation is a row in `outbox.db` beside the cache (a separate
file, so rebuilding a corrupt cache never loses queued writes). Rows are sent
in order once the server is back; each keeps its op_id, so a resend after a
crash mid-send is recognised by the server and written once.

So that pending writes are searchable at once, the outbox also keeps an
overlay: the same projections, holding each memory a pending operation
touches in its pending state. Searches made offline lay the overlay over the
cache (`mnemosync.kernel.search.search_overlaid`), so pending memories rank as the
server will rank them; the overlay row goes away once the operation is sent
and synced back.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mnemosync.agent.errors import local_storage
from mnemosync.kernel import db, migrations, private_files, projections, vectors
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.memory import MEMORY_COLUMNS, MemoryRow, row_to_memory
from mnemosync.kernel.model_identity import ModelInfo
from mnemosync.kernel.operations import ValidOp


def _outbox_v1(conn) -> None:
    migrations.execute_script(conn, projections.SCHEMA)
    conn.execute(
        """CREATE TABLE outbox (
            position INTEGER PRIMARY KEY AUTOINCREMENT,
            op_id TEXT NOT NULL UNIQUE,
            memory_id TEXT NOT NULL,
            op TEXT NOT NULL,
            base_version INTEGER NOT NULL,
            payload TEXT NOT NULL,
            embedding BLOB,
            model TEXT,
            created_at_ms INTEGER NOT NULL,
            state TEXT NOT NULL DEFAULT 'pending',
            error TEXT NOT NULL DEFAULT '',
            attempts INTEGER NOT NULL DEFAULT 0
        )"""
    )


def _outbox_v2(conn) -> None:
    migrations.execute_script(conn, projections.SCHEMA_V2)


def _outbox_v3(conn) -> None:
    """Signed operations keep their salt and signature until sent."""
    conn.execute("ALTER TABLE outbox ADD COLUMN salt BLOB NOT NULL DEFAULT x''")
    conn.execute("ALTER TABLE outbox ADD COLUMN signature BLOB NOT NULL DEFAULT x''")


def _outbox_v4(conn) -> None:
    """The overlay shows a memory's own event time (`projections.SCHEMA_V3`)."""
    migrations.execute_script(conn, projections.SCHEMA_V3)


def _outbox_v5(conn) -> None:
    """The overlay shows links with their weight and reason (`projections.SCHEMA_V5`)."""
    migrations.execute_script(conn, projections.SCHEMA_V5)


def _outbox_v6(conn) -> None:
    """The overlay shows who wrote a memory's text (`projections.SCHEMA_V6`)."""
    migrations.execute_script(conn, projections.SCHEMA_V6)


def _outbox_v7(conn) -> None:
    """Queued adds the server answered with another memory (the same text was already stored): where each went."""
    conn.execute(
        """CREATE TABLE redirects (
            memory_id TEXT PRIMARY KEY,
            became TEXT NOT NULL,
            op_id TEXT NOT NULL,
            at_ms INTEGER NOT NULL
        )"""
    )


def _outbox_v8(conn) -> None:
    """The overlay shows the sources a queued write names (`projections.SCHEMA_V7`, issue 31)."""
    migrations.execute_script(conn, projections.SCHEMA_V7)


def _outbox_v9(conn) -> None:
    """The overlay shows a queued procedure's steps (`projections.SCHEMA_V8`, issue 31)."""
    migrations.execute_script(conn, projections.SCHEMA_V8)


def _outbox_v10(conn) -> None:
    """The overlay shows a queued import's origin (`projections.SCHEMA_V9`, issue 41)."""
    migrations.execute_script(conn, projections.SCHEMA_V9)


OUTBOX_STEPS = (_outbox_v1, _outbox_v2, _outbox_v3, _outbox_v4, _outbox_v5, _outbox_v6, _outbox_v7, _outbox_v8,
                _outbox_v9, _outbox_v10)


@dataclass(frozen=True)
class Redirect:
    """A queued add whose memory id was never stored: the server answered it with memory `became`."""

    memory_id: str
    became: str
    op_id: str
    at_ms: int


@dataclass(frozen=True)
class PendingOp:
    """One queued operation."""

    position: int
    op: ValidOp
    model: ModelInfo | None
    created_at_ms: int
    state: str
    error: str
    attempts: int


class Outbox:
    """The outbox file of one agent. Thread-safe."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._open()

    @local_storage
    def _open(self) -> None:
        """Never moved aside like a corrupt cache: it holds writes nobody else has (a newer schema is refused)."""
        private_files.secure_folder(self.path.parent, self.path.name, patterns=(f"{self.path.name}*",))
        with db.opening(self.path):
            # FULL: a queued write is acknowledged to the caller, so it must survive power loss.
            self._conn = db.connect(self.path, synchronous="full").conn
            self._mirror = vectors.open_mirror(self.path)  # searches of the overlay
            vectors.attach(self._conn, self._mirror)
            try:
                migrations.migrate(self._conn, OUTBOX_STEPS)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Closes the file."""
        with self._lock:
            self._conn.close()
            self._mirror.close()

    @local_storage
    def enqueue(self, op: ValidOp, model: ModelInfo | None, agent_id: str, base: MemoryRow | None,
                base_vector: bytes | None) -> None:
        """Queues an operation and shows its effect in the overlay, in one transaction.

        Args:
            op: The validated operation.
            model: The embedding model of its vector, if any.
            agent_id: This agent (the overlay's author).
            base: The memory as this agent last saw it (None for add).
            base_vector: That memory's vector, so the overlay can be searched.
        """
        now = int(time.time() * 1000)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "INSERT INTO outbox (op_id, memory_id, op, base_version, payload, embedding, "
                "model, created_at_ms, salt, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (op.op_id, op.memory_id, op.op, op.base_version, json.dumps(op.payload),
                 op.embedding, json.dumps(model.__dict__) if model else None, now, op.salt, op.signature),
            )
            self._overlay(conn, op, model, agent_id, base, base_vector, now)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _overlay(self, conn, op, model, agent_id, base, base_vector, now) -> None:
        if op.op in ("link", "unlink", "resolve_conflict"):
            return  # no change to a memory's own fields to show (a resolution is shown once synced)
        current = projections.get_memory(conn, op.memory_id)
        if current is None and base is not None:
            payload = {k: getattr(base, k) for k in (
                "scope", "type", "layer", "tags", "content", "importance", "confidence", "protected", "trust",
                "quote", "event_time_ms") if getattr(base, k) is not None}
            projections.apply(conn, Entry(
                seq=0, op_id="", agent_id=base.author_agent, memory_id=base.id, op="add",
                # An archived base is copied as add (its version - 1) then forget (its version),
                # so each overlay version is recorded once in the overlay's history.
                base_version=0, version=base.version - 1 if base.archived else base.version, payload=payload,
                embedding=base_vector,
                embedding_model=base.embedding_model, server_time_ms=base.created_at_ms, prev_hash="",
            ))
            if base.archived:
                projections.apply(conn, Entry(
                    seq=0, op_id="", agent_id=base.updated_by, memory_id=base.id, op="forget",
                    base_version=0, version=base.version, payload={}, embedding=None,
                    embedding_model="", server_time_ms=base.updated_at_ms, prev_hash="",
                ))
            current = projections.get_memory(conn, op.memory_id)
        if op.op != "add" and current is None:
            return
        version = 1 if op.op == "add" else current.version + 1
        projections.apply(conn, Entry(
            seq=0, op_id=op.op_id, agent_id=agent_id, memory_id=op.memory_id, op=op.op,
            base_version=op.base_version, version=version, payload=op.payload,
            embedding=op.embedding, embedding_model=model.name if (model and op.embedding) else "",
            server_time_ms=now, prev_hash="",
        ))

    @local_storage
    def pending(self) -> list[PendingOp]:
        """Queued operations not yet sent, oldest first."""
        rows = self._conn.execute(
            "SELECT position, op_id, memory_id, op, base_version, payload, embedding, model, "
            "created_at_ms, state, error, attempts, salt, signature FROM outbox WHERE state = 'pending' "
            "ORDER BY position"
        ).fetchall()
        return [
            PendingOp(
                position=r[0],
                op=ValidOp(r[1], r[2], r[3], r[4], json.loads(r[5]), r[6], r[12], r[13]),
                model=ModelInfo(**json.loads(r[7])) if r[7] else None,
                created_at_ms=r[8], state=r[9], error=r[10], attempts=r[11],
            )
            for r in rows
        ]

    @local_storage
    def mark_sent(self, *positions: int) -> None:
        """Removes sent operations from the queue (in one transaction)."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM outbox WHERE position = ?", [(p,) for p in positions])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @local_storage
    def mark_failed(self, position: int, error: str) -> None:
        """Parks an operation the server refused for good (kept, visible in status)."""
        self._conn.execute(
            "UPDATE outbox SET state = 'failed', error = ?, attempts = attempts + 1 WHERE position = ?",
            (error, position),
        )

    @local_storage
    def counts(self) -> tuple[int, int, int | None]:
        """(pending, failed, created_at_ms of the oldest pending or None)."""
        pending, oldest = self._conn.execute(
            "SELECT count(*), min(created_at_ms) FROM outbox WHERE state = 'pending'"
        ).fetchone()
        failed = self._conn.execute("SELECT count(*) FROM outbox WHERE state = 'failed'").fetchone()[0]
        return pending, failed, oldest

    @local_storage
    def failed(self) -> list[tuple[str, str, str, str]]:
        """(op_id, op, memory_id, error) of operations the server refused."""
        return self._conn.execute(
            "SELECT op_id, op, memory_id, error FROM outbox WHERE state = 'failed' ORDER BY position"
        ).fetchall()

    @local_storage
    @local_storage
    def record_redirects(self, redirects: list[Redirect]) -> None:
        """Remembers where queued adds went that became other memories (kept: the ids were handed out)."""
        if not redirects:
            return
        with self._lock:
            with self._conn:
                self._conn.executemany(
                    "INSERT OR REPLACE INTO redirects (memory_id, became, op_id, at_ms) VALUES (?, ?, ?, ?)",
                    [(r.memory_id, r.became, r.op_id, r.at_ms) for r in redirects])

    @local_storage
    def redirect_of(self, memory_id: str) -> Redirect | None:
        """Where a queued add's memory id went, or None."""
        row = self._conn.execute("SELECT memory_id, became, op_id, at_ms FROM redirects WHERE memory_id = ?",
                                 (memory_id,)).fetchone()
        return Redirect(*row) if row else None

    @local_storage
    def redirected_ids(self, prefix: str) -> set[str]:
        """Memory ids starting with `prefix` that became other memories."""
        return {r[0] for r in self._conn.execute("SELECT memory_id FROM redirects WHERE memory_id >= ? AND "
                                                  "memory_id < ?", (prefix, prefix + "\uffff"))}

    def overlay_ids(self) -> set[str]:
        """Ids of memories shown in their pending state."""
        return {r[0] for r in self._conn.execute("SELECT id FROM memories")}

    @local_storage
    def overlay_get(self, memory_id: str) -> MemoryRow | None:
        """A memory in its pending state, or None (its links as laid over: the overlay holds no other memory)."""
        return projections.get_memory(self._conn, memory_id, every_link=True)

    @local_storage
    def overlay_rows(self) -> list[tuple[MemoryRow, bytes | None]]:
        """Every memory in its pending state, with its vector (what `search_overlaid` lays over the cache)."""
        rows = []
        for row in self._conn.execute(f"SELECT {MEMORY_COLUMNS} FROM memories ORDER BY num").fetchall():
            stored = vectors.get(self._conn, row[0])
            rows.append((row_to_memory(row, projections.get_links(self._conn, row[1])), stored[0] if stored else None))
        return rows

    @local_storage
    def clear_overlay(self) -> None:
        """Drops overlay rows of memories with no operation still pending."""
        waiting = {r[0] for r in self._conn.execute(
            "SELECT DISTINCT memory_id FROM outbox WHERE state = 'pending'")}
        stale = self.overlay_ids() - waiting
        if not stale:
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            for memory_id in stale:
                projections.remove_memory(self._conn, memory_id)
            self._conn.execute("COMMIT")
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
