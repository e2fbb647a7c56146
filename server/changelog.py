"""The changelog table: the append-only SQLite home of the entries (`mnemosync.kernel.entry`).

Every mutation is one row here with a gap-free, increasing `seq`; triggers
refuse UPDATE and DELETE, except the one change a redaction makes (blanking an
entry's text, see `mnemosync.server.redaction`), which schema version 3's trigger lets
through and nothing else. Only the server's store keeps a changelog; agents
keep the fold of it (`mnemosync.kernel.projections`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterator

from mnemosync.kernel import blanking
from mnemosync.kernel.entry import (
    GENESIS_HASH,
    BlankedEntry,
    ChainReport,
    Entry,
    canonical_json,
    scrub_payload,
    walk_chain,
)

SCHEMA = """
CREATE TABLE changelog (
    seq INTEGER PRIMARY KEY,
    op_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    memory_id TEXT NOT NULL,
    op TEXT NOT NULL,
    base_version INTEGER NOT NULL,
    version INTEGER NOT NULL,
    payload TEXT NOT NULL,
    embedding BLOB,
    embedding_model TEXT NOT NULL,
    server_time_ms INTEGER NOT NULL,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    UNIQUE (agent_id, op_id)
);
CREATE INDEX changelog_memory ON changelog (memory_id, seq);
CREATE TRIGGER changelog_no_update BEFORE UPDATE ON changelog
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only'); END;
CREATE TRIGGER changelog_no_delete BEFORE DELETE ON changelog
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only'); END;
"""

SCHEMA_V2 = """
ALTER TABLE changelog ADD COLUMN authority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE changelog ADD COLUMN conflict TEXT NOT NULL DEFAULT '';
"""

_NO_UPDATE_BUT_BLANKING = """
CREATE TRIGGER changelog_no_update BEFORE UPDATE ON changelog
WHEN NOT (
    OLD.redacted_by = 0 AND OLD.payload_commit != '' AND NEW.redacted_by > OLD.seq
    AND EXISTS (SELECT 1 FROM changelog WHERE seq = NEW.redacted_by AND op = 'redact')
    AND NEW.payload_salt = '' AND (NEW.embedding IS NULL OR NEW.embedding IS OLD.embedding)
    AND NEW.request_hash = ''
    AND NEW.seq = OLD.seq AND NEW.op_id = OLD.op_id AND NEW.agent_id = OLD.agent_id
    AND NEW.memory_id = OLD.memory_id AND NEW.op = OLD.op AND NEW.base_version = OLD.base_version
    AND NEW.version = OLD.version AND NEW.embedding_model = OLD.embedding_model
    AND NEW.server_time_ms = OLD.server_time_ms AND NEW.prev_hash = OLD.prev_hash AND NEW.hash = OLD.hash
    AND NEW.authority = OLD.authority AND NEW.conflict = OLD.conflict
    AND NEW.payload_commit = OLD.payload_commit AND NEW.embedding_sha256 = OLD.embedding_sha256
    AND NEW.signature IS OLD.signature AND NEW.signer_key = OLD.signer_key{also}
)
BEGIN SELECT RAISE(ABORT, 'the changelog is append-only (only a redaction may blank an entry''s text)'); END;
"""

SCHEMA_V3 = """
ALTER TABLE changelog ADD COLUMN payload_commit TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN payload_salt TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN embedding_sha256 TEXT NOT NULL DEFAULT '';
ALTER TABLE changelog ADD COLUMN redacted_by INTEGER NOT NULL DEFAULT 0;
ALTER TABLE changelog ADD COLUMN signature BLOB;
ALTER TABLE changelog ADD COLUMN signer_key TEXT NOT NULL DEFAULT '';
DROP TRIGGER changelog_no_update;
""" + _NO_UPDATE_BUT_BLANKING.format(also="")
"""Schema version 3: salted payload commitments, redaction, signatures (see the module docstring)."""

SCHEMA_V4 = """
ALTER TABLE changelog ADD COLUMN blanked TEXT NOT NULL DEFAULT '';
DROP TRIGGER changelog_no_update;
""" + _NO_UPDATE_BUT_BLANKING.format(also=" AND NEW.blanked = OLD.blanked")
"""Schema version 4: a redact entry's record of what it blanked (`Entry.blanked`), which the trigger keeps
unchanged like every other column."""

_COLUMNS = (
    "seq, op_id, agent_id, memory_id, op, base_version, version, payload, embedding, "
    "embedding_model, server_time_ms, prev_hash, hash, authority, conflict, payload_commit, payload_salt, "
    "embedding_sha256, redacted_by, signature, signer_key, blanked"
)


def head(conn) -> tuple[int, str]:
    """The newest entry's (seq, hash), or (0, GENESIS_HASH) when empty."""
    row = conn.execute("SELECT seq, hash FROM changelog ORDER BY seq DESC LIMIT 1").fetchone()
    return (row[0], row[1]) if row else (0, GENESIS_HASH)


