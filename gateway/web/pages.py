"""The pages: each handler reads through a service, then renders one template.

Pages that show live data (runs, sources, the DLQ) get their first state from the server and
their updates from the JSON API, which the page's script calls with the session cookie and the
CSRF header (docs/decisions/0030, 0031, 0032). The admin pages of sources and the DLQ are shells
that their scripts fill from /v1/sources and /v1/admin/dlq, the same API a CLI or curl uses.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Any
from urllib.parse import urlsplit
from uuid import UUID

from litestar import Request, Response, Router, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from gateway import auth, filetypes, paging
from gateway.auth import login_throttle, users
from gateway.auth import routes as auth_routes
from gateway.context import Context, Ctx
from gateway.documents import listing as doc_listing
from gateway.events import replay as ledger_replay
from gateway.imports import clients as import_clients
from gateway.imports import intake as import_intake
from gateway.operations import metrics
from gateway.records import service as records
from gateway.search import embedding as query_model
from gateway.search import routes as search_routes
from gateway.search import service as search_service
from gateway.web import assets, errorpages, reads, session
from gateway.webhooks import webhooks
from shared import contracts, errors
from shared.contracts import ad_metrics

# No inline script or style anywhere, so the policy can forbid both.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    # Pages hold tenant data: never keep them in a shared or back-button cache.
    "Cache-Control": "no-store",
}
HOME = "/upload"


def render(request: Request, template: str, *, status_code: int = 200,
           cookies: list[Cookie] | None = None, **context: Any) -> Template:
    principal = getattr(request.state, "principal", None)
    return Template(template_name=template, status_code=status_code, headers=SECURITY_HEADERS,
                    cookies=cookies or [], context={
                        "me": principal, "my_email": getattr(request.state, "email", None),
                        "csrf": _csrf(request), "path": request.url.path, **context})


async def _who(request: Request) -> None:
    """Before a signed-in page: the e-mail the header shows (one indexed read)."""
    principal = getattr(request.state, "principal", None)
    if principal is not None:
        request.state.email = await reads.signed_in_email(
            request.app.state.ctx.pool, tenant_id=principal.tenant_id,
            user_id=principal.user_id)


def _csrf(request: Request) -> str:
    token = session.cookie_token(request)
    if not token:
        return ""
    return session.csrf_token(token, request.app.state.ctx.settings.jwt_secret)


def _uuid(value: str, what: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise errors.NotFound(f"That address names no {what}; pick one from the list.") from None


def safe_next(target: str | None) -> str:
    """Only a path of this site: never redirect a signed-in user to another host."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return HOME
    parts = urlsplit(target)
    return target if not (parts.scheme or parts.netloc) else HOME


# ── sign in and out ─────────────────────────────────────────────────────────────────────────
@get("/", sync_to_thread=False)
def home() -> Redirect:
    return Redirect(HOME)


@get("/login", opt={"public": True})
async def login_form(request: Request, ctx: Ctx, next: FromQuery[str | None] = None,
                     signed_out: FromQuery[bool] = False,
                     expired: FromQuery[bool] = False) -> Response:
    token = session.cookie_token(request)
    if token and await _valid(token, ctx):
        return Redirect(safe_next(next))
    notice = ("You are signed out." if signed_out else
              "Your session has ended; sign in again to continue." if expired else None)
    return _login_page(request, ctx, next=next, notice=notice)


@post("/login", opt={"public": True}, status_code=303)
async def login_submit(request: Request, ctx: Ctx) -> Response:
    form = await request.form()
    target = safe_next(form.get("next"))
    tenant, email = str(form.get("tenant", "")), str(form.get("email", ""))
    if not session.login_token_matches(request, form.get(session.FORM_FIELD)):
        return _login_page(request, ctx, next=target, status_code=403, renew=True,
                           error="The sign-in form expired; enter your e-mail and password "
                                 "again.", tenant=tenant)
    try:
        principal, device = await users.login(
            ctx.pool, tenant, email, str(form.get("password", "")),
            address=auth.client_address(request),
            limits=login_throttle.Limits.from_settings(ctx.settings),
            device=auth_routes.device(request, ctx))
    except errors.TooManyAttempts as exc:
        page = _login_page(request, ctx, next=target, status_code=429, error=exc.detail,
                           email=email, tenant=tenant)
        page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    except (errors.Unauthorized, errors.InvalidRequest) as exc:
        return _login_page(request, ctx, next=target, status_code=401, error=exc.detail,
                           email=email, tenant=tenant)
    settings = ctx.settings
    token = auth.issue_token(principal, settings.jwt_secret, settings.jwt_expiry_hours)
    secure = session.secure(request, settings.session_cookie_secure)
    # The device cookie (ADR 0204) and the tenant's name, filled in next time (ADR 0202).
    return Redirect(target, status_code=303, cookies=[
        session.session_cookie(token, max_age=int(settings.jwt_expiry_hours * 3600),
                               secure=secure),
        auth_routes.device_cookie(request, ctx, device),
        session.tenant_cookie(tenant.strip(), secure=secure)])


