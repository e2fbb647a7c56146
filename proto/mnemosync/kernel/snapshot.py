"""Snapshots of the projections at a changelog position: the canonical image, its digest, its signed manifest,
and how a replica installs one (issue 30). The server makes them (`mnemosync.server.snapshots`), a new cache
installs one instead of replaying the changelog from entry 1 (`mnemosync.agent.bootstrap`), and
`mnemosync verify --snapshot` folds the log up to the snapshot's position and compares.

The image. Every projection row belongs to one memory scope (a memory, its links out, its history, its lifecycle
state, its vector; a conflict and its revisions by the conflict's scope), so the image is one section per scope,
sections in the order of the scope's SHA-256. A section is UTF-8 lines, one per row, each a JSON array
``[table, value, ...]`` (bytes as ``{"b64": ...}``); each table opens with a line ``["#", table, [columns]]``,
and rows come in primary-key order. The same state always gives the same bytes, so the digest of a section is a
digest of its content, and two folds of the same log give the same image. Keyword and tag indexes are not in
the image: they are derived from the memory rows when a snapshot is installed, exactly as the fold derives them.

Why sections per scope: an agent granted some scopes receives only their sections, which is exactly what a
replay would have folded for it (entries of other scopes arrive withheld and fold nothing). It still checks
the one signature: the manifest it receives names the other sections only by the hash of their scope name and
their digest, so it can recompute the content digest without learning what they hold. Memory row numbers are
the server's (the order memories were added); an installer numbers the memories it receives 1, 2, ... in that
order, as its own replay would have.

The manifest binds the image to the transparency log: the log id, the position N, the Merkle root of the first
N entries, the hash of entry N (with its audit path in that tree, so the chain continues from it) and the Merkle
frontier at N (so the replica can go on computing roots), signed with the server's checkpoint key. Signed text::

    mnemosync-snapshot/v1
    <log id>
    <N>
    <root of the first N entries, hex>
    <hash of entry N>
    <content digest, hex>
    <made at, ms since the epoch>
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mnemosync.kernel import merkle, projections, vectors
from mnemosync.kernel.signing import public_hex, valid

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from mnemosync.kernel.db import Conn

FORMAT = "mnemosync-snapshot/v1"
"""The first line of the signed text and of the manifest; a new image format gets a new version."""

_ROW_TABLES: tuple[tuple[str, str, str], ...] = (
    ("memories", "scope = ?", "num"),
    ("links", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id, target_id, relation"),
    ("memory_history", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id, version"),
    ("memory_lifecycle", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id"),
    ("conflicts", "scope = ?", "id"),
    ("conflict_revisions", "conflict_id IN (SELECT id FROM conflicts WHERE scope = ?)", "conflict_id, revision"),
    ("memory_sources", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id"),
    ("memory_procedures", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id"),
    ("memory_origins", "memory_id IN (SELECT id FROM memories WHERE scope = ?)", "memory_id"),
)
"""(table, which rows belong to a scope, primary-key order): the projection tables an image carries whole."""

VECTOR_TABLE = "vectors"
"""The image's name for the vector index rows: (num, embedding, *vectors.METADATA_COLUMNS)."""
_VECTOR_COLUMNS = ("num", "embedding", *vectors.METADATA_COLUMNS)


class SnapshotRefused(Exception):
    """A snapshot failed a check; the message says what did not match (the replica then replays instead)."""


def scope_hash(scope: str) -> str:
    """How a manifest names a section (lower-case hex SHA-256 of the scope name)."""
    return hashlib.sha256(scope.encode()).hexdigest()


@dataclass(frozen=True)
class Section:
    """One scope's part of the image.

    Attributes:
        scope_hash: `scope_hash(scope)`; sections are in this order.
        sha256: Lower-case hex SHA-256 of the section's bytes.
        scope: The scope's name ("" in a manifest served to an agent not granted it).
        length: The section's size in bytes (0 when not served).
        memories: Memories in it (0 when not served).
        offset: Where it starts in the server's image file (0 when not served).
    """

    scope_hash: str
    sha256: str
    scope: str = ""
    length: int = 0
    memories: int = 0
    offset: int = 0