_INSERT = (
    "INSERT INTO changelog (seq, op_id, agent_id, memory_id, op, base_version, version, "
    "payload, embedding, embedding_model, server_time_ms, prev_hash, hash, request_hash, authority, "
    "conflict, payload_commit, payload_salt, embedding_sha256, signature, signer_key, blanked) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert(conn, entry: Entry, request_hash: str) -> None:
    """Writes one entry; the caller holds the write transaction."""
    conn.execute(_INSERT, _row(entry, request_hash))


def insert_many(conn, entries: list[tuple[Entry, str]]) -> None:
    """Writes consecutive entries (each with its request hash) in one batch; the caller holds the write
    transaction."""
    conn.executemany(_INSERT, [_row(entry, request_hash) for entry, request_hash in entries])


def _row(entry: Entry, request_hash: str) -> tuple:
    return (
        entry.seq,
        entry.op_id,
        entry.agent_id,
        entry.memory_id,
        entry.op,
        entry.base_version,
        entry.version,
        canonical_json(entry.payload),
        entry.embedding,
        entry.embedding_model,
        entry.server_time_ms,
        entry.prev_hash,
        entry.hash,
        request_hash,
        entry.authority,
        canonical_json(entry.conflict) if entry.conflict else "",
        entry.payload_commit,
        entry.payload_salt,
        entry.embedding_sha256,
        entry.signature,
        entry.signer_key,
        canonical_json([b.to_json() for b in entry.blanked]) if entry.blanked else "",
    )


def blank(conn, entry: Entry, redact_seq: int, fields: tuple[str, ...], *, drop_embedding: bool) -> None:
    """Replaces an entry's texts in `fields` by REDACTED_TEXT, drops its salt and request hash (and, with
    `drop_embedding`, its embedding), recording `redact_seq` (the redact entry, already written in this
    transaction). The hash, the commitments and the signature stay, so the chain still verifies."""
    conn.execute(
        "UPDATE changelog SET payload = ?, embedding = CASE WHEN ? THEN NULL ELSE embedding END, "
        "payload_salt = '', request_hash = '', redacted_by = ? WHERE seq = ?",
        (canonical_json(scrub_payload(entry.payload, fields)), int(drop_embedding), redact_seq, entry.seq),
    )


def get(conn, seq: int) -> Entry | None:
    """The entry at `seq`, or None."""
    row = conn.execute(f"SELECT {_COLUMNS} FROM changelog WHERE seq = ?", (seq,)).fetchone()
    return _entry(row) if row else None


def for_memory(conn, memory_id: str, before_seq: int) -> list[Entry]:
    """The entries of `memory_id` before `before_seq`, in seq order."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM changelog WHERE memory_id = ? AND seq < ? ORDER BY seq",
        (memory_id, before_seq),
    ).fetchall()
    return [_entry(row) for row in rows]


def find_op(conn, agent_id: str, op_id: str) -> tuple[Entry, str] | None:
    """The entry an agent wrote with `op_id`, and its request hash, if any."""
    return find_ops(conn, agent_id, [op_id]).get(op_id)


def find_ops(conn, agent_id: str, op_ids: list[str]) -> dict[str, tuple[Entry, str]]:
    """`find_op` for many op_ids in one query: op_id -> (entry, request hash) of those already written."""
    found = find_agents_ops(conn, {(agent_id, op_id) for op_id in op_ids})
    return {op_id: written for (_, op_id), written in found.items()}


def find_agents_ops(conn, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], tuple[Entry, str]]:
    """The entries several agents wrote with these op_ids, in one query a chunk of op_ids at a time: (agent_id,
    op_id) -> (entry, request hash) of those already written."""
    agents = sorted({agent_id for agent_id, _ in keys})
    op_ids = sorted({op_id for _, op_id in keys})
    found: dict[tuple[str, str], tuple[Entry, str]] = {}
    for start in range(0, len(op_ids), 500):
        part = op_ids[start:start + 500]
        for row in conn.execute(f"SELECT {_COLUMNS}, request_hash FROM changelog WHERE agent_id IN "
                                f"({', '.join('?' for _ in agents)}) AND op_id IN ({', '.join('?' for _ in part)})",
                                (*agents, *part)):
            entry = _entry(row[:-1])
            if (entry.agent_id, entry.op_id) in keys:
                found[entry.agent_id, entry.op_id] = (entry, row[-1])
    return found


def read(conn, since_seq: int, limit: int) -> list[Entry]:
    """Up to `limit` entries with seq > since_seq, in seq order."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM changelog WHERE seq > ? ORDER BY seq LIMIT ?",
        (since_seq, limit),
    ).fetchall()
    return [_entry(row) for row in rows]


