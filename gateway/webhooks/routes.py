"""Webhook endpoints over HTTP, for a tenant's admins (docs/decisions/0153)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

from litestar import Request, Response, Router, delete, get, post
from litestar.params import FromPath, JSONBody
from litestar.types import ControllerRouterHandler
from msgspec import Meta

from gateway import auth, openapi, paging
from gateway.context import Ctx
from gateway.webhooks import webhooks
from shared.webhooks import urls

if TYPE_CHECKING:
    EventType = str
else:
    EventType = Literal[webhooks.EVENT_TYPES]  # an enum in /schema (ADR 0200)


@dataclass
class NewWebhookRequest:
    url: Annotated[str, Meta(max_length=urls.MAX_URL_CHARS, pattern=urls.URL_PATTERN,
                             description="url must be an absolute https URL, e.g. "
                                         "https://example.com/hook.")]
    event_types: Annotated[list[EventType], Meta(min_length=1)]


@post("/", status_code=201, responses=openapi.errors(400, 403), opt={"error_codes": {
    "url": "webhook_url_not_allowed", "event_types": "unknown_event_type"}})
async def create_webhook(data: JSONBody[NewWebhookRequest], request: Request, ctx: Ctx) -> Response:
    """Register an endpoint for `event_types` (e.g. ["ingestion.complete"]). The answer carries
    the signing secret (`whsec_…`, Standard Webhooks) this once only: store it now."""
    principal = auth.current(request)
    new = await webhooks.create(ctx.pool, ctx.settings, tenant_id=principal.tenant_id,
                                user_id=principal.user_id, url=data.url, types=data.event_types)
    return Response({**new.webhook, "secret": new.secret}, status_code=201,
                    headers={"Cache-Control": "no-store"})


@get("/", dependencies=paging.PAGES)
async def list_webhooks(request: Request, ctx: Ctx, window: paging.Paged) -> dict[str, Any]:
    """This tenant's endpoints, newest first; never a secret."""
    rows = await webhooks.listing(ctx.pool, auth.current(request).tenant_id,
                                  limit=window.limit + 1, offset=(window.page - 1) * window.limit)
    return window.result(rows, webhooks.view)


@delete("/{webhook_id:uuid}", status_code=204, responses=openapi.errors(404))
async def delete_webhook(webhook_id: FromPath[UUID], request: Request, ctx: Ctx) -> None:
    """Remove an endpoint and its delivery log; nothing more is sent to it."""
    await webhooks.delete(ctx.pool, auth.current(request).tenant_id, webhook_id)


@get("/{webhook_id:uuid}/deliveries", dependencies=paging.PAGES, responses=openapi.errors(404))
async def list_deliveries(webhook_id: FromPath[UUID], request: Request, ctx: Ctx,
                          window: paging.Paged) -> dict[str, Any]:
    """The endpoint's delivery log, newest first: each event's status (pending, delivered,
    failed), attempts, last HTTP status and error."""
    rows = await webhooks.deliveries(ctx.pool, auth.current(request).tenant_id, webhook_id,
                                     limit=window.limit + 1,
                                     offset=(window.page - 1) * window.limit)
    return window.result(rows, webhooks.delivery_view)


@dataclass
class RotateRequest:
    # How long the replaced secret keeps signing; WEBHOOK_SECRET_GRACE_S (24 h) by default.
    grace_period_s: Annotated[float, Meta(
        ge=0, le=webhooks.MAX_GRACE_S,
        description=f"grace_period_s must be between 0 and {webhooks.MAX_GRACE_S} (7 days)."
    )] | None = None


@post("/{webhook_id:uuid}/rotate-secret", status_code=200, responses=openapi.errors(400, 404))
async def rotate_secret(webhook_id: FromPath[UUID], request: Request, ctx: Ctx,
                        data: JSONBody[RotateRequest | None] = None) -> Response:
    """A new signing secret (`whsec_…`), in this answer only: store it now. Until
    `previous_secret_expires_at` (`grace_period_s`, default 24 h) every delivery is signed with
    both secrets, `webhook-signature: v1,<new> v1,<old>`, so receivers switch without losing a
    message; rotating again within it drops the oldest. The delivery log stays."""
    grace = data.grace_period_s if data and data.grace_period_s is not None \
        else ctx.settings.webhook_secret_grace_s
    new = await webhooks.rotate_secret(ctx.pool, auth.current(request).tenant_id, webhook_id,
                                       grace_s=grace)
    return Response({**new.webhook, "secret": new.secret}, headers={"Cache-Control": "no-store"})


@post("/{webhook_id:uuid}/test", status_code=202, responses=openapi.errors(404))
async def send_test(webhook_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict[str, Any]:
    """Send a `webhook.test` event to this endpoint through the normal delivery path; follow it
    in the delivery log."""
    return await webhooks.send_test(ctx.pool, auth.current(request).tenant_id, webhook_id)


router = Router("/v1/webhooks", route_handlers=[
    create_webhook, list_webhooks, delete_webhook, list_deliveries, rotate_secret, send_test],
    guards=[auth.admin_only], tags=["webhooks"])
ROUTES: list[ControllerRouterHandler] = [router]
