"""Running the dashboard: `run_dashboard` starts the web server in a thread and stops it on exit.

Used the same way by `mnemosync dashboard` (its own process) and by
`mnemosync serve --dashboard ADDR` (inside the server's process, still a gRPC
client of it). The socket is bound before the web server starts, so port 0
works and the address printed is the one in use. Plain HTTP is served on
loopback only; any other address needs an HTTPS certificate and key, and there
the sign-in cannot be turned off.
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn

from mnemosync.agent.client import AgentClient
from mnemosync.agent.client_settings import ClientSettings
from mnemosync.agent.dashboard.app import make_app
from mnemosync.agent.dashboard.dashboard_settings import DashboardSettings
from mnemosync.agent.dashboard.feed import LiveFeed
from mnemosync.agent.dashboard.sign_in import Access
from mnemosync.agent.dashboard.viewer import Viewer
from mnemosync.agent.dashboard.web import Dashboard
from mnemosync.kernel.addresses import is_loopback, join_host_port, split_host_port
from mnemosync.kernel.errors import FailedPrecondition

START_SECONDS = 20.0
STOP_SECONDS = 10.0


@dataclass(frozen=True)
class RunningDashboard:
    """A started dashboard: where it is, how to sign in, and its state."""

    url: str
    token: str | None
    board: Dashboard

    @property
    def login_url(self) -> str:
        """The sign-in link to print (the bare URL when there is no sign-in)."""
        return f"{self.url}/login?token={self.token}" if self.token else self.url


def _checked(settings: DashboardSettings) -> tuple[str, int, bool]:
    """(host, port, https) of the settings, refusing what the module docstring rules out."""
    try:
        host, port = split_host_port(settings.dashboard_listen)
    except ValueError as exc:
        raise FailedPrecondition(f"--listen: {exc}") from None
    https = settings.dashboard_https_cert is not None or settings.dashboard_https_key is not None
    if https and (settings.dashboard_https_cert is None or settings.dashboard_https_key is None):
        raise FailedPrecondition("HTTPS needs both --https-cert and --https-key")
    if not is_loopback(host):
        if not https:
            raise FailedPrecondition(
                f"refusing plain HTTP on {host}: the dashboard serves plain HTTP on a loopback address only "
                "(127.0.0.1, ::1, localhost); elsewhere give --https-cert and --https-key, or reach it through "
                "an SSH tunnel to a loopback address")
        if not settings.dashboard_login:
            raise FailedPrecondition(f"--no-login is allowed on a loopback address only, not on {host}")
    return host, port, https


@contextmanager
def run_dashboard(settings: DashboardSettings, client_settings: ClientSettings, *, embedder=None,
                  token: str | None = None) -> Iterator[RunningDashboard]:
    """Serves the dashboard until the block ends.

    Args:
        settings: Where to listen and how people sign in.
        client_settings: The dashboard's identity towards the server (its own cache directory included).
        embedder: An `mnemosync.agent.embeddings.Embedder` to share (loaded when a search or merge needs it).
        token: The sign-in token (default: a new random one); ignored when login is off.

    Raises:
        FailedPrecondition: an address or HTTPS setting the module docstring rules out, or the port is taken.
        CodedError: the dashboard's identity cannot be used (for example its certificate files).
    """
    host, port, https = _checked(settings)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise FailedPrecondition(f"cannot listen on {settings.dashboard_listen}: {exc.strerror}") from None
    token = (token or secrets.token_urlsafe(24)) if settings.dashboard_login else None
    try:
        client = AgentClient(client_settings, embedder=embedder, live=False, sync_on_start=False)
    except BaseException:
        sock.close()
        raise
    feed = LiveFeed(client.remote)
    board = Dashboard(Viewer(client), feed, Access(token, secure=https), settings)
    config = uvicorn.Config(make_app(board), log_level="warning", lifespan="off", access_log=False,
                            timeout_graceful_shutdown=2,
                            ssl_certfile=str(settings.dashboard_https_cert) if https else None,
                            ssl_keyfile=str(settings.dashboard_https_key) if https else None)
    web = uvicorn.Server(config)
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, name="mnemosync-dashboard", daemon=True)
    try:
        feed.start()
        thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not web.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise FailedPrecondition(f"the dashboard did not start on {settings.dashboard_listen}")
            time.sleep(0.02)
        bound = sock.getsockname()[1]
        url = f"{'https' if https else 'http'}://{join_host_port(host, bound)}"
        yield RunningDashboard(url, token, board)
    finally:
        board.closing.set()
        feed.stop()
        web.should_exit = True
        thread.join(STOP_SECONDS)
        sock.close()
        client.close()
