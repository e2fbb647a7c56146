"""Opening SQLite databases with sqlite-vec and FTS5 available.

Both the server's store and every agent's local cache open their files here,
so the two always agree on pragmas and on which SQLite library is used.

Python's built-in `sqlite3` is often compiled without extension loading
(`enable_load_extension` is missing). sqlite-utils prefers `pysqlite3` when it
is importable, and so do we: `pysqlite3-binary` ships a recent SQLite that can
load sqlite-vec. If neither can, `StorageUnavailable` says what to install.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TypeAlias

import sqlite_utils
import sqlite_vec
from sqlite_utils.utils import sqlite3

from mnemosync.kernel.errors import StorageUnavailable

SYNCHRONOUS_MODES = ("full", "normal")

Conn: TypeAlias = sqlite3.Connection
"""What the kernel's functions take as `conn`: a connection of the SQLite binding in use (pysqlite3's or the
standard library's, which its type stands for), as `connect(...).conn` gives it (a `Connection` underneath)."""


class Connection(sqlite3.Connection):
    """A SQLite connection that also carries what `mnemosync.kernel.vectors` keeps per connection.

    Attributes:
        vector_mirror: The in-memory mirror of the vector index its owner attached
            (`mnemosync.kernel.vectors.attach`), or None to answer from sqlite-vec.
        vector_schema: What `mnemosync.kernel.vectors` last read of this database's schema.
    """

    vector_mirror: object = None
    vector_schema: object = None


def sqlite_library() -> str:
    """Names the SQLite binding in use and its SQLite version, for diagnostics."""
    return f"{sqlite3.__name__} (SQLite {sqlite3.sqlite_version})"


def connect(path: Path | str, *, synchronous: str = "full", page_size: int | None = None) -> sqlite_utils.Database:
    """Opens `path` in WAL mode with sqlite-vec loaded (its `.conn` is a `Connection`).

    Args:
        path: The database file; its directory must exist.
        synchronous: "full" (an acknowledged commit survives power loss) or
            "normal" (survives a process crash, not power loss; faster).
        page_size: The page size a new (still empty) file is created with; a file that has pages keeps its own
            (SQLite cannot change it in WAL mode). None: SQLite's default.

    Raises:
        StorageUnavailable: SQLite cannot load sqlite-vec here, or lacks FTS5.
    """
    if synchronous not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, not {synchronous!r}")
    conn = sqlite3.connect(f"file:{Path(path)}", uri=True, check_same_thread=False, isolation_level=None,
                           factory=Connection)
    _load_sqlite_vec(conn)
    conn.execute("PRAGMA busy_timeout = 10000")
    if page_size is not None:
        conn.execute(f"PRAGMA page_size = {int(page_size)}")  # before WAL: the first write fixes it
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA secure_delete = ON")  # a redacted text must not linger in freed pages
    return sqlite_utils.Database(conn)


@contextlib.contextmanager
def opening(path: Path | str) -> Iterator[None]:
    """Held by a process while it opens a local database and brings its schema up to date: several processes open
    an agent's files at once (the local agent, the hooks, the CLI, an ingestion), and on a file that is still new,
    SQLite refuses a switch to WAL or a read of a schema being created (`database is locked`, `vtable constructor
    failed`) without waiting for the other. An exclusive `flock` on `<path>.lock` (0600, beside the file) makes
    those first moments one process at a time; it is held for the open only, never while the file is used.

    (`mnemosync.kernel.migrations.migrate` is safe on its own too: each step checks the schema version again
    under SQLite's write lock.)
    """
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def empty_wal(conn: Conn) -> None:
    """Copies the WAL into the main file and empties it (after a redaction, so that older page images
    holding the removed text go). Best effort: a reader on an old snapshot can keep frames alive until
    it finishes; the next checkpoint then overwrites them."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _load_sqlite_vec(conn: Conn) -> None:
    if not hasattr(conn, "enable_load_extension"):
        raise StorageUnavailable(
            f"this Python's SQLite ({sqlite_library()}) cannot load extensions, which "
            "sqlite-vec needs; install pysqlite3-binary (pip install pysqlite3-binary) "
            "or use a Python built with --enable-loadable-sqlite-extensions"
        )
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except sqlite3.Error as exc:
        raise StorageUnavailable(
            f"could not load sqlite-vec into {sqlite_library()}: {exc}; "
            "reinstall sqlite-vec for this platform"
        ) from exc
    compile_options = {row[0] for row in conn.execute("PRAGMA compile_options")}
    if "ENABLE_FTS5" not in compile_options:
        raise StorageUnavailable(
            f"{sqlite_library()} was built without FTS5; install pysqlite3-binary"
        )


def data_bytes(path: Path) -> int:
    """Size on disk of a database and its WAL and shared-memory files."""
    return sum(
        p.stat().st_size
        for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"))
        if p.exists()
    )
