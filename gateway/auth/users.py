"""Tenants and users: creation, sign-in, password changes and the admin's user management.

Every change to a user's password, role or activity moves its token version on, which ends the
user's sessions and tokens (docs/decisions/0055-revocable-sessions.md). The admin API never
touches operators, nor the admin's own account (docs/decisions/0057-user-management.md).

An e-mail address is unique within its tenant, and sign-in names the tenant
(docs/decisions/0202): whether another tenant has an address changes no answer here.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from gateway import auth
from gateway.auth import devices, login_throttle
from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("users.sql"))
WRONG_CREDENTIALS = "The e-mail or password is wrong; check both and try again."
# A tenant's users on one page; tenants have tens of users, not thousands.
LIST_LIMIT = 1000
PUBLIC = ("user_id", "tenant_id", "email", "role", "created_at", "updated_at")


# What /schema declares of an e-mail (gateway/auth/routes.py): one "@", no NUL, 254 at most.
EMAIL_PATTERN = r"^[^\x00@]*@[^\x00@]*$"
MAX_EMAIL_CHARS = 254


def normalise_email(email: str) -> str:
    email = email.strip()
    if email.count("@") != 1 or "\x00" in email or len(email) > MAX_EMAIL_CHARS:
        raise errors.InvalidRequest("Enter a valid e-mail address.")
    return email.lower()


def public(row: dict[str, Any]) -> dict[str, Any]:
    """What the API shows of a user: never the hash or the token version."""
    return {**{k: row[k] for k in PUBLIC if k in row}, "active": row.get("deactivated_at") is None,
            "deactivated_at": row.get("deactivated_at")}


def ensure_tenant(conn: db.Conn, name: str) -> UUID:
    row = conn.execute(Q["upsert_tenant"], {"name": name}).fetchone()
    assert row is not None
    return row["tenant_id"]


def create_user(conn: db.Conn, *, tenant_id: UUID, email: str, password: str,
                role: str, replace: bool = False) -> dict:
    """Create a user; with ``replace`` an existing one gets the new password and role.

    The CLI's path: it may also create platform operators, which the API never can."""
    _check_role(role, operator_allowed=True)
    params = {"tenant_id": tenant_id, "email": normalise_email(email), "role": role,
              "password_hash": auth.hash_password(password)}
    with db.translate():
        if replace:
            row = conn.execute(Q["set_password"], params).fetchone()
            if row is not None:
                return row
        row = conn.execute(Q["insert_user"], params).fetchone()
    assert row is not None
    return row


async def create_user_async(pool: db.AsyncPool, *, tenant_id: UUID, email: str,
                            password: str, role: str) -> dict:
    _check_role(role, operator_allowed=False)
    params = {"tenant_id": tenant_id, "email": normalise_email(email), "role": role,
              "password_hash": await asyncio.to_thread(auth.hash_password, password)}
    try:
        with db.translate():
            async with pool.connection() as conn:
                row = await (await conn.execute(Q["insert_user"], params)).fetchone()
    except errors.Conflict as exc:
        # Unique per tenant: only this tenant's own users can make this happen (ADR 0202).
        raise errors.Conflict("Your tenant already has a user with that e-mail; pick another "
                              "address.") from exc
    assert row is not None
    return public(row)


# ── signing in and out ──────────────────────────────────────────────────────────────────────
@dataclass(frozen=True)
class DeviceCookie:
    """The client's device cookie as sent, and how to read it (gateway/auth/devices.py)."""

    cookie: str | None
    secret: str
    max_age_s: float


async def login(pool: db.AsyncPool, tenant: str, email: str, password: str, *,
                address: str | None, limits: login_throttle.Limits,
                device: DeviceCookie) -> tuple[auth.Principal, str]:
    """The principal for a right password of an active user of the named tenant, and the
    device cookie to hand back; 401 otherwise, 429 when throttled.

    Known, unknown and deactivated accounts, and unknown tenants, take the same path: one
    throttle count, one bcrypt check (against a dummy hash when unknown), one answer. A client
    whose device cookie names this account is counted on its own (ADR 0204)."""
    email = email.strip().lower()
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["find_login_user"], {
            "tenant": tenant.strip(), "email": email})).fetchone()
    known = devices.read(device.cookie, device.secret, max_age_s=device.max_age_s)
    trusted = known if known and row and known.user_id == row["user_id"] else None
    account = login_throttle.account_key(tenant, email)
    key = trusted.throttle_key if trusted else None
    await login_throttle.attempt(pool, limits, account=account, address=address, device=key)
    right = await auth.verify_password_async(password, row["password_hash"] if row else None)
    if not right or row is None or row["deactivated_at"] is not None:
        raise errors.Unauthorized(WRONG_CREDENTIALS)
    await login_throttle.succeeded(pool, account=account, address=address, device=key)
    cookie = devices.issue(row["user_id"], device.secret, trusted.device_id if trusted else None)
    return _principal(row), cookie


