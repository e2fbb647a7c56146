"""`mnemosync maintain decay`: the server's lifecycle sweep by hand (admin certificates only).

The server sweeps on its own every `[server.lifecycle] sweep_interval_seconds`;
this runs one now (or for another time, `--now`), or with `--dry-run` prints
what it would archive and why without writing anything.
"""

from __future__ import annotations

import click

from agent_client.cli_options import client_options
from server.core import event_time
from server.core.command_line import echo_json


@click.group()
def maintain():
    """Run the server's maintenance by hand (admin certificates only).

    \b
    Example:
      mnemosync maintain decay --dry-run
    """


@maintain.command()
@client_options
@click.option("--dry-run", is_flag=True, help="Print what the sweep would write; write nothing.")
@click.option("--now", "now", help="Sweep as of this time (ISO 8601, UTC unless an offset follows) [default: the "
                                   "server's now]. A second sweep for the same time writes nothing.")
def decay(settings, as_json, dry_run, now):
    """Run the lifecycle sweep: decay entries for memories whose use changed, archive entries for those that
    faded below their layer's threshold past its minimum age.

    Prints every archive with its reason (the numbers against the layer's rule), then the counts.

    \b
    Examples:
      mnemosync maintain decay --dry-run
      mnemosync maintain decay --now 2026-03-01 --json
    """
    from agent_client.client import AgentClient

    now_ms = event_time.parse(now) if now else 0
    with AgentClient(settings, live=False, sync_on_start=False) as client:
        report = client.decay_sweep(dry_run=dry_run, now_ms=now_ms)
    if as_json:
        echo_json({k: v for k, v in report.__dict__.items() if k not in ("decisions", "after_num", "done")}
                  | {"decisions": [{"memory_id": d.memory_id, "op": d.op, "reason": d.reason}
                                   for d in report.decisions]})
        return
    verb = "would archive" if dry_run else "archived"
    for d in report.decisions:
        if d.op == "archive":
            click.echo(f"{verb} {d.memory_id}: {d.reason}")
    written = "nothing written (dry run)" if dry_run else f"{report.entries_written} entries written"
    click.echo(f"swept {report.examined} memories as of {event_time.text(report.as_of_ms)}: "
               f"{report.archived} to archive, {report.decayed} decay records; {written}")
