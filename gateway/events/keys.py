"""Per-tenant API keys: how machines push events (docs/decisions/0136).

A key is ``dfk_`` plus 256 random bits (URL-safe base64); only its SHA-256 is stored. A key is
not a user session: the auth guard accepts it only on routes that opt in (event intake and the
cursor), and it always acts for the tenant that created it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

from shared import db, errors
from shared.db import listen

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("events.sql"))
KEY_PREFIX = "dfk_"
# Shown in lists so people can tell keys apart: the marker plus 8 of the 43 random characters.
DISPLAY_CHARS = len(KEY_PREFIX) + 8
# Longer than any key we issue: anything longer is refused before it is hashed.
MAX_KEY_CHARS = 100
HEADER = "x-api-key"
# Postgres names every revoked or removed key here at commit (migrations/0200): key_id only.
CHANNEL = "df_api_keys"
# The listener's connection, as pg_stat_activity names it.
APPLICATION_NAME = "ingest-gateway-api-keys"


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
    sent alone in autocommit (``db.read_alone``), so no BEGIN and COMMIT either.

    With ``cache_s`` > 0 a live key a statement found answers its next requests from memory
    for ``cache_s`` seconds (ADR 0440), but only while ``listen_forever`` hears revocations:
    Postgres announces each revoked or removed key at commit (migrations/0200) and it is
    forgotten as the announcement arrives. Only keys a statement found live get in, by the
    SHA-256 of the whole key, each with the key's own tenant: what a cached key answers is
    what the statement answered for that same key."""

    def __init__(self, pool: db.AsyncPool, *, cache_s: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pool = pool
        self._waiting: dict[str, list[asyncio.Future[KeyCaller | None]]] = {}
        self._task: asyncio.Task[None] | None = None
        # Live keys found by a statement, by hash, each with when it must be looked up again
        # (ADR 0440). Filled and read only while revocations are heard (``listen_forever``).
        self.cache_s = cache_s
        self._clock = clock
        self._cache: dict[str, tuple[KeyCaller, float]] = {}
        self._hearing = False
        # Moves at every revocation heard and whenever hearing starts or stops: a statement's
        # answer fills the cache only if it did not move while the statement ran, so a key
        # revoked meanwhile is never put back.
        self._epoch = 0

    async def caller(self, presented: str) -> KeyCaller:
        """The live key behind ``presented``, or 401: unknown, malformed and revoked keys read
        the same, so the answer tells an attacker nothing."""
        if not presented.startswith(KEY_PREFIX) or len(presented) > MAX_KEY_CHARS:
            raise errors.Unauthorized("The API key is not valid; ask an admin for a new one.")
        key_hash = digest(presented)
        cached = self._cache.get(key_hash)
        if cached is not None and cached[1] > self._clock():
            return cached[0]
        future: asyncio.Future[KeyCaller | None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(key_hash, []).append(future)
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
            epoch = self._epoch
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
            if self._hearing and epoch == self._epoch and self.cache_s > 0:
                self._keep(found)
            for key_hash, futures in batch.items():
                for future in futures:
                    if not future.done():  # the request may have gone meanwhile
                        future.set_result(found.get(key_hash))


    def _keep(self, found: dict[str, KeyCaller]) -> None:
        now = self._clock()
        if len(self._cache) > 4096:  # only live keys get in; drop the expired ones now and then
            self._cache = {h: c for h, c in self._cache.items() if c[1] > now}
        until = now + self.cache_s
        for key_hash, caller in found.items():
            self._cache[key_hash] = (caller, until)

    def revoked(self, key_id: UUID | None) -> None:
        """``key_id`` was revoked or removed (None: anything may have been): no request is
        answered from the cache for it from here on."""
        self._epoch += 1
        if key_id is None:
            self._cache.clear()
        else:
            self._cache = {h: c for h, c in self._cache.items() if c[0].key_id != key_id}

    def _hear(self, on: bool) -> None:
        # Revocations announced while nobody listened are lost: start again from nothing.
        self._hearing = on
        self.revoked(None)

    async def listen_forever(self, url: str, *, retry_max_s: float = 30.0,
                             check_s: float = 10.0) -> None:
        """Hear revocations (migrations/0200) and, while heard, answer live keys from the
        cache. A lost connection turns the cache off (every request looks its key up again)
        until the listener is back; a quiet one is checked every ``check_s``."""
        if self.cache_s <= 0:
            return
        delay = 0.5
        while True:
            try:
                async with listen.listening(url, CHANNEL, check_s=check_s,
                                            application_name=APPLICATION_NAME) as payloads:
                    self._hear(True)
                    delay = 0.5
                    async for payload in payloads:
                        self.revoked(_key_id(payload))
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - any failure: look keys up until heard again
                log.warning("api key revocations not heard; looking every key up", exc_info=True)
            finally:
                self._hear(False)
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max_s)


def _key_id(payload: str) -> UUID | None:
    try:
        return UUID(payload)
    except ValueError:  # someone NOTIFYing by hand: forget every key, the safe reading
        return None
