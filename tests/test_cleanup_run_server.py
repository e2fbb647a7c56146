"""`run_server` gives back what it opened when it cannot start: a bad policy file leaves no database open."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from server.app import run_server
from server.policy import PolicyError
from server.settings import ServerSettings

from conftest import RawAgent

PROC_FDS = Path("/proc/self/fd")


def _open_files_under(directory: Path) -> list[str]:
    """Paths below `directory` that this process holds open (Linux /proc)."""
    found = []
    for fd in os.listdir(PROC_FDS):
        try:
            target = os.readlink(PROC_FDS / fd)
        except OSError:  # closed since listing
            continue
        if target.startswith(str(directory)):
            found.append(target)
    return found


@pytest.mark.skipif(not PROC_FDS.is_dir(), reason="needs /proc/self/fd to see open files")
def test_a_bad_policy_file_is_named_and_leaves_no_database_open(tmp_path):
    data = tmp_path / "server"
    bad = tmp_path / "bad-policy.toml"
    bad.write_text("[agents.alice]\nauthority = 9\n")
    good = tmp_path / "policy.toml"
    good.write_text("[agents.alice]\nauthority = 2\n")

    def settings(policy: Path) -> ServerSettings:
        return ServerSettings(data_dir=data, listen="127.0.0.1:0", insecure=True, synchronous="normal",
                              policy_file=policy)

    with pytest.raises(PolicyError) as err:
        with run_server(settings(bad)):
            pass
    assert str(bad) in str(err.value) and "[agents.alice] authority must be an integer from 1" in str(err.value)
    assert (data / "mnemosync.db").exists()  # the store had been opened ...
    assert _open_files_under(data) == []  # ... and was closed again

    with run_server(settings(good)) as running:
        alice = RawAgent(running.address, "alice")
        try:
            alice.add("the server starts on the same data directory once the policy is fixed")
            assert [e.authority for e in alice.sync(0)] == [2]
        finally:
            alice.close()
    assert _open_files_under(data) == []
