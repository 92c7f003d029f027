"""Where raw uploads and extracted artifacts live: a local folder (file://) or a bucket (s3://).

Writers are streaming and synchronous; async callers hand them batches through a thread. A
writer's object becomes visible only on ``commit``; ``abort`` leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from shared import errors

# S3 parts must be at least 5 MiB except the last; 8 MiB keeps memory per upload small.
S3_PART_BYTES = 8 * 1024 * 1024


class Writer(Protocol):
    uri: str

    def write(self, data: bytes | memoryview) -> None: ...
    def commit(self) -> str: ...
    def abort(self) -> None: ...


class Store(Protocol):
    root_uri: str

    def writer(self, key: str) -> Writer: ...
    def put_bytes(self, key: str, data: bytes) -> str: ...


def file_path(uri: str) -> Path:
    parsed = urlparse(uri)
    return Path(unquote(parsed.netloc + parsed.path)) if parsed.netloc else Path(unquote(parsed.path))


def split_s3(uri: str) -> tuple[str, str]:
    parsed = urlparse(uri)
    return parsed.netloc, parsed.path.lstrip("/")


# ── file:// ─────────────────────────────────────────────────────────────────────────────────
# A file system out of space (or over a quota) is a passing outage of the store, like a database
# that is down: callers answer 503 and workers leave the job for redelivery (chaos soak, issue
# 24). Any other OSError is left as it is.
_FULL = {errno.ENOSPC, errno.EDQUOT}


@contextlib.contextmanager
def _space() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        if exc.errno in _FULL:
            raise errors.StorageUnavailable("The file store is full; retry in a minute.") \
                from exc
        raise


class FileWriter:
    def __init__(self, path: Path) -> None:
        with _space():
            path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.uri = path.as_uri()
        # Written beside the target and renamed on commit: a reader never sees half a file.
        self._tmp = path.with_name(path.name + ".part")
        with _space():
            self._fh = open(self._tmp, "wb")  # noqa: SIM115 - closed in commit/abort

    def write(self, data: bytes | memoryview) -> None:
        with _space():
            self._fh.write(data)

    def commit(self) -> str:
        with _space():
            self._fh.close()
            os.replace(self._tmp, self.path)
        return self.uri

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # a close that cannot flush a full disk
            self._fh.close()
        self._tmp.unlink(missing_ok=True)
        _remove_empty_parents(self.path.parent, levels=2)


class FileStore:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root_uri = self.root.as_uri()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if not path.is_relative_to(self.root):
            raise ValueError(f"key escapes the store: {key!r}")
        return path

    def writer(self, key: str) -> FileWriter:
        return FileWriter(self._path(key))

    def put_bytes(self, key: str, data: bytes) -> str:
        w = self.writer(key)
        try:
            w.write(data)
            return w.commit()
        except BaseException:
            w.abort()  # no .part file left behind on a full disk
            raise


def _remove_empty_parents(folder: Path, levels: int) -> None:
    for _ in range(levels):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# ── s3:// ───────────────────────────────────────────────────────────────────────────────────
class S3Writer:
    """Streams to S3: one PUT for small objects, a multipart upload once a part's worth arrives."""

    def __init__(self, s3: Any, bucket: str, key: str) -> None:
        self.s3, self.bucket, self.key = s3, bucket, key
        self.uri = f"s3://{bucket}/{key}"
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._parts: list[dict[str, Any]] = []

    def write(self, data: bytes | memoryview) -> None:
        self._buffer += data
        if len(self._buffer) >= S3_PART_BYTES:
            self._flush_part()

    def _flush_part(self) -> None:
        if self._upload_id is None:
            self._upload_id = self.s3.create_multipart_upload(
                Bucket=self.bucket, Key=self.key)["UploadId"]
        number = len(self._parts) + 1
        etag = self.s3.upload_part(Bucket=self.bucket, Key=self.key, UploadId=self._upload_id,
                                   PartNumber=number, Body=bytes(self._buffer))["ETag"]
        self._parts.append({"ETag": etag, "PartNumber": number})
        self._buffer.clear()

    def commit(self) -> str:
        if self._upload_id is None:
            self.s3.put_object(Bucket=self.bucket, Key=self.key, Body=bytes(self._buffer))
        else:
            if self._buffer:
                self._flush_part()
            self.s3.complete_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=self._upload_id,
                MultipartUpload={"Parts": self._parts})
        self._buffer.clear()
        return self.uri

    def abort(self) -> None:
        self._buffer.clear()
        if self._upload_id is not None:
            with contextlib.suppress(Exception):
                self.s3.abort_multipart_upload(
                    Bucket=self.bucket, Key=self.key, UploadId=self._upload_id)


