"""Filling a new or far-behind cache from the server's snapshot instead of replaying the changelog (issue 30).

`from_snapshot` asks for the newest snapshot (`mnemosync.kernel.snapshot`) and installs it only after every
check passes: the manifest is signed by the checkpoint key this agent trusts, for the log it follows; its
Merkle frontier gives its root and its last entry is in that tree; the server's signed checkpoint at the same
position has the same root (otherwise the snapshot belongs to a fork of the log); for an agent that already
accepted a checkpoint, the consistency proof shows the snapshot's log extends it; and the file received hashes
to its signed digest.

What arrives is a ready SQLite file of the projections this agent may read (signed: see
`mnemosync.kernel.snapshot.ReplicaSeal`), downloaded beside the cache, its digest checked as it arrives and a
broken connection resumed where it stopped (`SnapshotRequest.offset`); the cache then checks the file's schema
and moves it into place (`Cache.adopt_replica`), with no row inserted. Any failed check is refused with a
message that says what did not match, nothing of the snapshot is applied, and the caller replays the changelog
as before.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.remote import Remote
from mnemosync.agent.transparency import trusted_key
from mnemosync.kernel import merkle
from mnemosync.kernel.errors import NotFound
from mnemosync.kernel.snapshot import Manifest, SnapshotRefused

log = logging.getLogger(__name__)

RESUMES = 3
"""How many times a broken download resumes before the agent gives up on the snapshot."""


def from_snapshot(cache: Cache, remote: Remote) -> Manifest | None:
    """Installs the server's newest snapshot into `cache` when it is ahead of it and checks out.

    Returns:
        The installed snapshot's manifest, or None when there was none to use or it was refused (the reason is
        logged; the caller then replays the changelog).

    Raises:
        ServerUnavailable: the server cannot be reached (neither a snapshot nor a replay can go on).
    """
    try:
        return install(cache, remote)
    except NotFound as exc:
        log.info("no snapshot to start from (%s); replaying the changelog", exc)
    except SnapshotRefused as exc:
        log.warning("refused the server's snapshot: %s. Nothing of it was applied; replaying the changelog "
                    "instead", exc)
    return None


def install(cache: Cache, remote: Remote, *, size: int = 0) -> Manifest | None:
    """`from_snapshot` without the fallback: installs the snapshot at `size` (0: the newest), or returns None when
    it is not ahead of the cache.

    Raises:
        SnapshotRefused: a check failed (the message says which); nothing was applied.
        NotFound: the server has no such snapshot.
        ServerUnavailable: the server cannot be reached.
    """
    stream = remote.snapshot(size, 0)
    first = next(stream)
    manifest, seal = first.manifest, first.seal
    if manifest is None or seal is None:
        raise SnapshotRefused(f"the server at {remote.address} began its snapshot without a manifest")
    if manifest.size <= cache.offset:
        close = getattr(stream, "close", None)  # a generator's: ends the call on the server too
        if close is not None:
            close()
        return None
    accepted = cache.checkpoint
    reply = remote.checkpoint(manifest.size, accepted.size if accepted and accepted.size <= manifest.size else 0)
    key = trusted_key(cache, remote, reply)
    _check(cache, remote, manifest, reply, key)
    problem = seal.problem(manifest, key)
    if problem:
        raise SnapshotRefused(problem)
    part = cache.path.with_name(f"{cache.path.name}.snapshot")
    try:
        _download(remote, manifest, seal, stream, first.data, part)
        installed = cache.adopt_replica(part, manifest, reply.checkpoint, key)
    finally:
        part.unlink(missing_ok=True)
    log.info("installed the server's %s: %d memories, continuing from entry %d", manifest.describe(), installed,
             manifest.size + 1)
    return manifest


def _check(cache: Cache, remote: Remote, manifest: Manifest, reply, key: str) -> None:
    """Every check of the module docstring but the file's digest (that one runs as the bytes arrive)."""
    checkpoint, accepted = reply.checkpoint, cache.checkpoint
    if not checkpoint.signed_by(key):
        raise SnapshotRefused(f"the server's checkpoint at entry {manifest.size} is not signed by its checkpoint "
                              f"key {key[:16]}…")
    problem = manifest.problem(key)
    if problem:
        raise SnapshotRefused(problem)
    if cache.log_id and manifest.log_id != cache.log_id:
        raise SnapshotRefused(f"the {manifest.describe()} belongs to log {manifest.log_id}, but this agent follows "
                              f"log {cache.log_id}")
    if checkpoint.size != manifest.size or checkpoint.root != manifest.root or checkpoint.log_id != manifest.log_id:
        raise SnapshotRefused(f"the {manifest.describe()} is not of the server's signed log, whose first "
                              f"{checkpoint.size} entries have root {checkpoint.root[:16]}…: it belongs to a fork "
                              "of the log or names the wrong position")
    if accepted is not None and accepted.size <= manifest.size and not merkle.verify_consistency(
            accepted.size, bytes.fromhex(accepted.root), manifest.size, bytes.fromhex(manifest.root),
            reply.consistency):
        raise SnapshotRefused(f"the {manifest.describe()} does not extend the checkpoint this agent accepted "
                              f"({accepted.describe()}): the server's history was rewritten")
    if accepted is not None and accepted.size > manifest.size:
        raise SnapshotRefused(f"the {manifest.describe()} is older than the checkpoint this agent accepted "
                              f"({accepted.describe()})")


def _download(remote: Remote, manifest: Manifest, seal, stream, first: bytes, part: Path) -> None:
    """Writes the replica file into `part`, hashing it as it arrives and resuming a broken stream up to `RESUMES`
    times; its digest and size must be the seal's."""
    digest, received = hashlib.sha256(), 0
    with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:  # private from the start
        def take(data: bytes) -> None:
            nonlocal received
            if received + len(data) > seal.length:
                raise SnapshotRefused(f"the server sent more than the {seal.length} bytes of the {manifest.describe()}")
            digest.update(data)
            out.write(data)
            received += len(data)

        take(first)
        resumes = 0
        while True:
            try:
                for chunk in stream:
                    if chunk.offset != received:
                        raise SnapshotRefused(f"the server sent bytes from {chunk.offset} of the "
                                              f"{manifest.describe()} where {received} were expected")
                    take(chunk.data)
                break
            except ServerUnavailable as exc:
                resumes += 1
                if resumes > RESUMES:
                    raise
                log.info("the snapshot download broke after %d bytes (%s); resuming", received, exc)
                stream = remote.snapshot(manifest.size, received)
                again = next(stream)
                if again.seal is None or again.seal.signature != seal.signature:
                    raise SnapshotRefused(
                        f"the server resumed with another snapshot than the {manifest.describe()}") from None
                take(again.data)
    if received != seal.length or digest.hexdigest() != seal.sha256:
        raise SnapshotRefused(f"the replica file of the {manifest.describe()} does not match its digest "
                              f"{seal.sha256[:16]} ({received} bytes hash to {digest.hexdigest()[:16]}): its "
                              "content was changed")