@dataclass(frozen=True)
class Manifest:
    """A snapshot's signed description (see the module docstring).

    Attributes:
        log_id: The log it belongs to.
        size: N: the snapshot is the fold of entries 1 to N.
        root: The Merkle root over entries 1 to N, lower-case hex.
        last_hash: The hash of entry N.
        last_path: The audit path of entry N in the tree of N entries.
        frontier: The Merkle frontier of N entries (`mnemosync.kernel.merkle.Frontier.hashes`).
        made_at_ms: When it was made.
        sections: Every scope's section, in scope-hash order.
        key: The signer's checkpoint key, lower-case hex.
        signature: Ed25519 over `body()`.
    """

    log_id: str
    size: int
    root: str
    last_hash: str
    last_path: tuple[bytes, ...]
    frontier: tuple[bytes, ...]
    made_at_ms: int
    sections: tuple[Section, ...]
    key: str = ""
    signature: bytes = b""

    def content_digest(self) -> str:
        """The digest of the whole image: SHA-256 over each section's scope hash and digest, in order."""
        text = "".join(f"{s.scope_hash} {s.sha256}\n" for s in self.sections)
        return hashlib.sha256(text.encode()).hexdigest()

    def body(self) -> bytes:
        """The signed text (see the module docstring)."""
        return (f"{FORMAT}\n{self.log_id}\n{self.size}\n{self.root}\n{self.last_hash}\n{self.content_digest()}\n"
                f"{self.made_at_ms}\n").encode()

    def describe(self) -> str:
        """`snapshot at N, root abcd…` for messages."""
        return f"snapshot at entry {self.size}, root {self.root[:16]}…"

    def served(self) -> tuple[Section, ...]:
        """The sections this manifest's receiver gets (those whose scope it names), in stream order."""
        return tuple(s for s in self.sections if s.scope)

    def for_reader(self, granted: Callable[[str], bool]) -> Manifest:
        """This manifest as an agent sees it: sections of scopes it may not read keep only their scope hash and
        digest (enough to check the signature, nothing of their content)."""
        return replace(self, sections=tuple(s if granted(s.scope) else Section(s.scope_hash, s.sha256)
                                            for s in self.sections))

    def problem(self, key_hex: str) -> str:
        """Why this manifest does not bind a snapshot to the log signed by `key_hex`, or "" when it does."""
        if not self.signature or self.key != key_hex or not valid(key_hex, self.signature, self.body()):
            return (f"the {self.describe()} is not signed by the server's checkpoint key {key_hex[:16]}… "
                    "(its content, position or root do not match its signature)")
        try:
            frontier = merkle.Frontier(self.size, self.frontier)
        except ValueError as exc:
            return f"the {self.describe()} carries a broken Merkle frontier: {exc}"
        if frontier.root().hex() != self.root:
            return f"the Merkle frontier of the {self.describe()} gives root {frontier.root().hex()[:16]}"
        if self.size and not merkle.verify_inclusion(merkle.leaf_hash(self.last_hash), self.size - 1, self.size,
                                                     self.last_path, bytes.fromhex(self.root)):
            return f"entry {self.size} of the {self.describe()} (hash {self.last_hash[:16]}) is not in its tree"
        for s in self.sections:
            if s.scope and scope_hash(s.scope) != s.scope_hash:
                return f"the section of scope {s.scope!r} in the {self.describe()} is filed under another scope"
        return ""

    def to_json(self) -> dict[str, Any]:
        """Plain data (how the server keeps a manifest beside its image)."""
        return {"format": FORMAT, "log_id": self.log_id, "size": self.size, "root": self.root,
                "last_hash": self.last_hash, "last_path": [h.hex() for h in self.last_path],
                "frontier": [h.hex() for h in self.frontier], "made_at_ms": self.made_at_ms,
                "sections": [s.__dict__ for s in self.sections], "key": self.key, "signature": self.signature.hex()}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Manifest:
        """The inverse of `to_json`."""
        if doc.get("format") != FORMAT:
            raise SnapshotRefused(f"snapshot format {doc.get('format')!r} is not {FORMAT}")
        return cls(doc["log_id"], doc["size"], doc["root"], doc["last_hash"],
                   tuple(bytes.fromhex(h) for h in doc["last_path"]), tuple(bytes.fromhex(h) for h in doc["frontier"]),
                   doc["made_at_ms"], tuple(Section(**s) for s in doc["sections"]), doc["key"],
                   bytes.fromhex(doc["signature"]))


