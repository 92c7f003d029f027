"""POST /v1/imports: take a records file into a batch, its run and its job, or find its batch.

The file streams and hashes exactly like a document upload (gateway/uploads.py, with this
form's fields). Then one transaction writes the batch, its `records_import` run and the job
to the outbox (DESIGN.md "Intake without lost work"); the relay publishes it after commit.
The same tenant, contract and file content is the same batch (docs/decisions/0091): the
unique key decides, so concurrent identical uploads make exactly one batch. An ad-metrics
upload also names its platform and, optionally, its advertiser client; both are part of that
key (docs/decisions/0146), and so are the processing options (error budget, force_partial,
decimal separator): the same file with other options is a new batch, never the old one with
the new options ignored (docs/decisions/0176).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from litestar import Request, Response, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType, Schema
from psycopg.types.json import Jsonb

from gateway import auth, filetypes, openapi, uploads
from gateway.context import Ctx
from shared import contracts, db, errors, jobs, objectstore
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("intake.sql"))

# The contracts a batch may name, with the version a new batch records: the registry's.
CONTRACTS = {name: c.version for name, c in contracts.CONTRACTS.items()}
# A contract's name as a type the API declares (an enum in /schema), from the registry.
if TYPE_CHECKING:
    ContractName = str
else:
    ContractName = Literal[tuple(CONTRACTS)]
SOURCES = ("simplicity", "jbi", "manual")
# An ad-metrics upload's source (staging-promotion-runtime.md §3.2).
AD_SOURCES = ("manual", "api", "webhook")
AD_CONTRACT = contracts.AD_METRICS.name
DEFAULT_THRESHOLD = Decimal(10)
MAX_SOURCE_REFERENCE = 200  # characters, as import_batches checks
# The form's text fields besides `file`, with their limits in characters (gateway/uploads.py).
FORM_FIELDS = {"contract": 64, "error_threshold_percent": 16, "source": 16,
               "source_reference": MAX_SOURCE_REFERENCE, "force_partial": 8,
               "platform": 16, "client_id": 64, "decimal_separator": 16}
# decimal_separator: the words an upload may use, and the separator each means (None: detect).
DECIMAL_SEPARATORS = {".": ".", "dot": ".", "point": ".", "period": ".", ",": ",",
                      "comma": ",", "auto": None, "": None}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")
# What _threshold reads, as /schema declares it: 0 to 100, at most two decimals.
THRESHOLD_PATTERN = r"^(100(\.0{1,2})?|[0-9]{1,2}(\.[0-9]{1,2})?)$"


class UnknownContract(errors.InvalidRequest):
    """The contract is not one this service knows; send judgments or plaintiffs."""

    code = "unknown_contract"


class InvalidThreshold(errors.InvalidRequest):
    """error_threshold_percent must be a number from 0 to 100; leave it out for the default 10."""

    code = "invalid_error_threshold"


class InvalidSource(errors.InvalidRequest):
    """source must be simplicity, jbi or manual (ad_metrics: manual, api or webhook)."""

    code = "invalid_source"


class PlatformRequired(errors.InvalidRequest):
    """An ad_metrics upload names the platform of its export: platform=meta, google or tiktok."""

    code = "platform_required"


class UnexpectedAdField(errors.InvalidRequest):
    """platform and client_id belong to ad_metrics uploads only; leave them out."""

    code = "unexpected_ad_field"


class UnknownClient(errors.NotFound):
    """client_id names no advertiser client of your tenant; GET /v1/clients lists them."""

    code = "unknown_client"


class InvalidForcePartial(errors.InvalidRequest):
    """force_partial must be true or false."""

    code = "invalid_force_partial"


class InvalidDecimalSeparator(errors.InvalidRequest):
    """decimal_separator must be `.` (1,234.56), `,` (1.234,56) or auto (the default)."""

    code = "invalid_decimal_separator"


@dataclass(frozen=True)
class Form:
    """The form's fields, checked."""

    contract: str
    error_threshold_percent: Decimal
    source: str
    source_reference: str | None
    force_partial: bool
    platform: str | None = None
    client_id: uuid.UUID | None = None
    decimal_separator: str | None = None  # None: detected from the file


