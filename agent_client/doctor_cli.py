"""`mnemosync doctor`: check everything a session needs and say what to do about each failure.

The checks are `mnemosync.agent.doctor`'s. The exit code says whether all is
well: 0 when no check failed (warnings included), 1 otherwise.
"""

from __future__ import annotations

import os

import click

from mnemosync.agent.cli_options import connection_options, load_settings
from mnemosync.agent.doctor import FAIL, ChecksFailed, Finding, local_agent, run_checks
from mnemosync.kernel.command_line import echo_json, json_option
from mnemosync.kernel.errors import SettingsError

_MARK = {"ok": "ok  ", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


@click.command()
@connection_options
@json_option
def doctor(as_json, connection):
    """Check this agent's set-up: model, certificate, server, clock, cache, outbox.

    Each line says what was found; each failure or warning says what to do.
    Exits 0 when nothing failed, 1 otherwise.

    \b
    Examples:
      mnemosync doctor
      MNEMOSYNC_CERT_DIR=~/certs/alice mnemosync doctor --server memory.internal:50051 --json
    """
    try:
        findings = run_checks(load_settings(connection))
    except SettingsError as exc:
        findings = [Finding("settings", FAIL, str(exc), "fix the setting named above (flag, MNEMOSYNC_* variable "
                                                        "or settings file)")]
    else:
        from mnemosync.agent import local_socket

        status = local_socket.agent_status(os.environ, connection)
        reached = any(f.check == "server" and f.status == "ok" for f in findings)
        findings.append(local_agent(status, local_socket.describe_agent(status, server_reached=reached),
                                    server_reached=reached))
    if as_json:
        echo_json({"ok": not any(f.status == FAIL for f in findings), "checks": [f.as_dict() for f in findings]})
    else:
        for f in findings:
            click.echo(f"{_MARK[f.status]}  {f.check:<12} {f.summary}")
            if f.fix and f.status != "ok":
                click.echo(f"{'':18}-> {f.fix}")
    failed = [f.check for f in findings if f.status == FAIL]
    if failed:
        raise ChecksFailed(f"{len(failed)} of {len(findings)} checks failed: {', '.join(failed)}")
