"""The server database's schema versions: the migration steps of its SQLite file, in order.

Applied by `mnemosync.kernel.migrations.migrate` when the store opens. Steps are
append-only: never edit a released step, add a new one.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from mnemosync.kernel import projections
from mnemosync.kernel.migrations import Step, execute_script
from mnemosync.server import changelog, merkle_log, usage_stats


def _server_v1(conn) -> None:
    execute_script(conn, changelog.SCHEMA)
    execute_script(conn, projections.SCHEMA)
    execute_script(
        conn,
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE agent_offsets (
            agent_id TEXT PRIMARY KEY,
            acked_seq INTEGER NOT NULL,
            acked_at_ms INTEGER NOT NULL
        );
        """
    )


def _server_v2(conn) -> None:
    """Authorities and conflict marks on entries; trust labels, history and conflicts in the
    projections. (Version 3 then folds the projections again, so memories written before get their
    history and every new column its value; the fold reads the changelog as version 3 has it.)"""
    execute_script(conn, changelog.SCHEMA_V2)
    execute_script(conn, projections.SCHEMA_V2)


def _server_v3(conn) -> None:
    """Salted payload commitments, redaction and signatures (see `mnemosync.kernel.entry`). Entries already
    written keep their encoding; new ones are redactable. (Version 5 then folds the projections again, reading
    the changelog as it has it.)"""
    execute_script(conn, changelog.SCHEMA_V3)


def _server_v4(conn) -> None:
    """A memory's own event time (`projections.SCHEMA_V3`); no earlier entry carries one, so nothing is refolded."""
    execute_script(conn, projections.SCHEMA_V3)


def _server_v5(conn) -> None:
    """Provable redactions and the transparency log: a redact entry records what it blanked
    (`mnemosync.kernel.blanking`), the Merkle tree over every entry is kept beside the changelog
    (`mnemosync.server.merkle_log`, built here for the entries already written, with progress in the log), and
    the log gets its id, which every checkpoint names. (This step folded the projections again for databases
    from before version 3, whose new columns need values; version 7 now does, with the fold of today.)"""
    execute_script(conn, changelog.SCHEMA_V4)
    execute_script(conn, merkle_log.SCHEMA)
    conn.execute("INSERT INTO meta (key, value) VALUES ('log_id', ?)", (str(uuid.uuid4()),))
    merkle_log.build(conn)


def _server_v6(conn) -> None:
    """The memory lifecycle (issue 15): the lifecycle projection folded from decay entries
    (`projections.SCHEMA_V4`; no earlier entry is one, so nothing is refolded) and the access statistics
    (`mnemosync.server.usage_stats`, server state)."""
    execute_script(conn, projections.SCHEMA_V4)
    execute_script(conn, usage_stats.SCHEMA)


def _server_v7(conn) -> None:
    """Typed links with weights and reasons (`projections.SCHEMA_V5`, issue 16). (This step folded the
    projections again, so links made with relation names from before the edge types read as their types
    (`mnemosync.kernel.links.edge_type`); version 11 now does, with the fold of today, which writes the columns
    and reads the tables of the versions after it.)"""
    execute_script(conn, projections.SCHEMA_V5)


def _server_v8(conn) -> None:
    """Who wrote the text a memory shows, apart from its last editor (`projections.SCHEMA_V6`, issue 33): only a
    fold of every entry knows, so version 11 folds the projections again."""
    execute_script(conn, projections.SCHEMA_V6)


def _server_v9(conn) -> None:
    """The agents' daily use quotas (`usage_stats.QUOTA_SCHEMA`, issue 33): server state, like the statistics."""
    execute_script(conn, usage_stats.QUOTA_SCHEMA)


def _server_v10(conn) -> None:
    """Memories' sources and their verification (`projections.SCHEMA_V7`, issue 31)."""
    execute_script(conn, projections.SCHEMA_V7)


def _server_v11(conn) -> None:
    """Procedure memories' steps, preconditions and postconditions (`projections.SCHEMA_V8`, issue 31). The
    projections are folded again, with the fold of today, which reads every table the versions before added:
    links made with relation names from before the edge types read as their types
    (`mnemosync.kernel.links.edge_type`), every memory gets the author of the text it shows (version 8), and
    every column added since version 1 gets its value. The fold of today also reads the origins table of version
    12, so it is made here first (version 12 then finds it)."""
    execute_script(conn, projections.SCHEMA_V8)
    execute_script(conn, projections.SCHEMA_V9)
    projections.clear(conn)
    for entry in changelog.iterate(conn):
        projections.apply(conn, entry)


def _server_v12(conn) -> None:
    """Imported memories' origin (`projections.SCHEMA_V9`, issue 41); no earlier entry carries one."""
    execute_script(conn, projections.SCHEMA_V9)


SERVER_STEPS: Sequence[Step] = (_server_v1, _server_v2, _server_v3, _server_v4, _server_v5, _server_v6,
                                _server_v7, _server_v8, _server_v9, _server_v10, _server_v11, _server_v12)
