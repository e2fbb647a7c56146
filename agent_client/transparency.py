"""The agent's side of the transparency log: whose checkpoints it trusts, and the check at every sync.

Before every catch-up and every (re)connection of live updates, `check_log`
asks the server for a signed checkpoint of exactly the entries this agent has
applied, with a consistency proof from the checkpoint it accepted last
(`mnemosync.kernel.merkle`). The proof shows the server's log still begins with
everything the agent accepted; the checkpoint's root must equal the root the
agent computes over its own entries. So a rewrite of any entry the agent has
ever seen, however deep and with every hash recomputed, is found at its next
sync, and nothing is applied from such a server. Pages of entries are then
checked against the checkpoints that close them as they are applied
(`mnemosync.agent.cache`).

A changelog row edited behind the server's back *without* touching its tree
(entry 1 rewritten, two entries swapped, one deleted, a forged redaction mark)
leaves that root as it was. So each check also asks the server to show again
`SPOT_CHECKS` entries this agent applied, drawn at random, each with its audit
path in the checkpoint just verified: an entry that is missing, moved, no longer
hashes or commits to what it holds, is not the leaf this agent applied, or shows
a blanking its redaction does not prove is refused like a rewrite. With n entries
applied, a single edited one is drawn with probability SPOT_CHECKS / n at each
check; the server's own background audit walks them all
(`mnemosync.server.chain_audit`).

Whose key. Under mTLS the server sends its certificate with the checkpoint;
the agent checks that its own CA issued it and takes the checkpoint key the
certificate names (so a key rotated with a new server certificate is trusted
too). In development mode (no certificate) the agent trusts the key it sees
first, warns loudly that it did, and refuses any other key afterwards: a
server already tampered with before that first sync cannot be told apart.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import HistoryMismatch, TamperDetected
from mnemosync.agent.remote import Remote
from mnemosync.kernel import blanking, merkle
from mnemosync.kernel.checkpoint import Attested, Checkpoint, CheckpointReply
from mnemosync.kernel.errors import OutOfRange

log = logging.getLogger(__name__)

SPOT_CHECKS = 8
"""Entries this agent applied before that each check asks the server to prove again, drawn at random."""
_RANDOM = random.SystemRandom()  # a server cannot guess which entries the next check looks at


def check_log(cache: Cache, remote: Remote, head: int | None = None) -> Checkpoint:
    """Checks that the server's log extends everything this cache accepted and applied; accepts the checkpoint.

    Args:
        cache: The agent's cache.
        remote: The server.
        head: The server's head if already known (for messages).

    Returns:
        The verified checkpoint: of the cache's offset, now the accepted one, or, for an empty cache, of the
        server's head (then only its key and log id are pinned).

    Raises:
        HistoryMismatch: the server no longer has entries this agent applied (an older backup), or serves
            another log.
        TamperDetected: the server's log does not extend what this agent accepted, or its checkpoint is not
            signed by the key this agent trusts.
        ServerUnavailable: the server cannot be reached.
    """
    offset, root, accepted = cache.position()  # one read: the live stream may apply entries meanwhile
    advice = (f"Nothing was applied. The operator must check the server (mnemosync verify, and which backup it "
              f"was restored from); only if the server's present history is the one to keep, delete this agent's "
              f"cache {cache.path} so it is rebuilt from the server.")
    spots = sorted(_RANDOM.sample(range(1, offset + 1), min(SPOT_CHECKS, offset)))
    try:
        reply = remote.checkpoint(offset, accepted.size if accepted else 0, spots)
    except OutOfRange:
        at = f" (its head is {head if head is not None else remote.stats().head_seq})"
        raise HistoryMismatch(
            f"the server at {remote.address} no longer has changelog entry {offset}, which this agent already "
            f"applied{at}: it was restored from an older backup or its history was cut. {advice}") from None
    checkpoint = reply.checkpoint
    key = _trusted_key(cache, remote, reply)
    if not checkpoint.signed_by(key):
        raise TamperDetected(f"the server at {remote.address} sent a checkpoint ({checkpoint.describe()}) that is "
                             f"not signed by its checkpoint key {key[:16]}…. {advice}")
    if cache.log_id and checkpoint.log_id != cache.log_id:
        raise HistoryMismatch(f"this agent's cache holds log {cache.log_id}, but the server at {remote.address} "
                              f"serves log {checkpoint.log_id} (another or a re-created database). {advice}")
    if accepted is not None and not merkle.verify_consistency(
            accepted.size, bytes.fromhex(accepted.root), checkpoint.size, bytes.fromhex(checkpoint.root),
            reply.consistency):
        raise TamperDetected(
            f"the server at {remote.address} has a different changelog entry {accepted.size} or earlier than the "
            f"ones this agent applied: its signed log ({checkpoint.describe()}) does not extend the checkpoint "
            f"this agent accepted ({accepted.describe()}), so the server's history was rewritten. {advice}")
    if offset and (checkpoint.size != offset or checkpoint.root != root):
        raise TamperDetected(
            f"the server at {remote.address} has a different changelog entry {offset} or earlier than the ones "
            f"this agent applied (its log of {checkpoint.size} entries has root {checkpoint.root[:16]}, this "
            f"agent's {root[:16]}): the server's history was rewritten. {advice}")
    if reply.proven:  # a server older than spot checks proves nothing
        _spot_check(cache, remote.address, spots, reply.proven, advice)
    cache.accept(checkpoint if offset else None, key, checkpoint.log_id)
    return checkpoint


def _spot_check(cache: Cache, address: str, asked: list[int], proven: tuple[Attested, ...], advice: str) -> None:
    """Each entry the server proved must be the one this agent applied at that seq: in the tree of the checkpoint
    whose root is this agent's own, its own hash and payload commitment sound, a blanking it shows proven by its
    redaction (as `mnemosync.agent.cache` checks entries when it applies them).

    Raises:
        TamperDetected: naming the first entry that is not.
    """
    if len(proven) != len(asked):
        raise TamperDetected(f"the server at {address} proved {len(proven)} entries where this agent asked for "
                             f"{len(asked)} (a spot check of entries applied before). {advice}")
    for seq, shown in zip(asked, proven, strict=True):
        entry = shown.entry
        if entry.seq != seq:
            problem = f"it shows entry {entry.seq} where entry {seq} was" if entry.seq else f"it shows no entry {seq}"
        else:
            problem = "" if entry.withheld else entry.problem()
            if not problem and not merkle.verify_inclusion(merkle.leaf_hash(entry.hash), seq - 1, shown.checkpoint.size,
                                                           shown.path, bytes.fromhex(shown.checkpoint.root)):
                problem = f"its entry {seq} is not the one in the log this agent accepted"
            if not problem and entry.redacted_by and not entry.withheld:
                problem = _blanking_problem(cache, entry)
        if problem:
            raise TamperDetected(f"the server at {address} no longer holds the changelog this agent applied: "
                                 f"{problem} (a spot check of entries applied before). {advice}")


def _blanking_problem(cache: Cache, entry) -> str:
    redaction = entry.redaction
    if redaction is None:
        return f"its entry {entry.seq} is blanked by redaction {entry.redacted_by}, which it does not show"

    def conflict_of(conflict_id: int) -> tuple[str, str] | None:
        found = cache.conflict(conflict_id)
        return (found.kind, found.other_memory_id) if found is not None else None

    return redaction.problem(cache.log_key or None) or blanking.problem(entry, redaction.entry, conflict_of)


def trusted_key(cache: Cache, remote: Remote, reply: CheckpointReply) -> str:
    """The key to check `reply` (and a snapshot signed beside it) against; see `_trusted_key`."""
    return _trusted_key(cache, remote, reply)


def _trusted_key(cache: Cache, remote: Remote, reply: CheckpointReply) -> str:
    """The checkpoint key to check `reply` against: the one the server certificate names (mTLS), else the pinned
    one, else (first sync in development mode) the one offered, with a loud warning."""
    pinned, offered = cache.log_key, reply.checkpoint.key
    if reply.certificate and remote.tls is not None:
        vouched = _vouched_key(remote, reply.certificate, remote.tls.ca_cert)
        if pinned and vouched != pinned:
            log.warning("the server's checkpoint key changed from %s… to %s…, named by a server certificate "
                        "issued by this agent's CA", pinned[:16], vouched[:16])
        return vouched
    if pinned:
        if offered != pinned:
            raise TamperDetected(
                f"the server at {remote.address} signs its checkpoints with key {offered[:16]}…, but this agent "
                f"trusted {pinned[:16]}… before: it is not the same server or its key was replaced. With mTLS the "
                f"CA vouches for a new key (mnemosync ca issue-server); otherwise delete this agent's cache "
                f"{cache.path} once the operator confirms the new key.")
        return pinned
    log.warning("TRUST ON FIRST USE: now trusting checkpoint key %s… of %s (no server certificate names one%s); "
                "use mTLS (`mnemosync ca issue-server`) to have the CA vouch for it", offered[:16], remote.address,
                "" if remote.tls is None else ": it predates checkpoints")
    return offered


def _vouched_key(remote: Remote, der: bytes, ca_cert: Path) -> str:
    """The checkpoint key named by a server certificate this agent's CA (`ca_cert`, PEM) issued.

    Raises:
        TamperDetected: the certificate is not a server certificate issued by this agent's CA, or names no key.
    """
    from cryptography import x509  # only with a CA: 6 MB an agent on a development server never needs
    from cryptography.exceptions import InvalidSignature
    from cryptography.x509.oid import ExtendedKeyUsageOID

    from mnemosync.kernel import certificates

    try:
        cert = x509.load_der_x509_certificate(der)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_cert.read_bytes()))
        usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except (ValueError, TypeError, InvalidSignature, OSError, x509.ExtensionNotFound) as exc:
        raise TamperDetected(f"the server at {remote.address} vouched for its checkpoint key with a certificate "
                             f"that this agent's CA did not issue ({exc or type(exc).__name__})") from None
    key = certificates.checkpoint_key(cert)
    if ExtendedKeyUsageOID.SERVER_AUTH not in usage or not key:
        raise TamperDetected(f"the certificate the server at {remote.address} sent is not a server certificate "
                             "naming a checkpoint key")
    return key
