"""The job payload the gateway publishes and the worker consumes (gateway-worker-ingestion.md §5).

One model validates both ends. ``schema_version`` lets a newer gateway and an older worker
coexist during a rollout: unknown fields are ignored, a version the worker does not know is
rejected as an invalid job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from shared import errors

SCHEMA_VERSION: Literal[1] = 1
SourceType = Literal["pdf", "docx", "html", "txt", "md", "pptx", "xlsx", "xls", "csv", "eml", "msg",
                     "epub", "odt", "rtf", "json", "png", "jpeg", "tiff", "webp"]


class InvalidJob(errors.AppError):
    """The message is not a valid ingest job and can never succeed."""

    code = "invalid_job"


class IngestJob(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    job_type: Literal["upload_ingest", "s3_sync_ingest"] = "upload_ingest"
    run_id: UUID
    doc_id: UUID
    tenant_id: UUID
    upload_uri: str = Field(min_length=1)
    title: str
    source_type: SourceType
    source_uri: str = Field(min_length=1)
    original_filename: str
    content_hash: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    embedding_model: str = Field(min_length=1)
    embedding_dim: int = Field(gt=0)
    submitted_at: datetime
    # An e-mail attachment's document: how deep its message is nested (1 = an upload's own
    # attachment). Its own attachments become documents only below Limits.max_depth
    # (docs/decisions/0250). Workers that predate it ignore it; uploads leave it 0.
    attachment_depth: int = Field(default=0, ge=0, le=64)


class RecordsJob(BaseModel):
    """Import one records file of a batch through its contract (DESIGN.md "Records imports").

    The batch row holds the same facts; the job carries what the worker needs before it reads
    the row, and the batch's own row stays the truth (its threshold, its status)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION
    job_type: Literal["records_import"]
    run_id: UUID
    batch_id: UUID
    tenant_id: UUID
    contract: str = Field(min_length=1, max_length=64)
    contract_version: str = Field(min_length=1, max_length=32)
    upload_uri: str = Field(min_length=1)
    original_filename: str
    file_format: Literal["csv", "jsonl"]
    file_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    error_threshold_percent: float = Field(ge=0, le=100)
    force_partial: bool = False
    submitted_at: datetime


# Every job the queue carries, told apart by job_type.
Job = Annotated[IngestJob | RecordsJob, Field(discriminator="job_type")]
_JOB = TypeAdapter[IngestJob | RecordsJob](Job)


def encode(job: IngestJob | RecordsJob) -> str:
    return orjson.dumps(job.model_dump(mode="json")).decode()


def parse(body: str | bytes) -> IngestJob | RecordsJob:
    """Parse a message body into the job its job_type names; raise InvalidJob with a
    one-sentence reason if it cannot be a job. What a worker that dispatches by type calls."""
    data = _object(body)
    # IngestJob defaulted job_type before records existed: a body without it is a document job.
    data.setdefault("job_type", "upload_ingest")
    return _validate(_JOB.validate_python, data)


def decode(body: str | bytes) -> IngestJob:
    """Parse a document job (the document pipeline's entry); any other job type is InvalidJob."""
    job = parse(body)
    if not isinstance(job, IngestJob):
        raise InvalidJob(f"job_type {job.job_type!r} is not a document job.")
    return job


def _object(body: str | bytes) -> dict[str, object]:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidJob(f"message body is not JSON ({exc.msg}).") from exc
    if not isinstance(data, dict):
        raise InvalidJob("message body is JSON but not an object.")
    return data


def _validate(validate: Callable[[object], IngestJob | RecordsJob],
              data: dict[str, object]) -> IngestJob | RecordsJob:
    try:
        return validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        # The union puts the job_type tag first in the location; the field is what helps.
        loc = first["loc"][1:] if first["loc"][:1] == (data.get("job_type"),) else first["loc"]
        where = ".".join(str(p) for p in loc) or "body"
        raise InvalidJob(
            f"invalid job field {where!r}: {first['msg']} ({exc.error_count()} problem(s))."
        ) from exc
