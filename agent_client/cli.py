"""The agent's commands: `mnemosync add`, `search`, `get`, `redact`, `sync` and `status`.

Each parses its options, calls `AgentClient`, and prints: a table or short
text for people, `--json` for scripts. Errors are the client's typed errors;
the `mnemosync` command's error edge prints them and picks the exit code
(`mnemosync.cli`, `mnemosync.kernel.command_line`). The command table loads these by
name (`mnemosync.cli.COMMANDS`), so nothing here imports the server's commands.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from mnemosync.agent.cli_options import client_options, connection_options, load_settings
from mnemosync.kernel import codec, event_time, procedures, source_refs
from mnemosync.kernel.command_line import echo_json, json_option
from mnemosync.kernel.memory import LAYERS, text_author, text_authority
from mnemosync.kernel.one_line import one_line, one_lines
from mnemosync.kernel.wording import counted, plural


def _progress(applied: int, offset: int, head: int) -> None:
    click.echo(f"\rsyncing: {offset}/{head} entries ({applied} new)", err=True, nl=False)
    if offset >= head:
        click.echo("", err=True)


def _open(settings, *, live: bool = False):
    """An agent client for one command; `with _open(...) as client` boots it (sync, queued writes) once."""
    from mnemosync.agent.client import AgentClient

    return AgentClient(settings, progress=_progress, live=live)


def saw(client, versions: dict[str, int], command: str) -> None:
    """Records what a command showed the person at this agent's command line (`mnemosync.agent.shown`): their
    `update` and `forget` are made from these versions. A failure to record is said, never fatal."""
    from mnemosync.agent.shown import CLI_READER
    from mnemosync.kernel.errors import CodedError

    try:
        client.reader(CLI_READER).saw(versions, f"mnemosync {command}")
    except CodedError as exc:
        click.echo(f"(what was shown is not recorded, so a later update needs --base-version: {exc})", err=True)


def conflict_line(client, conflict_id: int) -> str:
    """The line saying a write opened or joined a conflict, with its sides (`mnemosync.agent.conflicts.summary`)."""
    from mnemosync.agent import conflicts
    from mnemosync.kernel.errors import CodedError

    try:
        line = conflicts.summary(client.conflict(conflict_id).conflict)
    except CodedError:
        line = f"conflict #{conflict_id}"
    return f"this write opened or joined {line} (review with `mnemosync conflicts show {conflict_id}`)"


def memory_dict(m) -> dict:
    """A memory as JSON-ready data."""
    return {
        "id": m.id, "scope": m.scope, "type": m.type, "layer": m.layer, "tags": list(m.tags),
        "content": m.content, "importance": m.importance, "confidence": m.confidence,
        "protected": m.protected, "author": m.author_agent, "updated_by": m.updated_by,
        "text_author": text_author(m), "text_authority": text_authority(m), "authority": m.authority,
        "version": m.version, "created_at_ms": m.created_at_ms, "updated_at_ms": m.updated_at_ms,
        "archived": m.archived, "links": [{"target_id": k.target_id, "relation": k.relation, "weight": k.weight,
                                                   "reason": k.reason} for k in m.links],
        "event_time_ms": m.event_time_ms,
        "sources": list(m.sources),
        "verification": m.verification.__dict__ if m.verification is not None else None,
        **(m.procedure.as_dict() if m.procedure else {}),
        **({"origin": m.origin.as_dict()} if m.origin else {}),
    }


def procedure_options(func):
    """--step, --precondition and --postcondition (each repeatable, in order): a procedure memory (seed 004)."""
    for name, what in (("postcondition", "What holds after the steps"),
                       ("precondition", "What must hold before the steps"),
                       ("step", "A step of the procedure, in order")):
        func = click.option(f"--{name}", f"{name}s", multiple=True,
                            help=f"{what} (repeat for more; makes it a procedure).")(func)
    return func


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


@click.command()
@client_options
@click.argument("content")
@click.option("--scope", help="Scope, e.g. user or project:NAME [default from settings: user].")
@click.option("--type", "type_", default="fact", show_default=True, help="Kind of memory (decision, fix, …).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeat for more).")
@click.option("--layer", help="constitutional, legislative, factual (default) or ephemeral.")
@click.option("--importance", type=float, help="0 to 1 [default 0.5].")
@click.option("--event-time", help="When it happened, if not now: ISO 8601, UTC unless an offset follows "
                                   "(2025-03-08, 2025-03-08T16:20, 2025-03-08T16:20+01:00).")
@click.option("--source", "sources", multiple=True,
              help="What it is about (repeatable): PATH, PATH:10-20, PATH#symbol, commit:SHA or a URL; a file in "
                   "--root gets the hash of the cited part recorded.")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The project's working tree the source paths are relative to [default: the current directory].")
@procedure_options
def add(settings, as_json, content, scope, type_, tags, layer, importance, event_time, sources, root, steps,
        preconditions, postconditions):
    """Store a memory.

    \b
    Example:
      mnemosync add "Deploys go through ops/deploy.sh" --type decision --tag deploy
      mnemosync add "Maya: I start at Rumo on 1 April" --event-time 2025-03-08T16:20
      mnemosync add "The API client retries 502s twice" --source src/lib/api.ts#retry
      mnemosync add "Deploy the web app" --type procedure --precondition "tests pass" --step "build the image" \\
          --step "push it" --postcondition "the service is healthy"
    """
    with _open(settings) as client:
        result = client.add(content, scope=scope, type=type_, tags=tags, layer=layer, importance=importance,
                            event_time=event_time, sources=sources, root=root, steps=steps,
                            preconditions=preconditions, postconditions=postconditions)
        if not result.deduplicated:
            saw(client, {result.memory_id: result.version}, "add")
        conflict = conflict_line(client, result.conflict_id) if result.conflict_id else ""
    from mnemosync.agent.source_tree import source_notes
    from mnemosync.agent.write_path import recorded_sources

    notes = source_notes(recorded_sources(sources, root), root) if sources else []
    if as_json:
        echo_json({**result.__dict__, **({"notes": notes} if notes else {})})
    else:
        state = "queued offline (will be sent when the server is back)" if result.pending else f"seq {result.seq}"
        click.echo(f"{result.memory_id}  v{result.version}  {state}")
        if conflict:
            click.echo(conflict)
    for note in notes:
        click.echo(f"note: source {note}", err=True)


@click.command()
@client_options
@click.argument("query")
@click.option("--limit", default=10, show_default=True, help="Number of results.")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeat for more).")
@click.option("--type", "types", multiple=True, help="Only this type (repeat for more).")
@click.option("--tag", "tags", multiple=True, help="Only memories with all these tags.")
@click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default="hybrid", show_default=True)
def search(settings, as_json, query, limit, scopes, types, tags, mode):
    """Search memories (hybrid vector + keyword).

    \b
    Example:
      mnemosync search "how are login tokens signed?" --limit 5
    """
    with _open(settings) as client:
        outcome = client.search(query, limit=limit, scopes=scopes, types=types, tags=tags, mode=mode)
        saw(client, {h.memory.id: h.memory.version for h in outcome.hits}, "search")
    if as_json:
        echo_json({
            "offline": outcome.offline, "note": outcome.note,
            "results": [{"memory": memory_dict(h.memory), "score": {
                "final": h.final, "fused": h.fused, "vector_score": h.vector_score,
                "keyword_score": h.keyword_score, "keyword_coverage": h.keyword_coverage, "rrf": h.rrf,
                "vector_rank": h.vector_rank, "vector_distance": h.vector_distance,
                "keyword_rank": h.keyword_rank, "bm25": h.bm25,
                **{name: getattr(h, name) for name in codec.COGNITIVE_PARTS}}}
                for h in outcome.hits],
        })
        return
    if outcome.note:
        click.echo(f"({outcome.note})", err=True)
    if not outcome.hits:
        click.echo("no results")
    for h in outcome.hits:
        m = h.memory
        click.echo(f"{h.final:.4f}  {m.id}  v{m.version}  [{m.scope}/{m.type}]  {m.content[:100]}")


@click.command()
@client_options
@click.argument("memory_id")
def get(settings, as_json, memory_id):
    """Show one memory, by its id or the 8-character prefix other commands print.

    \b
    Example:
      mnemosync get 2f1c0b7e
      mnemosync get 2f1c0b7e-3d5a-4c2e-9a41-6f0b2d7e8c19 --json
    """
    with _open(settings) as client:
        m = client.get(client.local.resolve_id(memory_id))
        saw(client, {m.id: m.version}, "get")
    if as_json:
        echo_json(memory_dict(m))
        return
    click.echo(f"{m.id}  v{m.version}{'  (forgotten)' if m.archived else ''}")
    click.echo(f"scope {m.scope}  type {m.type}  layer {LAYERS.get(m.layer, m.layer)}  importance {m.importance:g}  "
               f"confidence {m.confidence:g}  tags {', '.join(m.tags) or '-'}")
    click.echo(f"by {m.author_agent} at {_when(m.created_at_ms)}; last change by {m.updated_by} "
               f"at {_when(m.updated_at_ms)}; the text shown is {text_author(m)}'s (authority {text_authority(m)})")
    if m.origin is not None:
        o = m.origin
        changed = f"; last changed there by {o.updated_by} at {_when(o.updated_at_ms)}" if o.updated_by else ""
        click.echo(f"imported: first written by {o.author_agent} at {_when(o.created_at_ms)}{changed}")
    if m.event_time_ms is not None:
        click.echo(f"happened at {event_time.text(m.event_time_ms)}")
    click.echo("")
    click.echo(m.content)
    if m.procedure:
        click.echo("")
        for line in procedures.render(m.procedure):
            click.echo(line)
    for k in m.links:
        weight = f" {k.weight:g}" if k.weight != 1 else ""
        click.echo(f"-> {k.relation}{weight} {k.target_id}{f'  ({k.reason})' if k.reason else ''}")
    for source in m.sources:
        hashed = f"  sha256 {source['sha256'][:12]}" if "sha256" in source else ""
        click.echo(f"source {one_line(source_refs.describe(source), 600)}{hashed}")
    if m.verification is not None and m.verification.status:
        v = m.verification
        paths = f" ({one_lines(v.paths, 600)})" if v.paths else ""
        click.echo(f"verification: {v.status}{paths} by {v.checked_by} at {_when(v.checked_at_ms)}")


@click.command("verify-memories")
@client_options
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeatable) [default: every cached one].")
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="The project's working tree to check against [default: the current directory].")
def verify_memories(settings, as_json, scopes, root):
    """Check memories that cite sources against a working tree: verified, stale, contradicted or unverified.

    Each status that changed is written to the changelog by this agent, so every cache agrees and search counts
    a stale memory's confidence at 0.7 times, a contradicted one's at 0.3 times.

    \b
    Example:
      mnemosync verify-memories --scope project:web --root ~/src/web
    """
    with _open(settings) as client:
        outcomes = client.verify_memories(scopes=scopes, root=root)
    if as_json:
        echo_json([o.__dict__ for o in outcomes])
        return
    for o in outcomes:
        change = f"(was {o.previous or 'never checked'}, recorded)" if o.written else "(unchanged)"
        paths = f" {one_lines(o.paths, 600)}" if o.paths else ""
        click.echo(f"{o.memory_id[:8]}  {o.status:<12}{paths}  {change}")
    if not outcomes:
        click.echo("no memories with sources in these scopes")


@click.command()
@client_options
@click.argument("memory_id")
@click.option("--reason", required=True, help="Why (kept in the changelog as the audit record).")
def redact(settings, as_json, memory_id, reason):
    """Remove a memory's text everywhere, for a leaked secret (admin certificate required).

    The content and quote become "[redacted]" in every version, conflict
    revision, agent cache and changelog entry; the memory is archived. The
    hash chain still verifies, and the redaction itself stays in the changelog
    (who, when, why). Add the knowledge again without the secret if it is
    still needed.

    \b
    Example:
      mnemosync redact 2f1c… --reason "AWS key pasted into a memory"
    """
    with _open(settings) as client:
        result = client.redact(client.local.resolve_id(memory_id), reason)
    if as_json:
        echo_json(result.__dict__)
    else:
        click.echo(f"{result.memory_id}  v{result.version}  redacted at seq {result.seq}; agents drop the text "
                   "at their next sync")


@click.command()
@client_options
def sync(settings, as_json):
    """Catch the local cache up with the server (agent_sync) and send queued writes.

    \b
    Example:
      mnemosync sync
    """
    from mnemosync.agent.client import AgentClient

    with AgentClient(settings, progress=_progress, live=False, sync_on_start=False) as client:
        sent, refused = client.flush()
        redirected = client.redirected
        summary = client.sync()
    if as_json:
        echo_json({**summary.__dict__, "sent": sent, "refused": refused,
                   "became": [{"memory_id": r.memory_id, "became": r.became} for r in redirected]})
    else:
        click.echo(f"applied {counted(summary.applied, 'entry')} in {summary.seconds:.2f}s; offset {summary.offset} "
                   f"of {summary.head}; sent {counted(sent, 'queued write')}"
                   + (f", {refused} refused" if refused else ""))
        for r in redirected:
            click.echo(f"queued add {r.memory_id} was not stored: memory {r.became} already says the same, so it "
                       f"became that memory")
        if summary.conflicts_waiting:
            waiting = summary.conflicts_waiting
            click.echo(f"{counted(waiting, 'conflict')} with a revision of yours {plural(waiting, 'waits', 'wait')} "
                       "for review: mnemosync conflicts list")


@click.command()
@connection_options
@json_option
def status(as_json, connection):
    """Show this agent's connection, offset, queued writes and local agent process.

    An unreachable server is a state worth showing (exit 0); a connection
    the server or TLS refuses (expired, revoked or wrong-CA certificate,
    hostname mismatch) is a fault: the state is shown, then the reason as
    `mnemosync sync` words it, and the exit code is 1.

    \b
    Example:
      mnemosync status --json
    """
    import os

    from mnemosync.agent import captures, local_socket
    from mnemosync.agent.client import AgentClient

    with AgentClient(load_settings(connection), live=False, sync_on_start=False) as client:
        s = client.status()
        waiting = captures.waiting(client.settings.resolved_cache_dir())
    local = local_socket.agent_status(os.environ, connection)
    refusal = s.refusal
    if as_json:
        shown = {k: v for k, v in s.__dict__.items() if k != "refusal"}
        echo_json({**shown, "local_agent": local, "captures_waiting": [c.__dict__ for c in waiting],
                   **({"error": str(refusal)} if refusal else {})})
    else:
        state = "online" if s.online else f"NOT CONNECTED: {refusal.code}" if refusal else "UNREACHABLE"
        click.echo(f"agent    {s.agent_id}")
        click.echo(f"server   {s.server} ({state})")
        lag = f" (head {s.head}, {s.head - s.offset} behind)" if s.head is not None else ""
        click.echo(f"offset   {s.offset}{lag}")
        age = f", oldest {s.oldest_pending_age_s:.0f}s old" if s.oldest_pending_age_s is not None else ""
        click.echo(f"outbox   {s.pending} pending{age}; {s.failed} refused")
        click.echo(f"cache    {s.cache_path}")
        click.echo(f"local    {local_socket.describe_agent(local, server_reached=s.online)}")
        if waiting:
            click.echo(f"captures {captures.summary(waiting)}")
    if refusal:
        raise refusal
