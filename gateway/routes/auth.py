from __future__ import annotations

from dataclasses import dataclass

from litestar import Request, get, post

from gateway import auth, openapi, users
from gateway.context import Context


@dataclass
class LoginRequest:
    email: str
    password: str


@post("/v1/auth/login", opt={"public": True}, status_code=200, tags=["auth"],
      responses=openapi.errors(401))
async def login(data: LoginRequest, ctx: Context) -> dict:
    """Exchange e-mail and password for a bearer token."""
    principal = await users.login(ctx.pool, data.email, data.password)
    settings = ctx.settings
    return {
        "access_token": auth.issue_token(principal, settings.jwt_secret, settings.jwt_expiry_hours),
        "token_type": "bearer",
        "expires_in": int(settings.jwt_expiry_hours * 3600),
        "user": {"user_id": principal.user_id, "tenant_id": principal.tenant_id,
                 "role": principal.role},
    }


@get("/v1/auth/me", tags=["auth"])
async def me(request: Request) -> dict:
    principal = auth.current(request)
    return {"user_id": principal.user_id, "tenant_id": principal.tenant_id, "role": principal.role}
