"""The conflicts view: open (and resolved) conflicts, one conflict's revisions side by side with a word-level diff,
and the form that resolves it by keeping one revision, keeping both (semantic) or writing a merge.

A resolution goes through `Viewer.resolve`, which is `AgentClient.resolve_conflict`, the call behind
`mnemosync conflicts resolve`: the same Append, the same rules, decided by the server. The form names the
memory version the page showed, so a memory that changed since is refused (look again), and carries the
session's CSRF token.
"""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from mnemosync.agent.dashboard.sign_in import Access
from mnemosync.agent.dashboard.web import (
    client_error_page,
    dashboard_of,
    error_page,
    flash,
    no_store,
    page,
    session_of,
    take_flash,
    whole_number,
)
from mnemosync.agent.dashboard.word_diff import word_diff
from mnemosync.kernel import wording
from mnemosync.kernel.conflict_projection import Conflict, Revision
from mnemosync.kernel.errors import CodedError

FIELDS = ("type", "tags", "importance", "confidence", "protected", "archived", "trust", "quote")
MAX_NOTE = 1024


def _reference(c: Conflict) -> Revision:
    """The revision the others are compared with: the visible one (write), the existing memory (semantic)."""
    if c.kind == "write":
        return next((r for r in c.revisions if r.visible), c.revisions[0])
    return c.revisions[0]


def _sides(c: Conflict) -> list[tuple[Revision, list, list[str]]]:
    """Each revision with its content as diff pieces against the reference, and the fields that differ."""
    if not c.revisions:
        return []
    ref = _reference(c)
    sides = []
    for r in c.revisions:
        pieces = word_diff(ref.state["content"], r.state["content"]) if r is not ref else [
            ("same", ref.state["content"])]
        changed = [f"{k}: {wording.shown(ref.state[k])} → {wording.shown(r.state[k])}" for k in FIELDS
                   if r is not ref and ref.state[k] != r.state[k]]
        sides.append((r, pieces, changed))
    return sides


def conflicts(request: Request) -> Response:
    """GET /conflicts (?all=1 also lists resolved ones)."""
    include_resolved = request.query_params.get("all") == "1"
    try:
        found = dashboard_of(request).viewer.conflicts(include_resolved)
    except CodedError as exc:
        return client_error_page(request, exc)
    return no_store(page(request, "conflicts.html", found=found, include_resolved=include_resolved))


def _conflict_id(request: Request) -> int | None:
    return whole_number(request.path_params["conflict_id"])


def conflict(request: Request) -> Response:
    """GET /conflicts/{id}: the common base, the revisions side by side, and the resolve form while it is open
    (with what the last resolve did, or why it did nothing)."""
    conflict_id = _conflict_id(request)
    if conflict_id is None:
        return error_page(request, 404, "Not found",
                          f"{request.path_params['conflict_id']!r} is not a conflict id (conflict ids are numbers)")
    try:
        view = dashboard_of(request).viewer.conflict(conflict_id)
    except CodedError as exc:
        return client_error_page(request, exc)
    return no_store(page(request, "conflict.html", view=view, c=view.conflict,
                         sides=_sides(view.conflict), reference=_reference(view.conflict) if view.conflict.revisions
                         else None, problem=take_flash(request, problem=True), done=take_flash(request)))


async def resolve(request: Request) -> Response:
    """POST /conflicts/{id}/resolve: keep=N | keep=all | keep=merge with merged text; note; base_version; csrf."""
    form = await request.form()
    return await run_in_threadpool(_resolve, request, {k: str(v) for k, v in form.items()})


def _resolve(request: Request, form: dict[str, str]) -> Response:
    if not Access.form_is_genuine(session_of(request), form.get("csrf", "")):
        return error_page(request, 403, "Form refused",
                          "the form's security token is missing or stale (CSRF check); nothing was changed. "
                          "Reload the conflict's page and resolve it from there.")
    conflict_id = _conflict_id(request)
    if conflict_id is None:
        return error_page(request, 404, "Not found",
                          f"{request.path_params['conflict_id']!r} is not a conflict id; nothing was changed")
    keep, note = form.get("keep", ""), form.get("note", "").strip()
    base_version = whole_number(form.get("base_version", ""))
    back = RedirectResponse(f"/conflicts/{conflict_id}", status_code=303)  # a reload must not post it again
    choice: dict = {}
    if keep == "all":
        choice["keep_all"] = True
    elif keep == "merge":
        merged = form.get("merged", "").replace("\r\n", "\n").strip()
        if not merged:
            flash(request, "a merge needs the merged text; nothing was changed", problem=True)
            return back
        choice["merged_content"] = merged
    elif (number := whole_number(keep)) and number > 0:
        choice["keep"] = number
    else:
        flash(request, "choose a revision to keep, keep both, or write a merge; nothing was changed", problem=True)
        return back
    if base_version is None:
        flash(request, "the form did not say which memory version it was made from; nothing was changed",
              problem=True)
        return back
    if len(note) > MAX_NOTE:
        flash(request, f"the note was {len(note)} characters; the limit is {MAX_NOTE}; nothing was changed",
              problem=True)
        return back
    try:
        result = dashboard_of(request).viewer.resolve(conflict_id, base_version=base_version, note=note, **choice)
    except CodedError as exc:
        return client_error_page(request, exc)
    how = ("kept both memories" if "keep_all" in choice else f"kept revision {choice['keep']}" if "keep" in choice
           else "wrote the merged content")
    if result.pending:
        flash(request, f"Queued: {how}; the server went away, so it is sent when the dashboard writes next.")
    else:
        flash(request, f"Resolved: {how}; memory {result.memory_id[:8]} is now version {result.version} "
                       f"(seq {result.seq}).")
    return back
