"""The blocking S3 side of a sync: list a source's objects page by page, and stream one object
into the upload store while hashing and sniffing it. Callers run these in threads.

The whole object never sits in memory: it moves in 1 MiB pieces from the GET body to the store
writer (a local file or a multipart upload), and the SHA-256 is computed on the way.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gateway import filetypes
from shared import aws, errors, objectstore, retry

READ_BYTES = 1024 * 1024
# Archived objects cannot be read without a restore: skipping them beats failing them.
ARCHIVED = frozenset({"GLACIER", "DEEP_ARCHIVE"})


@dataclass(frozen=True)
class Listed:
    key: str
    size: int
    etag: str
    last_modified: datetime
    storage_class: str


@dataclass(frozen=True)
class Page:
    objects: list[Listed]
    next_token: str | None


@dataclass(frozen=True)
class Fetched:
    upload_uri: str
    content_hash: str  # "sha256:<hex>"
    size: int


def client(*, endpoint_url: str | None, region: str) -> Any:
    """An S3 client for a source. Credentials come from the gateway's environment or role
    (boto3's default chain); a source never carries any."""
    return aws.client("s3", endpoint_url=endpoint_url, region=region, retries=2)


@retry.transient(attempts=3, max_wait_s=4)
def list_page(s3: Any, *, bucket: str, prefix: str, token: str | None, page_size: int) -> Page:
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": page_size}
    if token:
        kwargs["ContinuationToken"] = token
    response = s3.list_objects_v2(**kwargs)
    objects = [Listed(o["Key"], int(o["Size"]), o.get("ETag", ""), o["LastModified"],
                      o.get("StorageClass", "STANDARD")) for o in response.get("Contents", [])]
    next_token = response.get("NextContinuationToken")
    if response.get("IsTruncated") and not next_token:
        # Without a token the rest cannot be listed, and a partial listing must not count.
        raise errors.ServiceUnavailable("S3 said the listing goes on but gave no continuation "
                                        "token.")
    return Page(objects, next_token if response.get("IsTruncated") else None)


@retry.transient(attempts=3, max_wait_s=4)
def fetch(s3: Any, *, bucket: str, key: str, store: objectstore.Store, store_key: str,
          max_bytes: int, source_type: str) -> Fetched:
    """Stream an object into the store; a transient failure retries it from the start.

    Content that contradicts the extension (as for uploads, gateway/filetypes.py), an empty
    object and one over the cap raise AppErrors, which are never retried.
    """
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    writer = store.writer(store_key)
    try:
        sha, size = _copy(body, writer, max_bytes, source_type)
        uri = writer.commit()
    except BaseException:
        writer.abort()
        raise
    finally:
        body.close()
    return Fetched(uri, f"sha256:{sha}", size)


def _copy(body: Any, writer: objectstore.Writer, max_bytes: int,
          source_type: str) -> tuple[str, int]:
    sha = hashlib.sha256()
    head = bytearray()
    checked = False
    size = 0
    for chunk in body.iter_chunks(READ_BYTES):
        size += len(chunk)
        if size > max_bytes:
            # The object grew after it was listed: the cap holds while streaming too.
            raise errors.FileTooLarge("larger than the upload limit")
        if not checked:
            head += chunk[: filetypes.SNIFF_BYTES - len(head)]
            if len(head) >= filetypes.SNIFF_BYTES:
                filetypes.check_content(source_type, bytes(head), complete=False)
                checked = True
        sha.update(chunk)
        writer.write(chunk)
    if size == 0:
        raise errors.EmptyFile()
    if not checked:
        filetypes.check_content(source_type, bytes(head), complete=True)
    return sha.hexdigest(), size
