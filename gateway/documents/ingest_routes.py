from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

from litestar import Request, Response, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIFormat, OpenAPIType, Schema

from gateway import auth, filetypes, openapi, uploads
from gateway.context import Ctx
from gateway.documents import intake
from shared import objectstore
from shared.settings import GatewaySettings

log = logging.getLogger(__name__)


# /schema: the form this route streams by hand, and its two answers (docs/decisions/0051).
UPLOAD_FORM = openapi.form_body(
    ("file",), file_types=filetypes.media_types(GatewaySettings.model_fields["allowed_types"].default),
    file=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.BINARY, description="The document; its filename's "
                "extension decides the type and its first bytes must agree. Accepted by default (ALLOWED_TYPES): "
                + ", ".join(f".{t}" for t in GatewaySettings.model_fields["allowed_types"].default)
                + " (also .htm, .markdown, .jpg, .tif). Legacy .doc and .ppt are refused (415) with how to "
                "save them as .docx/.pptx."),
    title=Schema(type=OpenAPIType.STRING, max_length=1024, description="Defaults to the filename."),
    doc_id=Schema(type=OpenAPIType.STRING, format=OpenAPIFormat.UUID, description="Upload a new version of this "
                  "document of your tenant."))


@dataclass
class Queued:
    run_id: uuid.UUID
    doc_id: uuid.UUID
    status: str  # "queued"


@dataclass
class Skipped:
    doc_id: uuid.UUID
    status: str  # "skipped": the same bytes are already the active version or on their way
    reason: str | None = None
    run_id: uuid.UUID | None = None


@post("/v1/ingest", request_max_body_size=None, tags=["ingest"], status_code=202,
      operation_class=UPLOAD_FORM, responses={
          202: ResponseSpec(Queued, description="Accepted: a run is queued."),
          200: ResponseSpec(Skipped, description="Nothing to do: the content is already there."),
          **openapi.errors(400, 404, 409, 413, 415)})
async def ingest(request: Request, ctx: Ctx) -> Response:
    """Upload a document (multipart field `file`, optional `title` and `doc_id`); 202 queued or
    200 skipped. With `doc_id` the upload becomes a new version of that document."""
    principal = auth.current(request)
    settings = ctx.settings
    run_id = uuid.uuid4()
    length = request.headers.get("content-length")
    received = await uploads.receive(
        content_type=request.headers.get("content-type", ""),
        content_length=int(length) if length and length.isdigit() else None,
        body=request.stream(),
        store=ctx.upload_store,
        key_prefix=f"{principal.tenant_id}/{run_id}",
        max_bytes=settings.upload_max_bytes,
        allowed=settings.allowed_types,
    )
    submission = intake.Submission(
        tenant_id=principal.tenant_id, run_id=run_id, initiated_by=principal.user_id,
        source_uri=intake.upload_source_uri(received.content_hash),
        source_type=received.source_type,
        title=received.title or received.original_filename or received.stored_filename,
        original_filename=received.original_filename, content_type=received.content_type,
        size_bytes=received.size_bytes, content_hash=received.content_hash,
        upload_uri=received.upload_uri, embedding_model=settings.embedding_model,
        embedding_dim=settings.embedding_dim,
        doc_id=received.doc_id, replace_title=received.title is not None,
    )
    try:
        outcome = await intake.submit(ctx.pool, submission)
    except BaseException:
        # No run points at the file, so nothing would ever clean it up later.
        await asyncio.to_thread(objectstore.delete, received.upload_uri, ctx.s3)
        raise
    if outcome.status == "skipped":
        await asyncio.to_thread(objectstore.delete, received.upload_uri, ctx.s3)
    else:
        ctx.relay.wake()
    _log_submitted(principal, submission, outcome)
    if outcome.status == "skipped":
        body = {"doc_id": outcome.doc_id, "status": "skipped", "reason": outcome.reason}
        if outcome.run_id:
            body["run_id"] = outcome.run_id
        return Response(body, status_code=200)
    return Response({"run_id": outcome.run_id, "doc_id": outcome.doc_id, "status": "queued"},
                    status_code=202)


def _log_submitted(principal: auth.Principal, sub: intake.Submission, outcome: intake.Outcome) -> None:
    log.info("ingest_job_submitted", extra={
        "tenant_id": str(sub.tenant_id), "user_id": str(principal.user_id),
        "run_id": str(outcome.run_id) if outcome.run_id else None, "doc_id": str(outcome.doc_id),
        "dedup_result": outcome.dedup_result, "content_type": sub.content_type,
        "size_bytes": sub.size_bytes, "content_hash": sub.content_hash,
        "source_uri": sub.source_uri, "delegation_mode": "queue",
    })
