"""Who is calling: passwords, JWTs (HS256; claims sub, tenant_id, role, ver, exp) and role guards.

Every route requires a valid token unless its handler says ``opt={"public": True}``; tenant_id
always comes from the verified token, never from the request. A token is also checked against
its user's row on every request (one primary-key read): a deactivated user, or a token whose
version ``ver`` is older than the user's, is refused (docs/decisions/0055-revocable-sessions.md).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from uuid import UUID

import bcrypt
import jwt
from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from gateway.events import keys
from gateway.web import session
from shared import db, errors
from shared import logging as applog

# Roles a tenant admin may give through the API; `operator` (platform staff) only by the CLI.
ROLES = ("admin", "user")
OPERATOR = "operator"
BCRYPT_ROUNDS = 12
# Characters, not bytes: bcrypt reads only 72 bytes, so it gets an HMAC-SHA256 of the password
# keyed with its own salt (passlib's bcrypt_sha256, which also stops a leaked unsalted SHA-256
# of the password elsewhere from being tried against ours). ADR 0200: the limits are what
# /schema declares, with no byte count a client cannot see.
MIN_PASSWORD_CHARS = 8
MAX_PASSWORD_CHARS = 1024
PASSWORD_RULE = f"{MIN_PASSWORD_CHARS} to {MAX_PASSWORD_CHARS} characters"
_PREHASHED = "$bcrypt-sha256$"
# Hashes written before the prehash: plain bcrypt of at most 72 bytes, still verified.
_LEGACY_MAX_BYTES = 72
_SALT_CHARS = 29  # "$2b$12$" and 22 characters of salt


def _prehashed(password: str, salt: bytes) -> bytes:
    return base64.b64encode(hmac.new(salt, password.encode(), hashlib.sha256).digest())


def _hash(password: str) -> str:
    salt = bcrypt.gensalt(BCRYPT_ROUNDS)
    return _PREHASHED + bcrypt.hashpw(_prehashed(password, salt), salt).decode()


# Verified against when the e-mail is unknown, so both cases take the same time (bcrypt reads
# its cost from the hash). Written here once, as `_hash("dummy-password")` made it: making it
# at start was a quarter second of a gateway's CPU (docs/decisions/0324).
DUMMY_HASH = "$bcrypt-sha256$$2b$12$NHdayKYpAZs.gl.mUdRm/OsZy/624wfDWfo.QuujZtfMmZ7hHdzN2"
# The users table's queries (gateway/auth/users.py owns them); this module reads one per request.
Q = db.load_queries(Path(__file__).with_name("users.sql"))
SESSION_ENDED = "Your session has ended; sign in again."


@dataclass(frozen=True)
class Principal:
    user_id: UUID
    tenant_id: UUID
    role: str
    # The user's token version when the token was issued; a newer one in the row revokes it.
    token_version: int = 0

    @property
    def is_admin(self) -> bool:
        # An operator is also an admin of its own tenant.
        return self.role in ("admin", OPERATOR)

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR


def hash_password(password: str) -> str:
    if not MIN_PASSWORD_CHARS <= len(password) <= MAX_PASSWORD_CHARS:
        raise errors.InvalidRequest(f"Passwords must be {PASSWORD_RULE} long; choose another "
                                    "one.")
    return _hash(password)


def verify_password(password: str, password_hash: str | None) -> bool:
    stored = password_hash or DUMMY_HASH
    if stored.startswith(_PREHASHED):
        hashed = stored[len(_PREHASHED):].encode()
        right = bcrypt.checkpw(_prehashed(password, hashed[:_SALT_CHARS]), hashed)
    else:
        raw = password.encode()
        right = len(raw) <= _LEGACY_MAX_BYTES and bcrypt.checkpw(raw, stored.encode())
    return right and bool(password_hash)


def issue_token(principal: Principal, secret: str, expiry_hours: float) -> str:
    now = datetime.now(UTC)
    claims = {
        "sub": str(principal.user_id),
        "tenant_id": str(principal.tenant_id),
        "role": principal.role,
        "ver": principal.token_version,
        "iat": now,
        "exp": now + timedelta(hours=expiry_hours),
    }
    return jwt.encode(claims, secret, algorithm="HS256")


def decode_token(token: str, secret: str) -> Principal:
    try:
        claims = jwt.decode(token, secret, algorithms=["HS256"],
                            options={"require": ["sub", "tenant_id", "role", "ver", "exp"]})
        principal = Principal(UUID(claims["sub"]), UUID(claims["tenant_id"]), claims["role"],
                              int(claims["ver"]))
    except jwt.ExpiredSignatureError as exc:
        raise errors.Unauthorized("Your session has expired; sign in again.") from exc
    except (jwt.InvalidTokenError, ValueError, KeyError, TypeError) as exc:
        raise errors.Unauthorized("The token is invalid; sign in again.") from exc
    if principal.role not in (*ROLES, OPERATOR):  # operators sign in too (`make run`'s admin)
        raise errors.Unauthorized("The token carries an unknown role; sign in again.")
    return principal


async def live_principal(pool: db.AsyncPool, token: str, secret: str) -> Principal:
    """The principal of a token that is signed, unexpired and not revoked: the user is active
    and the token's version is still the user's. The role is the row's, not the token's."""
    claimed = decode_token(token, secret)
    async with pool.connection() as conn:
        rows = await db.read_alone(conn, Q["session_user"], {
            "user_id": claimed.user_id, "tenant_id": claimed.tenant_id})
    row = rows[0] if rows else None
    if row is None or row["deactivated_at"] is not None \
            or row["token_version"] != claimed.token_version:
        raise errors.Unauthorized(SESSION_ENDED)
    return Principal(claimed.user_id, claimed.tenant_id, row["role"], row["token_version"])


def client_address(connection: ASGIConnection) -> str | None:
    """The caller's address: the peer's, which the server already took from X-Forwarded-For
    only when the peer is one of TRUSTED_PROXIES (cli/main.py passes them to uvicorn)."""
    client = connection.scope.get("client")
    return client[0] if client else None


def bearer_token(connection: ASGIConnection) -> str | None:
    header = connection.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def authenticate(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """App-wide guard: resolve the caller once and keep it on the connection's state."""
    if connection.route_handler.opt.get("public"):
        return
    if await _api_key(connection):
        return
    settings = connection.app.state.ctx.settings
    if not settings.auth_enabled:
        connection.state.principal = Principal(
            UUID(settings.dev_user_id), UUID(settings.dev_tenant_id), "admin")
        return
    token = bearer_token(connection)
    cookie = None if token else session.cookie_token(connection)  # the web UI's session
    credential = token or cookie
    if credential is None:
        if keys.HEADER in connection.headers:
            raise errors.Unauthorized("An API key opens only event intake (/v1/events); sign "
                                      "in and send 'Authorization: Bearer <token>' here.")
        raise errors.Unauthorized("Sign in first: send 'Authorization: Bearer <token>'.")
    principal = connection.state.principal = await live_principal(
        connection.app.state.ctx.pool, credential, settings.jwt_secret)
    if cookie:
        # Browsers attach cookies to other sites' requests too: unsafe methods must also carry
        # the CSRF header that only our own pages can read (gateway/web/session.py).
        session.require_csrf(connection, cookie, settings.jwt_secret)
    # Every later log line of the request names the caller's tenant and user (ids, no e-mail).
    applog.bind(tenant_id=principal.tenant_id, user_id=principal.user_id)


