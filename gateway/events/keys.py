"""Per-tenant API keys: how machines push events (docs/decisions/0136).

A key is ``dfk_`` plus 256 random bits (URL-safe base64); only its SHA-256 is stored. A key is
not a user session: the auth guard accepts it only on routes that opt in (event intake and the
cursor), and it always acts for the tenant that created it.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("events.sql"))
KEY_PREFIX = "dfk_"
# Shown in lists so people can tell keys apart: the marker plus 8 of the 43 random characters.
DISPLAY_CHARS = len(KEY_PREFIX) + 8
# Longer than any key we issue: anything longer is refused before it is hashed.
MAX_KEY_CHARS = 100
HEADER = "x-api-key"


@dataclass(frozen=True)
class KeyCaller:
    """A machine that presented a live API key of ``tenant_id``."""

    key_id: UUID
    tenant_id: UUID


@dataclass(frozen=True)
class NewKey:
    key_id: UUID
    key: str        # the secret: returned once, never stored
    name: str
    prefix: str


def generate() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


async def create(pool: db.AsyncPool, tenant_id: UUID, user_id: UUID, name: str) -> NewKey:
    name = name.strip()
    if not 1 <= len(name) <= 100 or "\x00" in name:
        raise errors.InvalidRequest("name must be 1 to 100 characters, e.g. 'billing-system'.")
    key = generate()
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["insert_api_key"], {
            "tenant_id": tenant_id, "name": name, "key_hash": digest(key),
            "prefix": key[:DISPLAY_CHARS], "created_by": user_id})).fetchone()
    assert row is not None
    return NewKey(row["key_id"], key, row["name"], row["prefix"])


async def listing(pool: db.AsyncPool, tenant_id: UUID) -> list[dict]:
    async with pool.connection() as conn:
        return await (await conn.execute(Q["list_api_keys"], {"tenant_id": tenant_id})).fetchall()


async def revoke(pool: db.AsyncPool, tenant_id: UUID, user_id: UUID, key_id: UUID) -> None:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["revoke_api_key"], {
            "tenant_id": tenant_id, "key_id": key_id, "user_id": user_id})).fetchone()
    if row is None:
        raise errors.NotFound("No API key with that id exists in your tenant.")


async def caller(pool: db.AsyncPool, presented: str) -> KeyCaller:
    """The live key behind ``presented``, or 401: unknown, malformed and revoked keys read the
    same, so the answer tells an attacker nothing."""
    if not presented.startswith(KEY_PREFIX) or len(presented) > MAX_KEY_CHARS:
        raise errors.Unauthorized("The API key is not valid; ask an admin for a new one.")
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["key_caller"], {"key_hash": digest(presented)})).fetchone()
    if row is None:
        raise errors.Unauthorized("The API key is not valid; ask an admin for a new one.")
    return KeyCaller(row["key_id"], row["tenant_id"])
