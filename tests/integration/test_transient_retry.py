"""Transient failures inside a job are retried with backoff, not surfaced as failures."""

from __future__ import annotations

import time

import pytest

from shared import aws, errors
from tests.support.tcpproxy import TcpProxy
from worker.pipeline import read


def test_s3_connection_resets_during_read_are_retried(moto, s3):
    # Given an upload in S3, behind a link that resets the first two connections
    s3.create_bucket(Bucket="uploads-retry")
    s3.put_object(Bucket="uploads-retry", Key="t/r/doc.md", Body=b"# hello\n\nworld")
    proxy = TcpProxy(moto.port, drop_first=2).start()
    flaky = aws.client("s3", endpoint_url=proxy.url, region="us-east-1", retries=1)

    # When the read stage fetches it
    with read.open_upload("s3://uploads-retry/t/r/doc.md", flaky) as path:
        data = path.read_bytes()
    proxy.stop()

    # Then it retried past the resets and got the bytes
    assert data == b"# hello\n\nworld"
    assert proxy.accepted == 3


def test_a_missing_upload_is_not_retried_but_named(moto, s3):
    s3.create_bucket(Bucket="uploads-missing")
    started = time.monotonic()
    with pytest.raises(errors.BadDocument, match="no longer in the upload store"), \
            read.open_upload("s3://uploads-missing/nothing.md", s3):
        pass
    assert time.monotonic() - started < 2
