"""Versioned schema migrations, tracked in SQLite's `user_version`.

Each database kind (the server's store, an agent's cache) has an ordered list
of steps; opening a database applies the steps it has not seen yet, each in
its own transaction. Steps are append-only: never edit a released step, add
a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlite_utils.utils import sqlite3

from server import changelog, projections

Step = Callable[[object], None]


def execute_script(conn, script: str) -> None:
    """Runs SQL statements one by one inside the caller's transaction.

    (`executescript` would commit first, which breaks a migration's atomicity.)
    """
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"incomplete SQL statement: {statement.strip()[:80]}")


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
    """Salted payload commitments, redaction and signatures (see `server.changelog`). Entries already
    written keep their encoding; new ones are redactable. The projections are folded again."""
    execute_script(conn, changelog.SCHEMA_V3)
    projections.clear(conn)
    for entry in changelog.iterate(conn):
        projections.apply(conn, entry)


SERVER_STEPS: Sequence[Step] = (_server_v1, _server_v2, _server_v3)


def migrate(conn, steps: Sequence[Step]) -> int:
    """Applies the steps newer than the database's `user_version`; returns the new version.

    Raises:
        RuntimeError: The database is newer than this software.
    """
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > len(steps):
        raise RuntimeError(
            f"database schema version {current} is newer than this mnemosync "
            f"(knows {len(steps)}); upgrade mnemosync"
        )
    for version, step in enumerate(steps[current:], start=current + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            step(conn)
            conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(steps)
