"""`mnemosync.server.ca` and `mnemosync.server.revocation`: where the server's TLS files live, and the revocation
list it reads
(failing closed)."""

from __future__ import annotations

import logging
import re
import shutil
import stat
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from mnemosync.server import ca, revocation
from mnemosync.server.app import run_server

from helpers import TEST_MODEL_INFO, TlsAgent, add_op, refused, server_tls_dir, tls_remote, tls_settings


def test_a_revocation_list_not_signed_by_the_ca_stops_every_call(tmp_path, pki, tls_dir, foreign):
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as server:
        alice = tls_remote(server.address, pki / "agents/alice")
        try:
            shutil.copy(foreign / "crl.pem", tls_dir / "crl.pem")
            with pytest.raises(Exception, match="revocation list .* cannot be used"):
                alice.stats()
        finally:
            alice.close()


def _revoked_copy(tmp_path, pki, name: str):
    """A copy of the CA with `name` revoked; returns its new crl.pem."""
    copy = tmp_path / f"ca-without-{name}"
    shutil.copytree(pki, copy)
    ca.revoke(copy, name)
    return copy / "crl.pem"


def test_the_server_does_not_start_without_a_revocation_list_unless_told_to(tmp_path, pki, tls_dir, caplog):
    (tls_dir / "crl.pem").unlink()
    with pytest.raises(revocation.RevocationListUnreadable, match="no revocation list at .*--allow-missing-crl"):
        with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO):
            pass
    allowed = replace(tls_settings(tmp_path, tls_dir), allow_missing_crl=True)
    with caplog.at_level(logging.WARNING), run_server(allowed) as server:
        assert not server.revocations.loaded
        assert "NO REVOCATION LIST" in caplog.text
        shutil.copy(_revoked_copy(tmp_path, pki, "bob"), tls_dir / "crl.pem")  # it appears: in force at once
        bob = TlsAgent(server.address, pki / "agents/bob")
        assert refused(lambda: bob.sync(0))[0] == grpc.StatusCode.UNAUTHENTICATED
        bob.close()


def test_a_deleted_revocation_list_leaves_the_last_good_one_in_force_and_says_so(tmp_path, pki, tls_dir, caplog):
    shutil.copy(_revoked_copy(tmp_path, pki, "bob"), tls_dir / "crl.pem")
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as server:
        bob, alice = TlsAgent(server.address, pki / "agents/bob"), TlsAgent(server.address, pki / "agents/alice")
        assert refused(lambda: bob.sync(0))[0] == grpc.StatusCode.UNAUTHENTICATED
        (tls_dir / "crl.pem").unlink()
        with caplog.at_level(logging.ERROR):
            code, details = refused(lambda: bob.sync(0))
            assert alice.sync(0) == []
        assert code == grpc.StatusCode.UNAUTHENTICATED and "was revoked" in details
        assert caplog.text.count("REVOCATION LIST MISSING") == 1  # once, not on every call
        bob.close()
        alice.close()


def test_an_older_revocation_list_is_refused_while_serving_and_after_a_restart(tmp_path, pki, tls_dir, caplog):
    older = tmp_path / "older-crl.pem"
    shutil.copy(tls_dir / "crl.pem", older)  # validly signed, but from before bob was revoked
    newer = _revoked_copy(tmp_path, pki, "bob")
    assert revocation.crl_number(_crl(newer)) > revocation.crl_number(_crl(older))
    shutil.copy(newer, tls_dir / "crl.pem")
    settings = tls_settings(tmp_path, tls_dir)
    with run_server(settings) as server:
        bob = TlsAgent(server.address, pki / "agents/bob")
        assert refused(lambda: bob.sync(0))[0] == grpc.StatusCode.UNAUTHENTICATED
        shutil.copy(older, tls_dir / "crl.pem")
        with caplog.at_level(logging.ERROR):
            assert refused(lambda: bob.sync(0))[0] == grpc.StatusCode.UNAUTHENTICATED  # the newer list stays
        assert "OLDER REVOCATION LIST REFUSED" in caplog.text
        bob.close()
    remembered = settings.data_dir / revocation.CRL_NUMBER_FILE
    assert int(remembered.read_text()) == revocation.crl_number(_crl(newer))
    assert stat.S_IMODE(remembered.stat().st_mode) == 0o600
    with pytest.raises(revocation.RevocationListUnreadable, match=r"has CRL number \d+, older than number"):
        with run_server(settings):  # a restart remembers the newest list it accepted
            pass


