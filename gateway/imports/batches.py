"""The batch API: a batch's status, its row errors (JSON and a CSV export), the tenant's batches.

`GET /intake/batches/{id}` and `…/errors` answer the data contract's `BatchStatusResult` and
`BatchErrorsResult` exactly (records-data-contract.md "API Response Contract"). Everything is
tenant-scoped: another tenant's batch is a 404, like one that does not exist. Raw rows are
personal data: only the tenant's admins and the uploader see them (docs/decisions/0092).
"""

from __future__ import annotations

import csv
import io
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

import orjson
from litestar import Request, get
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Stream

from gateway import auth, openapi, paging
from gateway.context import Context, Ctx
from gateway.imports import intake
from shared import db, errors

Q = db.load_queries(Path(__file__).with_name("batches.sql"))
# A page in the back half of a finished batch is the same query walked backwards from its last
# error (docs/decisions/0165); the caller puts the rows back in row order.
_ROW_ORDER = "ORDER BY e.row_number, e.id"
_FROM_FIRST = ">= (SELECT row_number, id FROM first)"


def _walked_backwards(name: str) -> str:
    if Q[name].count(_ROW_ORDER) != 2 or _FROM_FIRST not in Q[name]:
        raise RuntimeError(f"batches.sql {name} no longer orders by {_ROW_ORDER!r} from its "
                           "first row; update gateway/imports/batches.py with it")
    return (Q[name].replace(_ROW_ORDER, "ORDER BY e.row_number DESC, e.id DESC")
            .replace(_FROM_FIRST, _FROM_FIRST.replace(">=", "<=")))


FROM_END = {suffix: _walked_backwards("page_errors" + suffix) for suffix in ("", "_by_code")}
STATUSES = ("pending", "processing", "staging_complete", "promoting", "completed", "partial",
            "failed")
if TYPE_CHECKING:
    Status = str
else:
    Status = Literal[STATUSES]  # an enum in /schema (ADR 0200)
EXPORT_CHUNK = 5000
# A cell a spreadsheet would read as a formula (or a DDE payload) starts with one of these.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
NOT_FOUND = "No import batch with that id exists in your tenant."
ErrorCode = Annotated[str | None, QueryParameter(name="errorCode", min_length=1, max_length=100,
                                            pattern=openapi.NO_NUL,
                                            required=False,
                                            description="Only errors with this code.")]


# ── views ───────────────────────────────────────────────────────────────────────────────────
def batch_status(row: dict[str, Any]) -> dict[str, Any]:
    """The spec's BatchStatusResult, every field and no other (docs/decisions/0090)."""
    total, invalid = row["rows_total"], row["rows_invalid"]
    parse_ms, db_ms = row["parse_duration_ms"], row["db_duration_ms"]
    spent_ms = (parse_ms or 0) + (db_ms or 0)
    return {
        "id": str(row["batch_id"]),
        "filename": row["file_name"],
        "fileHash": row["file_hash"],
        "status": row["status"],
        "rowCountTotal": total,
        # Every valid row promotion accepted: new, amended or already so (docs/decisions/0090).
        "rowCountInserted": row["rows_inserted"] + row["rows_updated"] + row["rows_unchanged"],
        "rowCountInvalid": invalid,
        "rowCountDuplicate": row["rows_duplicate"],
        "errorThresholdPercent": float(row["error_threshold_percent"]),
        "errorRate": invalid / total * 100 if total else 0.0,
        "rejectionReason": row["rejection_reason"],
        "parseDurationMs": parse_ms,
        "dbDurationMs": db_ms,
        "throughputRowsPerSec": total / (spent_ms / 1000) if spent_ms else 0.0,
        "createdAt": _iso(row["created_at"]),
        "completedAt": _iso(row["completed_at"]),
        "source": row["source"],
        "sourceReference": row["source_reference"],
        "file": file_read(row),
    } | ad_metrics(row)


def file_read(row: dict[str, Any]) -> dict[str, Any]:
    """How the worker read the file (docs/decisions/0170): the encoding, delimiter and decimal
    separator it used (null until it read the file), the option the upload gave, and the rows
    it skipped as export furniture, by reason."""
    return {
        "encoding": row.get("file_encoding"),
        "delimiter": row.get("file_delimiter"),
        "decimalSeparator": row.get("decimal_separator_read"),
        "decimalSeparatorOption": row.get("decimal_separator") or "auto",
        "rowsSkipped": row.get("rows_skipped") or 0,
        "skippedReasons": row.get("skipped_reasons") or {},
    }


