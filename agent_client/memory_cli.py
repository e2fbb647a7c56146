"""The agent's commands that change one memory or list recent ones: `mnemosync update`, `forget`, `restore` and
`recent` (also `list`); `mnemosync link` is `mnemosync graph link` (`mnemosync.agent.graph_cli`).

The same calls the MCP tools make (`update`, `forget`, `restore`, `list_recent`), for a person at a shell.
Every id may be the 8-character prefix the other outputs print; an ambiguous one is refused with the matches
listed. A write made from a version another agent has since changed is still recorded, as a conflicting revision:
the line says so and names the conflict to review.

A change is made from the version a command last showed the person (`get`, `search`, `list`/`recent`, their own
writes: `mnemosync.agent.shown`), never from one the command itself synced in: the catch-up before the write would
otherwise make every update last-writer-wins. `--base-version N` names another; a memory never shown is refused
unless `--force` says to change whichever version is current. The line says which base was used.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from mnemosync.agent.cli import _open, conflict_line, memory_dict, procedure_options, saw
from mnemosync.agent.cli_options import client_options
from mnemosync.agent.shown import CLI_READER, Base
from mnemosync.kernel.command_line import echo_json
from mnemosync.kernel.wording import one_line


def _base(client, memory_id: str, base_version: int | None, force: bool) -> Base:
    """The base of a person's change (see the module docstring).

    Raises:
        click.UsageError: the memory was never shown to them and neither --base-version nor --force is given.
    """
    if force and base_version is not None:
        raise click.UsageError("give --base-version N or --force, not both")
    base = client.reader(CLI_READER).base(memory_id, base_version)
    if base.how == "blind" and not force:
        raise click.UsageError(
            f"no command has shown you memory {memory_id[:8]}, so there is no version to make this change from: run "
            f"`mnemosync get {memory_id[:8]}` first (the change is then made from the version it shows), give "
            "--base-version N, or --force to change whichever version is current")
    return base


def _written(client, result, as_json: bool, what: str, base: Base, command: str) -> None:
    """Records what the write made as shown to the person, then prints its outcome: its id and version, the base
    it was made from, its seq or that it is queued offline, and the conflict it opened."""
    client.reader(CLI_READER).wrote(result, f"mnemosync {command}")
    made_from = (f"v{base.version} (--base-version)" if base.how == "given" else
                 f"v{base.version} (last shown to you by `{base.via}`)" if base.how == "shown" else
                 "the current version (--force)")
    conflict = conflict_line(client, result.conflict_id) if result.conflict_id and not as_json else ""
    if as_json:
        echo_json({**result.__dict__, "base_version": base.version, "base": base.how})
        return
    state = "queued offline (will be sent when the server is back)" if result.pending else f"seq {result.seq}"
    click.echo(f"{result.memory_id}  v{result.version}  {what} from {made_from}, {state}")
    if conflict:
        click.echo(f"another agent changed it first: {conflict}")


base_version_option = click.option(
    "--base-version", type=click.IntRange(min=1),
    help="The version this change is made from [default: the version a command last showed you: get, search, "
         "list]. If another agent changed the memory since, the change is still recorded, as a conflicting "
         "revision.")
force_option = click.option(
    "--force", is_flag=True,
    help="Change the memory's current version even though no command has shown it to you (a blind write).")


@click.command()
@client_options
@click.argument("memory_id")
@click.option("--content", help="New text.")
@click.option("--type", "type_", help="New kind (decision, fix, …).")
@click.option("--tag", "tags", multiple=True, help="Replace the tags with these (repeat for more).")
@click.option("--importance", type=click.FloatRange(0, 1), help="0 to 1.")
@click.option("--confidence", type=click.FloatRange(0, 1), help="0 to 1.")
@click.option("--protected/--not-protected", default=None, help="Protect it from being forgotten by agents.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="New --content is stated against the sources' files in this tree (hashed again) [default: the "
                   "current directory]; a file not there keeps its old hash.")
@procedure_options
@base_version_option
@force_option
def update(settings, as_json, memory_id, content, type_, tags, importance, confidence, protected, root, steps,
           preconditions, postconditions, base_version, force):
    """Change a memory (content, type, tags, importance, confidence, protection, a procedure's lists).

    --step, --precondition and --postcondition replace that list (the others are kept).

    \b
    Example:
      mnemosync update 2f1c0b7e --content "Deploys go through ops/deploy.sh --canary"
      mnemosync update 2f1c0b7e --importance 0.9 --tag deploy --tag ci
      mnemosync update 2f1c0b7e --step "build the image" --step "push it" --step "roll out"
    """
    if not any(v is not None for v in (content, type_, importance, confidence, protected)) and not (
            tags or steps or preconditions or postconditions):
        raise click.UsageError("nothing to change: give --content, --type, --tag, --importance, --confidence, "
                               "--protected/--not-protected, --step, --precondition or --postcondition")
    with _open(settings) as client:
        full = client.local.resolve_id(memory_id)
        base = _base(client, full, base_version, force)
        result = client.update(full, content=content, type=type_, tags=list(tags) or None, importance=importance,
                               confidence=confidence, protected=protected, steps=list(steps) or None,
                               preconditions=list(preconditions) or None,
                               postconditions=list(postconditions) or None, root=root, base_version=base.version)
        _written(client, result, as_json, "updated", base, "update")


@click.command()
@client_options
@click.argument("memory_id")
@click.option("--reason", default="", help="Why (kept in the changelog).")
@base_version_option
@force_option
def forget(settings, as_json, memory_id, reason, base_version, force):
    """Forget a memory: it is archived, not deleted, and `mnemosync restore` brings it back.

    \b
    Example:
      mnemosync forget 2f1c0b7e --reason "we moved off Heroku"
    """
    with _open(settings) as client:
        full = client.local.resolve_id(memory_id)
        base = _base(client, full, base_version, force)
        result = client.forget(full, reason=reason, base_version=base.version)
        _written(client, result, as_json, "forgotten", base, "forget")


@click.command()
@client_options
@click.argument("memory_id")
@base_version_option
@force_option
def restore(settings, as_json, memory_id, base_version, force):
    """Bring back a forgotten memory.

    \b
    Example:
      mnemosync restore 2f1c0b7e
    """
    with _open(settings) as client:
        full = client.local.resolve_id(memory_id)
        base = _base(client, full, base_version, force)
        result = client.restore(full, base_version=base.version)
        _written(client, result, as_json, "restored", base, "restore")


@click.command()
@client_options
@click.option("--hours", type=click.FloatRange(0, 24 * 366, min_open=True), default=24 * 7, show_default=True,
              help="How far back to look.")
@click.option("--limit", type=click.IntRange(1, 500), default=20, show_default=True, help="Number of memories.")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeat for more).")
@click.option("--type", "types", multiple=True, help="Only this type (repeat for more).")
@click.option("--tag", "tags", multiple=True, help="Only memories with all these tags.")
def recent(settings, as_json, hours, limit, scopes, types, tags):
    """List the newest memories (from this agent's cache, synced first), newest first.

    \b
    Example:
      mnemosync recent --hours 24 --type decision
      mnemosync list --scope project:web --limit 50
    """
    since_ms = int((time.time() - hours * 3600) * 1000)
    with _open(settings) as client:
        rows = client.local.recent(since_ms=since_ms, scopes=scopes, types=types, tags=tags, limit=limit)
        pending = client.local.pending_adds(since_ms=since_ms, scopes=scopes)
        saw(client, {m.id: m.version for m in (*pending, *rows)}, "list")
    if as_json:
        echo_json({"memories": [{**memory_dict(m), "pending": True} for m in pending]
                   + [memory_dict(m) for m in rows]})
        return
    if not rows and not pending:
        click.echo(f"no memories in the last {hours:g} hours")
    for m in pending:
        click.echo(f"{m.id[:8]}  (queued)  [{m.scope}/{m.type}]  {one_line(m.content, 100)}")
    for m in rows:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(m.created_at_ms / 1000))
        click.echo(f"{m.id[:8]}  v{m.version}  {when}  {m.author_agent}  [{m.scope}/{m.type}]  "
                   f"{one_line(m.content, 100)}")


list_command = click.Command("list", callback=recent.callback, params=recent.params, help=recent.help,
                             short_help="The same as `mnemosync recent`.")
"""`mnemosync list`: `recent` under the name people try first."""
