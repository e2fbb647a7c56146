"""The `mnemosync` command: one click group for server and client commands.

Commands parse options, call `server.*` or `AgentClient`, and print: a table
or short text for people, `--json` for scripts. Errors become
`click.ClickException` (`Error: …`, exit 1) here and nowhere else.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path

import click

from agent_client import settings as client_settings
from agent_client.ca_cli import ca
from agent_client.errors import ClientError
from agent_client.model_cli import embed, model
from mcp_shim.hook_cli import hook
from server import __version__
from server.cli import rebuild, serve, verify


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mnemosync")
@click.option("-v", "--verbose", is_flag=True, help="Log progress and connection details to stderr.")
def cli(verbose):
    """Shared long-term memory for AI agents.

    \b
    Start a development server:   mnemosync serve --insecure
    Store a memory:               mnemosync add "The auth service signs JWTs with RS256" --insecure
    Find it again:                mnemosync search "how are login tokens signed?" --insecure
    See this agent's state:       mnemosync status --insecure
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


def client_options(func):
    """--server, --agent-id, --cache-dir, --insecure, --cert-dir, --tls-server-name, --embed-model, --config, --json."""

    @click.option("--server", help="Server HOST:PORT [env MNEMOSYNC_SERVER; default 127.0.0.1:50051].")
    @click.option("--agent-id", help="This agent's id [env MNEMOSYNC_AGENT_ID; default: the --cert-dir certificate's, "
                                     "else user@host].")
    @click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="Local cache directory [env MNEMOSYNC_CACHE_DIR; default per agent under the data home].")
    @click.option("--insecure/--no-insecure", default=None,
                  help="Plain-text connection to a development server [env MNEMOSYNC_INSECURE].")
    @click.option("--cert-dir", type=click.Path(file_okay=False, path_type=Path),
                  help="mTLS: this agent's certificate directory from `mnemosync ca issue-agent` "
                       "(ca.crt, agent.crt, agent.key) [env MNEMOSYNC_CERT_DIR].")
    @click.option("--tls-server-name",
                  help="mTLS: name the server certificate must carry, if not the --server host "
                       "[env MNEMOSYNC_TLS_SERVER_NAME].")
    @click.option("--embed-model", type=click.Path(dir_okay=False, path_type=Path),
                  help="GGUF embedding model [env MNEMOSYNC_EMBED_MODEL].")
    @click.option("--config", "config_file", type=click.Path(dir_okay=False, exists=True, path_type=Path),
                  envvar="MNEMOSYNC_CONFIG", help="TOML settings file with a [client] table.")
    @click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
    @functools.wraps(func)
    def wrapper(server, agent_id, cache_dir, insecure, cert_dir, tls_server_name, embed_model, config_file,
                as_json, **kwargs):
        try:
            settings = client_settings.load(
                settings_file=config_file, environ=os.environ,
                overrides={"server": server, "agent_id": agent_id, "cache_dir": cache_dir,
                           "insecure": insecure, "cert_dir": cert_dir, "tls_server_name": tls_server_name,
                           "embed_model": embed_model},
            )
        except (ValueError, TypeError) as exc:
            raise click.ClickException(str(exc)) from exc
        try:
            return func(settings=settings, as_json=as_json, **kwargs)
        except ClientError as exc:
            raise click.ClickException(str(exc)) from exc

    return wrapper


def _progress(applied: int, offset: int, head: int) -> None:
    click.echo(f"\rsyncing: {offset}/{head} entries ({applied} new)", err=True, nl=False)
    if offset >= head:
        click.echo("", err=True)


def _open(settings, *, live: bool = False):
    from agent_client.client import AgentClient

    client = AgentClient(settings, progress=_progress, live=live)
    client.start()
    return client


def memory_dict(m) -> dict:
    """A memory as JSON-ready data."""
    return {
        "id": m.id, "scope": m.scope, "type": m.type, "layer": m.layer, "tags": list(m.tags),
        "content": m.content, "importance": m.importance, "confidence": m.confidence,
        "protected": m.protected, "author": m.author_agent, "updated_by": m.updated_by,
        "version": m.version, "created_at_ms": m.created_at_ms, "updated_at_ms": m.updated_at_ms,
        "archived": m.archived, "links": [{"target_id": t, "relation": r} for t, r, _ in m.links],
    }


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))


@cli.command()
@client_options
@click.argument("content")
@click.option("--scope", help="Scope, e.g. user or project:NAME [default from settings: user].")
@click.option("--type", "type_", default="fact", show_default=True, help="Kind of memory (decision, fix, …).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeat for more).")
@click.option("--layer", help="constitutional, legislative, factual (default) or ephemeral.")
@click.option("--importance", type=float, help="0 to 1 [default 0.5].")
def add(settings, as_json, content, scope, type_, tags, layer, importance):
    """Store a memory.

    \b
    Example:
      mnemosync add "Deploys go through ops/deploy.sh" --type decision --tag deploy
    """
    with _open(settings) as client:
        result = client.add(content, scope=scope, type=type_, tags=tags, layer=layer, importance=importance)
    if as_json:
        click.echo(json.dumps(result.__dict__))
    else:
        state = "queued offline (will be sent when the server is back)" if result.pending else f"seq {result.seq}"
        click.echo(f"{result.memory_id}  v{result.version}  {state}")