async def end_sessions(pool: db.AsyncPool, principal: auth.Principal) -> None:
    """Sign out: every token of the user stops working (docs/decisions/0055)."""
    async with pool.connection() as conn:
        await conn.execute(Q["update_user"], _changes(principal.tenant_id, principal.user_id))


async def change_own_password(pool: db.AsyncPool, principal: auth.Principal, *, current: str,
                              new: str, address: str | None,
                              limits: login_throttle.Limits) -> auth.Principal:
    """The user's own change, proven by the current password (throttled like a sign-in, so a
    stolen session cannot guess it); the new principal's version ends every older token."""
    new_hash = await asyncio.to_thread(auth.hash_password, new)
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["find_user"], _ids(principal))).fetchone()
        if row is None:
            raise errors.Unauthorized("Your session has ended; sign in again.")
        account = await _account(conn, principal.tenant_id, row["email"])
    await login_throttle.attempt(pool, limits, account=account, address=address)
    if not await auth.verify_password_async(current, row["password_hash"]):
        # 403, not 400: the request is well formed (/schema cannot know a password), and not
        # 401: the session is still good.
        raise WrongPassword()
    await login_throttle.succeeded(pool, account=account, address=address)
    async with pool.connection() as conn:
        updated = await (await conn.execute(Q["update_user"], _changes(
            principal.tenant_id, principal.user_id, password_hash=new_hash))).fetchone()
    assert updated is not None
    return _principal(updated)


# ── an admin manages the users of their own tenant ─────────────────────────────────────────
async def list_users(pool: db.AsyncPool, tenant_id: UUID) -> list[dict[str, Any]]:
    """The tenant's users, each with its sign-in lock: `sign_in_locked_until` is set while
    wrong passwords from unknown devices lock the account (ADR 0204)."""
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["list_users"], {"tenant_id": tenant_id,
                                                           "limit": LIST_LIMIT})).fetchall()
        tenant = await _tenant_name(conn, tenant_id)
    keys = {r["user_id"]: login_throttle.account_key(tenant, r["email"]) for r in rows}
    locks = await login_throttle.locks(pool, list(keys.values()))
    return [{**public(r), "sign_in_locked_until": (locks.get(keys[r["user_id"]]) or {}).get(
        "locked_until")} for r in rows]


async def admin_update(pool: db.AsyncPool, actor: auth.Principal, user_id: UUID, *,
                       role: str | None = None, active: bool | None = None,
                       password: str | None = None) -> dict[str, Any]:
    """Change another user of the admin's tenant; each change ends that user's sessions."""
    if role is not None:
        _check_role(role, operator_allowed=False)
    password_hash = None if password is None else await asyncio.to_thread(auth.hash_password,
                                                                          password)
    ids = {"tenant_id": actor.tenant_id, "user_id": user_id}
    async with pool.connection() as conn, conn.transaction():
        target = await (await conn.execute(Q["lock_user"], ids)).fetchone()
        _check_admin_may_change(actor, target)
        row = await (await conn.execute(Q["update_user"], _changes(
            actor.tenant_id, user_id, role=role, active=active,
            password_hash=password_hash))).fetchone()
        account = await _account(conn, actor.tenant_id, row["email"]) if row else ""
    assert row is not None
    if password is not None:
        # A new password ends the account's lock-out with it (the admin vouched for the user).
        await login_throttle.forget(pool, account)
    return public(row)


def _check_admin_may_change(actor: auth.Principal, target: dict | None) -> None:
    if target is None:  # another tenant's user reads exactly like no user at all
        raise errors.NotFound("No user with that id in your tenant; pick one from the list.")
    if target["role"] == auth.OPERATOR:
        raise errors.Forbidden("Operators are platform staff, managed only with the `ingest` "
                               "CLI; ask an operator.")
    if target["user_id"] == actor.user_id:
        # No admin can lock themselves (and maybe the tenant's last admin) out by accident.
        raise errors.Conflict("You cannot change your own account here; change your password "
                              "at /v1/auth/password, or ask another admin.")


