"""`mnemosync conflicts`: review and resolve conflicts from the shell.

Parsing and printing only; the work is `AgentClient.conflicts`, `.conflict`
and `.resolve_conflict` (the same server calls the MCP shim's
check_conflicts / resolve_conflict tools make).

Exit codes are every command's (`mnemosync.kernel.command_line`); here they read:
3 no such conflict, 4 the conflict is already resolved or its memory changed
since you looked (show it again), 5 refused by a governance rule (authority
or scope; the message names the rule). With `--json` an error is printed as
`{"error": {"code", "message"}}`.
"""

from __future__ import annotations

import difflib
import shutil
import sys
import textwrap
import time
from pathlib import Path

import click

from mnemosync.agent.cli_options import client_options
from mnemosync.kernel import wording
from mnemosync.kernel.command_line import echo_json
from mnemosync.kernel.conflict_projection import Conflict, Revision

_FIELDS = ("type", "tags", "importance", "confidence", "protected", "archived", "trust", "quote")


def _client(settings):
    from mnemosync.agent.client import AgentClient

    return AgentClient(settings, live=False, sync_on_start=False)


def _age(ms: int) -> str:
    seconds = max(0, int(time.time() - ms / 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _shown(c: Conflict) -> Revision | None:
    """The revision a table summarises: the visible one (after a resolution, the kept one), or the new memory of
    a semantic conflict; None after a merge (the memory holds text no revision has)."""
    if not c.revisions or (c.resolved and c.resolution == "merged"):
        return None
    return next((r for r in c.revisions if r.visible), c.revisions[-1])


def _text_by(r: Revision) -> str:
    """The line "text by X (authority N)" when someone other than the revision's writer wrote its text ("" if
    not): a writer who changed only, say, the importance of an older version shows that version's text under its
    name."""
    if (r.text_agent, r.text_authority) == (r.agent_id, r.authority):
        return ""
    return f"text by {r.text_agent} (authority {r.text_authority})"


def revision_dict(r: Revision) -> dict:
    """A revision as JSON-ready data: `agent` wrote it, `text_author` wrote the text it shows."""
    return {"revision": r.revision, "memory_id": r.memory_id, "agent": r.agent_id, "authority": r.authority,
            "text_author": r.text_agent, "text_authority": r.text_authority, "seq": r.seq,
            "base_version": r.base_version, "version": r.version, "visible": r.visible,
            **{k: r.state[k] for k in ("content", *_FIELDS)}}


def conflict_dict(c: Conflict, memory_version: int) -> dict:
    """A conflict as JSON-ready data."""
    return {"id": c.id, "kind": c.kind, "memory_id": c.memory_id, "other_memory_id": c.other_memory_id,
            "similarity": c.similarity, "scope": c.scope, "opened_by": c.opened_by,
            "opened_at_ms": c.opened_at_ms, "memory_version": memory_version, "agents": c.agents,
            "visible_revision": c.visible_revision, "resolved": c.resolved, "resolved_by": c.resolved_by,
            "resolved_at_ms": c.resolved_at_ms, "resolved_seq": c.resolved_seq, "resolution": c.resolution,
            "kept_revision": c.kept_revision, "note": c.note,
            "revisions": [revision_dict(r) for r in c.revisions],
            "base": revision_dict(c.base) if c.base is not None else None}


def view_dict(view) -> dict:
    """A `ConflictView` as JSON-ready data: its conflict, and the merged text a merge left in the memory."""
    return {**conflict_dict(view.conflict, view.memory_version),
            **({"memory_content": view.memory_content} if view.memory_content else {})}


def _label(r: Revision) -> str:
    if r.revision == 0:
        return f"base v{r.version} ({r.agent_id})"
    other = f"; text by {r.text_agent}" if r.text_agent != r.agent_id else ""
    return f"revision {r.revision} ({r.agent_id}{other})"


def _diff(a: Revision, b: Revision) -> str:
    lines = difflib.unified_diff(
        a.state["content"].splitlines(), b.state["content"].splitlines(), _label(a), _label(b), lineterm="")
    text = "\n".join(lines)
    changed = [f"{k}: {wording.shown(a.state[k])} -> {wording.shown(b.state[k])}" for k in _FIELDS
               if a.state[k] != b.state[k]]
    return "\n".join(part for part in (text, *changed) if part)


def _pairs(c: Conflict) -> list[tuple[Revision, Revision]]:
    first = (_shown(c) or c.revisions[0]) if c.kind == "write" else c.revisions[0]
    return [(first, r) for r in c.revisions if r is not first]


@click.group()
def conflicts():
    """Review and resolve conflicting memories.

    \b
    A write conflict: two agents changed the same memory from the same version;
    both revisions are kept and the memory shows one (higher authority, then
    the earlier write). A semantic conflict: a new memory nearly duplicates
    another agent's memory but says something different.

    \b
    Examples:
      mnemosync conflicts list
      mnemosync conflicts show 17
      mnemosync conflicts resolve 17 --keep 2
      mnemosync conflicts resolve 17 --merged-file merged.txt --note "both were half right"

    Exit codes: 0 done, 1 error, 2 usage, 3 no such conflict, 4 already
    resolved or changed since shown, 5 refused by a governance rule.
    """


@conflicts.command("list")
@client_options
@click.option("--all", "include_resolved", is_flag=True, help="Include resolved conflicts (newest first).")
@click.option("--memory", "memory_id", default="", help="Only conflicts involving this memory id.")
@click.option("--limit", default=100, show_default=True, help="Most conflicts to list (1 to 1000).")
def list_command(settings, as_json, include_resolved, memory_id, limit):
    """List conflicts in this agent's scopes (open ones, oldest first).

    \b
    Examples:
      mnemosync conflicts list
      mnemosync conflicts list --all --json
    """
    with _client(settings) as client:
        found = client.conflicts(include_resolved=include_resolved, limit=limit,
                                 memory_id=client.local.resolve_id(memory_id) if memory_id else "")
    if as_json:
        echo_json({"offline": found.offline, "note": found.note,
                   "conflicts": [view_dict(v) for v in found.conflicts]})
        return
    if found.note:
        click.echo(f"({found.note})", err=True)
    if not found.conflicts:
        click.echo("no open conflicts" if not include_resolved else "no conflicts")
        return
    rows = [("ID", "KIND", "MEMORY", "AGENTS", "AGE", "REVS", "STATUS", "SHOWS")]
    for view in found.conflicts:
        c = view.conflict
        shown = _shown(c)
        status = f"resolved by {c.resolved_by}" if c.resolved else "open"
        kind = c.kind if c.kind == "write" else f"semantic {c.similarity:.2f}"
        text = view.memory_content or (shown.state["content"] if shown else "")
        rows.append((str(c.id), kind, c.memory_id[:8], ", ".join(c.agents), _age(c.opened_at_ms),
                     str(len(c.revisions)), status, wording.one_line(text, 48)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1])


def _side_by_side(a: Revision, b: Revision) -> list[str]:
    width = max(60, shutil.get_terminal_size((120, 24)).columns)
    column = (width - 3) // 2

    def head(r: Revision) -> list[str]:
        versions = (f"made from v{r.base_version}, now v{r.version}" if r.base_version else
                    f"memory {r.memory_id[:8]}, v{r.version}")
        lines = [f"revision {r.revision}{' (visible)' if r.visible else ''}",
                 f"by {r.agent_id} (authority {r.authority})", _text_by(r), f"seq {r.seq}, {versions}"]
        return [line for h in lines if h for line in textwrap.wrap(h, column)]

    def body(r: Revision) -> list[str]:
        lines = []
        for paragraph in r.state["content"].splitlines() or [""]:
            lines += textwrap.wrap(paragraph, column) or [""]
        return lines + (["[forgotten]"] if r.state["archived"] else [])

    def padded(blocks: tuple[list[str], list[str]]) -> tuple[list[str], list[str]]:
        height = max(len(blocks[0]), len(blocks[1]))
        return blocks[0] + [""] * (height - len(blocks[0])), blocks[1] + [""] * (height - len(blocks[1]))

    rule = ["-" * min(column, 40)]
    (head_a, head_b), (body_a, body_b) = padded((head(a), head(b))), padded((body(a), body(b)))
    return [f"{x.ljust(column)} | {y}" for x, y in zip(head_a + rule + body_a, head_b + rule + body_b, strict=True)]


@conflicts.command("show")
@client_options
@click.argument("conflict_id", type=int)
def show_command(settings, as_json, conflict_id):
    """Show a conflict: its revisions side by side, with a diff, authors and versions.

    \b
    Examples:
      mnemosync conflicts show 17
      mnemosync conflicts show 17 --json
    """
    with _client(settings) as client:
        view = client.conflict(conflict_id)
    c = view.conflict
    pairs = _pairs(c)
    from_base = [(c.base, r) for r in c.revisions] if c.base is not None else []
    if as_json:
        echo_json({"offline": view.offline, "conflict": view_dict(view),
                   "diffs": [{"from": a.revision, "to": b.revision, "diff": _diff(a, b)} for a, b in pairs],
                   "from_base": [{"to": b.revision, "diff": _diff(a, b)} for a, b in from_base]})
        return
    if view.offline:
        click.echo("(server unreachable: this comes from the local cache)", err=True)
    what = (f"write conflict on memory {c.memory_id}" if c.kind == "write" else
            f"semantic conflict: memory {c.memory_id} is {c.similarity:.3f} similar to {c.other_memory_id}")
    click.echo(f"conflict {c.id}: {what}")
    click.echo(f"scope {c.scope}; opened by {c.opened_by} {_age(c.opened_at_ms)} ago; memory is at version "
               f"{view.memory_version}")
    if c.resolved:
        kept = f" revision {c.kept_revision}" if c.kept_revision else ""
        click.echo(f"resolved ({c.resolution}{kept}) by {c.resolved_by} at seq {c.resolved_seq}"
                   + (f": {c.note}" if c.note else ""))
        if view.memory_content:
            click.echo(f"the memory now says (merged): {view.memory_content}")
    if c.base is not None:
        click.echo("")
        click.echo(f"common base: v{c.base.version} by {c.base.agent_id} (seq {c.base.seq}), what the revisions were "
                   "made from:")
        for paragraph in c.base.state["content"].splitlines() or [""]:
            click.echo(textwrap.indent(textwrap.fill(paragraph, 100) or "", "  "))
        for a, b in from_base:
            click.echo("")
            click.echo(_diff(a, b) or f"(revision {b.revision} says the same as the base)")
    for a, b in pairs:
        click.echo("")
        for line in _side_by_side(a, b):
            click.echo(line.rstrip())
        click.echo("")
        click.echo(_diff(a, b) or "(the revisions say the same)")
    if not c.resolved:
        extra = " | --keep all" if c.kind == "semantic" else ""
        click.echo("")
        click.echo(f"resolve with: mnemosync conflicts resolve {c.id} --keep REVISION | --merged-file PATH{extra}")


@conflicts.command("resolve")
@client_options
@click.argument("conflict_id", type=int)
@click.option("--keep", help="The revision number to keep (semantic conflicts: 'all' keeps both memories).")
@click.option("--merged-file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
              help="A file with the merged content ('-' reads standard input).")
@click.option("--note", default="", help="Why it was resolved this way (kept in the changelog).")
def resolve_command(settings, as_json, conflict_id, keep, merged_file, note):
    """Resolve a conflict by keeping one revision or writing merged content.

    The resolution is a changelog entry: every agent's cache applies it.

    \b
    Examples:
      mnemosync conflicts resolve 17 --keep 2
      mnemosync conflicts resolve 17 --merged-file merged.txt --note "TTL is 90s since the 3.2 release"
      mnemosync conflicts resolve 21 --keep all      # semantic: not duplicates after all
    """
    if (keep is None) == (merged_file is None):
        raise click.UsageError("give exactly one of --keep REVISION and --merged-file PATH")
    choice: dict = {}
    if keep is not None:
        if keep.lower() == "all":
            choice["keep_all"] = True
        elif keep.isdigit() and int(keep) > 0:
            choice["keep"] = int(keep)
        else:
            raise click.BadParameter(f"must be a revision number or 'all', got {keep!r}", param_hint="--keep")
    else:
        try:
            text = sys.stdin.read() if str(merged_file) == "-" else merged_file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.BadParameter(f"cannot read {merged_file}: {exc}", param_hint="--merged-file") from exc
        choice["merged_content"] = text.rstrip("\n")
    with _client(settings) as client:
        result = client.resolve_conflict(conflict_id, note=note, **choice)
    how = ("kept both memories" if "keep_all" in choice else
           f"kept revision {choice['keep']}" if "keep" in choice else "wrote the merged content")
    if as_json:
        echo_json({"conflict_id": conflict_id, "memory_id": result.memory_id,
                   "resolution": "keep_all" if "keep_all" in choice else "keep" if "keep" in choice else "merged",
                   "kept_revision": choice.get("keep", 0), "seq": result.seq, "version": result.version,
                   "pending": result.pending})
    elif result.pending:
        click.echo(f"conflict {conflict_id}: {how}; queued offline (sent when the server is back)")
    else:
        click.echo(f"resolved conflict {conflict_id}: {how}; memory {result.memory_id} is now "
                   f"v{result.version} (seq {result.seq})")
