"""Standard Webhooks signing (https://www.standardwebhooks.com, docs/decisions/0154).

A secret is ``whsec_`` + base64 of 32 random bytes; a delivery is signed with
``v1,<base64 HMAC-SHA256 of "<webhook-id>.<webhook-timestamp>.<body>">`` keyed by the decoded
bytes, so receivers verify with the `standardwebhooks` (or Svix) libraries unchanged.

While a rotated-out secret's grace period lasts, a delivery carries one signature per secret,
space-separated (``v1,<new> v1,<old>``): the spec's way to rotate, and what those libraries
accept when either one matches (docs/decisions/0196).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def signature(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(PREFIX))
    signed = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(signed).decode()


def headers(secrets: str | list[str], msg_id: str, timestamp: int,
            body: bytes) -> dict[str, str]:
    """The Standard Webhooks headers, signed with each of ``secrets`` (the current one first)."""
    keys = [secrets] if isinstance(secrets, str) else secrets
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp),
            "webhook-signature": " ".join(signature(s, msg_id, timestamp, body) for s in keys),
            "content-type": "application/json"}
