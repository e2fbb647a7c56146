"""The changelog view (newest entries, live, filtered by agent, scope, operation and memory) and a memory's
history (every version, who wrote it, what it showed, word by word against the version before)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mnemosync.agent.dashboard.web import (
    client_error_page,
    dashboard_of,
    error_page,
    fragment,
    live,
    no_store,
    page,
    whole_number,
)
from mnemosync.agent.dashboard.word_diff import word_diff
from mnemosync.kernel import links
from mnemosync.kernel.errors import CodedError

OPS = ("add", "update", "forget", "restore", "link", "unlink", "set_layer", "resolve_conflict", "redact")
PAGE = 50
LIVE_SECONDS = 15.0
FILTERS = ("agent_id", "scope", "op", "memory_id")


def _filters(request: Request) -> dict[str, str]:
    return {name: request.query_params.get(name, "").strip() for name in FILTERS}


def summary(entry) -> str:
    """One line saying what an entry did."""
    p = entry.payload
    text = p.get("content") or p.get("merged_content") or p.get("reason") or p.get("note") or ""
    if entry.op in ("link", "unlink"):
        weight = f" {p['weight']:g}" if "weight" in p else ""
        reason = f" ({p['reason']})" if p.get("reason") else ""
        target = p.get("target_id", "")[:8] or "a memory of a scope you may not read"  # emptied by the server
        text = f"{links.edge_type(p.get('relation', ''))}{weight} → {target}{reason}"
    elif entry.op == "set_layer":
        text = f"layer {p.get('layer')}"
    elif entry.op == "verify":
        paths = p.get("paths") or []
        text = f"sources {p.get('status') or 'checked'}" + (f": {', '.join(paths)}" if paths else "")
    elif entry.op == "resolve_conflict":
        how = ("kept both" if p.get("keep_all") else f"kept revision {p['keep_revision']}" if p.get("keep_revision")
               else "merged")
        text = f"conflict {p.get('conflict_id')}: {how}" + (f" ({text})" if text else "")
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 140 else flat[:139] + "…"


def changelog(request: Request) -> Response:
    """GET /changelog: the newest entries (older pages with ?before=SEQ), then live."""
    filters = _filters(request)
    before = whole_number(request.query_params.get("before")) or 0
    try:
        rows, head = dashboard_of(request).viewer.changelog(before_seq=before, limit=PAGE, **filters)
    except CodedError as exc:
        return client_error_page(request, exc)
    newest = max([head, *(r.entry.seq for r in rows)]) if not before else 0
    return no_store(page(request, "changelog.html", rows=rows, summary=summary, filters=filters, ops=OPS,
                         newest=newest, older=rows[-1].entry.seq if len(rows) == PAGE else 0, before=before))


async def changelog_live(request: Request) -> Response:
    """GET /changelog/live?after=SEQ&filters: rows committed after SEQ, newest first, as they come."""
    filters = _filters(request)
    last = whole_number(request.query_params.get("after")) or 0
    viewer = dashboard_of(request).viewer

    def render() -> str | None:
        nonlocal last
        rows, head = viewer.changelog(after_seq=last, limit=PAGE, **filters)
        last = max([last, *(r.entry.seq for r in rows)])
        return fragment("_changelog_rows.html", rows=rows, summary=summary, fresh=True) if rows else None

    return live(request, render, every=LIVE_SECONDS)


def memory(request: Request) -> Response:
    """GET /memories/{memory_id}: the memory now and every version of it."""
    memory_id = request.path_params["memory_id"]
    if len(memory_id) > 128:
        return error_page(request, 400, "Bad input", "a memory id is at most 128 characters")
    try:
        history = dashboard_of(request).viewer.history(memory_id)
    except CodedError as exc:
        return client_error_page(request, exc)
    steps, before = [], ""
    for version in history.versions:
        steps.append((version, word_diff(before, version.shown.state["content"]), summary(version.entry)))
        before = version.shown.state["content"]
    return no_store(page(request, "memory.html", memory=history.memory, steps=list(reversed(steps))))
