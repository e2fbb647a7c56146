"""`mnemosync.kernel.private_files`: the server's and agents' folders are 0700 and their files 0600, from the start,
and what an older version left open is tightened at the next start (or refused when it cannot be)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from mnemosync.agent.cache import Cache
from mnemosync.agent.outbox import Outbox
from mnemosync.agent.tls import AgentTls
from mnemosync.kernel import private_files
from mnemosync.server.app import run_server

from helpers import RawAgent, dev_settings


def _modes(folder: Path) -> dict[str, str]:
    return {p.name: f"{stat.S_IMODE(p.stat().st_mode):04o}" for p in [folder, *folder.iterdir()]}


def test_a_new_server_data_directory_and_every_file_in_it_are_private(tmp_path):
    settings = dev_settings(tmp_path)
    with run_server(settings) as server:
        agent = RawAgent(server.address, "agent-a")
        agent.add("a memory")
        agent.close()
        modes = _modes(settings.data_dir)  # while serving: the WAL and shared-memory files exist
    assert {"mnemosync.db", "mnemosync.db-wal", "mnemosync.db-shm"} <= set(modes)
    assert modes == {name: "0700" if name == settings.data_dir.name else "0600" for name in modes}


def test_files_an_older_version_left_open_to_others_are_tightened_with_a_warning(tmp_path, caplog):
    settings = dev_settings(tmp_path)
    with run_server(settings):
        pass
    data = settings.data_dir
    os.chmod(data, 0o755)
    for name in ("mnemosync.db", "audit.jsonl"):
        (data / name).touch()
        os.chmod(data / name, 0o644)
    (data / "notes.txt").write_text("not ours")
    os.chmod(data / "notes.txt", 0o644)
    with caplog.at_level(logging.WARNING), run_server(settings):
        pass
    assert _modes(data) == {data.name: "0700", "mnemosync.db": "0600", "audit.jsonl": "0600", "checkpoint.key": "0600",
                            "verified.json": "0600", "notes.txt": "0644"}
    assert f"file {data / 'mnemosync.db'} was open to other users (mode 0644); made it 0600" in caplog.text
    assert f"folder {data} was open to other users (mode 0755)" in caplog.text


def test_an_agent_cache_and_outbox_are_private_and_tightened_when_open(tmp_path):
    folder = tmp_path / "agents" / "alice"
    cache, outbox = Cache(folder / "cache.db"), Outbox(folder / "outbox.db")
    cache.close()
    outbox.close()
    assert set(_modes(folder).values()) == {"0700", "0600"} and _modes(folder)[folder.name] == "0700"
    for path in (folder, *folder.iterdir()):
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    Cache(folder / "cache.db").close()
    Outbox(folder / "outbox.db").close()
    assert _modes(folder) == {name: "0700" if name == "alice" else "0600" for name in _modes(folder)}


def test_an_agent_key_readable_by_others_is_tightened_before_use(tmp_path, pki):
    bundle = tmp_path / "alice"
    bundle.mkdir()
    for name in ("ca.crt", "agent.crt", "agent.key"):
        (bundle / name).write_bytes((pki / "agents" / "alice" / name).read_bytes())
    os.chmod(bundle / "agent.key", 0o644)
    AgentTls(bundle).credentials()
    assert stat.S_IMODE((bundle / "agent.key").stat().st_mode) == 0o600


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs a file nobody may chmod (/proc)")
def test_a_file_open_to_others_that_cannot_be_tightened_is_refused_with_the_fix():
    unchangeable = Path("/proc/self/status")  # mode 0444, and chmod is refused even to root
    with pytest.raises(private_files.NotPrivate) as err:
        private_files.check_key(unchangeable)
    assert f"key file {unchangeable} is open to other users (mode 0444)" in str(err.value)
    assert f"chmod 600 {unchangeable}" in str(err.value)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can give a file to another user (chown)")
def test_a_file_another_user_owns_stops_the_server_even_when_root_could_chmod_it(tmp_path):
    """Running as root, the server chmodded an audit.jsonl owned by another user and kept serving, where
    `server/SECURITY.md` says another owner stops it: that user can still read what the server writes there."""
    settings = dev_settings(tmp_path)
    settings.data_dir.mkdir(mode=0o700)
    audit = settings.data_dir / "audit.jsonl"
    audit.write_text("")
    os.chmod(audit, 0o644)
    os.chown(audit, 65534, 65534)
    with pytest.raises(private_files.NotPrivate) as err:
        with run_server(settings):
            pass
    assert f"file {audit} is owned by another user (uid 65534)" in str(err.value)
    assert f"chown {os.geteuid()} {audit}" in str(err.value)
    assert stat.S_IMODE(audit.stat().st_mode) == 0o644  # left as it was