@cli.command()
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
    if as_json:
        click.echo(json.dumps({
            "offline": outcome.offline, "note": outcome.note,
            "results": [{"memory": memory_dict(h.memory), "score": {
                "final": h.final, "rrf": h.rrf, "vector_rank": h.vector_rank,
                "vector_distance": h.vector_distance, "keyword_rank": h.keyword_rank, "bm25": h.bm25}}
                for h in outcome.hits],
        }))
        return
    if outcome.note:
        click.echo(f"({outcome.note})", err=True)
    if not outcome.hits:
        click.echo("no results")
    for h in outcome.hits:
        m = h.memory
        click.echo(f"{h.final:.4f}  {m.id}  v{m.version}  [{m.scope}/{m.type}]  {m.content[:100]}")


@cli.command()
@client_options
@click.argument("memory_id")
def get(settings, as_json, memory_id):
    """Show one memory.

    \b
    Example:
      mnemosync get 2f1c…
    """
    with _open(settings) as client:
        m = client.get(memory_id)
    if as_json:
        click.echo(json.dumps(memory_dict(m)))
        return
    click.echo(f"{m.id}  v{m.version}{'  (forgotten)' if m.archived else ''}")
    click.echo(f"scope {m.scope}  type {m.type}  layer {m.layer}  tags {', '.join(m.tags) or '-'}")
    click.echo(f"by {m.author_agent} at {_when(m.created_at_ms)}; last change by {m.updated_by} "
               f"at {_when(m.updated_at_ms)}")
    click.echo("")
    click.echo(m.content)


@cli.command()
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
        result = client.redact(memory_id, reason)
    if as_json:
        click.echo(json.dumps(result.__dict__))
    else:
        click.echo(f"{result.memory_id}  v{result.version}  redacted at seq {result.seq}; agents drop the text "
                   "at their next sync")


@cli.command()
@client_options
def sync(settings, as_json):
    """Catch the local cache up with the server (agent_sync) and send queued writes.

    \b
    Example:
      mnemosync sync
    """
    from agent_client.client import AgentClient

    with AgentClient(settings, progress=_progress, live=False, sync_on_start=False) as client:
        sent, refused = client.flush()
        summary = client.sync()
    if as_json:
        click.echo(json.dumps({**summary.__dict__, "sent": sent, "refused": refused}))
    else:
        click.echo(f"applied {summary.applied} entries in {summary.seconds:.2f}s; offset {summary.offset} "
                   f"of {summary.head}; sent {sent} queued writes" + (f", {refused} refused" if refused else ""))


@cli.command()
@client_options
def status(settings, as_json):
    """Show this agent's connection, offset and queued writes.

    An unreachable server is a state worth showing (exit 0); a connection
    the server or TLS refuses (expired, revoked or wrong-CA certificate,
    hostname mismatch) is a fault: the state is shown, then the reason as
    `mnemosync sync` words it, and the exit code is 1.

    \b
    Example:
      mnemosync status --json
    """
    from agent_client.client import AgentClient

    with AgentClient(settings, live=False, sync_on_start=False) as client:
        s = client.status()
    refusal = s.refusal
    if as_json:
        shown = {k: v for k, v in s.__dict__.items() if k != "refusal"}
        click.echo(json.dumps({**shown, **({"error": str(refusal)} if refusal else {})}))
    else:
        state = "online" if s.online else f"NOT CONNECTED: {refusal.code}" if refusal else "UNREACHABLE"
        click.echo(f"agent    {s.agent_id}")
        click.echo(f"server   {s.server} ({state})")
        lag = f" (head {s.head}, {s.head - s.offset} behind)" if s.head is not None else ""
        click.echo(f"offset   {s.offset}{lag}")
        age = f", oldest {s.oldest_pending_age_s:.0f}s old" if s.oldest_pending_age_s is not None else ""
        click.echo(f"outbox   {s.pending} pending{age}; {s.failed} refused")
        click.echo(f"cache    {s.cache_path}")
    if refusal:
        raise refusal


cli.add_command(serve)
cli.add_command(rebuild)
cli.add_command(verify)
cli.add_command(model)
cli.add_command(embed)
cli.add_command(hook)
cli.add_command(ca)

from agent_client.conflicts_cli import conflicts  # noqa: E402 - it reuses client_options, defined above

cli.add_command(conflicts)


def main() -> None:
    """Console-script entry point."""
    cli()
