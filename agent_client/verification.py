"""Verifying memories against a working tree (issue 31): the agent's half of HaluMem source verification.

For each live memory of the chosen scopes that cites sources, the cited files
are read under a root (the project's working tree) and checked against the
hashes recorded when the memory was written (`mnemosync.kernel.source_refs.check`).
A status that differs from the last recorded one is written as a verify entry
by this agent (`WritePath.verify`), so every cache folds the same status and
ranks by it (x0.7 stale, x0.3 contradicted); an unchanged status writes
nothing, so running it often costs the log nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mnemosync.kernel import source_projection, source_refs
from mnemosync.kernel.errors import StaleVersion


@dataclass(frozen=True)
class Outcome:
    """One memory's verification.

    Attributes:
        memory_id: The memory.
        status: What the check found (see `source_refs.STATUSES`).
        paths: The cited paths that changed or are gone.
        previous: The status recorded before ("" when never verified).
        written: Whether a verify entry was written (the status changed).
        seq: The entry's seq (0 when none was written).
    """

    memory_id: str
    status: str
    paths: tuple[str, ...]
    previous: str
    written: bool
    seq: int = 0


def verify_memories(client, *, scopes: Sequence[str] = (), root: Path | str | None = None) -> list[Outcome]:
    """Checks every sourced live memory of `scopes` (all the cache holds when empty) against `root` (default: the
    working directory), writing a verify entry for each status that changed.

    The cache is brought up to date first, so the versions verified are the server's. A memory another agent
    changes between the check and the write is left for the next run (its new sources need a new check).

    Raises:
        ServerUnavailable: the server cannot be reached (verifications are never queued).
    """
    base = Path(root) if root is not None else Path.cwd()
    client.sync()
    ids = client.cache.read(source_projection.sourced, scopes=tuple(scopes))
    outcomes = []
    for memory_id in ids:
        memory = client.cache.get(memory_id)
        found = source_refs.check(base, list(memory.sources))
        previous = memory.verification.status if memory.verification is not None else ""
        before = memory.verification.paths if memory.verification is not None else ()
        if (found.status, found.paths) == (previous, before):
            outcomes.append(Outcome(memory_id, found.status, found.paths, previous, False))
            continue
        try:
            result = client.verify(memory_id, found.status, found.paths, base_version=memory.version)
        except StaleVersion:
            outcomes.append(Outcome(memory_id, found.status, found.paths, previous, False))
            continue
        outcomes.append(Outcome(memory_id, found.status, found.paths, previous, True, result.seq))
    return outcomes
