"""`mnemosync.agent.dashboard.sign_in`: the sign-in token, sessions and the CSRF check."""

from __future__ import annotations

from mnemosync.agent.dashboard.sign_in import MAX_SESSIONS, Access


def test_only_the_token_signs_in_and_each_sign_in_is_a_new_session():
    access = Access("s3cret-token")
    assert access.sign_in("s3cret-tokeN") is None and access.sign_in("") is None
    first, second = access.sign_in("s3cret-token"), access.sign_in("s3cret-token")
    assert first.signed_in and second.signed_in and first.id != second.id
    assert access.session(first.id) is first
    assert not access.new_session().signed_in


def test_without_a_token_every_session_is_signed_in_and_nothing_signs_in():
    access = Access(None)
    assert not access.login_required
    assert access.new_session().signed_in
    assert access.sign_in("anything") is None


def test_a_form_is_genuine_only_with_its_own_sessions_token():
    access = Access("t")
    mine, other = access.new_session(), access.new_session()
    assert Access.form_is_genuine(mine, mine.csrf)
    assert not Access.form_is_genuine(mine, other.csrf)
    assert not Access.form_is_genuine(None, mine.csrf)
    assert not Access.form_is_genuine(mine, "")


def test_signed_out_sessions_are_forgotten_and_a_flood_of_new_ones_evicts_no_signed_in_one():
    access = Access("t")
    gone = access.sign_in("t")
    access.sign_out(gone)
    assert access.session(gone.id) is None
    signed, first = access.sign_in("t"), access.new_session()
    for _ in range(2 * MAX_SESSIONS):
        access.new_session()
    assert access.session(first.id) is None
    assert access.session(signed.id) is signed


def test_the_cookie_is_http_only_same_site_strict_and_secure_over_https():
    session = Access("t", secure=True).new_session()
    cookie = Access("t", secure=True).cookie(session)
    assert (cookie["httponly"], cookie["samesite"], cookie["secure"]) == (True, "strict", True)
    assert cookie["value"] == session.id
