"""Schema migrations run by several processes opening the same new files at once (`mnemosync.kernel.migrations`,
`mnemosync.kernel.db.opening`)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from mnemosync.kernel import db, migrations


def _warm(_: int) -> None:
    """Imports what `_open_at` needs, so the processes start their opens together."""
    import mnemosync.agent.cache
    import mnemosync.agent.ingest
    import mnemosync.agent.outbox  # noqa: F401


def _open_at(kind: str, folder: Path, start: float) -> str:
    """Opens one of an agent's files at `start` (a wall-clock time shared by every process); "ok" or the error."""
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.ingest import Watermarks
    from mnemosync.agent.outbox import Outbox

    opener = {"cache": lambda: Cache(folder / "cache.db"), "outbox": lambda: Outbox(folder / "outbox.db"),
              "ingest": lambda: Watermarks(folder / "ingest.db")}[kind]
    while time.time() < start:
        pass
    try:
        opener().close()
    except Exception as exc:  # noqa: BLE001 - the test reports every failure by process
        return f"{kind}: {type(exc).__name__}: {exc}"
    return "ok"


def test_eight_processes_opening_an_agents_new_files_at_once_all_succeed(tmp_path):
    """The fresh-clone failure of issue 36 ("table memories already exists"): an agent's cache, outbox and
    ingestion watermarks created by several processes in the same moment."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(8) as pool:
        pool.map(_warm, range(8))
        for round_ in range(3):
            folder = tmp_path / f"round-{round_}"
            start = time.time() + 0.3
            kinds = ["cache", "outbox", "ingest", "cache", "outbox", "ingest", "cache", "outbox"]
            outcomes = pool.starmap(_open_at, [(kind, folder, start) for kind in kinds])
            assert [o for o in outcomes if o != "ok"] == []


def test_a_failing_step_leaves_the_version_where_it_was(tmp_path):
    conn = db.connect(tmp_path / "x.db").conn

    def broken(conn) -> None:
        conn.execute("CREATE TABLE t (x)")
        raise RuntimeError("half way")

    with pytest.raises(RuntimeError):
        migrations.migrate(conn, [broken])
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 't'").fetchone()[0] == 0
