"""Filling a new or far-behind cache from the server's snapshot instead of replaying the changelog (issue 30).

`from_snapshot` asks for the newest snapshot (`mnemosync.kernel.snapshot`) and installs it only after every
check passes: the manifest is signed by the checkpoint key this agent trusts, for the log it follows; its
Merkle frontier gives its root and its last entry is in that tree; the server's signed checkpoint at the same
position has the same root (otherwise the snapshot belongs to a fork of the log); for an agent that already
accepted a checkpoint, the consistency proof shows the snapshot's log extends it; and every section received
hashes to its digest. The image is downloaded into a file beside the cache first; a broken connection resumes
where it stopped (`SnapshotRequest.offset`). Any failed check is refused with a message that says what did not
match, nothing of the snapshot is applied, and the caller replays the changelog as before.
"""

from __future__ import annotations

import logging
from pathlib import Path

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import ServerUnavailable
from mnemosync.agent.remote import Remote
from mnemosync.agent.transparency import trusted_key
from mnemosync.kernel import merkle, snapshot
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
    manifest, _, first = next(stream)
    if manifest is None:
        raise SnapshotRefused(f"the server at {remote.address} began its snapshot without a manifest")
    if manifest.size <= cache.offset:
        stream.close()
        return None
    accepted = cache.checkpoint
    reply = remote.checkpoint(manifest.size, accepted.size if accepted and accepted.size <= manifest.size else 0)
    key = trusted_key(cache, remote, reply)
    _check(cache, remote, manifest, reply, key)
    part = cache.path.with_name(f"{cache.path.name}.snapshot")
    try:
        _download(remote, manifest, stream, first, part)
        with open(part, "rb") as image:
            installed = cache.install_snapshot(manifest, reply.checkpoint, key, snapshot.served_lines(image))
    finally:
        part.unlink(missing_ok=True)
    log.info("installed the server's %s: %d memories, continuing from entry %d", manifest.describe(), installed,
             manifest.size + 1)
    return manifest


def _check(cache: Cache, remote: Remote, manifest: Manifest, reply, key: str) -> None:
    """Every check of the module docstring but the digests (those run as the bytes arrive)."""
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


def _download(remote: Remote, manifest: Manifest, stream, first: bytes, part: Path) -> None:
    """Writes this agent's image into `part`, checking each section's digest as it arrives and resuming a broken
    stream up to `RESUMES` times."""
    receiver = snapshot.Receiver(manifest)
    with open(part, "wb") as out:
        def take(data: bytes) -> None:
            receiver.feed(data)
            out.write(data)

        take(first)
        resumes = 0
        while True:
            try:
                for _, offset, data in stream:
                    if offset != receiver.received:
                        raise SnapshotRefused(f"the server sent bytes from {offset} of the {manifest.describe()} "
                                              f"where {receiver.received} were expected")
                    take(data)
                break
            except ServerUnavailable as exc:
                resumes += 1
                if resumes > RESUMES:
                    raise
                log.info("the snapshot download broke after %d bytes (%s); resuming", receiver.received, exc)
                stream = remote.snapshot(manifest.size, receiver.received)
                again, _, data = next(stream)
                if again is None or again.signature != manifest.signature:
                    raise SnapshotRefused(
                        f"the server resumed with another snapshot than the {manifest.describe()}") from None
                take(data)
        receiver.finish()
