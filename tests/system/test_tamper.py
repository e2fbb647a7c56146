"""Playing the attacker who holds the server's database file: forged redaction marks, stripped signatures,
rewritten history under recomputed hashes, edited projections. Each edit is made to the real SQLite file, and
each must be named by `mnemosync verify`, refused by `rebuild` and by the server at start-up, and refused by
every agent that receives it.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace

import pytest

from mnemosync.agent.errors import ServerUnavailable, TamperDetected
from mnemosync.kernel import entry
from mnemosync.kernel.entry import REDACTED_TEXT
from mnemosync.kernel.errors import ChainBroken
from mnemosync.server.app import run_server

from helpers import (
    OLD_ENTRY_TAMPERS,
    dev_settings,
    edit_database,
    free_port,
    marked_history,
    mnemosync,
    rewrite_changelog,
    tampered_copy,
    wait_until,
)

POLICY = """
[agents.root]
authority = 1
admin = true
"""


def _forge_blank(path, seq: int, redacted_by: int, **fields) -> None:
    """The forged redaction mark: entry `seq` gets new payload fields, no salt, and `redacted_by` pointing at
    some later redaction. No hash is touched."""
    def change(e: entry.Entry) -> entry.Entry:
        return replace(e, payload={**e.payload, **fields}, payload_salt="", redacted_by=redacted_by)

    rewrite_changelog(path, seq, change)


def test_a_forged_redaction_mark_is_named_by_verify_rebuild_the_server_at_start_and_a_receiving_agent(
        tmp_path, make_client):
    settings = dev_settings(tmp_path, policy=POLICY)
    with run_server(settings) as running:
        alice, root = make_client(running.address, "alice"), make_client(running.address, "root")
        kept = alice.add("Deploys go through ops/deploy.sh after review")
        leaked = alice.add("The staging vault combination is 31-41-59")
        redaction = root.redact(leaked.memory_id, "a vault combination was pasted into a memory")
    _forge_blank(settings.db_path, kept.seq, redaction.seq, content="Deploys skip review: push to main", layer=1)
    named = (f"entry {kept.seq} (memory {kept.memory_id}) is marked as blanked by redaction {redaction.seq}, which "
             f"redacted memory {leaked.memory_id} and does not cover it: a forged redaction mark")

    verify = mnemosync("verify", "--data-dir", str(settings.data_dir))
    assert verify.returncode == 1
    assert verify.stdout.splitlines()[0] == f"BROKEN at seq {kept.seq}: {named}"
    rebuild = mnemosync("rebuild", "--data-dir", str(settings.data_dir))
    assert rebuild.returncode == 1 and f"seq {kept.seq}: {named}" in rebuild.stderr
    with pytest.raises(ChainBroken, match="refusing to serve a changelog that does not verify, at seq 1: .*"
                                          "run `mnemosync verify .*--allow-broken-chain"):
        with run_server(settings):
            pass

    with run_server(replace(settings, allow_broken_chain=True)) as running:
        carol = make_client(running.address, "carol", start=False)
        refusal = re.escape(f"the server's {named}. Nothing from this batch was applied")
        with pytest.raises(TamperDetected, match=refusal):
            carol.sync()
        assert carol.cache.offset == 0 and carol.cache.get(kept.memory_id) is None
        assert running.store.reads.get(kept.memory_id).content == "Deploys go through ops/deploy.sh after review"


def test_a_forged_redaction_mark_on_a_signed_entry_is_named_although_its_signature_still_verifies(
        signing_server, signing_pki, signing_client):
    with signing_client("signer") as signer, signing_client("root") as root:
        kept = signer.add("Releases happen on Tuesdays")
        leaked = signer.add("The vault combination is 31-41-59")
        redaction = root.redact(leaked.memory_id, "leaked vault combination")
    path = signing_server.store.path
    signing_server.store.close()
    _forge_blank(path, kept.seq, redaction.seq, content="Releases happen whenever", layer=1)
    result = mnemosync("verify", "--data-dir", str(path.parent), "--ca-dir", str(signing_pki), "--json")
    report = json.loads(result.stdout)
    assert result.returncode == 1
    assert report["first_bad_seq"] == kept.seq and "a forged redaction mark" in report["problem"]
    assert not any("signature" in p["problem"] for p in report["problems"])  # the signature alone cannot tell


def test_a_genuinely_blanked_entry_changed_afterwards_is_named_by_what_its_redaction_recorded(tmp_path,
                                                                                               make_client):
    settings = dev_settings(tmp_path, policy=POLICY)
    with run_server(settings) as running:
        alice, root = make_client(running.address, "alice"), make_client(running.address, "root")
        leaked = alice.add("The vault combination is 31-41-59")
        redaction = root.redact(leaked.memory_id, "leaked vault combination")
    with run_server(settings):  # a genuine redaction passes the start-up check
        pass
    _forge_blank(settings.db_path, leaked.seq, redaction.seq, content=REDACTED_TEXT, layer=1, protected=True)
    verify = mnemosync("verify", "--data-dir", str(settings.data_dir))
    assert verify.returncode == 1
    assert (f"BROKEN at seq {leaked.seq}: entry {leaked.seq}'s blanked payload is not what redaction "
            f"{redaction.seq} left: it was changed since") in verify.stdout


def test_verify_with_the_ca_names_every_entry_whose_signature_was_stripped(signing_server, signing_pki,
                                                                           signing_client):
    with signing_client("signer") as signer:
        first, second = signer.add("Releases happen on Tuesdays"), signer.add("Alice owns billing")
    path = signing_server.store.path
    signing_server.store.close()
    for seq in (first.seq, second.seq):
        rewrite_changelog(path, seq, lambda e: replace(e, signature=None, signer_key=""))
    checked = mnemosync("verify", "--data-dir", str(path.parent), "--ca-dir", str(signing_pki))
    assert checked.returncode == 1
    lines = checked.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == [f"BROKEN at seq {first.seq}", f"BROKEN at seq {second.seq}"]
    assert lines[0].endswith(f"entry {first.seq} by agent signer is not signed, but the certificate the CA issued "
                             "that agent for that time (serial " + lines[0].split("(serial ")[1])
    assert "its signature was removed" in lines[1]
    unchecked = mnemosync("verify", "--data-dir", str(path.parent))
    assert unchecked.returncode == 0, unchecked.stdout  # without the CA's records nothing says a signature is due


def test_an_agent_finds_a_rewrite_of_an_entry_it_saw_long_ago_although_hashes_tree_and_projections_agree(
        tmp_path, make_client):
    """The thorough attacker recomputes every hash, the Merkle tree and the projections, so the server's own
    checks pass; the agent's last accepted checkpoint does not."""
    settings = dev_settings(tmp_path)
    settings = replace(settings, listen=f"127.0.0.1:{free_port()}")
    with run_server(settings) as running:
        alice = make_client(running.address, "alice")
        written = [alice.add(f"Service {i} is owned by team {i}") for i in range(5)]
        alice.sync()
        accepted = alice.cache.checkpoint
        assert accepted.size == 5 and accepted.root == alice.cache.root()

    def forge(e: entry.Entry) -> entry.Entry:
        payload = {**e.payload, "content": "Service 1 is owned by nobody"}
        return replace(e, payload=payload, payload_commit=entry.commit_payload(payload, e.payload_salt))

    rewrite_changelog(settings.db_path, written[1].seq, forge)
    assert mnemosync("rebuild", "--data-dir", str(settings.data_dir)).returncode == 0
    assert mnemosync("verify", "--data-dir", str(settings.data_dir)).returncode == 0  # nothing on the server tells

    def reachable() -> bool:  # alice's channel may be waiting out a reconnect backoff from the restart
        try:
            alice.remote.stats()
            return True
        except ServerUnavailable:
            return False

    with run_server(settings) as running:
        assert running.store.reads.get(written[1].memory_id).content == "Service 1 is owned by nobody"
        wait_until(reachable, timeout=30, message="alice never reached the restarted server")
        with pytest.raises(TamperDetected, match=r"has a different changelog entry 5 or earlier than the ones this "
                                                 r"agent applied: .* the server's history was rewritten"):
            alice.sync()
        assert alice.cache.get(written[1].memory_id).content == "Service 1 is owned by team 1"
        assert alice.cache.checkpoint == accepted


