"""Sign in, sign out everywhere, and change one's own password."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import Request, Response, get, post
from litestar.datastructures import Cookie
from litestar.params import JSONBody
from msgspec import Meta

from gateway import auth, openapi
from gateway.auth import devices, login_throttle, users
from gateway.context import Context, Ctx
from gateway.web import session

# What /schema declares and msgspec checks (ADR 0200); the server refuses nothing else.
# Each description is the sentence a refusal of the field says (gateway/errors.py).
Tenant = Annotated[str, Meta(min_length=1, max_length=200, pattern=openapi.NO_NUL,
                             description="tenant is your tenant's name as your admin gave it, "
                                         "1 to 200 characters.")]
Email = Annotated[str, Meta(max_length=users.MAX_EMAIL_CHARS, pattern=users.EMAIL_PATTERN,
                            description="email must be an e-mail address (any case): one @, "
                                        f"at most {users.MAX_EMAIL_CHARS} characters.")]
AnyPassword = Annotated[str, Meta(max_length=auth.MAX_PASSWORD_CHARS)]
NewPassword = Annotated[str, Meta(min_length=auth.MIN_PASSWORD_CHARS,
                                  max_length=auth.MAX_PASSWORD_CHARS,
                                  description=f"A password is {auth.PASSWORD_RULE}.")]


@dataclass
class LoginRequest:
    tenant: Tenant
    email: Email
    password: AnyPassword


@dataclass
class PasswordChange:
    current_password: AnyPassword
    new_password: NewPassword


def _token_body(principal: auth.Principal, ctx: Context) -> dict:
    settings = ctx.settings
    return {
        "access_token": auth.issue_token(principal, settings.jwt_secret, settings.jwt_expiry_hours),
        "token_type": "bearer",
        "expires_in": int(settings.jwt_expiry_hours * 3600),
        "user": {"user_id": principal.user_id, "tenant_id": principal.tenant_id,
                 "role": principal.role},
    }


def device(request: Request, ctx: Context) -> users.DeviceCookie:
    """The client's device cookie, and how to read it (ADR 0204)."""
    return users.DeviceCookie(request.cookies.get(devices.COOKIE), ctx.settings.jwt_secret,
                              ctx.settings.login_device_cookie_days * 86400)


def device_cookie(request: Request, ctx: Context, value: str) -> Cookie:
    """The device cookie a successful sign-in hands back."""
    return devices.cookie(value, max_age_s=ctx.settings.login_device_cookie_days * 86400,
                          secure=session.secure(request, ctx.settings.session_cookie_secure))


@post("/v1/auth/login", opt={"public": True}, status_code=200, tags=["auth"],
      responses=openapi.errors(401, 429))
async def login(data: JSONBody[LoginRequest], request: Request, ctx: Ctx) -> Response:
    """Exchange tenant, e-mail and password for a bearer token; throttled per account and
    address (429 with Retry-After). The answer sets a device cookie: an account locked by
    others' wrong passwords still opens, with the right one, from a client that has it."""
    principal, cookie = await users.login(
        ctx.pool, data.tenant, data.email, data.password, address=auth.client_address(request),
        limits=login_throttle.Limits.from_settings(ctx.settings), device=device(request, ctx))
    return Response(_token_body(principal, ctx),
                    cookies=[device_cookie(request, ctx, cookie)])


@post("/v1/auth/logout", status_code=204, tags=["auth"])
async def logout(request: Request, ctx: Ctx) -> None:
    """End every session and token of the caller (all devices)."""
    await users.end_sessions(ctx.pool, auth.current(request))


@post("/v1/auth/password", status_code=200, tags=["auth"],
      responses=openapi.errors(403, 429))
async def change_password(data: JSONBody[PasswordChange], request: Request, ctx: Ctx) -> dict:
    """Change one's own password with the current one (403 `wrong_password` when it is not);
    every older token stops working, and the answer carries a new one."""
    principal = await users.change_own_password(
        ctx.pool, auth.current(request), current=data.current_password, new=data.new_password,
        address=auth.client_address(request),
        limits=login_throttle.Limits.from_settings(ctx.settings))
    return _token_body(principal, ctx)


@get("/v1/auth/me", tags=["auth"])
async def me(request: Request) -> dict:
    principal = auth.current(request)
    return {"user_id": principal.user_id, "tenant_id": principal.tenant_id, "role": principal.role}
