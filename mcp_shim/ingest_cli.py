"""`mnemosync ingest PATH...`: Claude Code session transcripts into shared memory, once each.

The PreCompact and SessionEnd hooks start this in the background when no local
agent runs to take the capture (`mnemosync.shim.capture_hook`); it can also be
run by hand on any transcript. Each transcript is recorded as a capture first
(`mnemosync.agent.captures`), so one that fails is shown by `status` and
`doctor` and tried again by the local agent.
The work is `mnemosync.agent.ingest`: episodes (the user's instructions,
decisions and corrections with the assistant's conclusions, tool noise
dropped) stored as ephemeral memories linked in time order, each transcript
read from where the previous run stopped, secrets masked.
"""

from __future__ import annotations

from pathlib import Path

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import echo_json, json_option
from mnemosync.kernel.errors import CodedError
from mnemosync.shim.config import load_settings, scope_option


@click.command()
@connection_options
@scope_option
@json_option
@click.argument("paths", nargs=-1, required=True, type=click.Path(dir_okay=False, exists=True, path_type=Path))
@click.option("--project-dir", help="The session's project directory: the scope is project:<its name> "
                                    "unless --scope or MNEMOSYNC_SCOPE say otherwise.")
@click.option("--partial", is_flag=True, help="The session goes on (PreCompact): leave its last turn for the next "
                                              "run.")
def ingest(paths, project_dir, partial, as_json, scope, connection):
    """Store the episodes of Claude Code transcripts (JSONL) not stored yet.

    Each user turn with the assistant's conclusion becomes an ephemeral memory
    of type episode, linked to the one before. Running it again stores only
    what was added to a transcript since.

    \b
    Examples:
      mnemosync ingest ~/.claude/projects/-home-me-src-web/3f2a9c1b-….jsonl --insecure
      mnemosync ingest session.jsonl --project-dir ~/src/web --json
    """
    from mnemosync.agent import captures
    from mnemosync.agent.client import AgentClient
    from mnemosync.agent.ingest import Watermarks

    settings = load_settings(project_dir=project_dir, scope=scope, **connection)
    reports = []
    watermarks = Watermarks(settings.resolved_cache_dir() / captures.FILE_NAME)
    try:
        wanted = [watermarks.want(path, settings.scope, final=not partial) for path in paths]  # kept if we fail
        try:
            client = AgentClient(settings, live=False)
        except CodedError as exc:
            for capture in wanted:
                watermarks.failed(capture, str(exc))
            raise
        with client:
            for capture in wanted:
                reports.append(captures.run(client, watermarks, capture))
                if not as_json:
                    click.echo(reports[-1].summary())
    finally:
        watermarks.close()
    if as_json:
        echo_json([dict(r.__dict__) for r in reports])
