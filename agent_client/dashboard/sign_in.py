"""Who may use the dashboard: the sign-in token, sessions, and the CSRF check on forms.

At start the dashboard makes a random token and prints it (with a sign-in
link). A person signs in once with it; the browser then holds only a random
session id, in a cookie marked HttpOnly and SameSite=Strict (and Secure over
HTTPS). Every form carries the session's CSRF token, compared in constant time
like the sign-in token, and a POST whose Origin is another site is refused.
With login turned off (loopback only, `--no-login`), sessions are still made,
already signed in, so forms keep their CSRF check.

What the dashboard may see is decided by the server from the dashboard's own
identity, not here: a session only decides whether this browser may use it.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

COOKIE = "mnemosync_dashboard"
MAX_SESSIONS = 1000


@dataclass
class Session:
    """One browser's session: whether it signed in, the token its forms must carry, and a message for its next
    page (what its last form did)."""

    id: str
    signed_in: bool
    csrf: str
    flash: str = ""
    problem: str = ""


class Access:
    """Sessions and the sign-in token of one running dashboard.

    Args:
        token: The sign-in token (None: no sign-in, every session is signed in).
        secure: Mark cookies Secure (served over HTTPS).
    """

    def __init__(self, token: str | None, *, secure: bool = False):
        self.token = token
        self.secure = secure
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def login_required(self) -> bool:
        """True when a person must sign in with the token."""
        return self.token is not None

    def session(self, session_id: str | None) -> Session | None:
        """The session with this id, if it exists."""
        if not session_id:
            return None
        with self._lock:
            found = self._sessions.get(session_id)
            if found is not None:
                self._sessions.move_to_end(session_id)
            return found

    def new_session(self, *, signed_in: bool = False) -> Session:
        """A fresh session (signed in already when there is no sign-in)."""
        made = Session(secrets.token_urlsafe(32), signed_in or not self.login_required, secrets.token_urlsafe(32))
        with self._lock:
            self._sessions[made.id] = made
            while len(self._sessions) > MAX_SESSIONS:  # the oldest session never signed in goes first
                oldest = next((k for k, v in self._sessions.items() if not v.signed_in), None)
                if oldest is None:
                    self._sessions.popitem(last=False)
                else:
                    del self._sessions[oldest]
        return made

    def sign_in(self, given: str) -> Session | None:
        """A new signed-in session when `given` is the token (compared in constant time), else None."""
        if self.token is None or not hmac.compare_digest(given.encode(), self.token.encode()):
            return None
        return self.new_session(signed_in=True)

    def sign_out(self, session: Session) -> None:
        """Forgets the session."""
        with self._lock:
            self._sessions.pop(session.id, None)

    @staticmethod
    def form_is_genuine(session: Session | None, given: str) -> bool:
        """True when a form's CSRF token is its session's (compared in constant time)."""
        return session is not None and hmac.compare_digest(given.encode(), session.csrf.encode())

    def cookie(self, session: Session) -> dict:
        """The keyword arguments of `Response.set_cookie` for the session cookie."""
        return dict(key=COOKIE, value=session.id, httponly=True, samesite="strict", secure=self.secure, path="/")
