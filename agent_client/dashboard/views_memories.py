"""The memories view: the memories of the dashboard's scopes, newest first, filtered by scope, type, author and
layer, a page at a time (ListMemories); and a memory named by the 8-character id prefix every other surface hands
out, sent on to its history (`views_changelog.memory`), or a page saying that no memory, or several, start with
it."""

from __future__ import annotations

import re
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from mnemosync.agent.dashboard import views_changelog
from mnemosync.agent.dashboard.web import client_error_page, dashboard_of, error_page, no_store, page, whole_number
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.memory import LAYER_NUMBERS

PAGE = 50
MAX_PAGE = 2000
"""The last page a list offers (the server skips at most 100,000 memories)."""
FILTERS = ("scope", "type", "author", "layer")
MAX_FILTER_CHARS = 128
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PREFIX = re.compile(r"[0-9a-f-]{6,35}")
CHOICES = 20
"""Memories an ambiguous prefix lists at most."""


def memories(request: Request) -> Response:
    """GET /memories?scope=&type=&author=&layer=&archived=1&page=N: a page of memories, newest first."""
    filters = {name: request.query_params.get(name, "").strip() for name in FILTERS}
    archived = request.query_params.get("archived") == "1"
    if any(len(v) > MAX_FILTER_CHARS for v in filters.values()):
        return error_page(request, 400, "Bad input", f"a filter is at most {MAX_FILTER_CHARS} characters")
    if filters["layer"] and filters["layer"] not in LAYER_NUMBERS:
        return error_page(request, 400, "Bad input", f"layer must be one of {', '.join(LAYER_NUMBERS)}, not "
                                                     f"{filters['layer']!r}")
    number = whole_number(request.query_params.get("page", "1"))
    if number is None or not 1 <= number <= MAX_PAGE:
        return error_page(request, 400, "Bad input", f"page must be a whole number from 1 to {MAX_PAGE}")
    try:
        rows, total = dashboard_of(request).viewer.memories(
            scopes=(filters["scope"],) if filters["scope"] else (), type=filters["type"],
            author_agent=filters["author"], layer=LAYER_NUMBERS.get(filters["layer"], 0), include_archived=archived,
            limit=PAGE, offset=(number - 1) * PAGE)
    except CodedError as exc:
        return client_error_page(request, exc)
    kept = {k: v for k, v in (*filters.items(), ("archived", "1" if archived else "")) if v}
    query = f"&{urlencode(kept)}" if kept else ""
    return no_store(page(request, "memories.html", rows=rows, total=total, filters=filters, archived=archived,
                         layers=LAYER_NUMBERS, page_number=number, first=(number - 1) * PAGE + 1,
                         last_page=min(MAX_PAGE, max(1, -(-total // PAGE))), query=query))


def memory(request: Request) -> Response:
    """GET /memories/{memory_id}: the memory's history by its full id, or by the start of it (at least 6
    characters) when that names one memory; otherwise a page saying no memory, or which ones, start with it."""
    given = request.path_params["memory_id"]
    wanted = given.strip().lower()
    if _UUID.fullmatch(wanted):
        return views_changelog.memory(request)
    if not _PREFIX.fullmatch(wanted):
        return error_page(request, 404, "No such memory", f"no memory with id {given[:40]}: give its full id or its "
                                                          "first 8 characters, as the other pages show them")
    try:
        rows, total = dashboard_of(request).viewer.memories(id_prefix=wanted, include_archived=True, limit=CHOICES)
    except CodedError as exc:
        return client_error_page(request, exc)
    if total == 1:
        return RedirectResponse(f"/memories/{rows[0].id}", status_code=303)
    if total == 0:
        return error_page(request, 404, "No such memory", f"no memory of the scopes this dashboard may read has an "
                                                          f"id starting with {wanted}")
    return no_store(page(request, "memory_choices.html", status=300, prefix=wanted, rows=rows, total=total))
