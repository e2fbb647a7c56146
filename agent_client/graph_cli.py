"""`mnemosync graph`: typed links and the memory graph from the command line.

`link` adds (or with `--remove` removes) a typed link; `traverse`, `causes`,
`timeline` and `search` (Personalized PageRank, issue 31) ask the server and answer from this agent's cache when it is
unreachable (`--local` always reads the cache). Every command takes `--json`.
"""

from __future__ import annotations

import click

from mnemosync.agent.cli import _open, _when, memory_dict
from mnemosync.agent.cli_options import client_options
from mnemosync.kernel import event_time, graph, graph_rank, links
from mnemosync.kernel.command_line import echo_json

_DIRECTION = click.Choice(graph.DIRECTIONS)


@click.group(name="graph")
def graph_group():
    """Typed links between memories, walks of the graph they make, and timelines by event time.

    \b
    Examples:
      mnemosync graph link 2f1c… 9a0b… --type causal --reason "the eviction caused the errors"
      mnemosync graph traverse 2f1c… --depth 3 --direction both
      mnemosync graph causes 9a0b…
      mnemosync graph timeline --tag incident-42
      mnemosync graph search "why did the deploy fail" --seeds 3
    """


def step_dict(s: graph.Step) -> dict:
    """A walk's step as --json prints it."""
    return {"memory": memory_dict(s.memory), "depth": s.depth, "via_id": s.via_id, "relation": s.relation,
            "weight": s.weight, "reason": s.reason, "direction": s.direction}


def _print_walk(walk: graph.Walk, as_json: bool, offline: bool) -> None:
    if as_json:
        echo_json({"offline": offline, "start": memory_dict(walk.start), "steps": [step_dict(s) for s in walk.steps],
                   "truncated": walk.truncated})
        return
    if offline:
        click.echo("(server unreachable: answered from this agent's local cache)", err=True)
    click.echo(f"{walk.start.id}  {walk.start.content[:100]}")
    for s in walk.steps:
        arrow = "->" if s.direction == "out" else "<-"
        weight = f" {s.weight:g}" if s.weight != 1 else ""
        why = f"  ({s.reason})" if s.reason else ""
        click.echo(f"{'  ' * s.depth}{arrow} {s.relation}{weight} {s.memory.id}  {s.memory.content[:80]}{why}")
    if not walk.steps:
        click.echo("no linked memories")
    if walk.truncated:
        click.echo("(cut at --limit; raise it to see more)")


@graph_group.command()
@client_options
@click.argument("source_id")
@click.argument("target_id")
@click.option("--type", "relation", type=click.Choice(links.EDGE_TYPES), default=links.DEFAULT_TYPE,
              show_default=True, help="The edge type.")
@click.option("--weight", type=float, help="How strong, above 0 to 1 [default: 1].")
@click.option("--reason", default="", help="Why the memories are linked.")
@click.option("--remove", is_flag=True, help="Remove the link of this type instead.")
def link(settings, as_json, source_id, target_id, relation, weight, reason, remove):
    """Link SOURCE_ID to TARGET_ID with a typed edge (again: set its weight and reason), or remove it.

    Also `mnemosync link`. Ids may be the 8-character prefixes other commands print.

    A causal link is refused when either memory is labelled trust=inference.

    \b
    Example:
      mnemosync graph link 2f1c0b7e 9a0b11c2 --type causal --weight 0.8 --reason "evictions caused the errors"
      mnemosync link 2f1c0b7e 9a0b11c2 --type supersedes
    """
    with _open(settings) as client:
        source_id, target_id = client.local.resolve_id(source_id), client.local.resolve_id(target_id)
        if remove:
            result = client.unlink(source_id, target_id, relation)
        else:
            result = client.link(source_id, target_id, relation, weight=weight, reason=reason)
    if as_json:
        echo_json({"op": "unlink" if remove else "link", "memory_id": result.memory_id, "seq": result.seq,
                   "pending": result.pending})
        return
    where = "queued in the outbox (server unreachable)" if result.pending else f"seq {result.seq}"
    click.echo(f"{'unlinked' if remove else 'linked'} {source_id} -[{relation}]-> {target_id} ({where})")


@graph_group.command()
@client_options
@click.argument("memory_id")
@click.option("--type", "edge_types", multiple=True, type=click.Choice(links.EDGE_TYPES),
              help="Follow only this edge type (repeat for more) [default: all].")
@click.option("--direction", type=_DIRECTION, default="out", show_default=True,
              help="out: links it makes; in: links made to it; both.")
@click.option("--depth", type=int, default=graph.DEFAULT_DEPTH, show_default=True,
              help=f"Links away, 1 to {graph.MAX_DEPTH}.")
@click.option("--limit", type=int, default=graph.DEFAULT_LIMIT, show_default=True,
              help=f"Memories at most, 1 to {graph.MAX_LIMIT}.")
@click.option("--include-forgotten", is_flag=True, help="Also walk to and through forgotten memories.")
@click.option("--local", is_flag=True, help="Answer from this agent's cache without asking the server.")
def traverse(settings, as_json, memory_id, edge_types, direction, depth, limit, include_forgotten, local):
    """Walk the links from MEMORY_ID: the memories up to --depth links away, nearest first.

    \b
    Example:
      mnemosync graph traverse 2f1c… --depth 3 --direction both --type causal --type temporal
    """
    with _open(settings) as client:
        walk = client.traverse(client.local.resolve_id(memory_id), edge_types=edge_types, direction=direction,
                               depth=depth, limit=limit, include_archived=include_forgotten, local=local)
        offline = local or not client.online
    _print_walk(walk, as_json, offline)


