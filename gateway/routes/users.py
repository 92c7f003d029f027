from __future__ import annotations

from dataclasses import dataclass

from litestar import Request, post

from gateway import auth, openapi, users
from gateway.context import Context


@dataclass
class NewUser:
    email: str
    password: str
    role: str = "user"


@post("/v1/users", guards=[auth.admin_only], status_code=201, tags=["users"],
      responses=openapi.errors(409))
async def create_user(data: NewUser, request: Request, ctx: Context) -> dict:
    """Admins add users to their own tenant."""
    principal = auth.current(request)
    return await users.create_user_async(ctx.pool, tenant_id=principal.tenant_id,
                                         email=data.email, password=data.password, role=data.role)
