"""`mnemosync dashboard` and `mnemosync serve --dashboard` as real processes, the addresses and settings they
refuse, and a dashboard acting as its certificate's identity under mTLS."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.dashboard.dashboard_settings import DashboardSettings
from mnemosync.agent.dashboard.serving import run_dashboard
from mnemosync.kernel.errors import FailedPrecondition

from helpers import RawAgent, ServeProcess, mnemosync, wait_until


def _browser() -> urllib.request.OpenerDirector:
    """A urllib opener that keeps cookies, as a browser would."""
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def _text(opener: urllib.request.OpenerDirector, url: str) -> str:
    with opener.open(url, timeout=10) as response:
        return response.read().decode()


def _line(lines: list[str], pattern: str) -> re.Match:
    return wait_until(lambda: next((m for m in map(re.compile(pattern).search, list(lines)) if m), None),
                      timeout=60, message=lambda: f"no line matching {pattern!r} in:\n{''.join(lines)}")


@contextmanager
def _command(*args: str, env: dict | None = None) -> Iterator[list[str]]:
    """Runs `mnemosync ARGS` and yields the lines it writes to stderr as they come; then stops it with SIGTERM,
    which must end it with exit code 0."""
    process = subprocess.Popen([sys.executable, "-m", "mnemosync.cli", *args], stderr=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        yield lines
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(30)
        reader.join(10)
        process.stderr.close()
    assert code == 0, "".join(lines)


def test_mnemosync_dashboard_prints_its_sign_in_link_serves_behind_it_and_stops_on_sigterm(tmp_path, server):
    RawAgent(server.address, "alice").add("the changelog is the truth")
    with _command("dashboard", "--insecure", "--agent-id", "dashboard", "--server", server.address, "--listen",
                  "127.0.0.1:0", "--cache-dir", str(tmp_path / "cache")) as lines:
        link = _line(lines, r"sign in: (http://127\.0\.0\.1:\d+/login\?token=\S+)").group(1)
        base = link.split("/login")[0]
        anonymous = _text(_browser(), f"{base}/changelog")
        assert "Sign in" in anonymous and "the changelog is the truth" not in anonymous
        person = _browser()
        assert "viewing as <strong>dashboard</strong>" in _text(person, link)
        assert "the changelog is the truth" in _text(person, f"{base}/changelog")
    assert any("shutting down" in line for line in lines)


def test_serve_dashboard_runs_the_dashboard_in_the_servers_process_as_a_client_of_it(tmp_path):
    with ServeProcess(tmp_path / "data", "--dashboard", "127.0.0.1:0") as served:
        RawAgent(served.address, "alice").add("one memory")
        shown = _line(served.stderr_lines, r"mnemosync dashboard on (http://\S+) as (\S+)")
        assert shown.group(2) == "dashboard"
        link = _line(served.stderr_lines, r"mnemosync dashboard sign-in: (\S+)").group(1)
        person = _browser()
        _text(person, link)
        health = _text(person, f"{shown.group(1)}/health")
        assert 'id="head-seq">1<' in health
        assert "dashboard" in _text(person, f"{shown.group(1)}/agents")


@pytest.mark.parametrize(("args", "message"), [
    (("--listen", "0.0.0.0:0"), "refusing plain HTTP on 0.0.0.0"),
    (("--listen", "nonsense"), "listen address must be HOST:PORT"),
    (("--listen", "127.0.0.1:0", "--lag-warning", "many"), "--lag-warning"),
])
def test_mnemosync_dashboard_refuses_what_it_cannot_serve_safely(tmp_path, args, message):
    result = mnemosync("dashboard", "--insecure", "--cache-dir", str(tmp_path / "cache"), *args, timeout=60)
    assert result.returncode in (2, 4), result.stderr
    assert message in result.stderr


def test_no_login_and_half_an_https_pair_are_refused_off_loopback_before_anything_starts(tmp_path):
    client = ClientSettings(server="127.0.0.1:1", agent_id="dashboard", insecure=True, cache_dir=tmp_path / "c")
    cert = tmp_path / "cert.pem"
    cert.write_text("not used")
    for settings, message in (
        (DashboardSettings(dashboard_listen="0.0.0.0:0", dashboard_login=False, dashboard_https_cert=cert,
                           dashboard_https_key=cert), "--no-login is allowed on a loopback address only"),
        (DashboardSettings(dashboard_listen="127.0.0.1:0", dashboard_https_cert=cert), "HTTPS needs both"),
    ):
        with pytest.raises(FailedPrecondition, match=message), run_dashboard(settings, client):
            pass
    assert not (tmp_path / "c").exists()  # refused before the dashboard's client opened its cache


def test_serve_dashboard_on_an_mtls_server_needs_the_dashboards_own_certificate(tmp_path, tls_dir):
    result = mnemosync("serve", "--data-dir", str(tmp_path / "data"), "--tls-dir", str(tls_dir), "--listen",
                       "127.0.0.1:0", "--dashboard", "127.0.0.1:0", timeout=60)
    assert result.returncode == 4
    assert "--dashboard on an mTLS server needs --dashboard-cert-dir" in result.stderr


def test_under_mtls_the_dashboard_is_its_certificates_identity_and_sees_only_its_scopes(tmp_path, tls_server, pki):
    from helpers import TlsAgent

    root = TlsAgent(tls_server.address, pki / "agents" / "root")
    root.add("a user note", scope="user")
    hidden = root.add("the web launch is on March 3", scope="project:web")
    client = ClientSettings(server=tls_server.address, cert_dir=pki / "agents" / "bob", cache_dir=tmp_path / "bob")
    with run_dashboard(DashboardSettings(dashboard_listen="127.0.0.1:0"), client) as running:
        person = _browser()
        assert "viewing as <strong>bob</strong>" in _text(person, running.login_url)
        changelog = _text(person, f"{running.url}/changelog")
        assert "a user note" in changelog and "launch" not in changelog and "project:web" not in changelog
        with pytest.raises(urllib.error.HTTPError) as refused:
            person.open(f"{running.url}/memories/{hidden.memory_id}", timeout=10)
        assert refused.value.code == 403 and "scope-not-granted" in refused.value.read().decode()


def test_serve_dashboard_under_mtls_acts_as_the_certificate_it_is_given(tmp_path, tls_dir, pki):
    with _command("serve", "--data-dir", str(tmp_path / "data"), "--tls-dir", str(tls_dir), "--listen", "127.0.0.1:0",
                  "--dashboard", "127.0.0.1:0", "--dashboard-cert-dir", str(pki / "agents" / "bob"),
                  env={"MNEMOSYNC_CACHE_DIR": str(tmp_path / "dashboard-cache")}) as lines:
        assert _line(lines, r"mnemosync dashboard on (\S+) as (\S+)").group(2) == "bob"
        link = _line(lines, r"mnemosync dashboard sign-in: (\S+)").group(1)
        page = " ".join(_text(_browser(), link).split())
        assert "viewing as <strong>bob</strong> · authority 4 · scopes user" in page
