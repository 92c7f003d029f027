"""docs/decisions/0031: behind a TLS-terminating proxy (SESSION_COOKIE_SECURE=true) every cookie
the web UI sets carries `Secure`, so a browser never sends the session over plain http."""

from __future__ import annotations

import re

import httpx

from gateway.web import session
from tests.conftest import TEST_PASSWORD
from tests.support import stack


def _cookie(response: httpx.Response, name: str) -> str:
    return next(c for c in response.headers.get_list("set-cookie") if c.startswith(name + "="))


def test_session_cookie_secure_marks_every_cookie_secure(stack_env, out_dir, tenants):
    user = tenants.user(role="user")
    gateway = stack.start_gateway({**stack_env, "SESSION_COOKIE_SECURE": "true"}, out_dir)
    try:
        with httpx.Client(base_url=gateway.url, timeout=30, follow_redirects=False) as browser:
            # The sign-in form's double-submit cookie
            form = browser.get("/login")
            assert "Secure" in _cookie(form, session.LOGIN_COOKIE)
            token = re.search(r'name="csrf_token" value="([^"]+)"', form.text).group(1)
            # httpx keeps Secure cookies for https only: hand the form cookie back ourselves
            login_cookie = _cookie(form, session.LOGIN_COOKIE).split(";", 1)[0]
            ok = browser.post("/login", headers={"Cookie": login_cookie},
                              data={"tenant": user.tenant, "email": user.email,
                                    "password": TEST_PASSWORD, "csrf_token": token})
            assert ok.status_code == 303, ok.text
            cookie = _cookie(ok, session.COOKIE)
            assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie

            # and signing out clears it with the same flags
            jwt = cookie.split(";", 1)[0]
            page = browser.get("/upload", headers={"Cookie": jwt})
            csrf = re.search(r'<meta name="csrf-token" content="([0-9a-f]+)">', page.text)
            out = browser.post("/logout", headers={"Cookie": jwt},
                               data={"csrf_token": csrf.group(1)})
            assert out.status_code == 303
            assert "Secure" in _cookie(out, session.COOKIE)
    finally:
        gateway.stop()
