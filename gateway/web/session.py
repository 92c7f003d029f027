"""The browser session: an HttpOnly cookie holding the API's JWT, and CSRF tokens.

Cookies ride along on requests that other sites make, so every unsafe request authenticated by
the cookie must also carry a CSRF token that only our own pages can read. The token is an HMAC
of the session's JWT under the JWT secret: stateless (any replica can check it), and it changes
with every sign-in. The sign-in form has no session yet; it uses a double-submit cookie.
See docs/decisions/0031-web-session-and-csrf.md.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from litestar.connection import ASGIConnection
from litestar.datastructures import Cookie

from shared import errors

COOKIE = "df_session"
LOGIN_COOKIE = "df_login_csrf"
# The tenant this browser last signed in to, filled into the sign-in form (ADR 0202).
TENANT_COOKIE = "df_tenant"
_TENANT_TTL_S = 365 * 86400
HEADER = "x-csrf-token"
FORM_FIELD = "csrf_token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_PATH = "/login"
_LOGIN_TTL_S = 3600


def cookie_token(connection: ASGIConnection) -> str | None:
    return connection.cookies.get(COOKIE) or None


def csrf_token(session_token: str, secret: str) -> str:
    return hmac.new(secret.encode(), b"csrf:" + session_token.encode(), hashlib.sha256).hexdigest()


def csrf_matches(given: str | None, session_token: str, secret: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(),  # type: ignore[union-attr]
                                               csrf_token(session_token, secret).encode())


def require_csrf(connection: ASGIConnection, session_token: str, secret: str) -> None:
    """For a request authenticated by the cookie: unsafe methods need the CSRF header."""
    if connection.scope.get("method", "GET") in SAFE_METHODS:
        return
    if not csrf_matches(connection.headers.get(HEADER), session_token, secret):
        raise errors.Forbidden("The request did not come from an open page of this site; "
                               "reload the page and try again.")


def secure(connection: ASGIConnection, setting: bool | None) -> bool:
    """Secure cookies when the setting says so (by default outside DEV_MODE, ADR 0203) or the
    request itself came over https."""
    return bool(setting) or connection.url.scheme == "https"


def session_cookie(token: str, *, max_age: int, secure: bool) -> Cookie:
    return Cookie(key=COOKIE, value=token, max_age=max_age, path="/", httponly=True,
                  samesite="lax", secure=secure)


def cleared_session_cookie(*, secure: bool) -> Cookie:
    return Cookie(key=COOKIE, value="", max_age=0, expires=0, path="/", httponly=True,
                  samesite="lax", secure=secure)


# ── the sign-in form (no session yet): double-submit cookie ─────────────────────────────────
def login_token(connection: ASGIConnection, *, renew: bool = False) -> tuple[str, bool]:
    """The sign-in form's token, and whether it is new (then the response must set it)."""
    existing = None if renew else connection.cookies.get(LOGIN_COOKIE)
    if existing and len(existing) == 43:
        return existing, False
    return secrets.token_urlsafe(32), True


def login_cookie(token: str, *, secure: bool) -> Cookie:
    # Strict: only a form on our own page can post it back, and only to the sign-in path.
    return Cookie(key=LOGIN_COOKIE, value=token, max_age=_LOGIN_TTL_S, path=LOGIN_PATH,
                  httponly=True, samesite="strict", secure=secure)


def login_token_matches(connection: ASGIConnection, given: str | None) -> bool:
    expected = connection.cookies.get(LOGIN_COOKIE)
    return bool(expected and given) and hmac.compare_digest(
        expected.encode(), given.encode())  # type: ignore[union-attr]


# ── the tenant's name on the sign-in form (docs/decisions/0202) ─────────────────────────────
def tenant_cookie(tenant: str, *, secure: bool) -> Cookie:
    return Cookie(key=TENANT_COOKIE, value=tenant[:200], max_age=_TENANT_TTL_S, path=LOGIN_PATH,
                  httponly=True, samesite="strict", secure=secure)


def tenant_hint(connection: ASGIConnection) -> str:
    """The tenant to fill in: a link's ?tenant=, else the one this browser signed in to last."""
    return (connection.query_params.get("tenant") or connection.cookies.get(TENANT_COOKIE)
            or "")[:200]
