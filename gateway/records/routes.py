"""`GET /v1/records/…`: the tenant's judgments, plaintiffs and duplicate candidates, read back.

Thin: each route checks its parameters (bounds declared here, so /schema shows them and a
wrong type is a 400 before the handler runs) and calls gateway/records/service.py.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any
from uuid import UUID

from litestar import Request, get
from litestar.params import Parameter, QueryParameter

from gateway import auth, openapi, paging
from gateway.context import Ctx
from gateway.records import service

Search = Annotated[str | None, Parameter(
    max_length=service.MAX_SEARCH, required=False, pattern=openapi.NO_NUL,
    description="A part of a case number (in any spelling: `cv 12345` = `CV-12345`) or of a "
                "name.")]
CaseNumber = Annotated[str | None, Parameter(
    max_length=100, required=False, pattern=openapi.NO_NUL,
    description="One case number in any spelling; compared by its normalised form.")]
Text = Annotated[str | None, Parameter(max_length=service.MAX_SEARCH, required=False,
                                       pattern=openapi.NO_NUL)]
Day = Annotated[date | None, Parameter(required=False, description="YYYY-MM-DD, inclusive.")]
# A Decimal cannot carry a pattern: the amount is declared as the text it is, then read.
Amount = Annotated[str | None, Parameter(required=False, pattern=service.AMOUNT_PATTERN,
                                         description="USD, 0 or more, inclusive, e.g. 1500.50.")]
Batch = Annotated[UUID | None, Parameter(required=False,
                                         description="Only records the batch last wrote.")]
Status = Annotated[service.Status | None, Parameter(required=False, description="One of " + ", ".join(
    service.STATUSES) + ".")]
# `state` is a name Litestar reserves for the app state: the argument is us_state.
State = Annotated[str | None, QueryParameter(name="state", required=False, max_length=2,
                                             pattern=r"^[A-Z]{2}$",
                                             description="2-letter state code, e.g. NY.")]
# The codes these refusals had before /schema declared them (ADR 0200).
ERROR_CODES = {"amount_min": "invalid_filter", "amount_max": "invalid_filter",
               "status": "invalid_filter", "state": {"pattern": "invalid_filter"}}


@get("/v1/records/judgments", tags=["records"], dependencies=paging.CURSORS,
     opt={"error_codes": ERROR_CODES})
async def list_judgments(request: Request, ctx: Ctx, window: paging.Paged,
                         q: Search = None, case_number: CaseNumber = None, county: Text = None,
                         court: Text = None, filed_from: Day = None, filed_to: Day = None,
                         amount_min: Amount = None, amount_max: Amount = None,
                         batch_id: Batch = None) -> dict[str, Any]:
    """The tenant's judgments, newest first; search by case number or party name, filter by
    county, court, filed date, amount and batch; follow `next_cursor` to read them all."""
    principal = auth.current(request)
    filters = service.JudgmentFilters(
        service.clean_text(q), service.clean_text(case_number), service.clean_text(county),
        service.clean_text(court), filed_from, filed_to, service.amount(amount_min),
        service.amount(amount_max), batch_id).check()
    return await service.judgments(ctx.pool, tenant_id=principal.tenant_id, filters=filters,
                                   window=window)


@get("/v1/records/plaintiffs", tags=["records"], dependencies=paging.CURSORS,
     opt={"error_codes": ERROR_CODES})
async def list_plaintiffs(request: Request, ctx: Ctx, window: paging.Paged,
                          q: Search = None, case_number: CaseNumber = None,
                          status: Status = None, us_state: State = None,
                          batch_id: Batch = None) -> dict[str, Any]:
    """The tenant's plaintiffs, newest first; search by name, filter by linked case number,
    status, state and batch. `email`, `phone` and `contact_name` only for the tenant's admins
    (docs/decisions/0123)."""
    principal = auth.current(request)
    filters = service.PlaintiffFilters(
        service.clean_text(q), service.clean_text(case_number), service.clean_text(status),
        service.clean_text(us_state), batch_id).check()
    return await service.plaintiffs(ctx.pool, tenant_id=principal.tenant_id, filters=filters,
                                    window=window,
                                    with_contacts=principal.is_admin)


@get("/v1/records/plaintiffs/duplicates", tags=["records"], dependencies=paging.PAGES)
async def list_duplicates(request: Request, ctx: Ctx,
                          window: paging.Paged) -> dict[str, Any]:
    """Pairs of the tenant's plaintiffs that may be one (names more than 80 % similar by
    trigrams), most likely first, each with its confidence and the signals that matched
    (docs/decisions/0121): a manual-review queue, nothing is merged."""
    principal = auth.current(request)
    return await service.duplicates(ctx.pool, tenant_id=principal.tenant_id, window=window)


ROUTES = [list_judgments, list_plaintiffs, list_duplicates]