def ad_metrics(row: dict[str, Any]) -> dict[str, Any]:
    """An ad-metrics batch's platform, client, rows upserted per entity and the days it
    carried (docs/decisions/0149); nothing for a records batch, whose result stays the spec's."""
    if row.get("platform") is None:
        return {}
    return {"adMetrics": {
        "platform": row["platform"],
        "clientId": str(row["client_id"]) if row["client_id"] else None,
        "campaignsUpserted": row["campaigns_upserted"],
        "adSetsUpserted": row["ad_sets_upserted"],
        "adsUpserted": row["ads_upserted"],
        "dailyMetricsUpserted": row["daily_metrics_upserted"],
        "periodMetricsUpserted": row.get("period_metrics_upserted") or 0,
        "affectedDates": [d.isoformat() for d in row["affected_dates"]],
        # ids | names | ids_and_names: how campaigns, ad sets and ads were identified.
        "entityKeys": row.get("entity_keys"),
        # day | period | all_time, and the period's first and last day (docs/decisions/0174).
        "reportGrain": row.get("report_grain"),
        "reportPeriod": {"start": _day(row.get("report_period_start")),
                         "end": _day(row.get("report_period_end"))},
    }}


def _day(value: Any) -> str | None:
    return value.isoformat() if value is not None else None


def _listed(row: dict[str, Any]) -> dict[str, Any]:
    # The listing names what the status result leaves to the batch's own context.
    return {**batch_status(row), "contract": row["contract"],
            "runId": str(row["run_id"]) if row["run_id"] else None}


def _error(row: dict[str, Any], with_raw: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"rowNumber": row["row_number"], "errorCode": row["code"],
                           "errorMessage": row["message"], "severity": row["severity"],
                           "field": row["field"]}
    if with_raw:
        out["rawData"] = row["raw"]
    return out


def _iso(at: datetime | None) -> str | None:
    # The spec's form: 2025-01-04T15:30:00Z.
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z") if at else None


def sees_raw(principal: auth.Principal, batch: dict[str, Any]) -> bool:
    """Raw rows hold personal data: the tenant's admins and the batch's uploader only."""
    return principal.is_admin or batch["created_by"] == principal.user_id


# ── routes ──────────────────────────────────────────────────────────────────────────────────
async def _batch(ctx: Context, tenant_id: UUID, batch_id: UUID) -> dict[str, Any]:
    async with ctx.pool.connection() as conn:
        row = await (await conn.execute(
            Q["get_batch"], {"tenant_id": tenant_id, "batch_id": batch_id})).fetchone()
    if row is None:
        raise errors.NotFound(NOT_FOUND)
    return row


@get("/intake/batches/{batch_id:uuid}", tags=["imports"], responses=openapi.errors(404))
async def get_batch(batch_id: FromPath[UUID], request: Request, ctx: Ctx) -> dict[str, Any]:
    """A batch's BatchStatusResult (records-data-contract.md)."""
    principal = auth.current(request)
    return batch_status(await _batch(ctx, principal.tenant_id, batch_id))


@get("/intake/batches/{batch_id:uuid}/errors", tags=["imports"], dependencies=paging.PAGES,
     responses=openapi.errors(404))
async def get_batch_errors(batch_id: FromPath[UUID], request: Request, ctx: Ctx,
                           window: paging.Paged,
                           error_code: ErrorCode = None) -> dict[str, Any]:
    """A batch's row errors and warnings in row order (BatchErrorsResult), `page`/`limit` at a
    time, each with its `severity`; `totalErrors` counts the errors (critical) and
    `totalWarnings` the warnings that match `errorCode`. `rawData` only for the tenant's admins
    and the uploader."""
    principal = auth.current(request)
    batch = await _batch(ctx, principal.tenant_id, batch_id)
    keys: dict[str, Any] = {"tenant_id": principal.tenant_id, "batch_id": batch_id}
    suffix = "_by_code" if error_code else ""
    if error_code:
        keys["code"] = error_code
    async with ctx.pool.connection() as conn:
        total = await (await conn.execute(Q["count_errors" + suffix], keys)).fetchone() or {}
        rows = await _error_page(conn, suffix, keys, total.get("n", 0), total.get("settled"),
                                 offset=(window.page - 1) * window.limit, limit=window.limit)
    with_raw = sees_raw(principal, batch)
    return {"batchId": str(batch_id), "totalErrors": total.get("errors", 0),
            "totalWarnings": total.get("warnings", 0),
            "errors": [_error(r, with_raw) for r in rows]}