def sign(manifest: Manifest, key: Ed25519PrivateKey) -> Manifest:
    """`manifest` signed with the Ed25519 private key `key` (the checkpoint key)."""
    unsigned = replace(manifest, key=public_hex(key), signature=b"")
    return replace(unsigned, signature=key.sign(unsigned.body()))


# -- the image ------------------------------------------------------------------------------------------------


def _encode(table: str, row: Iterable[Any]) -> bytes:
    values = [{"b64": base64.b64encode(v).decode()} if isinstance(v, bytes) else v for v in row]
    return json.dumps([table, *values], ensure_ascii=True, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _decode(line: bytes) -> list[Any]:
    row: list[Any] = json.loads(line)
    return [base64.b64decode(v["b64"]) if isinstance(v, dict) else v for v in row]


def _columns(conn: Conn, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def scopes(conn: Conn) -> list[str]:
    """Every scope with a memory or a conflict, in section order."""
    found = {s for (s,) in conn.execute("SELECT DISTINCT scope FROM memories UNION SELECT DISTINCT scope FROM "
                                        "conflicts")}
    return sorted(found, key=scope_hash)


def section_lines(conn: Conn, scope: str) -> Iterator[bytes]:
    """The lines of one scope's section, as `write_image` writes them (the caller holds a read transaction)."""
    for table, belongs, order in _ROW_TABLES:
        columns = _columns(conn, table)
        yield _encode("#", [table, columns])
        for row in conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE {belongs} ORDER BY {order}",
                                (scope,)):
            yield _encode(table, row)
    yield _encode("#", [VECTOR_TABLE, list(_VECTOR_COLUMNS)])
    if vectors.dimensions(conn) is not None:
        for row in conn.execute(f"SELECT rowid, embedding, {', '.join(vectors.METADATA_COLUMNS)} FROM "
                                f"{vectors.TABLE} WHERE rowid IN (SELECT num FROM memories WHERE scope = ?) "
                                "ORDER BY rowid", (scope,)):
            yield _encode(VECTOR_TABLE, row)


class Writable(Protocol):
    """Where an image is written: a binary file, or anything with its `write`."""

    def write(self, data: bytes, /) -> object: ...


class _Discard:
    """Keeps nothing: for the sections of an image without its bytes."""

    def write(self, data: bytes, /) -> int:
        return len(data)


def write_image(conn: Conn, out: Writable) -> list[Section]:
    """Writes the image of `conn`'s projections to `out` (the caller holds one read transaction, so every
    section shows the same position); returns its sections with their offsets in `out`."""
    sections, offset = [], 0
    for scope in scopes(conn):
        digest, length = hashlib.sha256(), 0
        for line in section_lines(conn, scope):
            out.write(line)
            digest.update(line)
            length += len(line)
        memories = conn.execute("SELECT count(*) FROM memories WHERE scope = ?", (scope,)).fetchone()[0]
        sections.append(Section(scope_hash(scope), digest.hexdigest(), scope, length, memories, offset))
        offset += length
    return sections


def image_sections(conn: Conn) -> list[Section]:
    """The sections `write_image` would write, without keeping the bytes (`mnemosync verify --snapshot`)."""

    return write_image(conn, _Discard())


@dataclass
class Receiver:
    """Checks a served image as it arrives: the bytes of the manifest's served sections, in order, in any chunks.

    `feed` raises SnapshotRefused as soon as a section's bytes do not hash to its digest; `finish` when bytes
    are missing or left over.
    """

    manifest: Manifest
    received: int = 0
    _index: int = 0
    _in_section: int = 0
    _digest: Any = field(default_factory=hashlib.sha256)

    def __post_init__(self) -> None:
        self._sections = self.manifest.served()
        self.total = sum(s.length for s in self._sections)

    def feed(self, data: bytes) -> None:
        """Checks the next bytes of the stream."""
        view = memoryview(data)
        while view:
            if self._index >= len(self._sections):
                raise SnapshotRefused(f"the {self.manifest.describe()} sent more than the {self.total} bytes its "
                                      "manifest lists")
            section = self._sections[self._index]
            take = min(len(view), section.length - self._in_section)
            self._digest.update(view[:take])
            self._in_section += take
            self.received += take
            view = view[take:]
            if self._in_section == section.length:
                if self._digest.hexdigest() != section.sha256:
                    raise SnapshotRefused(
                        f"the section of scope {section.scope!r} in the {self.manifest.describe()} does not match "
                        f"its digest {section.sha256[:16]} (it hashes to {self._digest.hexdigest()[:16]}): its "
                        "content was changed")
                self._index, self._in_section, self._digest = self._index + 1, 0, hashlib.sha256()

    def finish(self) -> None:
        """Raises SnapshotRefused unless every served byte arrived."""
        if self.received != self.total:
            raise SnapshotRefused(f"the {self.manifest.describe()} ended after {self.received} of its "
                                  f"{self.total} bytes")


def install(conn: Conn, lines: Iterable[bytes]) -> int:
    """Replaces `conn`'s projections with a checked image's rows (the caller holds the transaction); returns the
    memories installed.

    Memories are numbered 1, 2, ... in the image's row-number order (their order of addition), the keyword and
    tag indexes are derived from them as the fold derives them, and vectors follow their memory's new number.

    Raises:
        SnapshotRefused: the image names a table or column this replica does not have, or a row is malformed.
    """
    projections.clear(conn)
    tables: dict[str, list[list[Any]]] = {}
    columns: dict[str, list[str]] = {}
    for line in lines:
        row = _decode(line)
        if row[0] == "#":
            table, names = row[1], row[2]
            if table != VECTOR_TABLE:
                unknown = set(names) - set(_columns(conn, table))
                if unknown:
                    raise SnapshotRefused(f"the snapshot's table {table} has columns {sorted(unknown)} this "
                                          "replica's schema does not know (upgrade it)")
            columns[table] = names
            tables.setdefault(table, [])
            continue
        if row[0] not in columns:
            raise SnapshotRefused(f"the snapshot has a row of table {row[0]!r} before that table's header")
        tables[row[0]].append(row[1:])
    memories = tables.get("memories", [])
    if not memories:
        return 0
    mem_columns = columns["memories"]
    at = {name: i for i, name in enumerate(mem_columns)}
    memories.sort(key=lambda r: r[at["num"]])
    renumber = {}
    for new, row in enumerate(memories, start=1):
        renumber[row[at["num"]]] = new
        row[at["num"]] = new
    for table, _, _ in _ROW_TABLES:
        rows = tables.get(table)
        if rows:
            names = columns[table]
            conn.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' for _ in names)})",
                             rows)
    for r in memories:  # the keyword and tag indexes as the fold makes them (a procedure's steps included)
        projections._index_text(conn, r[at["num"]], r[at["content"]], json.loads(r[at["tags"]]))
    vector_rows = sorted((renumber[r[0]], *r[1:]) for r in tables.get(VECTOR_TABLE, []))
    vectors.insert_many(conn, vector_rows)
    return len(memories)


