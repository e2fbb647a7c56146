"""Signing in with the token printed at start, and signing out."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from mnemosync.agent.dashboard.sign_in import Access
from mnemosync.agent.dashboard.web import dashboard_of, error_page, no_store, page, session_of


def _next(target: str) -> str:
    """Where to go after signing in: a path on this dashboard only (never another site)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


def _signed_in(request: Request, given: str, target: str) -> Response:
    access = dashboard_of(request).access
    session = access.sign_in(given)
    if session is None:
        return no_store(page(request, "login.html", status=401, next=target,
                             problem="that is not this dashboard's sign-in token: use the sign-in link or token "
                                     "that mnemosync dashboard (or mnemosync serve --dashboard) printed when it "
                                     "started; nothing was changed"))
    old = session_of(request)
    if old is not None:
        access.sign_out(old)
    response = RedirectResponse(_next(target), status_code=303)
    response.set_cookie(**access.cookie(session))
    return response


def login(request: Request) -> Response:
    """GET /login: the sign-in form; with ?token=… (the link printed at start) signs in at once."""
    target = request.query_params.get("next", "/")
    if not dashboard_of(request).access.login_required:
        return RedirectResponse(_next(target), status_code=303)
    if "token" in request.query_params:
        return _signed_in(request, request.query_params["token"], target)
    return no_store(page(request, "login.html", next=target, problem=""))


async def login_form(request: Request) -> Response:
    """POST /login with token, next and the form's csrf."""
    form = {k: str(v) for k, v in (await request.form()).items()}
    if not Access.form_is_genuine(session_of(request), form.get("csrf", "")):
        return await run_in_threadpool(error_page, request, 403, "Form refused", "the sign-in form's security token "
                                       "is missing or stale (CSRF check); open /login again")
    return await run_in_threadpool(_signed_in, request, form.get("token", ""), form.get("next", "/"))


async def logout(request: Request) -> Response:
    """POST /logout with the form's csrf."""
    form = await request.form()
    session = session_of(request)
    if not Access.form_is_genuine(session, str(form.get("csrf", ""))):
        return await run_in_threadpool(error_page, request, 403, "Form refused",
                                       "the form's security token is missing or stale (CSRF check)")
    dashboard_of(request).access.sign_out(session)
    return RedirectResponse("/login", status_code=303)