def _crl(path):
    from cryptography import x509

    return x509.load_pem_x509_crl(path.read_bytes())


def test_issue_server_writes_a_folder_of_its_own_without_the_ca_key(tmp_path):
    ca_dir = tmp_path / "ca"
    ca.init_ca(ca_dir)
    issued = ca.issue_server(ca_dir, ["127.0.0.1"])
    folder = ca_dir / "server"
    assert issued.path == str(folder / "server.crt")
    assert sorted(p.name for p in folder.iterdir()) == ["ca.crt", "checkpoint.key", "crl.pem", "server.crt",
                                                         "server.key"]
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "server.key").stat().st_mode) == 0o600
    assert not (ca_dir / "server.crt").exists() and not (ca_dir / "server.key").exists()
    with pytest.raises(ca.CaError, match="holds the CA key"):
        ca.issue_server(ca_dir, ["127.0.0.1"], out_dir=ca_dir)
    ca.issue_agent(ca_dir, "bob", authority=4, scopes=["user"])
    ca.revoke(ca_dir, "bob")
    assert (folder / "crl.pem").read_bytes() == (ca_dir / "crl.pem").read_bytes()  # revoke refreshes it


def test_the_server_refuses_a_tls_folder_that_holds_the_ca_key(tmp_path, pki):
    with pytest.raises(ca.CaError, match=r"refusing to serve from .*: it holds ca.key"):
        with run_server(tls_settings(tmp_path, pki), pin_model=TEST_MODEL_INFO):
            pass
    assert not (tmp_path / "server" / "mnemosync.db").exists()


def test_an_agent_certificate_may_grant_a_scope_prefix_as_the_policy_does(tmp_path, pki):
    ca_dir = tmp_path / "ca"
    shutil.copytree(pki, ca_dir)
    ca.issue_agent(ca_dir, "ci", authority=6, scopes=["project:*"])
    with run_server(tls_settings(tmp_path, server_tls_dir(tmp_path / "tls", ca_dir)),
                    pin_model=TEST_MODEL_INFO) as server:
        ci = TlsAgent(server.address, ca_dir / "agents/ci")
        assert ci.add("build cache lives in /var/cache/ci", scope="project:web").seq == 1
        code, details = refused(lambda: ci.add("a user note", scope="user"))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "grants 'project:*'" in details
        ci.close()
    with pytest.raises(Exception, match="a grant may also end in"):
        ca.issue_agent(ca_dir, "bad", authority=6, scopes=["project:with space*"])


def _subscribe(agent: TlsAgent):
    """An open Subscribe stream of `agent` from the start, and a queue its entries (or its ending error) arrive in."""
    import queue
    import threading

    from mnemosync.v1 import memory_pb2 as pb

    arrived: queue.Queue = queue.Queue()
    stream = agent.stub.Subscribe(pb.SubscribeRequest(since_seq=0), metadata=agent.metadata, timeout=60)

    def read():
        try:
            for entry in stream:
                arrived.put(entry)
        except grpc.RpcError as exc:
            arrived.put(exc)

    threading.Thread(target=read, daemon=True).start()
    return stream, arrived


def test_a_revocation_ends_an_open_subscribe_stream_before_it_delivers_another_entry(tmp_path, pki, tls_dir):
    """A stream opened before `ca revoke` kept delivering new entries whole."""
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as server:
        alice, bob = TlsAgent(server.address, pki / "agents/alice"), TlsAgent(server.address, pki / "agents/bob")
        alice.add("before the revocation")
        stream, arrived = _subscribe(bob)
        assert arrived.get(timeout=10).seq == 1
        shutil.copy(_revoked_copy(tmp_path, pki, "bob"), tls_dir / "crl.pem")
        alice.add("the new on-call rota is in the wiki")
        ended = arrived.get(timeout=10)
        assert isinstance(ended, grpc.RpcError), f"a revoked agent received entry {ended.seq}"
        assert ended.code() == grpc.StatusCode.UNAUTHENTICATED and "was revoked" in ended.details()
        stream.cancel()
        alice.close()
        bob.close()