@dataclass(frozen=True)
class Outcome:
    batch_id: uuid.UUID
    status: str
    duplicate: bool
    run_id: uuid.UUID | None = None
    # The latest batch of the same file under other options, when there is one.
    options_differ_from: uuid.UUID | None = None


def read_form(fields: dict[str, str | None]) -> Form:
    contract = fields.get("contract")
    if not contract:
        raise UnknownContract("The form has no contract; send contract=judgments or plaintiffs.")
    if contract not in CONTRACTS:
        raise UnknownContract(f"There is no contract named {contract[:64]!r}; send one of: "
                              f"{', '.join(CONTRACTS)}.")
    platform, client_id = _ad_fields(contract, fields)
    source = fields.get("source") or "manual"
    allowed = AD_SOURCES if platform else SOURCES
    if source not in allowed:
        raise InvalidSource(f"source must be one of: {', '.join(allowed)}.")
    return Form(contract, _threshold(fields.get("error_threshold_percent")), source,
                fields.get("source_reference"), _flag(fields.get("force_partial")),
                platform, client_id, _decimal(fields.get("decimal_separator")))


def _ad_fields(contract: str, fields: dict[str, str | None]) -> tuple[str | None, uuid.UUID | None]:
    """The platform (required) and client (optional) of an ad_metrics upload; neither for the
    records contracts. Whether the client is the tenant's is the database's to say."""
    platform, client = fields.get("platform"), fields.get("client_id")
    if contract != AD_CONTRACT:
        if platform or client:
            raise UnexpectedAdField(f"platform and client_id belong to {AD_CONTRACT} uploads "
                                    f"only, not to {contract}.")
        return None, None
    if not platform:
        raise PlatformRequired()
    contracts.ad_metrics.for_platform(platform)  # unknown_platform (400) names the others
    if not client:
        return platform, None
    try:
        return platform, uuid.UUID(client)
    except ValueError:
        # Said exactly as for a well-formed id the tenant has no client of.
        raise UnknownClient() from None


def _threshold(value: str | None) -> Decimal:
    if value is None:
        return DEFAULT_THRESHOLD
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise InvalidThreshold() from None
    if not number.is_finite() or not 0 <= number <= 100:
        raise InvalidThreshold()
    # import_batches keeps two decimals; say so rather than round behind the user's back.
    if number != number.quantize(Decimal("0.01")):
        raise InvalidThreshold("error_threshold_percent takes at most two decimals, e.g. 12.5.")
    return number


def _decimal(value: str | None) -> str | None:
    if value is None:
        return None
    word = value.strip().lower()
    if word not in DECIMAL_SEPARATORS:
        raise InvalidDecimalSeparator()
    return DECIMAL_SEPARATORS[word]


def _flag(value: str | None) -> bool:
    if value is None:
        return False
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise InvalidForcePartial()


async def submit(pool: db.AsyncPool, *, tenant_id: uuid.UUID, user_id: uuid.UUID | None,
                 run_id: uuid.UUID, form: Form, received: uploads.ReceivedFile) -> Outcome:
    """Write batch, run and job in one transaction, or find the batch of the same file."""
    file_hash = received.content_hash.removeprefix("sha256:")
    keys = {"tenant_id": tenant_id}
    ad = {"platform": form.platform, "client_id": form.client_id}
    options = {"error_threshold_percent": form.error_threshold_percent,
               "force_partial": form.force_partial, "decimal_separator": form.decimal_separator}
    with db.translate():
        async with pool.connection() as conn, conn.transaction():
            if form.client_id is not None and await (await conn.execute(Q["client_of_tenant"], {
                    **keys, "client_id": form.client_id})).fetchone() is None:
                raise UnknownClient()
            row = await (await conn.execute(Q["insert_batch"], {
                **ad,
                **keys, "contract": form.contract, "contract_version": CONTRACTS[form.contract],
                "file_name": received.original_filename or received.stored_filename,
                "file_hash": file_hash, "byte_size": received.size_bytes,
                "upload_uri": received.upload_uri, "source": form.source,
                "source_reference": form.source_reference, **options,
                "created_by": user_id})).fetchone()
            if row is None:
                existing = await (await conn.execute(Q["existing_batch"], {
                    **keys, **ad, **options, "contract": form.contract,
                    "file_hash": file_hash})).fetchone()
                assert existing is not None  # the conflict that stopped us is committed
                return Outcome(existing["batch_id"], existing["status"], duplicate=True)
            batch_id = row["batch_id"]
            other = await (await conn.execute(Q["same_file_other_options"], {
                **keys, **ad, "contract": form.contract, "file_hash": file_hash,
                "batch_id": batch_id})).fetchone()
            job = _job(tenant_id, run_id, batch_id, form, received, file_hash)
            await conn.execute(Q["insert_run"], {
                **keys, "run_id": run_id, "batch_id": batch_id, "initiated_by": user_id,
                "config": Jsonb(_config(form, received, user_id))})
            await conn.execute(Q["insert_outbox"], {
                **keys, "run_id": run_id, "payload": Jsonb(job.model_dump(mode="json"))})
    return Outcome(batch_id, "pending", duplicate=False, run_id=run_id,
                   options_differ_from=other["batch_id"] if other else None)


