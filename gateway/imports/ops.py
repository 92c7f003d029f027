"""The operations views of records imports (migrations/0016, docs/decisions/0129): the error
distribution of the last 7 days by code and contract, and the stale imports.

Tenant admins get their own tenant's at /v1/imports/ops; platform operators every tenant's at
/v1/admin/imports/ops, optionally narrowed to one. Counts, codes and ids only: no raw row,
message text or file name, so nothing personal leaves through here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from uuid import UUID

from litestar import Request, get
from litestar.params import FromQuery

from gateway import auth, openapi
from gateway.context import Context, Ctx
from gateway.imports.intake import ContractName, UnknownContract
from shared import contracts, db

Q = db.load_queries(Path(__file__).with_name("ops.sql"))


@get("/v1/imports/ops", guards=[auth.admin_only], tags=["imports"],
     responses=openapi.errors(400, 403), opt={"error_codes": {"contract": "unknown_contract"}})
async def tenant_ops(request: Request, ctx: Ctx,
                     contract: FromQuery[ContractName | None] = None) -> dict:
    """Your tenant's import errors of the last 7 days by code and contract, and its stale
    imports (unfinished and silent for over an hour)."""
    return await _views(ctx, auth.current(request).tenant_id, contract)


@get("/v1/admin/imports/ops", guards=[auth.operator_only], tags=["admin"],
     responses=openapi.errors(400, 403), opt={
         "error_codes": {"contract": "unknown_contract"},
         "operators_see": "every tenant's import errors and stale imports",
         "tenant_view": "/v1/imports/ops"})
async def fleet_ops(ctx: Ctx, tenant_id: FromQuery[UUID | None] = None,
                    contract: FromQuery[ContractName | None] = None) -> dict:
    """Every tenant's (or one tenant's) import errors of the last 7 days and stale imports."""
    return await _views(ctx, tenant_id, contract)


async def _views(ctx: Context, tenant_id: UUID | None, contract: str | None) -> dict[str, Any]:
    if contract is not None and contract not in contracts.CONTRACTS:
        raise UnknownContract("No contract of that name; see GET /v1/contracts.")
    params = {"tenant_id": tenant_id, "contract": contract}
    with db.translate():
        async with ctx.pool.connection() as conn:
            distribution = await (await conn.execute(Q["error_distribution"], params)).fetchall()
            stale = await (await conn.execute(Q["stale_imports"], params)).fetchall()
    return {"window_days": 7, "error_distribution": distribution, "stale_imports": stale}


ROUTES = [tenant_ops, fleet_ops]