@graph_group.command()
@client_options
@click.argument("memory_id")
@click.option("--direction", type=_DIRECTION, default="both", show_default=True,
              help="in: its causes; out: its effects; both.")
@click.option("--depth", type=int, default=graph.DEFAULT_CAUSAL_DEPTH, show_default=True,
              help=f"Links away, 1 to {graph.MAX_DEPTH}.")
@click.option("--limit", type=int, default=graph.DEFAULT_LIMIT, show_default=True, help="Memories at most.")
@click.option("--local", is_flag=True, help="Answer from this agent's cache without asking the server.")
def causes(settings, as_json, memory_id, direction, depth, limit, local):
    """The causes (<-) and effects (->) of MEMORY_ID along causal links.

    \b
    Example:
      mnemosync graph causes 9a0b… --direction in --json
    """
    with _open(settings) as client:
        walk = client.causal_chain(client.local.resolve_id(memory_id), direction=direction, depth=depth, limit=limit,
                                   local=local)
        offline = local or not client.online
    _print_walk(walk, as_json, offline)


@graph_group.command()
@client_options
@click.option("--around", "memory_id", default="", help="Memories before and after this one.")
@click.option("--limit", type=int, default=0, help=f"Around a memory: how many before and after it [default "
                                                   f"{graph.DEFAULT_AROUND}]; else memories at most [default "
                                                   f"{graph.DEFAULT_LIMIT}].")
@click.option("--start", help="From this event time (ISO 8601).")
@click.option("--end", help="Until this event time (ISO 8601).")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeat for more).")
@click.option("--tag", "tags", multiple=True, help="Only memories with all these tags.")
@click.option("--include-forgotten", is_flag=True, help="Also list forgotten memories.")
@click.option("--local", is_flag=True, help="Answer from this agent's cache without asking the server.")
def timeline(settings, as_json, memory_id, limit, start, end, scopes, tags, include_forgotten, local):
    """Memories in the order of when what they record happened (their event time, else when stored).

    \b
    Examples:
      mnemosync graph timeline --tag incident-42
      mnemosync graph timeline --around 9a0b… --limit 5
    """
    with _open(settings) as client:
        found = client.timeline(memory_id=client.local.resolve_id(memory_id) if memory_id else "", limit=limit,
                                start_ms=event_time.parse(start, "start") if start else None,
                                end_ms=event_time.parse(end, "end") if end else None, scopes=scopes, tags=tags,
                                include_archived=include_forgotten, local=local)
        offline = local or not client.online
    if as_json:
        echo_json({"offline": offline, "memories": [memory_dict(m) for m in found.memories],
                   "anchor_index": found.anchor_index})
        return
    for i, m in enumerate(found.memories):
        when = _when(m.event_time_ms if m.event_time_ms is not None else m.created_at_ms)
        mark = "*" if i == found.anchor_index else " "
        click.echo(f"{mark} {when}  {m.id}  [{m.scope}/{m.type}]  {m.content[:90]}")
    if not found.memories:
        click.echo("no memories")


def ranked_dict(r: graph_rank.Ranked) -> dict:
    """A graph search's result as --json prints it."""
    return {"memory": memory_dict(r.memory), "score": r.score, "path": list(r.path), "relations": list(r.relations),
            "seed": r.seed}


@graph_group.command(name="search")
@client_options
@click.argument("query")
@click.option("--seeds", type=int, default=graph_rank.DEFAULT_SEEDS, show_default=True,
              help=f"How many search hits start the walk, 1 to {graph_rank.MAX_SEEDS}.")
@click.option("--alpha", type=float, default=graph_rank.DEFAULT_ALPHA, show_default=True,
              help="The walk's restart probability, between 0 and 1.")
@click.option("--limit", type=int, default=graph_rank.DEFAULT_LIMIT, show_default=True,
              help=f"Results at most, 1 to {graph_rank.MAX_LIMIT}.")
@click.option("--scope", "scopes", multiple=True, help="Only this scope (repeat for more).")
@click.option("--type", "edge_types", multiple=True, type=click.Choice(links.EDGE_TYPES),
              help="Follow only this edge type (repeat for more) [default: all].")
@click.option("--local", is_flag=True, help="Answer from this agent's cache without asking the server.")
def search(settings, as_json, query, seeds, alpha, limit, scopes, edge_types, local):
    """Rank the memories linked to QUERY's hits by Personalized PageRank, with the path that reached each.

    The --seeds best hits of a hybrid search start a random walk along links (both directions, by weight)
    that returns to them with probability --alpha; memories the walk visits often score high.

    \b
    Example:
      mnemosync graph search "why did the deploy fail" --seeds 3 --type causal --json
    """
    with _open(settings) as client:
        found = client.graph_search(query, seeds=seeds, alpha=alpha, limit=limit, scopes=scopes,
                                    edge_types=edge_types, local=local)
        offline = local or not client.online
    if as_json:
        echo_json({"offline": offline, "iterations": found.iterations,
                   "results": [ranked_dict(r) for r in found.results]})
        return
    if offline:
        click.echo("(server unreachable: answered from this agent's local cache)", err=True)
    for r in found.results:
        steps = zip(r.path, r.relations, strict=False)
        via = "seed" if r.seed else " ".join(f"{a[:8]} -{rel}-" for a, rel in steps) + " *"
        click.echo(f"{r.score:.4f}  {r.memory.id}  [{r.memory.scope}/{r.memory.type}]  {r.memory.content[:80]}")
        click.echo(f"        via {via}")
    if not found.results:
        click.echo("no memories matched")
