"""The error vocabulary every room shares.

Each error carries a machine-readable ``code``; its docstring is the default message, written
as one sentence that says what went wrong and what to do. Only ``gateway/errors.py`` knows
which HTTP status each one becomes, and only the worker decides which ones fail a run.
"""

from __future__ import annotations


class AppError(Exception):
    """Something went wrong; please retry, and contact support if it keeps happening."""

    code = "internal_error"

    def __init__(self, detail: str | None = None) -> None:
        self.detail = detail or (self.__doc__ or "").strip()
        super().__init__(self.detail)


# ── request and auth errors (gateway) ──────────────────────────────────────────────────────
class InvalidRequest(AppError):
    """The request is malformed; check the fields and try again."""

    code = "invalid_request"


class Unauthorized(AppError):
    """Sign in again: the request has no valid token."""

    code = "unauthorized"


class Forbidden(AppError):
    """Your role does not allow this action; ask an admin."""

    code = "forbidden"


class TooManyAttempts(AppError):
    """Too many sign-in attempts; wait a while, then try again."""

    code = "too_many_attempts"

    def __init__(self, retry_after_s: float, detail: str | None = None) -> None:
        # Whole seconds, at least one: the Retry-After header and the page's sentence use it.
        self.retry_after_s = max(1, int(retry_after_s + 0.999))
        super().__init__(detail)


class NotFound(AppError):
    """Nothing with that id exists in your tenant."""

    code = "not_found"


class Conflict(AppError):
    """The resource changed meanwhile; reload and try again."""

    code = "conflict"


class SyncInProgress(Conflict):
    """A sync of this source is already running; wait for it to finish, then trigger again."""

    code = "sync_in_progress"

    def __init__(self, sync_id: object, detail: str | None = None) -> None:
        self.sync_id = sync_id
        # Machine-readable extras of the error body: a client can follow the running sync.
        self.fields = {"sync_id": str(sync_id) if sync_id else None}
        super().__init__(detail)


class SourceDisabled(Conflict):
    """This source is disabled; enable it (PATCH enabled=true) before syncing it."""

    code = "source_disabled"


class BucketNotGranted(Forbidden):
    """Your tenant has no grant for this bucket; ask an operator to run `ingest sources grant`."""

    code = "bucket_not_granted"


class PlatformBucket(Forbidden):
    """This bucket holds the platform's own uploads or artifacts; no source may read it."""

    code = "platform_bucket"


class EndpointNotAllowed(Forbidden):
    """This endpoint is not allowed; ask an operator to add it to SOURCE_ENDPOINT_ALLOWLIST.

    403: a well-formed URL the platform's rules keep the gateway from calling (ADR 0200)."""

    code = "endpoint_not_allowed"


class RunNotFailed(Conflict):
    """Only a failed run can be retried; this one has not failed."""

    code = "run_not_failed"


class UploadExpired(Conflict):
    """The uploaded file is no longer stored, so the run cannot be retried; upload it again."""

    code = "upload_expired"


class SourceObjectDeleted(Conflict):
    """The run's S3 object was deleted from its bucket; put it back and sync instead."""

    code = "source_object_deleted"


class AlreadyIngested(Conflict):
    """This content is already ingested or being ingested by another run; nothing to retry."""

    code = "already_ingested"


class FileTooLarge(AppError):
    """The file is larger than the upload limit; split it or compress it and upload again."""

    code = "file_too_large"


class UnsupportedType(AppError):
    """This file type is not supported; upload a PDF, DOCX, HTML, TXT or Markdown file."""

    code = "unsupported_type"


class EmptyFile(AppError):
    """The file is empty; choose a file with content and upload again."""

    code = "empty_file"


# ── upload form errors (gateway/uploads.py): a hostile or mistaken multipart body ──────────
class MultipleFiles(InvalidRequest):
    """The form carries more than one file; upload one file per request."""

    code = "multiple_files"


class FieldTooLarge(InvalidRequest):
    """A form field is longer than its limit; shorten it and upload again."""

    code = "field_too_large"


class UnknownField(InvalidRequest):
    """The form has a field this route does not accept; send only file, title and doc_id."""

    code = "unknown_field"


class DuplicateField(InvalidRequest):
    """A form field is sent more than once; send each field once."""

    code = "duplicate_field"


class DocumentNotFound(NotFound):
    """No document with that doc_id exists in your tenant; upload without doc_id to create one."""

    code = "document_not_found"


class VersionedBySync(Conflict):
    """This document comes from an S3 source, whose sync makes its versions; change the object."""

    code = "document_versioned_by_sync"


class VersionedByMessage(Conflict):
    """This document is an e-mail attachment: it gets a new version when its message does;
    upload a new version of the message instead."""

    code = "document_versioned_by_message"


class ServiceUnavailable(AppError):
    """A backing service is unreachable; retry in a minute."""

    code = "service_unavailable"


class DatabaseUnavailable(ServiceUnavailable):
    """The database is unreachable; retry in a minute."""

    code = "database_unavailable"


class StorageUnavailable(ServiceUnavailable):
    """The file store is full; retry in a minute."""

    code = "storage_unavailable"


class LiveStreamsFull(ServiceUnavailable):
    """Too many live streams are open on this server; the page checks for changes itself."""

    code = "live_streams_full"
    retry_after_s = 30


# ── document errors (worker): the document itself is bad, retrying cannot help ─────────────
class BadDocument(AppError):
    """The document could not be processed; check the file and upload it again."""

    code = "bad_document"

    def __init__(self, detail: str | None = None, *, stage: str = "extract") -> None:
        self.stage = stage
        super().__init__(detail)


class ExtractionError(BadDocument):
    """No text could be extracted from the document; check that it opens and contains text."""

    code = "extraction_error"


class EncryptedDocument(BadDocument):
    """The document is password-protected; remove the password and upload it again."""

    code = "encrypted_document"


class NoTextFound(BadDocument):
    """The document contains no extractable text (a scan without OCR?); upload a text version."""

    code = "no_text"


class UploadOutsideStore(BadDocument):
    """The job names a file outside its run's folder of the upload store; it was not read."""

    code = "upload_outside_store"


class TransientError(AppError):
    """A backing service failed for a moment; the operation will be retried."""

    code = "transient_error"