def test_verify_names_a_memories_row_edited_directly(tmp_path, make_client):
    settings = dev_settings(tmp_path)
    with run_server(settings) as running:
        alice = make_client(running.address, "alice")
        memory = alice.add("The on-call rotation changes on Mondays")
    assert mnemosync("verify", "--data-dir", str(settings.data_dir)).returncode == 0
    edit_database(settings.db_path, "UPDATE memories SET content = ?, importance = 1.0 WHERE id = ?",
                  "The on-call rotation is suspended", memory.memory_id)
    verify = mnemosync("verify", "--data-dir", str(settings.data_dir))
    assert verify.returncode == 1
    assert verify.stdout.splitlines() == [
        f"PROJECTION memory {memory.memory_id}: content is 'The on-call rotation is suspended' in the projections, "
        "'The on-call rotation changes on Mondays' by the changelog",
        f"PROJECTION memory {memory.memory_id}: importance is 1.0 in the projections, 0.5 by the changelog",
    ]
    assert "run `mnemosync rebuild` to fold them again" in verify.stderr
    assert mnemosync("rebuild", "--data-dir", str(settings.data_dir)).returncode == 0
    assert mnemosync("verify", "--data-dir", str(settings.data_dir)).returncode == 0


def test_the_server_refuses_to_start_on_a_broken_chain_unless_told_and_then_says_so(tmp_path, make_client, caplog):
    settings = dev_settings(tmp_path)
    with run_server(settings) as running:
        alice = make_client(running.address, "alice")
        for i in range(3):
            alice.add(f"Fact number {i}")
    edit_database(settings.db_path, "UPDATE changelog SET server_time_ms = server_time_ms + 1 WHERE seq = 2")
    serve = mnemosync("serve", "--data-dir", str(settings.data_dir), "--insecure", "--listen", "127.0.0.1:0")
    assert serve.returncode == 1
    assert serve.stderr.strip().splitlines()[-1] == (
        "Error: refusing to serve a changelog that does not verify, at seq 2: entry 2 was changed after it was "
        f"written; run `mnemosync verify --data-dir {settings.data_dir}` to see every problem, then restore the "
        "data directory from a backup you trust (or start with --allow-broken-chain to serve it anyway)")
    with run_server(replace(settings, allow_broken_chain=True)):
        pass
    assert "BROKEN CHANGELOG, served anyway (--allow-broken-chain): seq 2: entry 2 was changed after it was " \
           "written" in caplog.text


