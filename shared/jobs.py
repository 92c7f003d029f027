"""The job payload the gateway publishes and the worker consumes (gateway-worker-ingestion.md §5).

One model validates both ends. ``schema_version`` lets a newer gateway and an older worker
coexist during a rollout: unknown fields are ignored, a version the worker does not know is
rejected as an invalid job.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared import errors

SCHEMA_VERSION: Literal[1] = 1
SourceType = Literal["pdf", "docx", "html", "txt", "md"]


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


def encode(job: IngestJob) -> str:
    return orjson.dumps(job.model_dump(mode="json")).decode()


def decode(body: str | bytes) -> IngestJob:
    """Parse a message body; raise InvalidJob with a one-sentence reason if it cannot be a job."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidJob(f"message body is not JSON ({exc.msg}).") from exc
    if not isinstance(data, dict):
        raise InvalidJob("message body is JSON but not an object.")
    try:
        return IngestJob.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise InvalidJob(
            f"invalid job field {where!r}: {first['msg']} ({exc.error_count()} problem(s))."
        ) from exc
