"""Procedure memories (issue 31, seed 004): ordered steps, preconditions and postconditions, and their projection.

A write may carry `steps`, `preconditions` and `postconditions`, each a list
of short texts (meant for memories of type procedure, as seed 004 has them;
any memory may carry them). They travel in the changelog entry's payload,
hashed like the rest, and are folded into a table of their own (as the
sources are, `mnemosync.kernel.source_projection`), the same on the server
and in every cache. The three are replaced together: an update that names
any of them names all three (the agent fills in the ones it keeps), so a
write never leaves half of an older procedure behind.

Their text is part of the memory's keyword index (`index_text`), so a search
for a step finds the procedure; readers show them as numbered lists
(`render`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import InvalidArgument
from mnemosync.kernel.one_line import one_line
from mnemosync.kernel.text_fields import check_one_line, check_text

if TYPE_CHECKING:
    from mnemosync.kernel.db import Conn

FIELDS = ("steps", "preconditions", "postconditions")
MAX_ITEMS = 50
"""Items per list at most."""
MAX_ITEM_BYTES = 1000
"""Bytes per item at most."""

SCHEMA = """
CREATE TABLE memory_procedures (
    memory_id TEXT PRIMARY KEY,
    steps TEXT NOT NULL,
    preconditions TEXT NOT NULL,
    postconditions TEXT NOT NULL,
    seq INTEGER NOT NULL
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class Procedure:
    """A memory's steps, preconditions and postconditions, in order."""

    steps: tuple[str, ...] = ()
    preconditions: tuple[str, ...] = ()
    postconditions: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.steps or self.preconditions or self.postconditions)

    def as_dict(self) -> dict[str, list[str]]:
        """The non-empty lists by field name."""
        return {name: list(getattr(self, name)) for name in FIELDS if getattr(self, name)}


def validate(values: Any, name: str) -> list[str]:
    """One of the three lists, checked.

    Raises:
        InvalidArgument: naming the field (and item) and the limit broken.
    """
    if not isinstance(values, list | tuple):
        raise InvalidArgument(f"{name} must be a list of texts")
    if len(values) > MAX_ITEMS:
        raise InvalidArgument(f"{name} has {len(values)} items; the limit is {MAX_ITEMS}")
    checked = []
    for i, item in enumerate(values):
        if not isinstance(item, str) or not item.strip():
            raise InvalidArgument(f"{name}[{i}] must be a non-empty text")
        checked.append(check_one_line(check_text(item, f"{name}[{i}]", MAX_ITEM_BYTES).strip(), f"{name}[{i}]"))
    return checked


def from_payload(payload: Mapping[str, Any]) -> Procedure:
    """The procedure a payload (or a dict of the three lists) carries."""
    return Procedure(*(tuple(payload.get(name) or ()) for name in FIELDS))


def render(p: Procedure, *, indent: str = "") -> list[str]:
    """Lines showing a procedure: "Preconditions:", "Steps:" and "Postconditions:", each a numbered list whose
    items are one line each (`one_line`: a step written before steps were refused a line break cannot start a
    line of a block)."""
    lines: list[str] = []
    for name, title in (("preconditions", "Preconditions"), ("steps", "Steps"), ("postconditions", "Postconditions")):
        items = getattr(p, name)
        if items:
            lines.append(f"{indent}{title}:")
            lines += [f"{indent}  {i}. {one_line(item, MAX_ITEM_BYTES, fold=True)}" for i, item in enumerate(items, 1)]
    return lines


def inline(p: Procedure) -> str:
    """A procedure on one line, for blocks that give each memory one line (the prompt hook's):
    "preconditions: (1) a; steps: (1) b (2) c; postconditions: (1) d", whitespace folded."""
    parts = []
    for name in ("preconditions", "steps", "postconditions"):
        items = [" ".join(item.split()) for item in getattr(p, name)]
        if items:
            parts.append(f"{name}: " + " ".join(f"({i}) {item}" for i, item in enumerate(items, 1)))
    return "; ".join(parts)


def index_text(p: Procedure) -> str:
    """The text the keyword index adds for a procedure (every item, one a line)."""
    return "\n".join(item for name in FIELDS for item in getattr(p, name))


def apply_write(conn: Conn, e: Entry) -> bool:
    """An add or update: the procedure it carries replaces the memory's (all three lists empty: removes it).
    Returns whether the entry carried one (the caller then indexes the memory's text again)."""
    if not any(name in e.payload for name in FIELDS):
        return False
    p = from_payload(e.payload)
    if not p:
        conn.execute("DELETE FROM memory_procedures WHERE memory_id = ?", (e.memory_id,))
        return True
    conn.execute(
        "INSERT INTO memory_procedures (memory_id, steps, preconditions, postconditions, seq) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT (memory_id) DO UPDATE SET steps = excluded.steps, preconditions = excluded.preconditions, "
        "postconditions = excluded.postconditions, seq = excluded.seq",
        (e.memory_id, *(json.dumps(list(getattr(p, name))) for name in FIELDS), e.seq))
    return True


def lookup(conn: Conn, memory_ids: Iterable[str]) -> dict[str, Procedure]:
    """The procedure of each of `memory_ids` that has one."""
    ids = list(memory_ids)
    found: dict[str, Procedure] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for memory_id, *lists in conn.execute(
                "SELECT memory_id, steps, preconditions, postconditions FROM memory_procedures "
                f"WHERE memory_id IN ({', '.join('?' for _ in chunk)})", chunk):
            found[memory_id] = Procedure(*(tuple(json.loads(x)) for x in lists))
    return found


def attach(conn: Conn, memories: list[Any]) -> list[Any]:
    """The MemoryRows with their procedure filled in (those without one unchanged)."""
    found = lookup(conn, [m.id for m in memories])
    return [replace(m, procedure=found[m.id]) if m.id in found else m for m in memories]


def scrub(conn: Conn, memory_id: str) -> None:
    """A redaction removes the memory's text, its procedure too."""
    conn.execute("DELETE FROM memory_procedures WHERE memory_id = ?", (memory_id,))


def snapshot(conn: Conn, memory_id: str) -> tuple[Any, ...] | None:
    """The memory's row without its seq, for comparing replicas."""
    row: tuple[Any, ...] | None = conn.execute(
        "SELECT steps, preconditions, postconditions FROM memory_procedures WHERE memory_id = ?", (memory_id,)
    ).fetchone()
    return row


def clear(conn: Conn) -> None:
    """Empties the projection (a rebuild folds it again); nothing to do before the schema step that makes it."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'memory_procedures'").fetchone():
        conn.execute("DELETE FROM memory_procedures")