async def _error_page(conn: Any, suffix: str, keys: dict[str, Any], total: int,
                      settled: bool | None, *, offset: int, limit: int) -> list[dict[str, Any]]:
    """One page of errors in row order. A finished batch's error count is fixed, so a page in
    its back half is read from the end: the deepest page costs what the first does (the
    spec pages by number, which an OFFSET walk makes linear; docs/decisions/0165)."""
    if offset >= total:
        return []
    if not settled or offset <= total // 2:
        return await (await conn.execute(Q["page_errors" + suffix], {
            **keys, "limit": limit, "offset": offset})).fetchall()
    from_end = total - offset - limit  # entries after this page; negative: a short last page
    rows = await (await conn.execute(FROM_END[suffix], {
        **keys, "limit": limit + min(from_end, 0), "offset": max(from_end, 0)})).fetchall()
    return rows[::-1]


@get("/v1/imports", tags=["imports"], dependencies=paging.CURSORS,
     opt={"error_codes": {"contract": "unknown_contract"}})
async def list_imports(request: Request, ctx: Ctx, window: paging.Paged,
                       status: FromQuery[Status | None] = None,
                       contract: FromQuery[intake.ContractName | None] = None) -> dict[str, Any]:
    """The tenant's import batches, newest first, by `status` and `contract`; follow
    `next_cursor` to read them all."""
    principal = auth.current(request)
    if status is not None and status not in STATUSES:
        raise errors.InvalidRequest(f"status must be one of {', '.join(STATUSES)}.")
    if contract is not None and contract not in intake.CONTRACTS:
        raise intake.UnknownContract()
    async with ctx.pool.connection() as conn:
        rows = await (await conn.execute(Q["list_batches"], {
            "tenant_id": principal.tenant_id, "status": status, "contract": contract,
            **window.params()})).fetchall()
    return window.result(rows, _listed, key=("created_at", "batch_id"))


@get("/v1/imports/{batch_id:uuid}/errors.csv", tags=["imports"], responses=openapi.errors(404))
async def export_errors(batch_id: FromPath[UUID], request: Request, ctx: Ctx) -> Stream:
    """A batch's row errors as CSV, streamed; cells a spreadsheet would run as a formula are
    escaped. The `raw` column only for the tenant's admins and the uploader."""
    principal = auth.current(request)
    batch = await _batch(ctx, principal.tenant_id, batch_id)
    with_raw = sees_raw(principal, batch)
    rows = _export_rows(ctx, principal.tenant_id, batch_id, with_raw)
    # Litestar adds "; charset=utf-8" to a text/* type itself: named here too, it came twice.
    return Stream(rows, media_type="text/csv", headers={
        "Content-Disposition": f'attachment; filename="batch-{batch_id}-errors.csv"'})


async def _export_rows(ctx: Context, tenant_id: UUID, batch_id: UUID,
                       with_raw: bool) -> AsyncIterator[bytes]:
    header: list[object] = ["row_number", "field", "code", "severity", "message"]
    header += ["raw"] if with_raw else []
    yield _csv([header])
    after: tuple[int, int] = (-1, 0)
    while True:
        async with ctx.pool.connection() as conn:
            chunk = await (await conn.execute(Q["export_errors"], {
                "tenant_id": tenant_id, "batch_id": batch_id, "after_row": after[0],
                "after_id": after[1], "limit": EXPORT_CHUNK})).fetchall()
        if not chunk:
            return
        yield _csv([_export_cells(r, with_raw) for r in chunk])
        after = (chunk[-1]["row_number"], chunk[-1]["id"])


def _export_cells(row: dict[str, Any], with_raw: bool) -> list[object]:
    cells: list[object] = [row["row_number"], row["field"], row["code"], row["severity"],
                           row["message"]]
    if with_raw:
        cells.append(orjson.dumps(row["raw"]).decode() if row["raw"] is not None else "")
    return cells


def safe_cell(value: object) -> object:
    """A text cell that starts like a formula gets a leading quote (OWASP CSV injection);
    numbers we wrote stay numbers. Only for CSV we write, never for stored values."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv(rows: list[list[object]]) -> bytes:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerows([[safe_cell(c) for c in row] for row in rows])
    return buffer.getvalue().encode()
