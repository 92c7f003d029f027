"""Sign in, sign out everywhere, and change one's own password."""

from __future__ import annotations

from dataclasses import dataclass

from litestar import Request, get, post
from litestar.params import JSONBody

from gateway import auth, openapi
from gateway.auth import login_throttle, users
from gateway.context import Context, Ctx


@dataclass
class LoginRequest:
    email: str
    password: str


@dataclass
class PasswordChange:
    current_password: str
    new_password: str


def _token_body(principal: auth.Principal, ctx: Context) -> dict:
    settings = ctx.settings
    return {
        "access_token": auth.issue_token(principal, settings.jwt_secret, settings.jwt_expiry_hours),
        "token_type": "bearer",
        "expires_in": int(settings.jwt_expiry_hours * 3600),
        "user": {"user_id": principal.user_id, "tenant_id": principal.tenant_id,
                 "role": principal.role},
    }


@post("/v1/auth/login", opt={"public": True}, status_code=200, tags=["auth"],
      responses=openapi.errors(401, 429))
async def login(data: JSONBody[LoginRequest], request: Request, ctx: Ctx) -> dict:
    """Exchange e-mail and password for a bearer token; throttled per account and address
    (429 with Retry-After)."""
    principal = await users.login(ctx.pool, data.email, data.password,
                                  address=auth.client_address(request),
                                  limits=login_throttle.Limits.from_settings(ctx.settings))
    return _token_body(principal, ctx)


@post("/v1/auth/logout", status_code=204, tags=["auth"])
async def logout(request: Request, ctx: Ctx) -> None:
    """End every session and token of the caller (all devices)."""
    await users.end_sessions(ctx.pool, auth.current(request))


@post("/v1/auth/password", status_code=200, tags=["auth"],
      responses=openapi.errors(401, 429))
async def change_password(data: JSONBody[PasswordChange], request: Request, ctx: Ctx) -> dict:
    """Change one's own password with the current one; every older token stops working, and
    the answer carries a new one."""
    principal = await users.change_own_password(
        ctx.pool, auth.current(request), current=data.current_password, new=data.new_password,
        address=auth.client_address(request),
        limits=login_throttle.Limits.from_settings(ctx.settings))
    return _token_body(principal, ctx)


@get("/v1/auth/me", tags=["auth"])
async def me(request: Request) -> dict:
    principal = auth.current(request)
    return {"user_id": principal.user_id, "tenant_id": principal.tenant_id, "role": principal.role}
