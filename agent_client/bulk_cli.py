"""`mnemosync import` and `mnemosync export` (see `mnemosync.agent.bulk` for the formats)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from mnemosync.agent.cli_options import client_options
from mnemosync.kernel.command_line import echo_json
from mnemosync.kernel.wording import counted


@click.command("import")
@client_options
@click.argument("source", type=click.Path(exists=True, path_type=Path))
@click.option("--scope", help="Scope for memories whose source names none [default from settings].")
@click.option("--batch", default=250, show_default=True, help="Memories embedded and sent at a time.")
def import_memories(settings, as_json, source, scope, batch):
    """Import memories: mnemosync JSONL (from `export`), an MCP memory server's memory.jsonl, or markdown notes
    (a folder of notes with front matter, or a CLAUDE.md / MEMORY.md file: one memory per bullet).

    Running it again writes nothing twice (op_ids come from the source), so an interrupted import can simply be
    run again. Items refused (secrets, sizes, rules) are listed with the reason; exit code 0 unless nothing could
    be read.

    \b
    Example:
      mnemosync import ~/.local/share/mcp-memory/memory.jsonl --scope project:web
      mnemosync import ~/notes/
    """
    from dataclasses import replace

    from mnemosync.agent import bulk
    from mnemosync.agent.cli import _open

    try:
        items = bulk.read_source(source)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if scope:
        items = [replace(i, scope=i.scope or scope) for i in items]
    with _open(settings) as client, click.progressbar(length=len(items), label="importing", file=None) as bar:
        done = [0]

        def progress(count: int, total: int) -> None:
            bar.update(count - done[0])
            done[0] = count

        summary = client.add_many(items, batch=batch, progress=progress)
    if as_json:
        echo_json(summary.to_json())
        return
    click.echo(f"{counted(len(items), 'item')}: {summary.written} written, {summary.replayed} already imported, "
               f"{counted(summary.deduplicated, 'duplicate')} of existing memories, {counted(summary.links, 'link')} "
               f"({summary.links_unchanged} already there), "
               f"{len(summary.refused)} refused")
    for key, reason in summary.refused:
        click.echo(f"  refused {key.replace(chr(10), ' ')}: {reason}")


@click.command("export")
@client_options
@click.argument("target", type=click.Path(dir_okay=False, path_type=Path))
def export_memories(settings, as_json, target):
    """Export every memory this agent can see (not forgotten ones) to mnemosync JSONL, which `import` reads back
    under the same ids. The file is private (0600), and credentials the detector knows are masked.

    \b
    Example:
      mnemosync export memories.jsonl
    """
    from mnemosync.agent import bulk
    from mnemosync.agent.cli import _open
    from mnemosync.kernel import projections

    def live_memories(conn):
        ids = [i for (i,) in conn.execute("SELECT id FROM memories WHERE archived = 0 ORDER BY num")]
        return [projections.get_memory(conn, i) for i in ids]

    if not target.parent.is_dir():
        raise click.UsageError(f"cannot export to {target}: the folder {target.parent} does not exist")
    with _open(settings) as client:
        memories = client.cache.read(live_memories)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # 0600 from the start: it holds memories
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        for line in bulk.export_lines(memories):
            out.write(line + "\n")
    if as_json:
        echo_json({"exported": len(memories), "path": str(target)})
    else:
        click.echo(f"exported {counted(len(memories), 'memory')} to {target}")
