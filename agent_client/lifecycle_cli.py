"""`mnemosync maintain decay|consolidate|links` (admin), `mnemosync topics` and `mnemosync reflect`.

The server sweeps on its own every `[server.lifecycle] sweep_interval_seconds`
and consolidates every `[server.consolidation] interval_seconds`; `maintain`
runs one now (or for another time, `--now`), or with `--dry-run` prints what
it would write and why without writing anything. `topics` and `reflect` read
the agent's cache after a sync (offline: the cache as it is).
"""

from __future__ import annotations

import click

from mnemosync.agent.cli_options import client_options
from mnemosync.kernel import event_time
from mnemosync.kernel.command_line import echo_json
from mnemosync.kernel.wording import counted


@click.group()
def maintain():
    """Run the server's maintenance by hand (admin certificates only).

    \b
    Examples:
      mnemosync maintain decay --dry-run
      mnemosync maintain consolidate --dry-run
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
    from mnemosync.agent.client import AgentClient

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
    written = "nothing written (dry run)" if dry_run else f"{counted(report.entries_written, 'entry')} written"
    click.echo(f"swept {counted(report.examined, 'memory')} as of {event_time.text(report.as_of_ms)}: "
               f"{report.archived} to archive, {counted(report.decayed, 'decay record')}; {written}")


def _consolidate(settings, as_json: bool, dry_run: bool, now: str | None, links_only: bool) -> None:
    from mnemosync.agent.client import AgentClient

    now_ms = event_time.parse(now) if now else 0
    with AgentClient(settings, live=False, sync_on_start=False) as client:
        report = client.consolidate(dry_run=dry_run, now_ms=now_ms, links_only=links_only)
    if as_json:
        echo_json({k: v for k, v in report.__dict__.items() if k != "decisions"}
                  | {"decisions": [{"memory_id": d.memory_id, "op": d.op, "reason": d.reason}
                                   for d in report.decisions]})
        return
    verb = "would " if dry_run else ""
    for d in report.decisions:
        click.echo(f"{verb}{d.op} {d.memory_id}: {d.reason}")
    written = "nothing written (dry run)" if dry_run else f"{counted(report.entries_written, 'entry')} written"
    examined = counted(report.examined, "new memory", "new memories")
    click.echo(f"consolidated as of {event_time.text(report.as_of_ms)}: {examined}, "
               f"{report.linked} linked, {report.merged} merged, {counted(report.pruned, 'edge')} pruned, "
               f"{report.promoted} promoted; {written}")


_DRY = click.option("--dry-run", is_flag=True, help="Print what it would write and why; write nothing.")
_NOW = click.option("--now", "now", help="As of this time (ISO 8601, UTC unless an offset follows) [default: the "
                                         "server's now]. A second run for the same state and time writes nothing.")


@maintain.command()
@client_options
@_DRY
@_NOW
def consolidate(settings, as_json, dry_run, now):
    """Run consolidation (seed 002's sleep cycle, without an LLM): link new memories to their neighbours
    (cosine > 0.5), merge near-duplicates (> 0.85: the others archived and superseded by the survivor), prune
    associative edges that faded, promote ephemeral memories used often.

    Prints every entry with its reason, then the counts. Each is undone by an ordinary unlink, restore or
    set-layer.

    \b
    Examples:
      mnemosync maintain consolidate --dry-run
      mnemosync maintain consolidate --now 2026-03-01 --json
    """
    _consolidate(settings, as_json, dry_run, now, links_only=False)


@maintain.command()
@client_options
@_DRY
@_NOW
def links(settings, as_json, dry_run, now):
    """Run only consolidation's link work: link new memories to their neighbours and prune faded associative
    edges (no merges, no promotions).

    \b
    Example:
      mnemosync maintain links --dry-run
    """
    _consolidate(settings, as_json, dry_run, now, links_only=True)


@click.command()
@client_options
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable) [default: every cached one].")
@click.option("--limit", type=click.IntRange(1, 200), default=20, show_default=True, help="Topics to list.")
def topics(settings, as_json, scopes, limit):
    """List topic clusters of the memories (from this agent's cache after a sync; the same as the server's).

    \b
    Examples:
      mnemosync topics
      mnemosync topics --scope project:web --json
    """
    from mnemosync.agent.cli import _open

    with _open(settings) as client:
        found = client.list_topics(scopes=scopes, limit=limit)
    if as_json:
        echo_json([t.__dict__ for t in found.topics])
        return
    for t in found.topics:
        click.echo(f"{t.size:6d}  {t.scope}  {t.label}  (cohesion {t.cohesion:.2f}, e.g. {t.representative_id})")
    if not found.topics:
        click.echo("no topics: no live memories with vectors in the cache")


@click.command()
@client_options
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable) [default: every cached one].")
def reflect(settings, as_json, scopes):
    """Print the reflection summary (REFLECTION.md): themes, most accessed, recent insights, consolidation.

    \b
    Examples:
      mnemosync reflect > REFLECTION.md
      mnemosync reflect --json
    """
    import time

    from mnemosync.agent.cli import _open
    from mnemosync.kernel import reflection

    with _open(settings) as client:
        r = client.local.reflection(now_ms=int(time.time() * 1000), scopes=scopes)
    if as_json:
        echo_json({"as_of_ms": r.as_of_ms, "live": r.live, "themes": [t.__dict__ for t in r.themes],
                   "most_accessed": [m.__dict__ for m in r.most_accessed],
                   "recent_insights": [m.__dict__ for m in r.recent_insights], "consolidation": r.consolidation})
        return
    click.echo(reflection.markdown(r, event_time.text), nl=False)