def served_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines of a stream of image bytes in any chunks."""
    rest = b""
    for chunk in chunks:
        rest += chunk
        *lines, rest = rest.split(b"\n")
        yield from lines
    if rest:
        yield rest


def manifest_proto(m: Manifest) -> Any:
    """The wire form of a manifest (`mnemosync.v1.SnapshotManifest`)."""
    from mnemosync.v1 import memory_pb2 as pb

    return pb.SnapshotManifest(
        log_id=m.log_id, size=m.size, root_hash=m.root, last_hash=m.last_hash, last_entry_path=m.last_path,
        frontier=m.frontier, made_at_ms=m.made_at_ms, key=m.key, signature=m.signature,
        sections=[pb.SnapshotSection(scope_hash=s.scope_hash, sha256=s.sha256, scope=s.scope, length=s.length,
                                     memories=s.memories) for s in m.sections])


def manifest_from_proto(msg: Any) -> Manifest:
    """A received manifest (section offsets are the server's business: 0)."""
    return Manifest(msg.log_id, msg.size, msg.root_hash, msg.last_hash, tuple(msg.last_entry_path),
                    tuple(msg.frontier), msg.made_at_ms,
                    tuple(Section(s.scope_hash, s.sha256, s.scope, s.length, s.memories) for s in msg.sections),
                    msg.key, msg.signature)


# -- ready replicas ---------------------------------------------------------------------------------------------

REPLICA_FORMAT = "mnemosync-snapshot-replica/v1"
REPLICA_PAGE_SIZE = 16_384
"""The page size of a replica file (an agent cache's, `mnemosync.agent.cache.PAGE_SIZE`)."""
PROJECTION_SCRIPTS = (projections.SCHEMA, projections.SCHEMA_V2, projections.SCHEMA_V3, projections.SCHEMA_V4,
                      projections.SCHEMA_V5, projections.SCHEMA_V6, projections.SCHEMA_V7, projections.SCHEMA_V8,
                      projections.SCHEMA_V9)
"""The projections' schema in the order every replica applies it, so that `sqlite_master` reads the same."""


@dataclass(frozen=True)
class ReplicaSeal:
    """A ready SQLite file of the projections a snapshot gives one reader (the sections it may read, installed by
    `install`), signed with the checkpoint key: what GetSnapshot streams, so that a new cache starts by moving a
    file into place instead of inserting every row (issue 30's ≥10x aim; inserting is what a replay costs).

    The signature binds the file's SHA-256 and size to the snapshot's log id, position, root, content digest and
    the scope hashes of the sections installed, over the text::

        mnemosync-snapshot-replica/v1
        <log id>
        <N>
        <root>
        <content digest>
        <scope hashes of the installed sections, comma-separated>
        <SHA-256 of the file>
        <size of the file>
    """

    sha256: str
    length: int
    signature: bytes = b""

    def body(self, manifest: Manifest) -> bytes:
        """The signed text for the sections `manifest` serves."""
        scopes = ",".join(s.scope_hash for s in manifest.served())
        return (f"{REPLICA_FORMAT}\n{manifest.log_id}\n{manifest.size}\n{manifest.root}\n"
                f"{manifest.content_digest()}\n{scopes}\n{self.sha256}\n{self.length}\n").encode()

    def problem(self, manifest: Manifest, key_hex: str) -> str:
        """Why this seal does not vouch for a replica of `manifest`'s served sections, or ""."""
        if not self.signature or not valid(key_hex, self.signature, self.body(manifest)):
            return (f"the replica file of the {manifest.describe()} is not signed by the server's checkpoint key "
                    f"{key_hex[:16]}… for these sections")
        return ""


def build_replica(path: Path, lines: Iterable[bytes]) -> int:
    """Writes a new SQLite file at `path` holding the projections of an image's `lines` (`install`), in one file
    (no WAL left beside it); returns the memories in it."""
    from mnemosync.kernel import db, migrations

    conn = db.connect(path, synchronous="normal", page_size=REPLICA_PAGE_SIZE).conn
    try:
        for script in PROJECTION_SCRIPTS:
            migrations.execute_script(conn, script)
        conn.execute("BEGIN")
        installed = install(conn, lines)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode = DELETE")
    finally:
        conn.close()
    return installed


def replica_schema_problem(replica: Conn, reference: Conn) -> str:
    """Why the replica file's schema is not the projections' as `reference` (a replica of the same kind, e.g. an
    agent's cache) has them, or "". Every object must be the reference's, word for word, or part of the vector
    index; anything else (a trigger, a view, another table) is refused: the agent opens the file and it must hold
    nothing but data. The reference's own tables the replica lacks are the caller's to add."""
    def objects(conn: Conn) -> dict[str, tuple[Any, ...]]:
        return {name: (kind, table, sql) for kind, name, table, sql in
                conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")}

    mine, theirs = objects(reference), objects(replica)
    dims = vectors.dimensions(replica)
    for name, (kind, _, sql) in theirs.items():
        if name in mine:
            if mine[name][2] != sql:
                return f"the replica's {kind} {name} is not the one this agent's schema has"
            continue
        if name == "sqlite_sequence" and kind == "table":  # SQLite's own, made by the first AUTOINCREMENT row
            continue
        if name == vectors.TABLE:
            if dims is None or sql != vectors.table_sql(dims):
                return f"the replica's vector index is not one this agent would make ({sql[:80]})"
        elif kind not in ("table", "index") or not (name.startswith(vectors.TABLE)
                                                     or name.startswith(f"sqlite_autoindex_{vectors.TABLE}")):
            return f"the replica holds a {kind} {name} that no projection has"
    return ""
