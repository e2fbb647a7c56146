"""`mnemosync recall`: what the prompt hook would inject for a prompt, and why.

It runs the hook's recall (`mnemosync.shim.recall`) in this process, with this
agent's settings and the scope the hook would read (`MNEMOSYNC_SCOPE`, else
`project:<name of the current directory>`), without a session (so nothing
counts as already shown). `--explain` lists every candidate the search
returned with each feature of the decision (`mnemosync.kernel.recall_decision`),
its probability and why it was or was not injected; `--json` prints the same
as one JSON object.
"""

from __future__ import annotations

import json
import os

import click

from mnemosync.agent.cli_options import connection_options
from mnemosync.kernel.command_line import ErrorEdgeCommand
from mnemosync.kernel.recall_decision import FEATURES, MIN_PROMPT_CHARS
from mnemosync.kernel.session_scopes import home_scopes
from mnemosync.shim import recall as recall_module
from mnemosync.shim.config import load_settings, scope_option

SHORT = {"similarity": "sim", "above_background": "above_bg", "below_top": "below_top", "margin": "margin",
         "both_channels": "both", "coverage": "cover", "content_words": "words", "chat": "chat",
         "question": "quest", "generic": "generic", "ours": "ours"}
"""Column names of the --explain table."""


def explanation(found: recall_module.Recalled, prompt: str, scope: str) -> dict:
    """What `--json` prints: the block, the injected ids, the decision's threshold and every candidate."""
    decision = recall_module.shipped_decision()
    return {"prompt": prompt, "scope": scope, "context": found.text, "ids": list(found.ids),
            "offline": found.offline, "searched": found.searched, "threshold": decision.threshold,
            "max_items": decision.max_items, "candidates": [c.as_dict() for c in found.candidates]}


def explain_text(found: recall_module.Recalled, scope: str) -> str:
    """The candidates as a table: id, probability, decision, then each feature."""
    decision = recall_module.shipped_decision()
    if not found.searched:
        return (f"Not searched: the prompt is shorter than {MIN_PROMPT_CHARS} characters or a slash "
                "command.")
    lines = [f"Scope {scope}; a candidate is injected at probability {decision.threshold:.2f} or more, at most "
             f"{decision.max_items}.",
             "id        v  prob  decision                           " + " ".join(f"{SHORT[f]:>9}" for f in FEATURES)]
    for c in found.candidates:
        m = c.hit.memory
        lines.append(f"{m.id[:8]}  {m.version:<2} {c.probability:.2f}  {c.reason:<34} "
                     + " ".join(f"{c.features[f]:9.3f}" for f in FEATURES))
        lines.append(f"          {' '.join(m.content.split())[:100]}")
    if not found.candidates:
        lines.append("(the search found nothing in these scopes)")
    return "\n".join(lines)


@click.command(cls=ErrorEdgeCommand)
@connection_options
@scope_option
@click.argument("prompt")
@click.option("--explain", is_flag=True, help="Show every candidate with its features, probability and decision.")
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
