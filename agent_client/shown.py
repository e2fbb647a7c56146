"""What each reader was shown: the memory versions a session's model, or a person at the command line, last saw.

A write's base version is what its writer saw, not what the agent's cache holds now: the live stream moves the
cache forward the moment another agent commits, so defaulting to the cache would make every update
last-writer-wins. So every surface that shows memories records the versions it showed, per reader:

* `session:<id>`: one Claude Code session. Its MCP session records what every tool result showed (get, search,
  lists, walks, news of other agents' writes, check_conflicts, recall); its hooks record what the session start
  and the prompt hook injected. The id is Claude Code's session id where the relay has it (the
  `CLAUDE_CODE_SESSION_ID` Claude Code gives stdio MCP servers, the `session_id` it gives hooks), so the tools
  and the hooks of one session share one record; else one the relay made for its session. Two sessions of one
  agent are two readers, as apart as two agents.
* `cli`: the person at this agent's command line (`get`, `search`, `list`/`recent` and their own writes).

`Reader.base` is the version a write without an explicit base is made from: the one the reader was shown. A
memory it was never shown is a blind write: allowed (it is made from the version the agent has now), and the
caller says so.

The record is `shown.db` in the agent's cache directory (private, safe for the several processes that write it:
the local agent, the hooks, the command line), so it outlives the process: a session whose local agent is
restarted (its relay sends the same session id to the new one) keeps what it was shown. Versions only grow: a
reader that saw version 5 and later a cache's older copy of version 4 has still seen 5. The records of the
`MAX_READERS` most recently active readers are kept.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mnemosync.agent.errors import local_storage
from mnemosync.kernel import migrations, private_files

FILE_NAME = "shown.db"
CLI_READER = "cli"
MAX_READERS = 256


def session_reader(session_id: str) -> str:
    """The reader key of a Claude Code session (its MCP session and its hooks)."""
    return f"session:{session_id}"


def _shown_v1(conn) -> None:
    conn.execute("""CREATE TABLE shown (
        reader TEXT NOT NULL,
        memory_id TEXT NOT NULL,
        version INTEGER NOT NULL,
        via TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        PRIMARY KEY (reader, memory_id)
    ) WITHOUT ROWID""")
    conn.execute("CREATE TABLE readers (reader TEXT PRIMARY KEY, last_ms INTEGER NOT NULL)")
    conn.execute("CREATE INDEX readers_last ON readers (last_ms)")


SHOWN_STEPS = (_shown_v1,)


@dataclass(frozen=True)
class Seen:
    """A version a reader was shown, and what showed it (`get`, `search`, `session start`, ...)."""

    version: int
    via: str
    at_ms: int


class Shown:
    """The readers' records of one agent (see the module docstring). Thread-safe.

    Args:
        path: The SQLite file; created if missing.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock = threading.RLock()
        private_files.secure_folder(self.path.parent, self.path.name, patterns=(f"{self.path.name}*",))
        self._open()

    @local_storage
    def _open(self) -> None:
        self._conn = migrations.open_migrated(self.path, SHOWN_STEPS, synchronous="normal")

    def close(self) -> None:
        """Closes the file."""
        with self._lock:
            self._conn.close()

    @local_storage
    def record(self, reader: str, versions: Mapping[str, int], via: str) -> None:
        """Records that `reader` was shown `versions` (memory id -> version) by `via`; an older version than one
        recorded leaves it as it was."""
        if not versions:
            return
        now = int(time.time() * 1000)
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "INSERT INTO shown (reader, memory_id, version, via, at_ms) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (reader, memory_id) DO UPDATE SET version = excluded.version, via = excluded.via, "
                "at_ms = excluded.at_ms WHERE excluded.version >= shown.version",
                [(reader, memory_id, version, via, now) for memory_id, version in versions.items() if version > 0])
            conn.execute("INSERT INTO readers VALUES (?, ?) ON CONFLICT (reader) DO UPDATE SET last_ms = "
                         "excluded.last_ms", (reader, now))
            if conn.execute("SELECT count(*) FROM readers").fetchone()[0] > MAX_READERS:
                old = [r for (r,) in conn.execute("SELECT reader FROM readers ORDER BY last_ms DESC LIMIT -1 "
                                                  "OFFSET ?", (MAX_READERS,))]
                conn.executemany("DELETE FROM shown WHERE reader = ?", [(r,) for r in old])
                conn.executemany("DELETE FROM readers WHERE reader = ?", [(r,) for r in old])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @local_storage
    def get(self, reader: str, memory_id: str) -> Seen | None:
        """What `reader` was last shown of the memory, or None (never shown)."""
        row = self._conn.execute("SELECT version, via, at_ms FROM shown WHERE reader = ? AND memory_id = ?",
                                 (reader, memory_id)).fetchone()
        return Seen(*row) if row else None

    @local_storage
    def seen(self, reader: str) -> dict[str, int]:
        """Memory id -> the version `reader` was shown, for every memory it was shown."""
        return dict(self._conn.execute("SELECT memory_id, version FROM shown WHERE reader = ?", (reader,)))


@dataclass(frozen=True)
class Base:
    """The version a write is made from, and why: "given" (the caller named it), "shown" (the version the reader
    was shown; `via` says by what) or "blind" (never shown: `version` is None and the write is made from the
    version the agent has now)."""

    version: int | None
    how: str
    via: str = ""


class Reader:
    """One reader's view of `Shown`: what it saw, and the base its writes default to.

    Args:
        shown: The agent's record.
        key: The reader (`session_reader(...)` or `CLI_READER`).
    """

    def __init__(self, shown: Shown, key: str):
        self.shown = shown
        self.key = key

    def saw(self, versions: Mapping[str, int], via: str) -> None:
        """Records what this reader was shown (memory id -> version) and by what."""
        self.shown.record(self.key, versions, via)

    def base(self, memory_id: str, given: int | None = None) -> Base:
        """The base of a write to `memory_id`: `given` when set, else the version this reader was shown, else a
        blind write's (see `Base`)."""
        if given is not None:
            return Base(given, "given")
        seen = self.shown.get(self.key, memory_id)
        return Base(seen.version, "shown", seen.via) if seen is not None else Base(None, "blind")

    def wrote(self, result, via: str) -> None:
        """Records the version a write of this reader's made (an `AgentClient` `WriteResult`): what it wrote is what
        it knows. Not after a write that opened or joined a conflict (the version the memory shows then may be
        another writer's text, which this reader has not seen), nor after a deduplicated add."""
        if result.conflict_id or result.deduplicated or not result.version:
            return
        self.saw({result.memory_id: result.version}, via)