def _config(form: Form, received: uploads.ReceivedFile, user_id: uuid.UUID | None) -> dict[str, object]:
    # The keys a document run's config has where they mean the same (cleanup finds the run
    # that owns an upload by upload_uri), plus the contract.
    return {"source_type": "upload", "upload_uri": received.upload_uri,
            "original_filename": received.original_filename,
            "content_type": received.content_type, "file_size_bytes": received.size_bytes,
            "content_hash": received.content_hash, "contract": form.contract,
            "platform": form.platform, "decimal_separator": form.decimal_separator,
            "client_id": str(form.client_id) if form.client_id else None,
            "created_by_user_id": str(user_id) if user_id else None}


def _job(tenant_id: uuid.UUID, run_id: uuid.UUID, batch_id: uuid.UUID, form: Form,
         received: uploads.ReceivedFile, file_hash: str) -> jobs.RecordsJob:
    return jobs.RecordsJob(
        job_type="records_import", run_id=run_id, batch_id=batch_id, tenant_id=tenant_id,
        contract=form.contract, contract_version=CONTRACTS[form.contract],
        upload_uri=received.upload_uri, original_filename=received.original_filename,
        file_format=received.source_type,  # type: ignore[arg-type]
        file_hash=file_hash, error_threshold_percent=float(form.error_threshold_percent),
        force_partial=form.force_partial, submitted_at=datetime.now(UTC))


# ── the route ───────────────────────────────────────────────────────────────────────────────
# /schema: the form this route streams by hand, and its answers (docs/decisions/0051).
_RECORDS = [name for name in CONTRACTS if name != AD_CONTRACT]
IMPORT_FORM = openapi.form_body(
    ("file", "contract"),
    file_types=filetypes.media_types(GatewaySettings.model_fields["import_types"].default),
    # read_form's rules: ad_metrics names its platform (and may name a client); the records
    # contracts name neither, and each kind has its own sources.
    rules={"if": {"required": ["contract"], "properties": {"contract": {"const": AD_CONTRACT}}},
           "then": {"required": ["platform"], "properties": {"source": {"enum": list(AD_SOURCES)}}},
           "else": {"properties": {"source": {"enum": list(SOURCES)}, "platform": False,
                                   "client_id": False}}},
    file=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY,
                description="The records file: CSV (.csv) or JSON lines (.jsonl, .ndjson)."),
    contract=Schema(type=OpenAPIType.STRING, enum=list(CONTRACTS), examples=["judgments"],
                    description="The data contract the file follows."),
    error_threshold_percent=Schema(type=OpenAPIType.STRING, pattern=THRESHOLD_PATTERN,
                                   default="10", description="The error budget in percent, 0 "
                                   "to 100 with at most two decimals: a larger share of invalid "
                                   "rows fails the batch."),
    source=Schema(type=OpenAPIType.STRING, enum=list(dict.fromkeys(SOURCES + AD_SOURCES)),
                  default="manual", description="simplicity, jbi or manual for the records "
                  "contracts; manual, api or webhook for ad_metrics."),
    platform=Schema(type=OpenAPIType.STRING, enum=list(contracts.ad_metrics.PLATFORMS),
                    description="ad_metrics only, and required there: whose export the file "
                                "is."),
    client_id=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.UUID,
                     description="ad_metrics only, optional: the advertiser client (GET "
                                 "/v1/clients) the metrics belong to."),
    source_reference=Schema(type=OpenAPIType.STRING, max_length=MAX_SOURCE_REFERENCE,
                            description="The vendor's batch id."),
    force_partial=Schema(type=OpenAPIType.STRING, enum=[*_TRUE, *_FALSE], default="false",
                         description="Promote the valid rows even over the error budget."),
    decimal_separator=Schema(type=OpenAPIType.STRING, enum=[".", ",", "auto"], default="auto",
                             description="The file's decimal separator: `.` (1,234.56) or `,` "
                             "(1.234,56); auto detects it from values that read one way only. "
                             "A value that reads two ways under it is a row error."))



