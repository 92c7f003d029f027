"""Tenants and users: creation for the CLI and admins, and the login check."""

from __future__ import annotations

from pathlib import Path
from uuid import UUID

from gateway import auth
from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("queries.sql"))


def normalise_email(email: str) -> str:
    email = email.strip().lower()
    if "@" not in email or len(email) > 254:
        raise errors.InvalidRequest("Enter a valid e-mail address.")
    return email


def ensure_tenant(conn: db.Conn, name: str) -> UUID:
    row = conn.execute(Q["upsert_tenant"], {"name": name}).fetchone()
    assert row is not None
    return row["tenant_id"]


def create_user(conn: db.Conn, *, tenant_id: UUID, email: str, password: str,
                role: str, replace: bool = False) -> dict:
    """Create a user; with ``replace`` an existing one gets the new password and role.

    The CLI's path: it may also create platform operators, which the API never can."""
    if role not in (*auth.ROLES, auth.OPERATOR):
        raise errors.InvalidRequest(f"Role must be one of {', '.join(auth.ROLES)} or operator.")
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
    if role not in auth.ROLES:
        raise errors.InvalidRequest(f"Role must be one of {', '.join(auth.ROLES)}.")
    params = {"tenant_id": tenant_id, "email": normalise_email(email), "role": role,
              "password_hash": auth.hash_password(password)}
    try:
        with db.translate():
            async with pool.connection() as conn:
                row = await (await conn.execute(Q["insert_user"], params)).fetchone()
    except errors.Conflict as exc:
        raise errors.Conflict("A user with that e-mail already exists; pick another address.") from exc
    assert row is not None
    return row


async def login(pool: db.AsyncPool, email: str, password: str) -> auth.Principal:
    async with pool.connection() as conn:
        row = await (await conn.execute(
            Q["find_user_by_email"], {"email": email.strip().lower()})).fetchone()
    if not await auth.verify_password_async(password, row["password_hash"] if row else None):
        raise errors.Unauthorized("The e-mail or password is wrong; check both and try again.")
    assert row is not None
    return auth.Principal(row["user_id"], row["tenant_id"], row["role"])
