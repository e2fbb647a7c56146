"""`mnemosync vault`: the memories as a folder of markdown files (`mnemosync.agent.vault`, seed 004's format)."""

from __future__ import annotations

from pathlib import Path

import click

from mnemosync.agent.cli import _open
from mnemosync.agent.cli_options import client_options
from mnemosync.kernel.command_line import echo_json
from mnemosync.kernel.wording import counted

_DIR = click.Path(file_okay=False, path_type=Path)


@click.group(name="vault")
def vault_group():
    """Keep the memories as markdown files a person edits and keeps in git, and read the edits back.

    \b
    Examples:
      mnemosync vault export ~/team-memory
      mnemosync vault sync ~/team-memory
    """


@vault_group.command("export")
@client_options
@click.argument("directory", type=_DIR)
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeat for more) [default: every one].")
def export(settings, as_json, directory, scopes):
    """Write one markdown file per memory into DIRECTORY, with _index.json and _state.json.

    Files are graph/<type>/<title>-<id prefix>.md: front matter (id, type, layer, tags, importance,
    confidence, sources, author, version, relations …) and the content.

    \b
    Example:
      mnemosync vault export ~/team-memory --scope project:web
    """
    from mnemosync.agent import vault

    with _open(settings) as client:
        count = vault.export(client, directory, scopes=tuple(scopes))
    if as_json:
        echo_json({"exported": count, "path": str(directory)})
    else:
        click.echo(f"exported {counted(count, 'memory')} to {directory}")


@vault_group.command("sync")
@client_options
@click.argument("directory", type=_DIR)
def sync(settings, as_json, directory):
    """Read DIRECTORY's edits back: edited files become updates, new files adds, deleted files forgets.

    A file with the size and time of change _state.json recorded is not read; only files whose SHA-256
    differs from the recorded one are written. An update is made from the
    file's version, so a change another agent made since becomes a conflict (see `mnemosync conflicts`).
    A renamed or moved file (git mv) is the same memory at a new path. Without _state.json (a fresh clone)
    each file is matched with the memory its id names; deleted files cannot be seen then.

    \b
    Example:
      mnemosync vault sync ~/team-memory --json
    """
    from mnemosync.agent import vault

    with _open(settings) as client:
        report = vault.sync(client, directory)
    if as_json:
        echo_json({"updated": report.updated, "added": report.added, "forgotten": report.forgotten,
                   "unchanged": report.unchanged, "adopted": report.adopted, "state_missing": report.state_missing,
                   "moved": [{"memory_id": m, "from": old, "to": new} for m, old, new in report.moved],
                   "conflicts": [{"memory_id": m, "conflict_id": c} for m, c in report.conflicts],
                   "refused": [{"path": p, "reason": r} for p, r in report.refused],
                   "written": report.written,
                   "removed": [{"memory_id": m, "path": p} for m, p in report.removed]})
        return
    click.echo(f"{len(report.updated)} updated, {len(report.added)} added, {len(report.forgotten)} forgotten, "
               f"{report.unchanged} unchanged, {len(report.moved)} moved, {len(report.adopted)} adopted"
               + (f", {len(report.removed)} removed (redacted)" if report.removed else ""))
    if report.state_missing:
        click.echo(f"  no {vault.STATE_FILE} in {directory}: each file was matched with the memory its id names; "
                   "deleted files cannot be detected without it, so nothing was forgotten")
    for memory_id, old, new in report.moved:
        click.echo(f"  moved {memory_id}: {old} -> {new}")
    for memory_id, conflict_id in report.conflicts:
        click.echo(f"  conflict {conflict_id} on {memory_id}: another agent changed it since the file's version "
                   f"(review with `mnemosync conflicts show {conflict_id}`)")
    for path in report.written:
        click.echo(f"  wrote {path}")
    for memory_id, path in report.removed:
        click.echo(f"  removed {path}: memory {memory_id} was redacted")
    for path, reason in report.refused:
        click.echo(f"  not read {path}: {reason}")
