"""Versioned schema migrations, tracked in SQLite's `user_version`.

Each database kind has an ordered list of steps (the server's store:
`mnemosync.server.schema`; an agent's cache and outbox: `mnemosync.agent.cache`,
`mnemosync.agent.outbox`); opening a database applies the steps it has not seen yet, each in
its own transaction. Steps are append-only: never edit a released step, add
a new one.

Several processes may open the same file for the first time at once (an agent's
cache and outbox are opened by the local agent, the hooks, the CLI and an
ingestion): each step runs under SQLite's write lock (`BEGIN IMMEDIATE`) and
checks `user_version` again once it holds it, so a step another process applied
meanwhile is skipped rather than run twice.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sqlite_utils.utils import sqlite3

from mnemosync.kernel.errors import SchemaTooNew

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

Step = Callable[[object], None]


def execute_script(conn: Conn, script: str) -> None:
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


def migrate(conn: Conn, steps: Sequence[Step]) -> int:
    """Applies the steps newer than the database's `user_version`; returns the new version.

    Raises:
        SchemaTooNew: the database was written by a newer mnemosync (the message names both versions).
    """
    current = conn.execute("PRAGMA user_version").fetchone()[0]
    if current > len(steps):
        path = next((row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"), "")
        raise SchemaTooNew(path or "in memory", current, len(steps))
    for version, step in enumerate(steps[current:], start=current + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("PRAGMA user_version").fetchone()[0] < version:  # else another process applied it
                step(conn)
                conn.execute(f"PRAGMA user_version = {version}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return len(steps)


def open_migrated(path: Path | str, steps: Sequence[Step], *, synchronous: str = "full") -> Conn:
    """Opens a local database (`mnemosync.kernel.db.connect`) and brings its schema up to date, under
    `mnemosync.kernel.db.opening` (several processes may open it for the first time at once); closed again if that
    fails.

    Raises:
        SchemaTooNew: see `migrate`.
    """
    from mnemosync.kernel import db

    with db.opening(path):
        conn: Conn = db.connect(path, synchronous=synchronous).conn
        try:
            migrate(conn, steps)
        except BaseException:
            conn.close()
            raise
    return conn
