"""`mnemosync.agent.transparency`: whose checkpoint key an agent trusts, and the check of the server's log at
every sync."""

from __future__ import annotations

from dataclasses import replace

import pytest
from cryptography import x509

from mnemosync.agent.cache import Cache
from mnemosync.agent.errors import HistoryMismatch, TamperDetected
from mnemosync.agent.remote import Remote
from mnemosync.agent.sync import catch_up
from mnemosync.agent.transparency import check_log
from mnemosync.kernel import certificates
from mnemosync.server.app import run_server

from helpers import RawAgent, TlsAgent, add_op, dev_settings, free_port, tls_remote


def test_under_mtls_an_agent_trusts_the_checkpoint_key_its_ca_put_in_the_server_certificate(
        tls_server, tls_dir, pki, tmp_path, caplog):
    TlsAgent(tls_server.address, pki / "agents/alice").append(add_op("one"), add_op("two"))
    cache, remote = Cache(tmp_path / "cache.db"), tls_remote(tls_server.address, pki / "agents/alice")
    catch_up(cache, remote)
    named = certificates.checkpoint_key(x509.load_pem_x509_certificate((tls_dir / "server.crt").read_bytes()))
    assert named and cache.log_key == named
    assert (cache.checkpoint.size, cache.checkpoint.root) == (2, cache.root())
    assert "TRUST ON FIRST USE" not in caplog.text
    remote.close()
    cache.close()


def test_in_development_mode_an_agent_trusts_the_first_key_it_sees_and_says_so_loudly(server, tmp_path, caplog):
    RawAgent(server.address, "writer").add("one")
    cache, remote = Cache(tmp_path / "cache.db"), Remote(server.address, "alice")
    checkpoint = check_log(cache, remote)
    assert cache.log_key == checkpoint.key and cache.checkpoint is None  # an empty cache pins, accepts nothing
    assert "TRUST ON FIRST USE: now trusting checkpoint key" in caplog.text
    assert len([r for r in caplog.records if "TRUST ON FIRST USE" in r.getMessage()]) == 1
    catch_up(cache, remote)
    assert cache.checkpoint.size == 1
    remote.close()
    cache.close()


def test_a_server_signing_with_another_key_is_refused_and_nothing_is_applied(tmp_path):
    settings = replace(dev_settings(tmp_path), listen=f"127.0.0.1:{free_port()}")
    cache = Cache(tmp_path / "cache.db")
    with run_server(settings) as running:
        RawAgent(running.address, "writer").add("one")
        remote = Remote(running.address, "alice")
        catch_up(cache, remote)
    (settings.data_dir / "checkpoint.key").unlink()  # another key: another server, or a replaced key
    with run_server(settings) as running:
        RawAgent(running.address, "writer").add("two")
        with pytest.raises(TamperDetected, match="signs its checkpoints with key .* but this agent trusted .* before"):
            catch_up(cache, remote)
    assert cache.offset == 1
    remote.close()
    cache.close()


def test_a_server_that_lost_entries_an_agent_applied_is_named_as_an_older_backup(tmp_path):
    first = replace(dev_settings(tmp_path, name="a"), listen=f"127.0.0.1:{free_port()}")
    cache = Cache(tmp_path / "cache.db")
    with run_server(first) as running:
        RawAgent(running.address, "writer").append(add_op("one"), add_op("two"))
        remote = Remote(running.address, "alice")
        catch_up(cache, remote)
    other = replace(dev_settings(tmp_path, name="b"), listen=first.listen)
    (other.data_dir).mkdir()
    (other.data_dir / "checkpoint.key").write_bytes((first.data_dir / "checkpoint.key").read_bytes())
    with run_server(other) as running:
        RawAgent(running.address, "writer").add("one")
        with pytest.raises(HistoryMismatch, match="no longer has changelog entry 2, which this agent already "
                                                  r"applied \(its head is 1\)"):
            check_log(cache, remote)
        RawAgent(running.address, "writer").append(add_op("x"), add_op("y"))
        with pytest.raises(HistoryMismatch, match="this agent's cache holds log .*, but the server .* serves log"):
            check_log(cache, remote)
    remote.close()
    cache.close()


def test_the_check_holds_while_another_thread_applies_entries(server, tmp_path):
    """The live stream checks the log at every reconnection while a write's own entries or a catch-up apply on
    another thread: an apply between its read of the offset and of the root made a sound server look rewritten,
    and stopped the live stream for good."""
    import threading

    from mnemosync.kernel.codec import entry_from_proto

    writer = RawAgent(server.address, "writer")
    writer.append(*(add_op(f"note {n}") for n in range(120)))
    entries = [entry_from_proto(e) for e in writer.sync(0)]
    cache, remote = Cache(tmp_path / "cache.db"), Remote(server.address, "alice")
    check_log(cache, remote)  # pins the key
    cache.apply(entries[:1])
    failures: list[BaseException] = []
    done = threading.Event()

    def check_again() -> None:
        while not done.is_set():
            try:
                check_log(cache, remote)
            except (TamperDetected, HistoryMismatch) as exc:
                failures.append(exc)
                return

    checker = threading.Thread(target=check_again)
    checker.start()
    for n in range(1, len(entries)):
        cache.apply(entries[n:n + 1])
    done.set()
    checker.join()
    assert failures == [] and cache.checkpoint.size <= cache.offset
    remote.close()
    cache.close()
