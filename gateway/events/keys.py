"""Per-tenant API keys: how machines push events (docs/decisions/0136).

A key is ``dfk_`` plus 256 random bits (URL-safe base64); only its SHA-256 is stored. A key is
not a user session: the auth guard accepts it only on routes that opt in (event intake and the
cursor), and it always acts for the tenant that created it.
"""

from __future__ import annotations

import asyncio
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


class Lookups:
    """The guard's key lookups, one statement for every request waiting at that moment
    (issue 32): 16 producers that send together were 16 lookups of four round trips each (the
    pool's check, BEGIN, the query, COMMIT), behind the same event loop and the same cores as
    their events' commits. A request joins the next statement, never one already running, so
    a key revoked before the request arrived is refused by it, as with a query of its own
    (ADR 0136: revocation at once). One statement at a time needs one connection: its own,
    sent alone in autocommit (``db.read_alone``), so no BEGIN and COMMIT either."""

    def __init__(self, pool: db.AsyncPool) -> None:
        self.pool = pool
        self._waiting: dict[str, list[asyncio.Future[KeyCaller | None]]] = {}
        self._task: asyncio.Task[None] | None = None

    async def caller(self, presented: str) -> KeyCaller:
        """The live key behind ``presented``, or 401: unknown, malformed and revoked keys read
        the same, so the answer tells an attacker nothing."""
        if not presented.startswith(KEY_PREFIX) or len(presented) > MAX_KEY_CHARS:
            raise errors.Unauthorized("The API key is not valid; ask an admin for a new one.")
        future: asyncio.Future[KeyCaller | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(digest(presented), []).append(future)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="api-key-lookups")
        try:
            found = await future
        finally:
            # However the request leaves (cancelled, or its coroutine closed without a cancel),
            # its future is done from here on, so the lookup never sets an exception on it that
            # nobody will read ("Future exception was never retrieved").
            future.cancel()
        if found is None:
            raise errors.Unauthorized("The API key is not valid; ask an admin for a new one.")
        return found

    async def _run(self) -> None:
        """Look up what is waiting, then what came meanwhile, until nothing waits."""
        while self._waiting:
            batch, self._waiting = self._waiting, {}
            try:
                async with self.pool.connection() as conn:
                    rows = await db.read_alone(conn, Q["key_callers"], {
                        "key_hashes": list(batch)})
            except BaseException as exc:  # each waiting request fails as its own query would
                for futures in batch.values():
                    for future in futures:
                        if not future.done():  # the request may have gone meanwhile
                            future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                continue
            found = {row["key_hash"]: KeyCaller(row["key_id"], row["tenant_id"]) for row in rows}
            for key_hash, futures in batch.items():
                for future in futures:
                    if not future.done():  # the request may have gone meanwhile
                        future.set_result(found.get(key_hash))