def _login_page(request: Request, ctx: Context, *, next: str | None, status_code: int = 200,
                error: str | None = None, notice: str | None = None, email: str = "",
                renew: bool = False, tenant: str | None = None) -> Template:
    token, new = session.login_token(request, renew=renew)
    secure = session.secure(request, ctx.settings.session_cookie_secure)
    cookies = [session.login_cookie(token, secure=secure)] if new else []
    return render(request, "login.html", status_code=status_code, cookies=cookies,
                  login_csrf=token, next=safe_next(next), error=error, notice=notice,
                  email=email, tenant=session.tenant_hint(request) if tenant is None else tenant)


async def _valid(token: str, ctx: Context) -> bool:
    try:
        await auth.live_principal(ctx.pool, token, ctx.settings.jwt_secret)
    except errors.Unauthorized:
        return False
    return True


@post("/logout", opt={"public": True}, status_code=303)
async def logout(request: Request, ctx: Ctx) -> Response:
    token = session.cookie_token(request)
    form = await request.form()
    if token and not session.csrf_matches(form.get(session.FORM_FIELD), token,
                                          ctx.settings.jwt_secret):
        raise errors.Forbidden("The sign-out form came from an old page; reload the page and "
                               "sign out again.")
    if token:
        # Clearing the cookie is not enough: a copied cookie must stop working too.
        with contextlib.suppress(errors.Unauthorized):
            await users.end_sessions(ctx.pool, await auth.live_principal(
                ctx.pool, token, ctx.settings.jwt_secret))
    secure = session.secure(request, ctx.settings.session_cookie_secure)
    return Redirect("/login?signed_out=true", status_code=303,
                    cookies=[session.cleared_session_cookie(secure=secure)])


# ── pages for everyone signed in ────────────────────────────────────────────────────────────
@get("/upload")
async def upload(request: Request, ctx: Ctx) -> Template:
    settings = ctx.settings
    # The extensions the page checks before sending come from the gateway's own type table
    # (gateway/filetypes.py), so the browser and the server refuse the same files.
    accepted = [*settings.allowed_types, *(alias for alias, kind in filetypes.ALIASES.items()
                                           if kind in settings.allowed_types)]
    return render(request, "upload.html", max_bytes=settings.upload_max_bytes,
                  allowed_types=list(settings.allowed_types), accepted=accepted)


@get("/runs")
async def runs(request: Request, ctx: Ctx, status: FromQuery[str | None] = None,
               page: int = paging.PAGE, filename: FromQuery[str | None] = None,
               source_id: FromQuery[str | None] = None) -> Template:
    principal = auth.current(request)
    listing = await reads.runs_page(ctx.pool, tenant_id=principal.tenant_id,
                                    status=status or None, page=page, filename=filename,
                                    source_id=source_id)
    return render(request, "runs.html", listing=listing, statuses=reads.RUN_STATUSES)


@get("/runs/{run_id:str}")
async def run(run_id: FromPath[str], request: Request, ctx: Ctx) -> Template:
    principal = auth.current(request)
    item = await reads.run(ctx.pool, tenant_id=principal.tenant_id,
                           run_id=_uuid(run_id, "ingestion run"))
    can_retry = principal.is_admin or item["initiated_by"] == principal.user_id
    return render(request, "run.html", run=item, can_retry=can_retry)


