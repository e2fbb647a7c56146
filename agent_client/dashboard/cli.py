"""`mnemosync dashboard`: the web dashboard in its own process, a gRPC client of the server.

Parsing and printing only; `mnemosync.agent.dashboard.serving.run_dashboard` does the work. It prints where it
listens and, unless sign-in is off, the sign-in link with the token made for this run.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import click

from mnemosync.agent.cli_options import connection_options, load_settings
from mnemosync.agent.dashboard import dashboard_settings
from mnemosync.kernel.command_line import stop_signals


@click.command()
@connection_options
@click.option("--listen", "dashboard_listen",
              help="HOST:PORT of the dashboard [env MNEMOSYNC_DASHBOARD_LISTEN; default 127.0.0.1:8765; port 0: "
                   "any free port]. Plain HTTP on loopback only; elsewhere give --https-cert and --https-key.")
@click.option("--no-login", is_flag=True, default=None,
              help="No sign-in token (loopback only): anyone who can reach the address uses the dashboard's identity.")
@click.option("--https-cert", "dashboard_https_cert", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Serve HTTPS with this certificate (PEM) [env MNEMOSYNC_DASHBOARD_HTTPS_CERT].")
@click.option("--https-key", "dashboard_https_key", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="The HTTPS certificate's private key (PEM) [env MNEMOSYNC_DASHBOARD_HTTPS_KEY].")
@click.option("--lag-warning", "dashboard_lag_warning", type=int,
              help="Flag agents more than this many entries behind [default 1000].")
def dashboard(connection, dashboard_listen, no_login, dashboard_https_cert, dashboard_https_key,
              dashboard_lag_warning):
    """Run the web dashboard: agents and their lag, the live changelog, conflicts, search explained, health.

    The dashboard connects to the server like any agent, with the identity the
    connection options give (under mTLS its own certificate: an admin's shows
    every scope, any other only its own); it never shows a scope that identity
    is not granted. A person signs in with the token it prints at start.

    \b
    Examples:
      mnemosync dashboard --insecure --agent-id dashboard
      mnemosync dashboard --cert-dir ~/.local/share/mnemosync/ca/agents/ops --server memory.internal:50051
      mnemosync dashboard --insecure --listen 127.0.0.1:0 --no-login
    """
    from mnemosync.agent.dashboard.serving import run_dashboard

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = load_settings(connection)
    settings = dashboard_settings.load(settings_file=connection["config_file"], environ=os.environ, overrides={
        "dashboard_listen": dashboard_listen, "dashboard_login": False if no_login else None,
        "dashboard_https_cert": dashboard_https_cert, "dashboard_https_key": dashboard_https_key,
        "dashboard_lag_warning": dashboard_lag_warning})
    with run_dashboard(settings, client) as running:
        stopped = stop_signals()
        click.echo(f"mnemosync dashboard on {running.url} as {client.resolved_agent_id()} (server {client.server})",
                   err=True)
        if running.token:
            click.echo(f"sign in: {running.login_url}", err=True)
        else:
            click.echo("sign-in is off (--no-login): anyone who can reach this address uses the dashboard", err=True)
        sys.stderr.flush()
        stopped()
        click.echo("mnemosync dashboard: shutting down", err=True)
