"""The S3 upload store: bytes land in the bucket intact, and refusals leave nothing behind."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shared import objectstore
from tests.integration.test_upload import (
    add_active_version,
    assert_error,
    counts,
    multipart,
    run_row,
    sha,
    upload,
)
from tests.support import stack

MiB = 1024 * 1024


@pytest.fixture
def bucket(s3) -> Iterator[str]:
    name = f"uploads-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    yield name
    for obj in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=obj["Key"])
    for up in s3.list_multipart_uploads(Bucket=name).get("Uploads", []):
        s3.abort_multipart_upload(Bucket=name, Key=up["Key"], UploadId=up["UploadId"])
    s3.delete_bucket(Bucket=name)


@pytest.fixture
def s3_gateway(stack_env, out_dir: Path, bucket: str) -> Iterator[stack.Process]:
    process = stack.start_gateway({**stack_env, "UPLOAD_STORE_URI": f"s3://{bucket}/uploads",
                                   "UPLOAD_MAX_SIZE_MB": "20"}, out_dir, "gateway-s3")
    yield process
    process.stop()


def keys(s3, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", []))


def pending_multipart(s3, bucket: str) -> list[dict]:
    return s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def fetch(s3, uri: str) -> bytes:
    bucket, key = objectstore.split_s3(uri)
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def patterned(size: int) -> bytes:
    """Text whose every MiB differs, so a reordered or dropped part changes the bytes."""
    line = b"line %09d of a large upload that spans several multipart parts\n"
    out = bytearray()
    i = 0
    while len(out) < size:
        out += line % i
        i += 1
    return bytes(out[:size])


def test_small_upload_is_stored_in_the_bucket(s3_gateway, s3, bucket, tenants, conn):
    # Given a gateway storing uploads in S3
    user = tenants.user(role="user")
    data = b"Small file kept in S3.\n" * 10
    # When a file is uploaded
    with s3_gateway.client(user.token) as client:
        response = upload(client, "small.txt", data)
    # Then the bucket holds exactly its bytes under uploads/<tenant>/<run>/<name>
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    uri = run_row(conn, run_id)["config"]["upload_uri"]
    assert uri == f"s3://{bucket}/uploads/{user.tenant_id}/{run_id}/small.txt"
    assert fetch(s3, uri) == data
    assert keys(s3, bucket) == [f"uploads/{user.tenant_id}/{run_id}/small.txt"]


def test_large_upload_goes_through_multipart_intact(s3_gateway, s3, bucket, tenants, conn):
    # Given a 19 MiB file (more than two 8 MiB parts)
    user = tenants.user(role="user")
    data = patterned(19 * MiB)
    # When it is uploaded
    with s3_gateway.client(user.token) as client:
        response = upload(client, "big.txt", data)
    # Then the object in the bucket is byte-for-byte the upload, and its hash is recorded
    assert response.status_code == 202, response.text
    config = run_row(conn, response.json()["run_id"])["config"]
    stored = fetch(s3, config["upload_uri"])
    assert len(stored) == len(data) and stored == data
    assert config["content_hash"] == sha(data) and config["file_size_bytes"] == len(data)
    assert pending_multipart(s3, bucket) == []


def test_skipped_upload_leaves_no_object(s3_gateway, s3, bucket, tenants, conn):
    # Given a processed upload
    user = tenants.user(role="user")
    data = b"Uploaded twice.\n" * 10
    with s3_gateway.client(user.token) as client:
        first = upload(client, "twice.txt", data).json()
        add_active_version(conn, tenant_id=user.tenant_id, doc_id=first["doc_id"],
                           run_id=first["run_id"], content_hash=sha(data))
        before = keys(s3, bucket)
        # When the same bytes are uploaded again
        second = upload(client, "twice.txt", data)
    # Then it is skipped and only the first object remains
    assert second.status_code == 200 and second.json()["status"] == "skipped"
    assert keys(s3, bucket) == before and len(before) == 1


def test_skipped_large_upload_leaves_no_object(s3_gateway, s3, bucket, tenants):
    # Given a 9 MiB upload whose run is still queued
    user = tenants.user(role="user")
    data = patterned(9 * MiB)
    with s3_gateway.client(user.token) as client:
        assert upload(client, "big.txt", data).status_code == 202
        before = keys(s3, bucket)
        # When the same bytes are uploaded again (stored through multipart, then skipped)
        second = upload(client, "big.txt", data)
    # Then it is skipped, its object deleted and no multipart upload left open
    assert second.status_code == 200, second.text
    assert keys(s3, bucket) == before and len(before) == 1
    assert pending_multipart(s3, bucket) == []


def test_oversize_streamed_upload_leaves_no_object_and_no_open_multipart(s3_gateway, s3, bucket,
                                                                         tenants, conn):
    # Given a 20 MB limit and a 30 MiB file streamed without Content-Length
    user = tenants.user(role="user")
    head, content_type = multipart(b"huge.txt", b"")
    opening, closing = head.split(b"\r\n\r\n\r\n", 1)

    def body() -> Iterator[bytes]:
        yield opening + b"\r\n\r\n"
        for _ in range(30 * 4):
            yield b"z" * (MiB // 4)
        yield b"\r\n" + closing

    # When it is uploaded, so two 8 MiB parts are in S3 before the limit trips
    with s3_gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=body(), headers={"Content-Type": content_type})

    # Then the client reads 413, the bucket is empty and the multipart upload was aborted
    assert_error(response, 413, "file_too_large")
    assert keys(s3, bucket) == []
    assert pending_multipart(s3, bucket) == []
    assert counts(conn) == {"documents": 0, "ingestion_runs": 0, "job_outbox": 0,
                            "document_versions": 0}


def test_refused_content_leaves_no_object(s3_gateway, s3, bucket, tenants):
    user = tenants.user(role="user")
    with s3_gateway.client(user.token) as client:
        response = upload(client, "fake.pdf", b"not a pdf\n" * 2_000_000)
    assert_error(response, 415, "unsupported_type")
    assert keys(s3, bucket) == [] and pending_multipart(s3, bucket) == []


def test_second_file_part_leaves_no_object_and_no_open_multipart(s3_gateway, s3, bucket, tenants,
                                                                 conn):
    # Given a form whose first file part (9 MiB, so a multipart upload is open in S3) is
    # followed by a second file part
    user = tenants.user(role="user")
    head, content_type = multipart(b"first.txt", patterned(9 * MiB))
    second, _ = multipart(b"second.txt", b"more text\n")
    body = head.rsplit(b"--dragonfly-boundary-7f3a--", 1)[0] + second
    # When it is posted
    with s3_gateway.client(user.token) as client:
        response = client.post("/v1/ingest", content=body, headers={"Content-Type": content_type})
    # Then it is refused, the bucket is empty and the multipart upload was aborted
    assert_error(response, 400, "multiple_files")
    assert keys(s3, bucket) == [] and pending_multipart(s3, bucket) == []
    assert counts(conn) == {"documents": 0, "ingestion_runs": 0, "job_outbox": 0,
                            "document_versions": 0}