# ── the CLI's operations, by e-mail, across tenants (operators' tool) ──────────────────────
def list_tenant_users(conn: db.Conn, tenant_name: str) -> list[dict[str, Any]]:
    tenant = conn.execute(Q["find_tenant"], {"name": tenant_name}).fetchone()
    if tenant is None:
        raise errors.NotFound(f"No tenant named {tenant_name!r}.")
    rows = conn.execute(Q["list_users"], {"tenant_id": tenant["tenant_id"],
                                          "limit": LIST_LIMIT}).fetchall()
    return [public(r) for r in rows]


def find_by_email(conn: db.Conn, email: str, tenant: str | None = None) -> dict[str, Any]:
    """The one account with this e-mail (in the named tenant): operators' CLI lookups. An
    address several tenants use needs the tenant (ADR 0202)."""
    rows = conn.execute(Q["find_users_by_email"], {"email": email.strip().lower(),
                                                   "tenant": tenant}).fetchall()
    where = f" in tenant {tenant!r}" if tenant else ""
    if not rows:
        raise errors.NotFound(f"No user with e-mail {email!r}{where}.")
    if len(rows) > 1:
        names = ", ".join(r["tenant_name"] for r in rows)
        raise errors.InvalidRequest(f"Tenants {names} each have a user {email!r}; name one "
                                    "with --tenant.")
    return rows[0]


def cli_update(conn: db.Conn, email: str, *, role: str | None = None, active: bool | None = None,
               password: str | None = None, tenant: str | None = None) -> dict[str, Any]:
    """set-role (operator included), deactivate, reactivate, reset-password by e-mail."""
    if role is not None:
        _check_role(role, operator_allowed=True)
    row = find_by_email(conn, email, tenant)
    password_hash = None if password is None else auth.hash_password(password)
    updated = conn.execute(Q["update_user"], _changes(
        row["tenant_id"], row["user_id"], role=role, active=active,
        password_hash=password_hash)).fetchone()
    assert updated is not None
    if password is not None:
        login_throttle.forget_account(conn, login_throttle.account_key(row["tenant_name"],
                                                                       row["email"]))
    return public(updated)


def token_principal(conn: db.Conn, email: str, tenant: str | None = None) -> auth.Principal:
    """`ingest token`: a token of an active user, carrying its current version."""
    row = find_by_email(conn, email, tenant)
    if row["deactivated_at"] is not None:
        raise errors.NotFound(f"No active user with e-mail {email!r}.")
    return _principal(row)


# ── helpers ─────────────────────────────────────────────────────────────────────────────────
class WrongPassword(errors.Forbidden):
    """The current password is wrong; enter it again."""

    code = "wrong_password"


async def _tenant_name(conn: db.AsyncConn, tenant_id: UUID) -> str:
    row = await (await conn.execute(Q["tenant_name"], {"tenant_id": tenant_id})).fetchone()
    return row["name"] if row else ""


async def _account(conn: db.AsyncConn, tenant_id: UUID, email: str) -> str:
    """The sign-in throttle's key of a user (tenant name and e-mail, as sign-in sees them)."""
    return login_throttle.account_key(await _tenant_name(conn, tenant_id), email)


def _check_role(role: str, *, operator_allowed: bool) -> None:
    allowed = (*auth.ROLES, auth.OPERATOR) if operator_allowed else auth.ROLES
    if role not in allowed:
        raise errors.InvalidRequest(f"Role must be one of {', '.join(allowed)}.")


def _ids(principal: auth.Principal) -> dict[str, UUID]:
    return {"tenant_id": principal.tenant_id, "user_id": principal.user_id}


def _changes(tenant_id: UUID, user_id: UUID, *, role: str | None = None,
             active: bool | None = None, password_hash: str | None = None) -> dict[str, Any]:
    return {"tenant_id": tenant_id, "user_id": user_id, "role": role, "active": active,
            "password_hash": password_hash}


def _principal(row: dict[str, Any]) -> auth.Principal:
    return auth.Principal(row["user_id"], row["tenant_id"], row["role"], row["token_version"])
