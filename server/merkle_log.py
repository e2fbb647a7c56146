"""The server's Merkle tree over the changelog (`mnemosync.kernel.merkle`), kept in SQLite beside it.

`merkle_nodes` holds the hash of every complete, aligned subtree: level 0 is
the leaves (leaf `i` is entry `i + 1`), level `l` index `i` covers leaves
[i * 2**l, (i + 1) * 2**l). Appending entry `n` writes its leaf and the
subtrees it completes (on average two rows) in the append's own transaction,
so the tree always covers exactly the committed entries. Any tree head,
inclusion proof or consistency proof then costs O(log n) lookups.

The tree is derived from the entries' hashes, which a redaction does not
change, so it never has to change either. `check` recomputes it from the
changelog; `build` makes it for a database that had entries before it existed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from mnemosync.kernel import merkle
from mnemosync.server import changelog

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE merkle_nodes (
    level INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;
"""


def nodes(conn) -> merkle.NodeSource:
    """The stored subtrees as a `mnemosync.kernel.merkle.NodeSource` (a missing node is a LookupError)."""

    def node(level: int, index: int) -> bytes:
        row = conn.execute("SELECT hash FROM merkle_nodes WHERE level = ? AND idx = ?", (level, index)).fetchone()
        if row is None:
            raise LookupError(f"the transparency log has no node at level {level}, index {index}")
        return row[0]

    return node


def append_leaf(conn, seq: int, entry_hash: str) -> None:
    """Adds entry `seq` (the next one) to the tree; the caller holds the append's transaction."""
    index, node = seq - 1, merkle.leaf_hash(entry_hash)
    rows = [(0, index, node)]
    level = 0
    while index & 1:
        left = conn.execute("SELECT hash FROM merkle_nodes WHERE level = ? AND idx = ?",
                            (level, index - 1)).fetchone()[0]
        node, level, index = merkle.node_hash(left, node), level + 1, index >> 1
        rows.append((level, index, node))
    conn.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", rows)


def append_leaves(conn, leaves: list[tuple[int, str]]) -> None:
    """Adds consecutive entries (seq, entry hash), the next ones, to the tree with one insert of every node they
    complete; the caller holds the append's transaction. The subtrees they build on are read once, not per leaf."""
    if not leaves:
        return
    size = leaves[0][0] - 1
    tree = merkle.Frontier(size, frontier(nodes(conn), size))
    rows: list[tuple[int, int, bytes]] = []
    for _, entry_hash in leaves:
        rows += tree.append(merkle.leaf_hash(entry_hash))
    conn.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", rows)


def frontier(node: merkle.NodeSource, size: int) -> list[bytes]:
    """The roots of the complete subtrees over the first `size` leaves, largest first (`merkle.Frontier`'s)."""
    found, start = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            found.append(node(level, start >> level))
            start += 1 << level
    return found


def nodes_between(conn, old_size: int, new_size: int) -> list[tuple[int, int, bytes]]:
    """The nodes the tree gained when it grew from `old_size` leaves to `new_size` (each as level, index, hash):
    at each level, those whose leaves all lie below `new_size` but not all below `old_size`."""
    found: list[tuple[int, int, bytes]] = []
    level = 0
    while new_size >> level:
        found += conn.execute("SELECT level, idx, hash FROM merkle_nodes WHERE level = ? AND idx >= ? AND idx < ? "
                              "ORDER BY idx", (level, old_size >> level, new_size >> level)).fetchall()
        level += 1
    return found


def build(conn, *, every_seconds: float = 5.0) -> int:
    """Makes the tree for every entry already in the changelog (a migration step); returns their number.

    Logs its progress every `every_seconds` on a big changelog.
    """
    total = changelog.head(conn)[0]
    frontier, last_report = merkle.Frontier(), time.monotonic()
    batch: list[tuple[int, int, bytes]] = []
    for seq, entry_hash in _hashes(conn):
        batch += frontier.append(merkle.leaf_hash(entry_hash))
        if len(batch) >= 10_000:
            conn.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", batch)
            batch = []
        if time.monotonic() - last_report >= every_seconds:
            log.info("building the transparency log: %d of %d entries", seq, total)
            last_report = time.monotonic()
    conn.executemany("INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)", batch)
    return frontier.size


def check(conn, progress: Callable[[int], None] | None = None) -> str:
    """Recomputes the tree from the changelog's hashes; returns what differs from the stored one, or "".

    Every stored node must be the one the entries give, and no node may cover
    entries that do not exist. Each level is read in order with its own cursor,
    so the check is one pass over the table.
    """
    frontier = merkle.Frontier()
    levels: dict[int, Iterator[tuple[int, bytes]]] = {}
    for seq, entry_hash in _hashes(conn):
        for level, index, h in frontier.append(merkle.leaf_hash(entry_hash)):
            if level not in levels:
                levels[level] = iter(conn.execute(
                    "SELECT idx, hash FROM merkle_nodes WHERE level = ? ORDER BY idx", (level,)))
            kept = next(levels[level], None)
            if kept is None or kept[0] != index:
                return f"the transparency log has no node for entry {seq} (level {level}, index {index})"
            if kept[1] != h:
                return (f"the transparency log's node at level {level}, index {index} (covering entry {seq}) "
                        "is not the one the changelog gives: the tree was changed")
        if progress and seq % 10_000 == 0:
            progress(seq)
    expected = 2 * frontier.size - bin(frontier.size).count("1")
    found = conn.execute("SELECT count(*) FROM merkle_nodes").fetchone()[0]
    if found != expected:
        return f"the transparency log has {found} nodes where {frontier.size} entries give {expected}"
    return ""


def rebuild(conn) -> int:
    """Throws the tree away and makes it again from the changelog; returns the entries it covers."""
    conn.execute("DELETE FROM merkle_nodes")
    return build(conn)


def _hashes(conn):
    """(seq, hash) of every entry in seq order, page by page."""
    since = 0
    while True:
        rows = conn.execute("SELECT seq, hash FROM changelog WHERE seq > ? ORDER BY seq LIMIT 5000",
                            (since,)).fetchall()
        if not rows:
            return
        yield from rows
        since = rows[-1][0]
