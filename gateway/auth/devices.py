"""Device cookies: a browser or client that signed in to an account before is known again.

The sign-in lock (gateway/auth/login_throttle.py) stops guessing, but anyone who knows a user's
e-mail could lock that user out by failing on purpose. OWASP's answer ("Slow Down Online
Guessing Attacks with Device Cookies") is kept here (docs/decisions/0204): a successful sign-in
hands the client a signed cookie naming the account and a random device id; an attempt that
carries a valid one for the account it names is counted against that device alone, so the
account's lock (and the address's) does not stop it, while a device that keeps failing locks
itself. The cookie holds no secret of the user's: an HMAC under a key derived from the JWT
secret, the user id, a random id and the issue time.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from uuid import UUID

from litestar.datastructures import Cookie

COOKIE = "df_device"
_VERSION = "d1"


@dataclass(frozen=True)
class Device:
    device_id: str
    user_id: UUID

    @property
    def throttle_key(self) -> str:
        return f"device:{self.device_id}"


def _key(secret: str) -> bytes:
    # A key of its own: a device cookie's MAC can never pass as a token's or a cursor's.
    return hmac.new(secret.encode(), b"dragonfly device cookie", hashlib.sha256).digest()


def _mac(secret: str, body: str) -> str:
    digest = hmac.new(_key(secret), body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def issue(user_id: UUID, secret: str, device_id: str | None = None,
          now: float | None = None) -> str:
    """A cookie value for this account: the same device id when the client already had one."""
    body = ".".join((_VERSION, user_id.hex, device_id or secrets.token_urlsafe(16),
                     str(int(now if now is not None else time.time()))))
    return f"{body}.{_mac(secret, body)}"


def read(value: str | None, secret: str, *, max_age_s: float,
         now: float | None = None) -> Device | None:
    """The device a cookie names, or None when it is absent, forged or older than max_age_s."""
    if not value or len(value) > 200:
        return None
    body, _, mac = value.rpartition(".")
    if not hmac.compare_digest(mac.encode(), _mac(secret, body).encode()):
        return None
    try:
        version, user_hex, device_id, issued = body.split(".")
        user_id, issued_at = UUID(hex=user_hex), int(issued)
    except ValueError:
        return None
    age = (now if now is not None else time.time()) - issued_at
    if version != _VERSION or not 0 <= age <= max_age_s:
        return None
    return Device(device_id, user_id)


def cookie(value: str, *, max_age_s: float, secure: bool) -> Cookie:
    # Strict: another site's request never carries it. Path /: the page's form posts to /login
    # and API clients to /v1/auth/login.
    return Cookie(key=COOKIE, value=value, max_age=int(max_age_s), path="/", httponly=True,
                  samesite="strict", secure=secure)
