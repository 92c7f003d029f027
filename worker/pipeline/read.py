"""Stage read: get the raw upload onto local disk, wherever the job says it is."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from shared import errors, objectstore, retry


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