def test_an_open_subscribe_stream_ends_when_its_certificate_expires(tmp_path, pki, tls_dir):
    import datetime as dt
    import time

    ca_dir = tmp_path / "ca"
    shutil.copytree(pki, ca_dir)
    soon = dt.datetime.now(dt.UTC) - dt.timedelta(days=1) + dt.timedelta(seconds=4)
    ca.issue_agent(ca_dir, "brief", authority=3, scopes=["user"], days=1, now=soon)
    with run_server(tls_settings(tmp_path, tls_dir), pin_model=TEST_MODEL_INFO) as server:
        alice, brief = TlsAgent(server.address, pki / "agents/alice"), TlsAgent(server.address, ca_dir / "agents/brief")
        alice.add("before the expiry")
        stream, arrived = _subscribe(brief)
        assert arrived.get(timeout=10).seq == 1
        time.sleep(max(0.0, (soon + dt.timedelta(days=1) - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)
        alice.add("written after the certificate expired")
        ended = arrived.get(timeout=10)
        assert isinstance(ended, grpc.RpcError), f"an expired agent received entry {ended.seq}"
        assert ended.code() == grpc.StatusCode.UNAUTHENTICATED and "expired" in ended.details()
        stream.cancel()
        alice.close()
        brief.close()


def test_a_revocation_ends_an_open_sync_stream_before_its_next_page(tmp_path, pki, tls_dir):
    """Sync resolves its caller again before every page (issue 33, item 3), as Subscribe does: a catch-up that
    was under way when `ca revoke` ran stops at the next page instead of delivering the rest of the changelog."""
    from mnemosync.v1 import memory_pb2 as pb
    from mnemosync.v1 import memory_pb2_grpc as pb_grpc

    total, page = 300, 10
    with run_server(replace(tls_settings(tmp_path, tls_dir), sync_page_size=page),
                    pin_model=TEST_MODEL_INFO) as server:
        alice = TlsAgent(server.address, pki / "agents/alice")
        filler = " the rota changes every week and the wiki says who is on call" * 120
        for start in range(0, total, 50):
            alice.append(*(add_op(f"note {i}:{filler}") for i in range(start, start + 50)))
        bundle = pki / "agents/bob"
        creds = grpc.ssl_channel_credentials((bundle / "ca.crt").read_bytes(), (bundle / "agent.key").read_bytes(),
                                             (bundle / "agent.crt").read_bytes())
        with grpc.secure_channel(server.address, creds, options=[("grpc.http2.bdp_probe", 0)]) as channel:
            stream = pb_grpc.MemoryServiceStub(channel).Sync(pb.SyncRequest(since_seq=0), timeout=60)
            assert next(stream).seq == 1  # the catch-up is open; flow control holds the server a page or so ahead
            shutil.copy(_revoked_copy(tmp_path, pki, "bob"), tls_dir / "crl.pem")
            delivered = 1
            with pytest.raises(grpc.RpcError) as ended:
                for _ in stream:
                    delivered += 1
            assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED and "was revoked" in ended.value.details()
            assert delivered < total - page, f"a revoked agent received {delivered} of {total} entries"
        alice.close()


def test_every_serve_example_in_the_ca_help_names_a_folder_serve_accepts(tmp_path):
    from click.testing import CliRunner

    from mnemosync.server.ca_cli import ca as ca_group

    home = tmp_path / "home"
    ca_dir = home / ".local" / "share" / "mnemosync" / "ca"
    ca.init_ca(ca_dir)
    ca.issue_server(ca_dir, ["127.0.0.1"])
    helps = [CliRunner().invoke(ca_group, [*command, "--help"]).output for command in ([], ["issue-server"])]
    folders = [m.group(1) for text in helps for m in re.finditer(r"serve --tls-dir (\S+)", text)]
    assert len(folders) == 2
    for folder in folders:
        ca.load_server_tls(Path(folder.replace("~", str(home))), state_dir=tmp_path / "state")
