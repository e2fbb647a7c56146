"""Ed25519 operation signatures end to end: signing agents with the real model, verify against the CA,
forgery under a recomputed chain, and redaction keeping signatures valid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from mnemosync.kernel import entry
from mnemosync.server import ca

from helpers import rewrite_changelog, snapshot


def test_a_signing_agent_writes_signed_entries_and_verify_checks_them_against_the_ca(
        signing_server, signing_pki, signing_client, tmp_path):
    with signing_client("signer") as client:
        added = client.add("Deploys go through ops/deploy.sh")
        client.update(added.memory_id, importance=0.8)
        assert client.cache.snapshot() == snapshot(signing_server.store)  # signed entries fold like any other
    entries = [e for e in _all(signing_server) if e.agent_id == "signer"]
    [issued] = [i for i in ca.issued_keys(signing_pki) if i.agent_id == "signer"]
    assert len(entries) == 2 and all(e.signature and e.signer_key == issued.signing_key for e in entries)
    report = signing_server.store.log.verify(ca.issued_keys(signing_pki))
    assert report.ok and report.signed == 2
    other_ca = tmp_path / "other-ca"
    ca.init_ca(other_ca)
    ca.issue_agent(other_ca, "signer", authority=3, scopes=["user"], signing=True)
    wrong = signing_server.store.log.verify(ca.issued_keys(other_ca))
    assert not wrong.ok and "a key the CA never issued to agent signer" in wrong.problem


def _all(running) -> list[entry.Entry]:
    return list(running.store.log.read(0, 1000))


def test_verify_finds_an_entry_forged_under_a_recomputed_hash_chain(signing_server, signing_pki, signing_client):
    """Whoever holds the database can rewrite an entry and recompute every hash after it; only the
    agent's signature, which they cannot make, shows the forgery."""
    with signing_client("signer") as client:
        client.add("Releases happen on Tuesdays")
        client.add("Alice owns the billing service")
    path = signing_server.store.path
    signing_server.store.close()
    _forge(path, seq=1, content="Releases happen on Fridays")
    result = subprocess.run([sys.executable, "-m", "mnemosync.cli", "verify", "--data-dir",
                             str(path.parent), "--ca-dir", str(signing_pki), "--json"],
                            capture_output=True, text=True, timeout=120)
    report = json.loads(result.stdout)
    assert result.returncode == 1, result.stderr
    assert (report["first_bad_seq"], report["problem"]) == (1, "entry 1's signature by agent signer does not verify")


def _forge(path: Path, *, seq: int, content: str) -> None:
    """Rewrites entry `seq`'s content with a fresh commitment and re-hashes the chain and tree from there."""
    def change(e: entry.Entry) -> entry.Entry:
        payload = {**e.payload, "content": content}
        return replace(e, payload=payload, payload_commit=entry.commit_payload(payload, e.payload_salt))

    rewrite_changelog(path, seq, change)


def test_a_redaction_keeps_the_writers_signatures_valid(signing_server, signing_pki, signing_client):
    with signing_client("signer") as signer, signing_client("root") as root:
        added = signer.add("The vault combination is 31-41-59")
        root.redact(added.memory_id, "leaked vault combination")
    report = signing_server.store.log.verify(ca.issued_keys(signing_pki))
    assert report.ok and (report.signed, report.redacted) == (2, 1)
