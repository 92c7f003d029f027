"""An admin's users of their own tenant: create, list, change role, (de)activate, reset password.

Another tenant's user id answers 404, an operator's 403, the admin's own 409
(docs/decisions/0057-user-management.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal
from uuid import UUID

from litestar import Request, Router, get, patch, post
from litestar.params import FromPath, JSONBody
from msgspec import Meta

from gateway import auth, openapi
from gateway.auth import users
from gateway.auth.routes import Email, NewPassword
from gateway.context import Ctx
from shared import errors

# auth.ROLES: the roles an admin may give (operators only by the CLI).
Role = Literal["admin", "user"]


@dataclass
class NewUser:
    email: Email
    password: NewPassword
    role: Role = "user"


@dataclass
class UserChange:
    role: Role | None = None
    active: bool | None = None


# A change changes something (ADR 0331): /schema says so, as update_user enforces it.
Change = Annotated[UserChange, Meta(extra_json_schema={"anyOf": [
    {"required": ["role"], "properties": {"role": {"type": "string"}}},
    {"required": ["active"], "properties": {"active": {"type": "boolean"}}}]})]


@dataclass
class PasswordReset:
    password: NewPassword


@post("/", status_code=201, responses=openapi.errors(409))
async def create_user(data: JSONBody[NewUser], request: Request, ctx: Ctx) -> dict:
    """Admins add users to their own tenant; an e-mail is unique within the tenant only (409
    when this tenant has it), whatever other tenants have (docs/decisions/0202)."""
    principal = auth.current(request)
    return await users.create_user_async(ctx.pool, tenant_id=principal.tenant_id,
                                         email=data.email, password=data.password, role=data.role)


@get("/")
async def list_users(request: Request, ctx: Ctx) -> dict:
    """The users of the admin's tenant, by e-mail; `sign_in_locked_until` says until when wrong
    passwords from unknown devices lock one out (their known devices still sign in)."""
    items = await users.list_users(ctx.pool, auth.current(request).tenant_id)
    return {"items": items, "total": len(items)}


@patch("/{user_id:uuid}", responses=openapi.errors(400, 409))
async def update_user(user_id: FromPath[UUID], data: JSONBody[Change], request: Request,
                      ctx: Ctx) -> dict:
    """Change a user's role (admin | user) or deactivate / reactivate them; either ends their
    sessions."""
    if data.role is None and data.active is None:  # nothing to change: end nobody's sessions
        raise errors.InvalidRequest("Send role, active or both: this request changes nothing.")
    return await users.admin_update(ctx.pool, auth.current(request), user_id, role=data.role,
                                    active=data.active)


@post("/{user_id:uuid}/password", status_code=200, responses=openapi.errors(409))
async def reset_password(user_id: FromPath[UUID], data: JSONBody[PasswordReset], request: Request,
                         ctx: Ctx) -> dict:
    """Set a new password for a user (tell them out of band); their sessions end."""
    return await users.admin_update(ctx.pool, auth.current(request), user_id,
                                    password=data.password)


router = Router("/v1/users", guards=[auth.admin_only], tags=["users"], route_handlers=[
    create_user, list_users, update_user, reset_password])