@get("/documents")
async def documents(request: Request, ctx: Ctx, search: FromQuery[str | None] = None,
                    status: FromQuery[str | None] = None, page: int = paging.PAGE) -> Template:
    principal = auth.current(request)
    search = (search or "").strip()[:200] or None
    state = status if status in doc_listing.STATES else "active"  # a hand-edited URL: default
    listing = await reads.documents_page(ctx.pool, tenant_id=principal.tenant_id,
                                         search=search, state=state, page=page)
    return render(request, "documents.html", listing=listing, search=search or "",
                  status=state)


@get("/documents/{doc_id:str}")
async def document(doc_id: FromPath[str], request: Request, ctx: Ctx,
                   page: int = paging.PAGE, chunk: FromQuery[int | None] = None) -> Template:
    """`chunk` (a search hit's chunk index) opens the page of chunks that holds it; the link's
    `#chunk-N` then scrolls to it."""
    principal = auth.current(request)
    if chunk is not None:
        if not 0 <= chunk < reads.CHUNKS_PER_PAGE * paging.MAX_PAGE:
            raise paging.InvalidPaging("chunk must be a chunk index of this document.")
        page = chunk // reads.CHUNKS_PER_PAGE + 1
    doc = await reads.document(ctx.pool, tenant_id=principal.tenant_id,
                               doc_id=_uuid(doc_id, "document"), chunk_page=page)
    return render(request, "document.html", doc=doc)


@get("/search", dependencies=search_routes.DEPENDENCIES)
async def search_page(request: Request, ctx: Ctx, search: NamedDependency[search_service.Runtime],
                      q: FromQuery[str | None] = None, mode: FromQuery[str] = "hybrid") -> Template:
    """Search the tenant's documents (the service behind /v1/search); the Ask box's script
    calls /v1/ask (docs/decisions/0109)."""
    search.check_enabled()
    hits, error = None, None
    if q and q.strip():
        try:
            wanted = search_service.validate(q, k=20, mode=mode, group="document",
                                             filters=search_service.Filters(),
                                             allowed_types=ctx.settings.allowed_types)
            hits = await search_service.search(ctx.pool, search, request=wanted,
                                               tenant_id=auth.current(request).tenant_id)
        except (search_service.InvalidSearch, search_service.SearchUnavailable,
                query_model.ModelLoading) as exc:
            error = exc.detail
    return render(request, "search.html", q=(q or "")[:search_service.MAX_QUERY_CHARS],
                  mode=mode if mode in search_service.MODES else "hybrid",
                  modes=search_service.MODES, hits=hits, error=error)


# ── records imports (docs/decisions/0125-0127) ──────────────────────────────────────────────
@get("/imports")
async def imports(request: Request, ctx: Ctx) -> Template:
    """Upload a records file under a contract; the user's latest batches, kept live by
    imports_upload.js through /intake/batches/{id}."""
    principal = auth.current(request)
    recent = await reads.my_imports(ctx.pool, tenant_id=principal.tenant_id,
                                    user_id=principal.user_id)
    # The ad-metrics contract's platform and advertiser client (issue 13, docs/decisions/0147).
    ad_clients = await import_clients.listing(ctx.pool, principal.tenant_id)
    return render(request, "imports/index.html", recent=recent,
                  ad_contract=import_intake.AD_CONTRACT, platforms=ad_metrics.PLATFORMS,
                  ad_sources=import_intake.AD_SOURCES, ad_clients=ad_clients,
                  contracts=list(contracts.CONTRACTS.values()), sources=import_intake.SOURCES,
                  threshold=import_intake.DEFAULT_THRESHOLD,
                  max_bytes=int(ctx.settings.import_max_size_mb * 1024 * 1024),
                  accepted=list(ctx.settings.import_types))


@get("/imports/{batch_id:str}")
async def import_batch(batch_id: FromPath[str], request: Request, ctx: Ctx, page: int = paging.PAGE,
                       code: FromQuery[str | None] = None) -> Template:
    principal = auth.current(request)
    code = (code or "").strip()[:100] or None
    item = await reads.batch(ctx.pool, principal=principal, batch_id=_uuid(batch_id, "import"),
                             code=code, page=page)
    return render(request, "imports/batch.html", batch=item)


# ── admin pages ─────────────────────────────────────────────────────────────────────────────
@get("/")
async def overview(request: Request, ctx: Ctx) -> Template:
    """The admin's own tenant's figures, as /v1/metrics has them (docs/decisions/0061)."""
    return await _figures(request, ctx, "admin/overview.html", auth.current(request).tenant_id)


