"""The agents view: every agent with its authority, scopes, acknowledged offset, lag (live), last call, whether it
is connected, the MCP sessions its local process serves and its outbox when it reports them; agents far behind
are flagged."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from mnemosync.agent.dashboard.web import dashboard_of, fragment, live, no_store, page
from mnemosync.kernel.errors import CodedError

LIVE_SECONDS = 2.0


def _rows(request: Request) -> str:
    board = dashboard_of(request)
    view = board.viewer.agents()
    return fragment("_agent_rows.html", view=view, lag_warning=board.settings.dashboard_lag_warning)


def agents(request: Request) -> Response:
    """GET /agents."""
    board = dashboard_of(request)
    try:
        rows, problem = _rows(request), ""
    except CodedError as exc:
        rows, problem = "", f"{exc.code}: {exc}"
    return no_store(page(request, "agents.html", rows=rows, problem=problem,
                         lag_warning=board.settings.dashboard_lag_warning))


async def agents_live(request: Request) -> Response:
    """GET /agents/live: the table's rows again whenever the head moves, and every few seconds."""
    return live(request, lambda: _rows(request), every=LIVE_SECONDS)
