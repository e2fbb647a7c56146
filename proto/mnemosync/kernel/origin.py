"""An imported memory's origin (issue 41): who wrote it and when, on the server it was exported from.

`mnemosync export` writes each memory's author and times; `mnemosync import`
of such a file sends them as the add's `origin` (AddOp.origin), so a memory
moved to a fresh server does not read as the importer's own. The importer
stays its `author_agent`, the writer of record here (governance, conflicts and
the changelog know only who wrote the entry); the origin is what the export
said, kept beside it. It travels in the add entry's payload, hashed and
replicated like every field, and is folded into a table of its own, the same
on the server and in every cache. A memory imported again keeps the origin
it already had (the first writer, not the last importer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.text_fields import check_text

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

MAX_AGENT_CHARS = 128
MAX_TIME_MS = 253_402_300_799_999
"""The last millisecond of the year 9999, as event times have it."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS memory_origins (
    memory_id TEXT PRIMARY KEY,
    author_agent TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Origin:
    """Who added a memory and when, and who changed it last and when ("" / 0: not known), where it came from."""

    author_agent: str
    created_at_ms: int
    updated_by: str = ""
    updated_at_ms: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The payload (and export) form: the fields that are known."""
        return {k: v for k, v in self.__dict__.items() if v}


def validate(value: Any) -> dict[str, Any]:
    """An add's `origin`, checked, in its payload form.

    Raises:
        InvalidArgument: naming the field (origin.author_agent, ...) and what it must be.
    """
    if not isinstance(value, Mapping):
        raise InvalidArgument("origin must be an object with author_agent and created_at_ms")
    unknown = sorted(set(value) - {"author_agent", "created_at_ms", "updated_by", "updated_at_ms"})
    if unknown:
        raise InvalidArgument(f"origin has unknown fields: {', '.join(map(str, unknown))}")
    checked: dict[str, Any] = {}
    for name, required in (("author_agent", True), ("updated_by", False)):
        text = value.get(name) or ""
        if not isinstance(text, str) or len(text) > MAX_AGENT_CHARS or (required and not text.strip()):
            raise InvalidArgument(f"origin.{name} must be an agent id of 1 to {MAX_AGENT_CHARS} characters")
        if text:
            checked[name] = check_text(text, f"origin.{name}", MAX_AGENT_CHARS * 4)
    for name, required in (("created_at_ms", True), ("updated_at_ms", False)):
        ms = value.get(name) or 0
        if isinstance(ms, bool) or not isinstance(ms, int) or not (0 < ms <= MAX_TIME_MS or (ms == 0 and not required)):
            raise InvalidArgument(f"origin.{name} must be milliseconds since 1970 up to the year 9999")
        if ms:
            checked[name] = ms
    return checked


def from_payload(payload: Mapping[str, Any]) -> Origin | None:
    """The origin an add's payload (or an export line) carries, or None."""
    found = payload.get("origin")
    return Origin(**found) if isinstance(found, Mapping) and found.get("author_agent") else None


def apply_add(conn: Conn, e: Entry) -> None:
    """An add: the origin it carries, if any, becomes the memory's."""
    found = from_payload(e.payload)
    if found is not None:
        conn.execute("INSERT OR REPLACE INTO memory_origins (memory_id, author_agent, created_at_ms, updated_by, "
                     "updated_at_ms, seq) VALUES (?, ?, ?, ?, ?, ?)",
                     (e.memory_id, found.author_agent, found.created_at_ms, found.updated_by, found.updated_at_ms,
                      e.seq))


def attach(conn: Conn, memories: Iterable[Any]) -> list[Any]:
    """The MemoryRows with their origin filled in (those without one unchanged)."""
    rows = list(memories)
    found: dict[str, Origin] = {}
    ids = [m.id for m in rows]
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for memory_id, *fields in conn.execute(
                "SELECT memory_id, author_agent, created_at_ms, updated_by, updated_at_ms FROM memory_origins "
                f"WHERE memory_id IN ({', '.join('?' for _ in chunk)})", chunk):
            found[memory_id] = Origin(*fields)
    return [replace(m, origin=found[m.id]) if m.id in found else m for m in rows]


def remove(conn: Conn, memory_id: str) -> None:
    """Drops the memory's origin with the memory (a local overlay's; a redaction leaves it: it is no text)."""
    conn.execute("DELETE FROM memory_origins WHERE memory_id = ?", (memory_id,))


def snapshot(conn: Conn, memory_id: str) -> tuple[Any, ...] | None:
    """The memory's row without its seq, for comparing replicas."""
    row: tuple[Any, ...] | None = conn.execute(
        "SELECT author_agent, created_at_ms, updated_by, updated_at_ms FROM memory_origins WHERE memory_id = ?",
        (memory_id,)).fetchone()
    return row


def clear(conn: Conn) -> None:
    """Empties the projection (a rebuild folds it again); nothing to do before the schema step that makes it."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_origins'").fetchone():
        conn.execute("DELETE FROM memory_origins")
