"""The server database's schema versions: the migration steps of its SQLite file, in order.

Applied by `server.core.migrations.migrate` when the store opens. Steps are
append-only: never edit a released step, add a new one.
"""

from __future__ import annotations

from collections.abc import Sequence

from server import changelog
from server.core import projections
from server.core.migrations import Step, execute_script


def _server_v1(conn) -> None:
    execute_script(conn, changelog.SCHEMA)
    execute_script(conn, projections.SCHEMA)
    execute_script(
        conn,
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE agent_offsets (
            agent_id TEXT PRIMARY KEY,
            acked_seq INTEGER NOT NULL,
            acked_at_ms INTEGER NOT NULL
        );
        """
    )


def _server_v2(conn) -> None:
    """Authorities and conflict marks on entries; trust labels, history and conflicts in the
    projections. (Version 3 then folds the projections again, so memories written before get their
    history and every new column its value; the fold reads the changelog as version 3 has it.)"""
    execute_script(conn, changelog.SCHEMA_V2)
    execute_script(conn, projections.SCHEMA_V2)


def _server_v3(conn) -> None:
    """Salted payload commitments, redaction and signatures (see `server.core.entry`). Entries already
    written keep their encoding; new ones are redactable. The projections are folded again."""
    execute_script(conn, changelog.SCHEMA_V3)
    _event_time_column(conn)  # the fold below writes every column today's projections have
    projections.clear(conn)
    for entry in changelog.iterate(conn):
        projections.apply(conn, entry)


def _server_v4(conn) -> None:
    """A memory's own event time (`projections.SCHEMA_V3`); no earlier entry carries one, so nothing is refolded."""
    _event_time_column(conn)


def _event_time_column(conn) -> None:
    """Adds `memories.event_time_ms` unless a refold in an earlier step already needed it."""
    if "event_time_ms" not in {row[1] for row in conn.execute("PRAGMA table_info(memories)")}:
        execute_script(conn, projections.SCHEMA_V3)


SERVER_STEPS: Sequence[Step] = (_server_v1, _server_v2, _server_v3, _server_v4)