def read_with_request_hash(conn, since_seq: int, limit: int) -> list[tuple[Entry, str]]:
    """Like `read`, with each entry's request hash (what copying a changelog elsewhere must carry along)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS}, request_hash FROM changelog WHERE seq > ? ORDER BY seq LIMIT ?",
        (since_seq, limit),
    ).fetchall()
    return [(_entry(row[:-1]), row[-1]) for row in rows]


def rows_with_scope(conn, *, scopes: tuple[str, ...] | None, before_seq: int = 0, after_seq: int = 0,
                    limit: int = 50, agent_id: str = "", op: str = "", memory_id: str = "") -> list[tuple[Entry, str]]:
    """Entries with seq between `after_seq` and `before_seq` (0: the head), each with its memory's scope, newest
    first, filtered by writer, operation, memory, and scopes (exact names; None: every one)."""
    if scopes is not None and not scopes:
        return []
    where: list[str] = ["c.seq > ?"]
    params: list[int | str] = [after_seq]
    if before_seq:
        where.append("c.seq < ?")
        params.append(before_seq)
    for column, value in (("c.agent_id", agent_id), ("c.op", op), ("c.memory_id", memory_id)):
        if value:
            where.append(f"{column} = ?")
            params.append(value)
    if scopes is not None:
        where.append(f"m.scope IN ({', '.join('?' for _ in scopes)})")
        params += scopes
    columns = ", ".join(f"c.{c.strip()}" for c in _COLUMNS.split(","))
    found = conn.execute(
        f"SELECT {columns}, m.scope FROM changelog c JOIN memories m ON m.id = c.memory_id "
        f"WHERE {' AND '.join(where)} ORDER BY c.seq DESC LIMIT ?",
        (*params, limit),
    ).fetchall()
    return [(_entry(row[:-1]), row[-1]) for row in found]


def first_seq_at(conn, time_ms: int) -> int:
    """The first seq written at or after `time_ms` (head + 1 when none was).

    Entry times never decrease along the chain (the store stamps each entry no
    earlier than the one before), so a binary search over seq finds it without
    an index on time.
    """
    low, high = 1, head(conn)[0] + 1
    while low < high:
        middle = (low + high) // 2
        (at,) = conn.execute("SELECT server_time_ms FROM changelog WHERE seq = ?", (middle,)).fetchone()
        if at < time_ms:
            low = middle + 1
        else:
            high = middle
    return low


def writes_per_minute(conn, since_seq: int, scopes: tuple[str, ...] | None,
                      minute_ms: int = 60_000) -> dict[int, dict[str, int]]:
    """Entries from `since_seq` on, per minute start and operation, of memories in `scopes` (None: every one)."""
    if scopes is not None and not scopes:
        return {}
    where: list[str] = ["c.seq >= ?"]
    params: list[int | str] = [since_seq]
    if scopes is not None:
        where.append(f"m.scope IN ({', '.join('?' for _ in scopes)})")
        params += scopes
    out: dict[int, dict[str, int]] = {}
    for minute, op, count in conn.execute(
        f"SELECT c.server_time_ms - c.server_time_ms % {int(minute_ms)}, c.op, count(*) FROM changelog c "
        f"JOIN memories m ON m.id = c.memory_id WHERE {' AND '.join(where)} GROUP BY 1, 2", params,
    ):
        out.setdefault(minute, {})[op] = count
    return out


def iterate(conn, since_seq: int = 0, page: int = 1000) -> Iterator[Entry]:
    """Every entry after `since_seq`, in seq order, read page by page."""
    while True:
        entries = read(conn, since_seq, page)
        if not entries:
            return
        yield from entries
        since_seq = entries[-1].seq


def _entry(row) -> Entry:
    return Entry(
        seq=row[0],
        op_id=row[1],
        agent_id=row[2],
        memory_id=row[3],
        op=row[4],
        base_version=row[5],
        version=row[6],
        payload=json.loads(row[7]),
        embedding=row[8],
        embedding_model=row[9],
        server_time_ms=row[10],
        prev_hash=row[11],
        hash=row[12],
        authority=row[13],
        conflict=json.loads(row[14]) if row[14] else None,
        payload_commit=row[15],
        payload_salt=row[16],
        embedding_sha256=row[17],
        redacted_by=row[18],
        signature=row[19],
        signer_key=row[20],
        blanked=tuple(BlankedEntry(**b) for b in json.loads(row[21])) if row[21] else (),
    )


def conflict_of(conn, conflict_id: int) -> tuple[str, str] | None:
    """(kind, other memory) of the conflict opened at seq `conflict_id`, from the mark of the entry that opened it
    (`mnemosync.kernel.blanking.ConflictKind`, read from the changelog alone)."""
    opener = get(conn, conflict_id) if conflict_id > 0 else None
    mark = opener.conflict if opener is not None else None
    return (mark["kind"], mark.get("with", "")) if mark and mark.get("id") == conflict_id else None


def verify_chain(conn, check: Callable[[Entry], str] | None = None,
                 progress: Callable[[int], None] | None = None, *,
                 after: tuple[int, str] = (0, GENESIS_HASH)) -> ChainReport:
    """Walks the whole changelog (or the entries after `after`, see `walk_chain`) and reports every entry that does
    not verify: hashes and links, blanked entries against the redactions they name (`mnemosync.kernel.blanking`),
    and `check`."""

    def entry_check(entry: Entry) -> str:
        problem = ""
        if entry.redacted_by:
            problem = blanking.problem(entry, get(conn, entry.redacted_by), lambda cid: conflict_of(conn, cid))
        if not problem and entry.blanked:
            problem = blanking.listing_problem(entry, lambda seq: get(conn, seq))
        return problem or (check(entry) if check else "")

    return walk_chain(iterate(conn, after[0]), entry_check, progress, after=after)
