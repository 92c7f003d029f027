"""Stage read: get the raw upload onto local disk, once the job's URI is confined to its run."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from shared import errors, jobs, objectstore, retry


def confined_upload(job: jobs.IngestJob, store_uri: str) -> str:
    """The job's upload URI if it lies in ``<upload store>/<tenant_id>/<run_id>/``; else the run
    fails with the reason, and nothing is read or deleted (docs/decisions/0068)."""
    try:
        return objectstore.confine_upload(job.upload_uri, store_uri=store_uri,
                                          tenant_id=job.tenant_id, run_id=job.run_id)
    except objectstore.OutsideStore as exc:
        raise errors.UploadOutsideStore(
            f"read: the job's upload_uri is {exc}, so it was neither read nor deleted; "
            "retry the run, and report it if it keeps failing.", stage="read") from exc


@contextlib.contextmanager
def open_upload(uri: str, s3: Any) -> Iterator[Path]:
    """Yield a local path with the upload's bytes; S3 objects go through a temp file."""
    if urlparse(uri).scheme == "file":
        path = objectstore.file_path(uri)
        if not path.is_file():
            raise _gone()
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="ingest-") as folder:
        path = Path(folder) / "upload"
        _download(uri, s3, path)
        yield path


@retry.transient()
def _download(uri: str, s3: Any, dest: Path) -> None:
    try:
        objectstore.download(uri, s3, dest)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
            raise _gone() from exc
        raise


def _gone() -> errors.BadDocument:
    return errors.BadDocument(
        "read: the uploaded file is no longer in the upload store; upload it again.", stage="read")
