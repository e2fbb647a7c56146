"""What the operator runs over a ledger with the server stopped, and no request asks for: the rebuild of every
projection from the changelog, and the check that the live projections equal a fresh fold.

`mnemosync rebuild` and `mnemosync verify --projections` (`mnemosync.server.operator_cli`) call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mnemosync.kernel import db, migrations, projections, vectors
from mnemosync.kernel.entry import Entry
from mnemosync.kernel.errors import ChainBroken
from mnemosync.server import changelog, merkle_log, schema, usage_stats
from mnemosync.server.ledger import Ledger, broken


def rebuild(ledger: Ledger) -> int:
    """Recomputes every projection, and the transparency log's tree, from the changelog, on the ledger's writer;
    returns entries folded.

    Raises:
        ChainBroken: the changelog does not verify (nothing is changed; the message names the entries).
    """
    folded: int = ledger.submit(_rebuild)
    return folded


def compare_projections(ledger: Ledger, scratch: Path) -> list[str]:
    """Folds the whole changelog afresh into a scratch database at `scratch` and names every difference from
    the live projections (see `mnemosync.kernel.projections.differences`); the scratch file is removed after."""
    reader = ledger.context.reader()
    with fresh_fold(scratch, changelog.iterate(reader)) as fresh:
        return projections.differences(reader, fresh)


@contextmanager
def fresh_fold(scratch: Path, entries: Iterable[Entry]) -> Iterator[db.Conn]:
    """A new server database at `scratch` with `entries` folded into its projections, in its open transaction:
    what a replay gives, to compare with what is stored (live projections, a snapshot's image). The file is
    removed after."""
    fresh = db.connect(scratch, synchronous="normal").conn
    try:
        vectors.attach(fresh, None)
        migrations.migrate(fresh, schema.SERVER_STEPS)
        fresh.execute("BEGIN")
        for entry in entries:
            projections.apply(fresh, entry)
        yield fresh
        fresh.execute("COMMIT")
    finally:
        fresh.close()
        for suffix in ("", "-wal", "-shm"):
            Path(f"{scratch}{suffix}").unlink(missing_ok=True)


def _rebuild(conn: db.Conn) -> int:
    report = changelog.verify_chain(conn)
    if not report.ok:
        raise ChainBroken(f"refusing to fold a changelog that does not verify: {broken(report)}; run "
                          "`mnemosync verify` for every finding, and restore the data directory from a backup")
    merkle_log.rebuild(conn)
    projections.clear(conn)
    usage_stats.clear(conn)
    count = 0
    for entry in changelog.iterate(conn):
        projections.apply(conn, entry)
        count += 1
    return count
