"""The dashboard's web application: its routes, and the access middleware every request passes.

`make_app` builds a Starlette application around a `Dashboard` (see
`mnemosync.agent.dashboard.web`). The middleware gives every browser a session
cookie, sends anyone not signed in to /login (or answers 401 for live streams
and forms), refuses a POST from another site's page, and sets headers that
keep the pages from being framed or from loading anything but their own
scripts and styles.

Over plain HTTP (loopback only) it also answers only to the names it listens
on: its own address, localhost, 127.0.0.1 and ::1 (`allowed_host`). Anything
else in `Host` gets 421: a page served as `rebind.example` whose name then
resolves to 127.0.0.1 (DNS rebinding) is same-origin with the dashboard as far
as the browser knows, and without the check could read its pages and post its
forms, even with the sign-in on. Over HTTPS the certificate does that work:
the browser refuses a rebound name the certificate does not carry.
"""

from __future__ import annotations

from html import escape
from http.cookies import SimpleCookie
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mnemosync.agent.dashboard import (
    views_agents,
    views_changelog,
    views_conflicts,
    views_health,
    views_memories,
    views_search,
    views_sign_in,
)
from mnemosync.agent.dashboard.sign_in import COOKIE
from mnemosync.agent.dashboard.web import Dashboard, error_page
from mnemosync.kernel.addresses import split_host_port

PUBLIC = ("/login", "/static/")
SECURITY_HEADERS = (
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                                 b"frame-ancestors 'none'; base-uri 'none'; form-action 'self'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),  # no-referrer would make Chromium send "Origin: null" on forms
)


def _cookie(scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"cookie":
            morsel = SimpleCookie(value.decode("latin-1")).get(COOKIE)
            if morsel is not None:
                return morsel.value
    return None


def _header(scope, name: bytes) -> str:
    return next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == name), "")


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def allowed_host(host_header: str, listen: str) -> bool:
    """True when a request's `Host` names the dashboard's listen address or a loopback name (any port)."""
    name = host_header.strip().lower()
    if name.startswith("["):
        name = name[1:name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.split(":", 1)[0]
    try:
        own = split_host_port(listen)[0].strip("[]").lower()
    except ValueError:
        own = ""
    return bool(name) and (name in LOOPBACK_NAMES or name == own)


class AccessMiddleware:
    """Sessions, sign-in, same-origin POSTs and security headers (see the module docstring)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"].startswith("/static/"):  # public files: no session to make

            async def with_headers(message):
                if message["type"] == "http.response.start":
                    message = {**message, "headers": list(message.get("headers", ())) + list(SECURITY_HEADERS)}
                await send(message)

            await self.app(scope, receive, with_headers)
            return
        board = scope["app"].state.dashboard
        host = _header(scope, b"host")
        if not board.access.secure and not allowed_host(host, board.settings.dashboard_listen):
            refusal = HTMLResponse(f"<h1>Wrong host name</h1><p>this dashboard answers to its own address and "
                                   f"localhost, not to {escape(host)}; nothing was read or changed.</p>",
                                   status_code=421)
            await refusal(scope, receive, send)
            return
        access = board.access
        session = access.session(_cookie(scope))
        fresh = session is None
        if session is None:
            session = access.new_session()
        scope.setdefault("state", {})["session"] = session

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ())) + list(SECURITY_HEADERS)
                sets_own = any(k == b"set-cookie" and v.startswith(COOKIE.encode() + b"=") for k, v in headers)
                if fresh and not sets_own:  # a sign-in sets the new session's cookie itself
                    cookie = Response()
                    cookie.set_cookie(**access.cookie(session))
                    headers += [(k, v) for k, v in cookie.raw_headers if k == b"set-cookie"]
                message = {**message, "headers": headers}
            await send(message)

        path, method = scope["path"], scope["method"]
        refusal = None
        origin = _header(scope, b"origin")
        if method == "POST" and origin and origin != f"{scope.get('scheme', 'http')}://{_header(scope, b'host')}":
            refusal = HTMLResponse(f"<h1>Form refused</h1><p>a form from another site ({origin}) may not change "
                                   "this dashboard; nothing was changed.</p>", status_code=403)
        elif access.login_required and not session.signed_in and not path.startswith(PUBLIC):
            if method == "GET" and not path.endswith("/live"):
                target = path + (f"?{scope['query_string'].decode('latin-1')}" if scope.get("query_string") else "")
                refusal = RedirectResponse(f"/login?next={quote(target)}", status_code=303)
            else:
                refusal = HTMLResponse("<h1>Not signed in</h1><p>sign in at /login with the token "
                                       "<code>mnemosync dashboard</code> printed when it started; nothing was "
                                       "changed.</p>", status_code=401)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def _home(request: Request) -> Response:
    return RedirectResponse("/agents", status_code=303)


def _http_error(request: Request, exc: Exception) -> Response:
    """An address no page answers (or a method it does not take) gets the dashboard's own error page (a sync
    handler: Starlette runs it in a worker thread, as `page` must be)."""
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 404:
        return error_page(request, 404, "No such page", f"nothing answers at {request.url.path}; the pages are "
                                                        "Agents, Changelog, Memories, Conflicts, Search and Health")
    return error_page(request, status, f"Not done ({status})", str(getattr(exc, "detail", "")) or "refused")


def make_app(board: Dashboard) -> Starlette:
    """The dashboard's Starlette application over a running `Dashboard`."""
    routes = [
        Route("/", _home),
        Route("/login", views_sign_in.login, methods=["GET"]),
        Route("/login", views_sign_in.login_form, methods=["POST"]),
        Route("/logout", views_sign_in.logout, methods=["POST"]),
        Route("/agents", views_agents.agents),
        Route("/agents/live", views_agents.agents_live),
        Route("/changelog", views_changelog.changelog),
        Route("/changelog/live", views_changelog.changelog_live),
        Route("/memories", views_memories.memories),
        Route("/memories/{memory_id}", views_memories.memory),
        Route("/conflicts", views_conflicts.conflicts),
        Route("/conflicts/{conflict_id}", views_conflicts.conflict),
        Route("/conflicts/{conflict_id}/resolve", views_conflicts.resolve, methods=["POST"]),
        Route("/search", views_search.search),
        Route("/health", views_health.health),
        Route("/health/live", views_health.health_live),
        Mount("/static", StaticFiles(packages=[("mnemosync.agent.dashboard", "static")]), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.dashboard = board
    app.add_middleware(AccessMiddleware)
    return app
