"""Logs are JSON lines with context, and secrets and personal data never reach them."""

from __future__ import annotations

import io
import logging
import uuid

import orjson
import pytest

from shared import logging as applog

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwicm9sZSI6ImFkbWluIn0"
       ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
BEARER = "opaque-token-4f9c2a7b1d"
DSN_PASSWORD = "hunter2-db-pass"
DSN = f"postgresql://ingest:{DSN_PASSWORD}@db.internal:5432/ingest"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
SSN = "123-45-6789"
EMAIL = "jane.doe@example.com"
SECRETS = {"jwt": JWT, "bearer": BEARER, "dsn_password": DSN_PASSWORD, "aws_key": AWS_KEY,
           "ssn": SSN, "email": EMAIL}
# The text each secret is logged in, as callers would write it.
PHRASES = {
    "jwt": f"token {JWT} rejected",
    "bearer": f"Authorization: Bearer {BEARER}",
    "dsn_password": f"cannot connect to {DSN}",
    "aws_key": f"using access key {AWS_KEY}",
    "ssn": f"customer ssn {SSN} found in document",
    "email": f"login failed for {EMAIL}",
}


@pytest.fixture
def log():
    """A logger whose records are formatted exactly as the processes' (shared.logging)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(applog.JsonFormatter("test"))
    logger = logging.getLogger(f"test.logging.{uuid.uuid4().hex}")
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)

    def lines() -> list[dict]:
        return [orjson.loads(line) for line in stream.getvalue().splitlines()]

    logger.lines = lines  # type: ignore[attr-defined]
    logger.raw = stream.getvalue  # type: ignore[attr-defined]
    return logger


@pytest.mark.parametrize("kind", SECRETS)
def test_secret_in_message_is_redacted(log, kind):
    log.warning(PHRASES[kind])
    raw = log.raw()
    assert SECRETS[kind] not in raw
    assert "REDACTED" in log.lines()[0]["event"]


@pytest.mark.parametrize("kind", SECRETS)
def test_secret_in_message_arguments_is_redacted(log, kind):
    log.warning("problem: %s", PHRASES[kind])
    assert SECRETS[kind] not in log.raw()


@pytest.mark.parametrize("kind", SECRETS)
def test_secret_in_extra_field_is_redacted(log, kind):
    log.info("event", extra={"detail": PHRASES[kind], "nested": {"list": [PHRASES[kind]]}})
    assert SECRETS[kind] not in log.raw()
    event = log.lines()[0]
    assert "REDACTED" in event["detail"] and "REDACTED" in event["nested"]["list"][0]


@pytest.mark.parametrize("kind", SECRETS)
def test_secret_in_exception_text_is_redacted(log, kind):
    try:
        raise RuntimeError(PHRASES[kind])
    except RuntimeError:
        log.exception("operation failed")
    assert SECRETS[kind] not in log.raw()
    event = log.lines()[0]
    assert event["error_type"] == "RuntimeError" and "REDACTED" in event["error"]
    assert "REDACTED" in event["traceback"]


@pytest.mark.parametrize("kind", SECRETS)
def test_secret_in_context_is_redacted(log, kind):
    with applog.context(detail=PHRASES[kind]):
        log.info("event")
    assert SECRETS[kind] not in log.raw()


def test_secret_as_an_extra_field_value_alone_is_redacted(log):
    log.info("auth", extra={"token": JWT, "email": EMAIL, "database_url": DSN})
    raw = log.raw()
    assert JWT not in raw and EMAIL not in raw and DSN_PASSWORD not in raw


def test_password_query_parameter_is_redacted(log):
    log.info("calling https://api.example.test/x?user=a&password=pa55word&x=1")
    assert "pa55word" not in log.raw() and "user=a" in log.raw()


def test_ordinary_identifiers_survive(log):
    # Over-redaction would make logs useless: ids, hashes, timestamps and sizes stay readable.
    run_id = str(uuid.uuid4())
    digest = "sha256:" + "0123456789abcdef" * 4
    log.info("ingest_job_submitted", extra={"run_id": run_id, "content_hash": digest,
                                            "size_bytes": 1234567, "at": "2026-02-15T12:00:00Z",
                                            "upload_uri": "file:///data/uploads/t/r/report.pdf"})
    event = log.lines()[0]
    assert event["run_id"] == run_id and event["content_hash"] == digest
    assert event["size_bytes"] == 1234567 and event["at"] == "2026-02-15T12:00:00Z"
    assert event["upload_uri"] == "file:///data/uploads/t/r/report.pdf"


def test_each_record_is_one_json_line_with_context(log):
    with applog.context(request_id="req-1", tenant_id=None):
        log.info("first\nwith newline", extra={"run_id": "r-1"})
    log.info("second")
    raw = log.raw()
    assert raw.count("\n") == 2
    first, second = log.lines()
    assert first["event"] == "first\nwith newline" and first["request_id"] == "req-1"
    assert first["run_id"] == "r-1" and "tenant_id" not in first
    assert first["level"] == "info" and first["process"] == "test" and first["ts"].endswith("+00:00")
    assert "request_id" not in second


def test_bind_adds_context_for_the_rest_of_the_task(log):
    import contextvars

    def job() -> None:
        applog.bind(run_id="r-9")
        log.info("inside")

    contextvars.copy_context().run(job)
    log.info("outside")
    inside, outside = log.lines()
    assert inside["run_id"] == "r-9" and "run_id" not in outside


def test_redact_function_covers_every_kind():
    text = " | ".join(PHRASES.values())
    cleaned = applog.redact(text)
    for secret in SECRETS.values():
        assert secret not in cleaned