class S3Store:
    def __init__(self, s3: Any, bucket: str, prefix: str = "") -> None:
        self.s3, self.bucket, self.prefix = s3, bucket, prefix.strip("/")
        self.root_uri = f"s3://{bucket}/{self.prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def writer(self, key: str) -> S3Writer:
        return S3Writer(self.s3, self.bucket, self._key(key))

    def put_bytes(self, key: str, data: bytes) -> str:
        self.s3.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        return f"s3://{self.bucket}/{self._key(key)}"


def ensure_bucket(s3: Any, bucket: str, region: str) -> None:
    """Create a bucket if it is missing; one that already exists and is ours is fine."""
    kwargs: dict[str, Any] = {"Bucket": bucket}
    if region != "us-east-1":  # the one region that refuses an explicit location constraint
        kwargs["CreateBucketConfiguration"] = {"LocationConstraint": region}
    with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
        s3.create_bucket(**kwargs)


def open_store(root_uri: str, s3: Any) -> FileStore | S3Store:
    scheme = urlparse(root_uri).scheme
    if scheme == "file":
        return FileStore(file_path(root_uri))
    if scheme == "s3":
        bucket, prefix = split_s3(root_uri)
        return S3Store(s3, bucket, prefix)
    raise ValueError(f"unsupported store URI {root_uri!r}: use file:// or s3://")


def probe(store: FileStore | S3Store) -> None:
    """Raise unless the store can take a file now: its bucket answers, or its folder (or the
    nearest one above it that exists) can be written and its file system has room
    (/health/ready, docs/decisions/0321)."""
    if isinstance(store, S3Store):
        store.s3.head_bucket(Bucket=store.bucket)
        return
    folder = store.root
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"the file store's folder cannot be written: {folder}")
    if os.statvfs(folder).f_bavail == 0:
        raise errors.StorageUnavailable("The file store is full; retry in a minute.")


# ── where a run's upload may be (the worker reads and deletes only there) ──────────────────
class OutsideStore(ValueError):
    """A URI that is not a file of the given run in the upload store."""


def confine_upload(uri: str, *, store_uri: str, tenant_id: object, run_id: object) -> str:
    """Return ``uri`` if it names one file directly under ``<store>/<tenant_id>/<run_id>/``.

    A job message is input like any other: its URI must not reach another tenant's file, a path
    outside the store or another bucket. Compared textually, never normalised into shape:
    ``.``/``..`` segments, empty segments, a query or a fragment are refused, not resolved.
    """
    parsed, store = urlparse(uri), urlparse(store_uri)
    if parsed.scheme != store.scheme or parsed.params or parsed.query or parsed.fragment:
        raise OutsideStore("not a URI of the upload store")
    folder = (str(tenant_id), str(run_id))
    if parsed.scheme == "file":
        root = file_path(store_uri).resolve()
        raw = unquote(parsed.path)
        parts = PurePosixPath(raw).parts
        if (parsed.netloc or "\x00" in raw or str(PurePosixPath(raw)) != raw
                or parts[:-1] != (*root.parts, *folder) or parts[-1] in (".", "..")
                # A symlink inside the run's folder must not lead elsewhere either.
                or Path(raw).resolve().parent != root.joinpath(*folder)):
            raise OutsideStore("not a file of this run in the upload store")
        return uri
    if parsed.scheme == "s3":
        bucket, prefix = split_s3(store_uri)
        expected = "/".join(p for p in (prefix.strip("/"), *folder) if p) + "/"
        key = parsed.path[1:]
        name = key[len(expected):]
        if (parsed.netloc != bucket or not key.startswith(expected) or not name or "/" in name
                or name in (".", "..") or "\\" in key):
            raise OutsideStore("not an object of this run in the upload bucket")
        return uri
    raise OutsideStore("not a URI of the upload store")


# ── reading and deleting by URI (the worker reads whatever URI a job names) ─────────────────
def download(uri: str, s3: Any, dest: Path) -> None:
    """Stream an s3:// object to a local file."""
    bucket, key = split_s3(uri)
    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with open(dest, "wb") as fh:
        shutil.copyfileobj(body, fh, length=1024 * 1024)


def exists(uri: str, s3: Any) -> bool:
    scheme = urlparse(uri).scheme
    if scheme == "file":
        return file_path(uri).is_file()
    bucket, key = split_s3(uri)
    try:
        s3.head_object(Bucket=bucket, Key=key)
        return True
    except s3.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return False
        raise


def delete(uri: str, s3: Any) -> None:
    """Delete an object; deleting what is already gone is not an error."""
    scheme = urlparse(uri).scheme
    if scheme == "file":
        path = file_path(uri)
        path.unlink(missing_ok=True)
        _remove_empty_parents(path.parent, levels=2)
    elif scheme == "s3":
        bucket, key = split_s3(uri)
        s3.delete_object(Bucket=bucket, Key=key)
    else:
        raise ValueError(f"unsupported URI {uri!r}")