async def _api_key(connection: ASGIConnection) -> bool:
    """API keys (docs/decisions/0136) open only routes whose handler says
    ``opt={"api_key": "only"}`` (a key is required) or ``"also"`` (a key or a signed-in user).
    On those, a presented key is the caller: ``connection.state.key_caller``, never a
    Principal, so no user route can mistake a machine for a person."""
    accepts = connection.route_handler.opt.get("api_key")
    if not accepts:
        return False
    presented = connection.headers.get(keys.HEADER)
    if presented is None:
        if accepts == "only":
            raise errors.Unauthorized("Send the tenant's API key as 'X-Api-Key: <key>'.")
        return False
    # One statement for the keys of every request waiting at that moment (keys.Lookups).
    caller = connection.state.key_caller = await connection.app.state.ctx.key_lookups.caller(
        presented)
    applog.bind(tenant_id=caller.tenant_id, key_id=caller.key_id)
    return True


async def admin_only(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    if not current(connection).is_admin:
        raise errors.Forbidden("Only admins may do this; ask an admin of your tenant.")


async def operator_only(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    """Routes that span tenants: platform staff only, not tenant admins. The refusal says what
    the route shows (``opt={"operators_see": ...}``) and where a tenant admin finds their own
    tenant's (``opt={"tenant_view": ...}``)."""
    if not current(connection).is_operator:
        raise errors.Forbidden(operator_refusal(handler.opt))


def operator_refusal(opt: dict) -> str:  # type: ignore[type-arg]
    sees, own = opt.get("operators_see"), opt.get("tenant_view")
    if not sees:
        return "Only platform operators may do this: it spans every tenant."
    where = f"; a tenant admin sees their own tenant's at {own}" if own else ""
    return f"Only platform operators see {sees}{where}."


def current(connection: ASGIConnection) -> Principal:
    principal: Principal = connection.state.principal
    return principal


async def verify_password_async(password: str, password_hash: str | None) -> bool:
    # bcrypt takes ~0.25 s of CPU by design; keep it off the event loop.
    return await asyncio.to_thread(verify_password, password, password_hash)
