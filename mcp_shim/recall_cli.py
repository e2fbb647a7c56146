"""`mnemosync recall`: what the prompt hook would inject for a prompt, and why.

It runs the hook's recall (`mnemosync.shim.recall`) in this process, with this
agent's settings and the scope the hook would read (`MNEMOSYNC_SCOPE`, else
`project:<name of the current directory>`), without a session (so nothing
counts as already shown). `--explain` lists every candidate the search
returned, in words: its relevance (the decision's estimated chance that it is
what the prompt needs, `mnemosync.kernel.recall_decision`), what that was
estimated from and why it was or was not injected; `--json` prints the same
as one JSON object.
"""

from __future__ import annotations

import json
import math
import os
import textwrap

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import ErrorEdgeCommand
from mnemosync.kernel.recall_decision import MIN_PROMPT_CHARS
from mnemosync.kernel.session_scopes import home_scopes
from mnemosync.shim import recall as recall_module
from mnemosync.shim.config import load_settings, scope_option

SAID = {"similarity": "similarity {:.2f}", "above_background": "{:+.2f} above the background",
        "margin": "{:+.2f} over the next best", "overlap": "holds {:.0%} of the prompt's words"}
"""How each feature of a candidate reads in --explain (the prompt's own features are said once, in the head)."""
WIDTH = 100


def explanation(found: recall_module.Recalled, prompt: str, scope: str) -> dict:
    """What `--json` prints: the block, the injected ids, the decision's threshold and every candidate."""
    decision = recall_module.shipped_decision()
    return {"prompt": prompt, "scope": scope, "context": found.text, "ids": list(found.ids),
            "offline": found.offline, "searched": found.searched, "threshold": decision.threshold,
            "max_items": decision.max_items, "candidates": [c.as_dict() for c in found.candidates]}


def _prompt_kind(features: dict[str, float]) -> str:
    words = round(math.expm1(features["content_words"]))
    kind = ("small talk (no topic word)" if features["chat"] else f"{words} topic word{'s' if words != 1 else ''}")
    return kind + (", a question" if features["question"] else "") + (
        ", shaped like a textbook question" if features["generic"] else "")


def explain_text(found: recall_module.Recalled, scope: str) -> str:
    """Every candidate in words, most relevant first: its id, version, relevance and decision, the start of its
    text, and what the relevance was estimated from; at most `WIDTH` columns."""
    decision = recall_module.shipped_decision()
    if not found.searched:
        return (f"Not searched: the prompt is shorter than {MIN_PROMPT_CHARS} characters or a slash "
                "command.")
    lines = [f"Scope {scope}. Relevance is the estimated chance that a memory is one the prompt needs; the hook",
             f"injects the memories of relevance {decision.threshold:.2f} or more, at most {decision.max_items}."]
    if found.candidates:
        lines.append(f"The prompt: {_prompt_kind(dict(found.candidates[0].features))}.")
    for n, c in enumerate(found.candidates, 1):
        m = c.hit.memory
        lines.append("")
        lines.append(f"{n:>2}. {m.id[:8]} v{m.version}  relevance {c.probability:.2f}  {c.reason}")
        lines.append(f"    {' '.join(m.content.split())[:WIDTH - 4]}")
        said = [SAID[f].format(c.features[f]) for f in SAID] + (["ranked first by the search"]
                                                                 if c.features["first"] else [])
        lines += textwrap.wrap(", ".join(said), WIDTH, initial_indent="    ", subsequent_indent="    ")
    if not found.candidates:
        lines.append("(the search found nothing in these scopes)")
    return "\n".join(lines)


@click.command(cls=ErrorEdgeCommand)
@connection_options
@scope_option
@click.argument("prompt")
@click.option("--explain", is_flag=True, help="Show every candidate with its relevance, what it was estimated from and "
                                            "the decision.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (with the candidates).")
@click.option("--budget", type=click.IntRange(50, 2000), default=recall_module.DEFAULT_BUDGET_TOKENS,
              show_default=True, help="Token budget of the injected block.")
def recall(prompt, explain, as_json, budget, scope, connection):
    """Print what the prompt hook would inject for PROMPT, and with --explain why.

    \b
    Examples:
      mnemosync recall "how are the JWT login tokens signed?" --insecure
      mnemosync recall "install lodash in the web app" --explain
      mnemosync recall "deploy this" --json --scope project:webshop
    """
    from mnemosync.agent.client import AgentClient

    settings = load_settings(project_dir=os.getcwd(), scope=scope, **connection)
    with AgentClient(settings, live=False, sync_on_start=False) as client:
        found = recall_module.recall(client, prompt, home_scopes(settings.scope), budget_tokens=budget)
    if as_json:
        click.echo(json.dumps(explanation(found, prompt, settings.scope), indent=2))
        return
    click.echo(found.text or "(nothing would be injected)")
    if explain:
        click.echo("")
        click.echo(explain_text(found, settings.scope))
