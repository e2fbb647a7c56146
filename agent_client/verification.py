"""Verifying memories against a working tree (issue 31): the agent's half of HaluMem source verification.

For each live memory of the chosen scopes that cites sources, the cited files
are read under a root (the project's working tree) and checked against the
hashes recorded when the memory was written (`mnemosync.kernel.source_refs.check`).
A status that differs from the last recorded one is written as a verify entry
by this agent (`WritePath.verify`), so every cache folds the same status and
ranks by it (x0.7 stale, x0.3 contradicted); an unchanged status writes
nothing, so running it often costs the log nothing. A memory of a stronger authority than this agent's is
checked and reported but not recorded: verifying is governed like changing (`written` is False).

A memory is only judged against a tree it can belong to. The root must be a project's directory: not the file
system's root, the home directory or a folder above it (a mistyped one would mark everything unverified, a
broad one would let anyone who can write a memory ask about any file this user can read). When the root is a
git working tree and a memory's sources recorded commits that this repository does not have, the memory
describes another repository: it is reported as `elsewhere` and nothing is written, rather than "contradicted"
because its files are not in this tree. Cited files are read inside the root only, never through a link out of
it, and never one git ignores (`mnemosync.agent.source_tree`): the status written back would otherwise answer a
guessed hash of a file nobody shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mnemosync.agent.source_tree import WorkingTree
from mnemosync.kernel import source_projection, source_refs
from mnemosync.kernel.errors import InvalidArgument, PermissionDenied, StaleVersion
from mnemosync.kernel.one_line import one_line

ELSEWHERE = "elsewhere"
"""The outcome of a memory whose recorded commits the tree's repository lacks: not checked, nothing written."""


@dataclass(frozen=True)
class Outcome:
    """One memory's verification.

    Attributes:
        memory_id: The memory.
        status: What the check found (see `source_refs.STATUSES`), or ELSEWHERE.
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
        InvalidArgument: `root` is not a directory.
        ServerUnavailable: the server cannot be reached (verifications are never queued).
    """
    base = project_root(root if root is not None else Path.cwd())
    client.sync()
    ids = client.cache.read(source_projection.sourced, scopes=tuple(scopes))
    repository = WorkingTree(base)
    outcomes = []
    for memory_id in ids:
        memory = client.cache.get(memory_id)
        previous = memory.verification.status if memory.verification is not None else ""
        if not repository.may_hold(memory.sources):
            outcomes.append(Outcome(memory_id, ELSEWHERE, (), previous, False))
            continue
        found = source_refs.check(base, list(memory.sources), readable=repository.readable)
        before = memory.verification.paths if memory.verification is not None else ()
        if (found.status, found.paths) == (previous, before):
            outcomes.append(Outcome(memory_id, found.status, found.paths, previous, False))
            continue
        try:
            result = client.verify(memory_id, found.status, found.paths, base_version=memory.version)
        except (StaleVersion, PermissionDenied):  # changed meanwhile, or written by a stronger authority
            outcomes.append(Outcome(memory_id, found.status, found.paths, previous, False))
            continue
        outcomes.append(Outcome(memory_id, found.status, found.paths, previous, True, result.seq))
    return outcomes


def project_root(root: Path | str) -> Path:
    """`root` as the project directory sources are checked in (see the module docstring).

    Raises:
        InvalidArgument: it is not a directory, or it is the file system's root, the home directory or above it.
    """
    base = Path(root).expanduser()
    if not base.is_dir():
        raise InvalidArgument(f"root {one_line(base, 200)!r} is not a directory: give the project's working tree")
    real, home = base.resolve(), Path.home().resolve()
    if real == Path(real.anchor) or home.is_relative_to(real):
        raise InvalidArgument(f"root {one_line(base, 200)!r} is not a project's working tree (it holds the home "
                              "directory or is the file system's root): give the project's own folder")
    return base
