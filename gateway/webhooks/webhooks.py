"""A tenant's webhook endpoints (docs/decisions/0153): what the routes and the web page do.

The secret is ``whsec_`` + 32 random bytes (base64), shown in the create (or rotate) answer only:
it must be kept to sign every delivery, so it is stored as issued, and no read ever returns it.
A rotation keeps the secret it replaces signing beside the new one for a grace period
(docs/decisions/0196).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import db, errors
from shared.settings import GatewaySettings
from shared.webhooks import signing, urls

Q = db.load_queries(Path(__file__).with_name("webhooks.sql"))
EVENT_TYPES = ("ingestion.complete",)
# Each event fans out to every endpoint: bound what one tenant can make the worker send.
MAX_WEBHOOKS = 20
# The longest grace period a rotation may give the secret it replaces.
MAX_GRACE_S = 7 * 86400


class UnknownEventType(errors.InvalidRequest):
    """event_types must name known event types, e.g. ["ingestion.complete"]."""

    code = "unknown_event_type"


class TooManyWebhooks(errors.InvalidRequest):
    """This tenant already has the most webhooks allowed; delete one first."""

    code = "too_many_webhooks"


class WebhookNotFound(errors.NotFound):
    """No webhook with that id exists in your tenant."""

    code = "webhook_not_found"


@dataclass(frozen=True)
class NewWebhook:
    webhook: dict[str, Any]
    secret: str  # returned once


def event_types(requested: list[str]) -> list[str]:
    chosen = list(dict.fromkeys(requested))
    if not chosen or any(t not in EVENT_TYPES for t in chosen):
        raise UnknownEventType(f"event_types must be a non-empty list of {list(EVENT_TYPES)}.")
    return chosen


async def check_url(settings: GatewaySettings, url: str) -> str:
    url = url.strip()
    # getaddrinfo blocks: off the event loop.
    await asyncio.to_thread(urls.check, url, allowlist=settings.webhook_url_allowlist,
                            dev_mode=settings.dev_mode)
    return url


async def create(pool: db.AsyncPool, settings: GatewaySettings, *, tenant_id: UUID,
                 user_id: UUID | None, url: str, types: list[str]) -> NewWebhook:
    chosen = event_types(types)
    url = await check_url(settings, url)
    secret = signing.new_secret()
    async with pool.connection() as conn, conn.transaction():
        count = await (await conn.execute(Q["count_webhooks"], {"tenant_id": tenant_id})).fetchone()
        if count and count["n"] >= MAX_WEBHOOKS:
            raise TooManyWebhooks(f"A tenant may have at most {MAX_WEBHOOKS} webhooks; "
                                  "delete one first.")
        row = await (await conn.execute(Q["insert_webhook"], {
            "tenant_id": tenant_id, "url": url, "event_types": chosen, "secret": secret,
            "created_by": user_id})).fetchone()
    assert row is not None
    return NewWebhook(view(row), secret)


async def listing(pool: db.AsyncPool, tenant_id: UUID, *, limit: int,
                  offset: int) -> list[dict[str, Any]]:
    async with pool.connection() as conn:
        return await (await conn.execute(Q["list_webhooks"], {
            "tenant_id": tenant_id, "limit": limit, "offset": offset})).fetchall()


async def get(pool: db.AsyncPool, tenant_id: UUID, webhook_id: UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["get_webhook"], {
            "tenant_id": tenant_id, "webhook_id": webhook_id})).fetchone()
    if row is None:
        raise WebhookNotFound()
    return row


async def delete(pool: db.AsyncPool, tenant_id: UUID, webhook_id: UUID) -> None:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["delete_webhook"], {
            "tenant_id": tenant_id, "webhook_id": webhook_id})).fetchone()
    if row is None:
        raise WebhookNotFound()


async def deliveries(pool: db.AsyncPool, tenant_id: UUID, webhook_id: UUID, *, limit: int,
                     offset: int) -> list[dict[str, Any]]:
    await get(pool, tenant_id, webhook_id)  # another tenant's id: 404, not an empty log
    async with pool.connection() as conn:
        return await (await conn.execute(Q["list_deliveries"], {
            "tenant_id": tenant_id, "webhook_id": webhook_id, "limit": limit,
            "offset": offset})).fetchall()


async def rotate_secret(pool: db.AsyncPool, tenant_id: UUID, webhook_id: UUID, *,
                        grace_s: float) -> NewWebhook:
    """A new secret for the endpoint; the old one keeps signing beside it for ``grace_s``."""
    if not 0 <= grace_s <= MAX_GRACE_S:
        raise errors.InvalidRequest(f"grace_period_s must be between 0 and {MAX_GRACE_S} "
                                    "(7 days).")
    secret = signing.new_secret()
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["rotate_secret"], {
            "tenant_id": tenant_id, "webhook_id": webhook_id, "secret": secret,
            "grace_s": grace_s})).fetchone()
    if row is None:
        raise WebhookNotFound()
    return NewWebhook(view(row), secret)


async def send_test(pool: db.AsyncPool, tenant_id: UUID, webhook_id: UUID) -> dict[str, Any]:
    async with pool.connection() as conn:
        row = await (await conn.execute(Q["send_test_event"], {
            "tenant_id": tenant_id, "webhook_id": webhook_id})).fetchone()
    if row is None:
        raise WebhookNotFound()
    return {"event_id": str(row["event_id"]), "delivery_id": row["delivery_id"],
            "webhook_message_id": row["message_id"]}


def view(row: dict[str, Any]) -> dict[str, Any]:
    def at(key: str) -> str | None:
        value = row.get(key)
        return None if value is None else value.isoformat()

    return {"webhook_id": str(row["webhook_id"]), "url": row["url"],
            "event_types": list(row["event_types"]),
            "created_by": None if row["created_by"] is None else str(row["created_by"]),
            "created_at": row["created_at"].isoformat(),
            "secret_rotated_at": at("secret_rotated_at"),
            # Until then deliveries also carry the previous secret's signature.
            "previous_secret_expires_at": at("previous_secret_expires_at")}


def delivery_view(row: dict[str, Any]) -> dict[str, Any]:
    def at(key: str) -> str | None:
        return None if row[key] is None else row[key].isoformat()

    return {"delivery_id": row["delivery_id"], "event_id": str(row["event_id"]),
            "event_type": row["event_type"],
            "upload_id": None if row["batch_id"] is None else str(row["batch_id"]),
            "webhook_message_id": row["message_id"], "status": row["status"],
            "attempts": row["attempts"], "last_status_code": row["last_status_code"],
            "last_error": row["last_error"], "last_attempt_at": at("last_attempt_at"),
            "next_attempt_at": at("next_attempt_at") if row["status"] == "pending" else None,
            "delivered_at": at("delivered_at"), "created_at": at("created_at")}
