"""`mnemosync serve`: the server's own command, plus the dashboard in the same process (`--dashboard`).

The one place where the server and the agent side meet in one process. The
server package imports nothing of the agent's, so the composition lives here, at
the namespace's root beside the command table: the server's `serve` options
and body (`mnemosync.server.operator_cli.serving`) with two options more, whose
dashboard starts once the server listens, as a gRPC client of it.
"""

from __future__ import annotations

import os
from contextlib import ExitStack
from pathlib import Path

import click

from mnemosync.kernel.errors import FailedPrecondition
from mnemosync.server import operator_cli

DASHBOARD_EXAMPLES = """
      mnemosync serve --insecure --dashboard 127.0.0.1:8765
      mnemosync serve --tls-dir ca/server --dashboard 127.0.0.1:8765 --dashboard-cert-dir ca/agents/ops
"""


@click.command("serve", help=(operator_cli.serve.help or "").rstrip() + DASHBOARD_EXAMPLES,
               context_settings=operator_cli.serve.context_settings)
@click.option("--dashboard", metavar="HOST:PORT",
              help="Also run the web dashboard in this process on HOST:PORT (see `mnemosync dashboard`). It is a "
                   "gRPC client of this server: agent id 'dashboard' in development, else --dashboard-cert-dir.")
@click.option("--dashboard-cert-dir", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="mTLS: the certificate directory the dashboard acts as (an admin's, or any agent's).")
def serve(dashboard, dashboard_cert_dir, **options):
    config_file = options["config_file"]

    def started(stack: ExitStack, running, settings) -> None:
        if dashboard:
            _start_dashboard(stack, running, settings, config_file, dashboard, dashboard_cert_dir)

    operator_cli.serving(started=started, **options)


serve.params[:0] = operator_cli.serve.params  # the server's own options first, as `--help` lists them


def _start_dashboard(stack: ExitStack, running, settings, config_file, listen: str, cert_dir: Path | None) -> None:
    """Starts the dashboard in this process as a gRPC client of the server just started."""
    from mnemosync.agent import client_settings
    from mnemosync.agent.dashboard import dashboard_settings
    from mnemosync.agent.dashboard.serving import run_dashboard
    from mnemosync.kernel.addresses import is_loopback, join_host_port, split_host_port

    if not settings.insecure and cert_dir is None:
        raise FailedPrecondition("--dashboard on an mTLS server needs --dashboard-cert-dir: the certificate "
                                 "directory the dashboard acts as (for example an admin's, from `mnemosync ca "
                                 "issue-agent ops --admin`)")
    host, _ = split_host_port(running.address)
    target = join_host_port(host if is_loopback(host) else "127.0.0.1", running.port)
    identity = {"server": target, "insecure": settings.insecure}
    identity.update({"agent_id": "dashboard"} if settings.insecure else {"cert_dir": cert_dir})
    client = client_settings.load(settings_file=config_file, environ=os.environ, overrides=identity)
    board = dashboard_settings.load(settings_file=config_file, environ=os.environ,
                                    overrides={"dashboard_listen": listen})
    shown = stack.enter_context(run_dashboard(board, client))
    click.echo(f"mnemosync dashboard on {shown.url} as {client.resolved_agent_id()}", err=True)
    if shown.token:
        click.echo(f"mnemosync dashboard sign-in: {shown.login_url}", err=True)
