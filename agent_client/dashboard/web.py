"""What every page of the dashboard shares: its state, rendering, error pages and the live (SSE) responses.

`Dashboard` is the running application's state (viewer, live feed, access,
settings), kept on `app.state.dashboard`. Pages are rendered from the package's
Jinja2 templates with autoescaping; every agent-client error becomes one error
page with a status that fits its gRPC code, naming what went wrong and
changing nothing. Live views are server-sent events whose data is a rendered
HTML fragment (`live`).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse

from mnemosync.agent.dashboard.dashboard_settings import DashboardSettings
from mnemosync.agent.dashboard.feed import LiveFeed
from mnemosync.agent.dashboard.sign_in import Access, Session
from mnemosync.agent.dashboard.viewer import Viewer
from mnemosync.kernel import source_refs, wording
from mnemosync.kernel.errors import CodedError
from mnemosync.kernel.memory import LAYERS

HEARTBEAT_SECONDS = 15.0
HTTP_STATUS = {"NOT_FOUND": 404, "PERMISSION_DENIED": 403, "UNAUTHENTICATED": 401, "INVALID_ARGUMENT": 400,
               "OUT_OF_RANGE": 400, "FAILED_PRECONDITION": 409, "ABORTED": 409, "ALREADY_EXISTS": 409,
               "UNAVAILABLE": 503, "RESOURCE_EXHAUSTED": 429}
"""gRPC status name to the HTTP status of the error page (anything else: 502, the server failed)."""


@dataclass
class Dashboard:
    """A running dashboard's state, shared by every request."""

    viewer: Viewer
    feed: LiveFeed
    access: Access
    settings: DashboardSettings
    closing: threading.Event = field(default_factory=threading.Event)


def _time(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S") if ms else "never"


def _ago(ms: int) -> str:
    if not ms:
        return "never"
    seconds = max(0, int(time.time() - ms / 1000))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


TEMPLATES = Environment(loader=PackageLoader("mnemosync.agent.dashboard", "templates"),
                        autoescape=select_autoescape(default=True, default_for_string=True))
TEMPLATES.filters.update(time=_time, ago=_ago, short=lambda s: s[:8], layer=lambda n: LAYERS.get(n, str(n)),
                         source=source_refs.describe, counted=lambda n, one: wording.counted(n, one),
                         one_line=lambda text, width: wording.one_line(text, width))


def dashboard_of(request: Request) -> Dashboard:
    """The running dashboard serving this request."""
    return request.app.state.dashboard


def session_of(request: Request) -> Session | None:
    """The request's session (set by the access middleware)."""
    return request.scope.get("state", {}).get("session")


def fragment(name: str, **context) -> str:
    """A template rendered to text (for live updates)."""
    return TEMPLATES.get_template(name).render(**context)


def page(request: Request, name: str, *, status: int = 200, **context) -> HTMLResponse:
    """A full page: the template with the session's CSRF token and, for a signed-in session, the dashboard's
    identity (a server call: call this from a worker thread, never on the event loop)."""
    board = dashboard_of(request)
    session = session_of(request)
    me = None
    if session is not None and session.signed_in:
        try:
            me = board.viewer.identity()
        except CodedError as exc:
            context["identity_problem"] = str(exc)
    return HTMLResponse(fragment(name, request=request, me=me, csrf=session.csrf if session else "",
                                 signed_in=bool(session and session.signed_in),
                                 login_required=board.access.login_required, **context), status_code=status)


def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    """A page saying what went wrong (nothing was changed)."""
    return page(request, "error.html", status=status, title=title, message=message)


def client_error_page(request: Request, exc: CodedError) -> HTMLResponse:
    """The error page of an agent-client error, its status from the gRPC code."""
    status = HTTP_STATUS.get(exc.code, 502)
    title = {404: "Not found", 403: "Not allowed", 409: "Not done: the state does not allow it",
             503: "Server unreachable", 400: "Bad input", 401: "Not authenticated"}.get(status, "Server error")
    return error_page(request, status, title, f"{exc.code}: {exc}")


def whole_number(text: str | None) -> int | None:
    """A form or query value as a whole number >= 0, None when absent or not one (the caller says so)."""
    if text is None or not text.strip().isdigit() or len(text.strip()) > 18:
        return None
    return int(text.strip())


def flash(request: Request, message: str, *, problem: bool = False) -> None:
    """Keeps a message for the session's next page: what a form just did, or (`problem`) why it did nothing. A
    form's answer is a redirect to that page, so reloading it never posts the form again."""
    session = session_of(request)
    if session is not None:
        if problem:
            session.problem = message
        else:
            session.flash = message


def take_flash(request: Request, *, problem: bool = False) -> str:
    """The session's kept message (or problem), once."""
    session = session_of(request)
    if session is None:
        return ""
    if problem:
        message, session.problem = session.problem, ""
    else:
        message, session.flash = session.flash, ""
    return message


def _event(name: str, data: str) -> str:
    return f"event: {name}\n" + "".join(f"data: {line}\n" for line in data.splitlines() or [""]) + "\n"


def live(request: Request, render: Callable[[], str | None], *, every: float) -> StreamingResponse:
    """A server-sent event stream: `render` (run in a worker thread) gives an HTML fragment, sent as an `html`
    event, when the stream opens, whenever the changelog head moves, and at least every `every` seconds; None
    sends nothing. A failed render sends an `problem` event with the error and the stream goes on."""
    board = dashboard_of(request)

    async def events() -> AsyncIterator[str]:
        yield "retry: 2000\n\n"
        quiet = 0.0
        while not board.closing.is_set():
            try:
                html = await run_in_threadpool(render)
            except CodedError as exc:
                yield _event("problem", f"{exc.code}: {exc}")
            else:
                yield _event("html", html) if html is not None else ""
                yield _event("ok", "")
            started = time.monotonic()
            moved = await board.feed.changed(every)
            quiet = 0.0 if moved else quiet + time.monotonic() - started
            if quiet >= HEARTBEAT_SECONDS:
                quiet = 0.0
                yield ": still here\n\n"

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def no_store(response: Response) -> Response:
    """Marks a response as not to be cached (pages with live data or forms)."""
    response.headers["Cache-Control"] = "no-store"
    return response
