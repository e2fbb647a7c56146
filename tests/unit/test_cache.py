"""`mnemosync.agent.cache`: an agent's fold of the changelog, its migrations and its failures."""

from __future__ import annotations

import pytest

from mnemosync.agent.cache import CACHE_STEPS, Cache
from mnemosync.agent.errors import CacheError, ClientError, StorageError


def test_a_version_1_cache_starts_again_from_offset_0_to_refold(tmp_path):
    from mnemosync.kernel import db, migrations
    from mnemosync.kernel import entry as entry_module

    path = tmp_path / "cache.db"
    conn = db.connect(path, synchronous="normal").conn
    migrations.migrate(conn, CACHE_STEPS[:1])
    conn.execute("UPDATE cache_state SET value = 7 WHERE key = 'offset'")
    conn.close()
    cache = Cache(path)
    assert (cache.offset, cache.last_hash) == (0, entry_module.GENESIS_HASH)
    cache.close()


def test_a_new_cache_has_16_kib_pages_and_one_made_before_keeps_its_own_and_still_applies(server, tmp_path):
    """New caches get `PAGE_SIZE` pages (sqlite-vec's vector chunks are shorter overflow chains); SQLite cannot
    change a WAL file's page size, so a cache made with the default pages opens, applies and reads as before."""
    from mnemosync.agent.cache import PAGE_SIZE
    from mnemosync.kernel import db

    entries = _received(server, "one", "two")
    (tmp_path / "new").mkdir(mode=0o700)
    (tmp_path / "old").mkdir(mode=0o700)
    db.connect(tmp_path / "old" / "cache.db", synchronous="normal").conn.close()  # made with SQLite's default pages
    for path, pages in ((tmp_path / "new" / "cache.db", PAGE_SIZE), (tmp_path / "old" / "cache.db", 4096)):
        cache = Cache(path)
        assert cache._conn.execute("PRAGMA page_size").fetchone()[0] == pages
        assert cache.apply(entries) == 2 and cache.get(entries[1].memory_id).content == "two"
        assert cache.vector(entries[1].memory_id) == entries[1].embedding
        cache.close()


def _schema_from_the_future(path) -> None:
    from mnemosync.kernel import db

    conn = db.connect(path, synchronous="normal").conn
    conn.execute("PRAGMA user_version = 99")
    conn.close()


def test_a_cache_from_a_newer_mnemosync_is_moved_aside_and_refilled_from_the_server(tmp_path):

    path = tmp_path / "cache.db"
    Cache(path).close()
    _schema_from_the_future(path)
    with pytest.raises(CacheError, match=f"the database {path} has schema version 99, but this mnemosync knows "
                                         f"versions up to {len(CACHE_STEPS)}; upgrade mnemosync to open it"):
        Cache(path)
    cache, rebuilt = Cache.open_or_rebuild(path)
    assert rebuilt and cache.offset == 0
    assert len(list(tmp_path.glob("cache.db.corrupt-*"))) == 1
    cache.close()


def test_a_failing_cache_file_raises_a_storage_error_naming_it(tmp_path):
    cache = Cache(tmp_path / "cache.db")
    cache.close()
    with pytest.raises(StorageError, match=f"^the local file {tmp_path / 'cache.db'} cannot be used: "):
        cache.get("2f1c0b7e-0000-4000-8000-000000000000")
    assert issubclass(StorageError, ClientError)


def _received(server, *contents: str):
    """Entries as an agent receives them from `server` (the last one closes the page with a checkpoint)."""
    from mnemosync.kernel.codec import entry_from_proto

    from helpers import RawAgent

    agent = RawAgent(server.address, "writer")
    for content in contents:
        agent.add(content)
    return [entry_from_proto(e) for e in agent.sync(0)]


def test_a_page_whose_entries_do_not_give_its_checkpoints_root_is_not_applied(server, tmp_path):
    from dataclasses import replace

    from mnemosync.agent.errors import TamperDetected

    entries = _received(server, "one", "two")
    assert entries[-1].checkpoint is not None and entries[0].checkpoint is None
    other = replace(entries[-1].checkpoint, root="00" * 32)
    cache = Cache(tmp_path / "cache.db")
    with pytest.raises(TamperDetected, match="the server's checkpoint of 2 entries has root 0000000000000000, but "
                                             "the 2 entries this agent holds give"):
        cache.apply([entries[0], replace(entries[1], checkpoint=other)])
    assert cache.offset == 0
    assert cache.apply(entries) == 2 and cache.root() == entries[-1].checkpoint.root
    cache.close()


def test_a_blanked_entry_is_refused_unless_its_redaction_comes_with_it(server, tmp_path):
    from dataclasses import replace

    from mnemosync.agent.errors import TamperDetected
    from mnemosync.kernel.entry import REDACTED_TEXT

    entries = _received(server, "one", "two")
    blanked = replace(entries[0], payload={**entries[0].payload, "content": REDACTED_TEXT}, payload_salt="",
                      redacted_by=2)
    cache = Cache(tmp_path / "cache.db")
    with pytest.raises(TamperDetected, match="entry 1 arrived blanked by redaction 2 without that redaction"):
        cache.apply([blanked, entries[1]])
    assert cache.offset == 0
    cache.close()


def test_a_cache_from_before_the_transparency_log_refills_and_its_old_last_entry_must_come_back_unchanged(
        server, tmp_path):
    from mnemosync.agent.errors import TamperDetected
    from mnemosync.kernel import db, migrations

    entries = _received(server, "one", "two", "three")

    def version_2_cache(path, last_hash: str) -> None:
        conn = db.connect(path, synchronous="normal").conn
        migrations.migrate(conn, CACHE_STEPS[:2])
        conn.execute("UPDATE cache_state SET value = 2 WHERE key = 'offset'")
        conn.execute("UPDATE cache_state SET value = ? WHERE key = 'last_hash'", (last_hash,))
        conn.close()

    version_2_cache(tmp_path / "a.db", entries[1].hash)
    cache = Cache(tmp_path / "a.db")
    assert cache.offset == 0 and cache.apply(entries) == 3
    cache.close()
    version_2_cache(tmp_path / "b.db", "ab" * 32)
    cache = Cache(tmp_path / "b.db")
    with pytest.raises(TamperDetected, match="the server's entry 2 .* is not the last entry this cache had applied "
                                             "before it was refilled"):
        cache.apply(entries)
    assert cache.offset == 0
    cache.close()