@get("/fleet", guards=[auth.operator_only])
async def fleet(request: Request, ctx: Ctx) -> Template:
    """Operators: the fleet's figures, as /api/metrics has them."""
    return await _figures(request, ctx, "admin/fleet.html", None)


async def _figures(request: Request, ctx: Context, template: str,
                   tenant_id: UUID | None) -> Template:
    try:
        snap = await metrics.snapshot(ctx.pool, ctx.depths, tenant_id=tenant_id,
                                      stale_s=ctx.settings.metrics_stale_after_s)
        json = metrics.tenant_json(snap) if tenant_id else metrics.dashboard_json(snap)
        figures, problem = json["ingest"], None
    except errors.AppError as exc:
        figures, problem = None, exc.detail
    return render(request, template, figures=figures, problem=problem)


@get("/sources")
async def sources(request: Request) -> Template:
    return render(request, "admin/sources.html")


@get("/sources/{source_id:str}")
async def source(source_id: FromPath[str], request: Request) -> Template:
    return render(request, "admin/source.html", source_id=_uuid(source_id, "source"))


# Operators see every tenant's dead letters; a tenant admin their own, with the same templates
# over /v1/dead-letters and without purge (docs/decisions/0060). The list asks for the most
# the API's paging allows: a bigger limit is a 400 and the page would list nothing.
_ALL_DLQ: dict[str, Any] = {"api": "/v1/admin/dlq", "base": "/admin/dlq", "everyone": True,
                            "limit": paging.MAX_LIMIT}
_OWN_DLQ: dict[str, Any] = {"api": "/v1/dead-letters", "base": "/admin/dead-letters",
                            "everyone": False, "limit": paging.MAX_LIMIT}


@get("/dlq", guards=[auth.operator_only])
async def dead_letters(request: Request) -> Template:
    return render(request, "admin/dlq.html", **_ALL_DLQ)


@get("/dlq/{message_id:str}", guards=[auth.operator_only])
async def dead_letter(message_id: FromPath[str], request: Request) -> Template:
    return render(request, "admin/dlq_message.html", message_id=message_id, **_ALL_DLQ)


@get("/dead-letters")
async def own_dead_letters(request: Request) -> Template:
    return render(request, "admin/dlq.html", **_OWN_DLQ)


@get("/dead-letters/{message_id:str}")
async def own_dead_letter(message_id: FromPath[str], request: Request) -> Template:
    return render(request, "admin/dlq_message.html", message_id=message_id, **_OWN_DLQ)


# ── event ledger: dead letters and replay (docs/decisions/0142, 0143) ──────────────────────
# Shells that events.js fills from /v1/events, whose scope (own tenant; operators all) applies.
_EVENT_STATES = [("dead_letter", "Dead letter"), ("pending", "Pending"),
                 ("processed", "Processed"), ("discarded", "Discarded"), ("all", "Any state")]


@get("/events")
async def events(request: Request,
                 # `state` is a name Litestar reserves for the app state.
                 wanted_state: Annotated[str | None, QueryParameter(name="state")] = None,
                 source_system: FromQuery[str | None] = None, type: FromQuery[str | None] = None,
                 error: FromQuery[str | None] = None, since: FromQuery[str | None] = None,
                 until: FromQuery[str | None] = None) -> Template:
    """The applied filter, from the URL: dead letters unless another state was chosen. The
    times (first seen) go to the API as typed; it says when one is not a time."""
    states = [value for value, _ in _EVENT_STATES]
    limit = ledger_replay.MAX_FILTER_CHARS
    filters = {"state": wanted_state if wanted_state in states else "dead_letter",
               "source_system": (source_system or "").strip()[:limit],
               "type": (type or "").strip()[:limit], "error": (error or "").strip()[:limit],
               "since": (since or "").strip()[:40], "until": (until or "").strip()[:40]}
    return render(request, "admin/events.html", states=_EVENT_STATES, filters=filters,
                  max_chars=limit)


@get("/events/{ledger_id:int}")
async def event(ledger_id: FromPath[int], request: Request) -> Template:
    return render(request, "admin/events_detail.html", ledger_id=ledger_id)


@get("/users")
async def user_list(request: Request, ctx: Ctx) -> Template:
    """The tenant's users; changes go through /v1/users from the page's script (CSRF header)."""
    listing = await users.list_users(ctx.pool, auth.current(request).tenant_id)
    return render(request, "admin/users.html", users=listing)