@dataclass
class Accepted:
    batch_id: uuid.UUID
    upload_id: uuid.UUID  # the spec's name of the batch id (staging-promotion-runtime.md §3.2)
    run_id: uuid.UUID
    status: str  # "pending"
    # Present when the same file was imported before with other options (a new batch).
    options_differ_from: uuid.UUID | None = None


@dataclass
class Duplicate:
    batch_id: uuid.UUID
    upload_id: uuid.UUID
    status: str  # the existing batch's status
    duplicate: bool  # true


@post("/v1/imports", request_max_body_size=None, tags=["imports"], status_code=202,
      operation_class=IMPORT_FORM, responses={
          202: ResponseSpec(Accepted, description="Accepted: a batch is pending."),
          200: ResponseSpec(Duplicate, description="The same file was already imported under "
                            "this contract with the same options: its batch, no new work."),
          **openapi.errors(400, 413, 415)})
async def create_import(request: Request, ctx: Ctx) -> Response:
    """Import a records file (multipart `file`, `contract`, optional `error_threshold_percent`,
    `source`, `source_reference`, `force_partial`, `decimal_separator`; for ad_metrics
    `platform` and optional `client_id`); 202 with a new batch or 200 with the batch of the
    same file and options (other options: a new batch, with `options_differ_from`)."""
    principal = auth.current(request)
    settings = ctx.settings
    run_id = uuid.uuid4()
    length = request.headers.get("content-length")
    received = await uploads.receive(
        content_type=request.headers.get("content-type", ""),
        content_length=int(length) if length and length.isdigit() else None,
        body=request.stream(), store=ctx.upload_store,
        key_prefix=f"{principal.tenant_id}/{run_id}",
        max_bytes=int(settings.import_max_size_mb * 1024 * 1024),
        allowed=settings.import_types, text_fields=FORM_FIELDS)
    try:
        form = read_form(dict(received.fields))
        outcome = await submit(ctx.pool, tenant_id=principal.tenant_id,
                               user_id=principal.user_id, run_id=run_id, form=form,
                               received=received)
    except BaseException:
        # No batch points at the file, so nothing would ever clean it up later.
        await asyncio.to_thread(objectstore.delete, received.upload_uri, ctx.s3)
        raise
    if outcome.duplicate:
        await asyncio.to_thread(objectstore.delete, received.upload_uri, ctx.s3)
    else:
        ctx.relay.wake()
    log.info("records_import_submitted", extra={
        "tenant_id": str(principal.tenant_id), "user_id": str(principal.user_id),
        "batch_id": str(outcome.batch_id),
        "run_id": str(outcome.run_id) if outcome.run_id else None, "contract": form.contract,
        "platform": form.platform, "client_id": str(form.client_id) if form.client_id else None,
        "file_hash": received.content_hash, "size_bytes": received.size_bytes,
        "duplicate": outcome.duplicate})
    if outcome.duplicate:
        return Response({"batch_id": outcome.batch_id, "upload_id": outcome.batch_id,
                         "status": outcome.status, "duplicate": True}, status_code=200)
    body: dict[str, object] = {"batch_id": outcome.batch_id, "upload_id": outcome.batch_id,
                               "run_id": outcome.run_id, "status": "pending"}
    if outcome.options_differ_from is not None:
        # Said, not silent: this file has a batch already, under other options.
        body["options_differ_from"] = outcome.options_differ_from
    return Response(body, status_code=202)