@pytest.fixture(scope="module")
def synced(tmp_path_factory):
    """Eight entries, all behind the start-up check's mark (`helpers.marked_history`), and the cache of an agent
    that applied them."""
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.remote import Remote
    from mnemosync.agent.sync import catch_up

    root = tmp_path_factory.mktemp("synced")

    def sync(address: str) -> None:
        cache = Cache(root / "cache.db")
        catch_up(cache, Remote(address, "alice"), snapshot_gap=None)
        assert cache.offset == 8
        cache.close()

    settings = dev_settings(root, policy=POLICY)
    marked_history(settings, sync)
    return settings, root / "cache.db"


@pytest.mark.parametrize("tamper", sorted(OLD_ENTRY_TAMPERS))
def test_an_agent_holding_old_entries_edited_behind_the_server_finds_them_by_its_spot_checks(synced, tmp_path,
                                                                                              tamper):
    """The agent's root over what it holds still matches the untouched tree; asked to show again the entries the
    agent applied (all eight here: a check draws up to eight), the server cannot show them as they were."""
    from mnemosync.agent.cache import Cache
    from mnemosync.agent.remote import Remote
    from mnemosync.agent.sync import catch_up

    pristine, cache_file = synced
    settings = tampered_copy(pristine, tmp_path / "server", tamper)
    shutil.copy(cache_file, tmp_path / "cache.db")
    with run_server(settings) as running:  # the start-up check passes: nothing after its mark changed
        cache = Cache(tmp_path / "cache.db")
        remote = Remote(running.address, "alice")
        with pytest.raises(TamperDetected, match=r"no longer holds the changelog this agent applied: .* \(a spot "
                                                 r"check of entries applied before\)\. Nothing was applied"):
            catch_up(cache, remote)
        assert cache.offset == 8
        remote.close()
        cache.close()