# ── records read-back (gateway/records/service.py, docs/decisions/0124) ────────────────────
# Webhooks (docs/decisions/0155): server-rendered from the same functions as /v1/webhooks;
# add, delete and "send test event" go through that API from webhooks.js (CSRF header).
@get("/webhooks")
async def webhook_list(request: Request, ctx: Ctx, page: int = paging.PAGE) -> Template:
    window = paging.Window(page, reads.PAGE_SIZE)
    rows = await webhooks.listing(ctx.pool, auth.current(request).tenant_id,
                                  limit=window.limit + 1, offset=(page - 1) * window.limit)
    # Rows as read (datetimes for the time macro); never the secret: the query has none.
    return render(request, "admin/webhooks.html", listing=window.result(rows, dict),
                  event_types=webhooks.EVENT_TYPES)


@get("/webhooks/{webhook_id:str}")
async def webhook_log(webhook_id: FromPath[str], request: Request, ctx: Ctx,
                      page: int = paging.PAGE) -> Template:
    tenant_id, hook_id = auth.current(request).tenant_id, _uuid(webhook_id, "webhook")
    window = paging.Window(page, reads.PAGE_SIZE)
    hook = await webhooks.get(ctx.pool, tenant_id, hook_id)
    rows = await webhooks.deliveries(ctx.pool, tenant_id, hook_id, limit=window.limit + 1,
                                     offset=(page - 1) * window.limit)
    return render(request, "admin/webhook.html", webhook=hook,
                  listing=window.result(rows, dict))


# Ad clients (issue 13, docs/decisions/0147): the list from the same function as GET
# /v1/clients; clients.js adds one through POST /v1/clients (CSRF header).
@get("/clients")
async def client_list(request: Request, ctx: Ctx) -> Template:
    listing = await import_clients.listing(ctx.pool, auth.current(request).tenant_id)
    return render(request, "admin/clients.html", clients=listing,
                  max_name=import_clients.MAX_NAME)


@get("/records", sync_to_thread=False)
def records_home() -> Redirect:
    return Redirect("/records/judgments")


@get("/records/judgments")
async def record_judgments(request: Request, ctx: Ctx, page: int = paging.PAGE) -> Template:
    filters = records.judgment_form(request.query_params)
    listing = await records.judgments(
        ctx.pool, tenant_id=auth.current(request).tenant_id, filters=filters,
        window=paging.Window(page, reads.PAGE_SIZE))
    return render(request, "records/judgments.html", listing=listing, form=_form_values(request))


@get("/records/plaintiffs")
async def record_plaintiffs(request: Request, ctx: Ctx, page: int = paging.PAGE) -> Template:
    principal = auth.current(request)
    listing = await records.plaintiffs(
        ctx.pool, tenant_id=principal.tenant_id, filters=records.plaintiff_form(request.query_params),
        window=paging.Window(page, reads.PAGE_SIZE), with_contacts=principal.is_admin)
    return render(request, "records/plaintiffs.html", listing=listing, form=_form_values(request),
                  statuses=records.STATUSES)


@get("/records/duplicates")
async def record_duplicates(request: Request, ctx: Ctx, page: int = paging.PAGE) -> Template:
    listing = await records.duplicates(ctx.pool, tenant_id=auth.current(request).tenant_id,
                                       window=paging.Window(page, reads.PAGE_SIZE))
    return render(request, "records/duplicates.html", listing=listing)


def _form_values(request: Request) -> dict[str, str]:
    # What the filter form shows again; paging links carry the same fields.
    return {k: v.strip() for k, v in request.query_params.items() if k != "page" and v.strip()}


def router(files: assets.Assets) -> Router:
    admin = Router("/admin", guards=[auth.admin_only], route_handlers=[
        overview, sources, source, dead_letters, dead_letter,
        fleet, own_dead_letters, own_dead_letter, user_list, events, event,
        webhook_list, webhook_log, client_list])
    return Router("/", include_in_schema=False, exception_handlers=errorpages.handlers(render),
                  before_request=_who,
                  route_handlers=[home, login_form, login_submit, logout, upload, runs, run,
                                  documents, document, search_page, imports, import_batch, admin,
                                  files.route(), records_home, record_judgments, record_plaintiffs,
                                  record_duplicates])
