"""Redaction beyond the basics: cut-short DSNs, any URL with a password, secret-named fields,
and crashes (main thread or any other) logged as redacted JSON instead of raw tracebacks."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import orjson
import pytest

from shared import logging as applog
from tests.support import logscan, stack


@pytest.mark.parametrize("text,secret", [
    ("input_value='postgresql://app:hu...0.1:5432/ingest'", "hu..."),
    ("postgresql+psycopg://app:hunter2@db/ingest", "hunter2"),
    ("https://deploy:pa55word@git.example.test/repo", "pa55word"),
    ("redis://:s3cret@cache:6379/0", "s3cret"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ('{"jwt_secret": "abcdefgh"}', "abcdefgh"),
    ("api_key: k-123456", "k-123456"),
    ("aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
])
def test_secret_is_redacted(text, secret):
    cleaned = applog.redact(text)
    assert secret not in cleaned and "REDACTED" in cleaned
    assert logscan.scan_text(cleaned) == []


@pytest.mark.parametrize("text", [
    "http://127.0.0.1:8000/v1/ingest", "see http://localhost:8000.", "s3://bucket/key.pdf",
    "file:///data/uploads/t/r/report.pdf", '{"tokens_total":1477,"token_count":3}',
    "http://[::1]:9000/x",
])
def test_ordinary_urls_and_fields_survive(text):
    assert applog.redact(text) == text


def test_a_field_named_like_a_secret_is_redacted_whatever_its_value():
    formatter = applog.JsonFormatter("test")
    import logging

    record = logging.LogRecord("t", logging.INFO, __file__, 1, "event", None, None)
    record.database_password = "plain"  # type: ignore[attr-defined]
    record.api_key = "plain-too"  # type: ignore[attr-defined]
    record.token_count = 3  # type: ignore[attr-defined]
    event = orjson.loads(formatter.format(record))
    assert event["database_password"] == "[REDACTED]" and event["api_key"] == "[REDACTED]"
    assert event["token_count"] == 3


CRASH = textwrap.dedent("""
    import threading
    from shared import logging as applog
    applog.setup("test")
    def boom():
        raise RuntimeError("cannot reach postgresql://app:hunter2@db/ingest for a@b.example")
    thread = threading.Thread(target=boom, name="job-1")
    thread.start()
    thread.join()
    raise ValueError("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2ln rejected")
""")


def test_uncaught_exceptions_are_logged_as_redacted_json():
    # When a thread and then the main thread die of exceptions that quote secrets
    result = subprocess.run([sys.executable, "-c", CRASH], capture_output=True, text=True,
                            timeout=60, cwd=stack.ROOT, env=stack.clean_env({}))

    # Then stderr holds two JSON lines, redacted, and nothing else
    assert result.returncode != 0
    lines = [orjson.loads(line) for line in result.stderr.splitlines()]
    assert [e["event"] for e in lines] == ["uncaught exception in a thread", "uncaught exception"]
    assert lines[0]["thread_name"] == "job-1" and lines[0]["error_type"] == "RuntimeError"
    assert lines[1]["error_type"] == "ValueError" and lines[1]["level"] == "critical"
    assert "hunter2" not in result.stderr and "a@b.example" not in result.stderr
    assert "eyJzdWIiOiIxIn0" not in result.stderr
    assert logscan.scan_text(result.stderr) == []


def test_the_log_scan_finds_what_redaction_missed(tmp_path):
    # Given a log that existed before the session and a line appended to it since
    log = tmp_path / "a" / "worker.log"
    log.parent.mkdir()
    log.write_text('{"event": "old line for bob@example.com"}\n')
    before = logscan._sizes(tmp_path)
    with open(log, "a") as fh:
        fh.write('{"event": "login failed for jane.doe@example.com"}\n')
        fh.write('{"event": "ok", "user": "[EMAIL_REDACTED]"}\n')
    (tmp_path / "b.log").write_text("dsn postgresql://app:hunter2@db/x and AKIAIOSFODNN7EXAMPLE\n")

    # When the scan runs
    findings = logscan.scan_since(tmp_path, before)

    # Then it reports what was appended only, each kind it found
    assert sorted(f.kind for f in findings) == ["aws key", "dsn password", "email"]
    assert all("bob@" not in f.line for f in findings)


# ── personal data and database errors (issue 20) ──────────────────────────────────────────
@pytest.mark.parametrize("phone", ["(212) 555-9876", "212-555-9876", "212.555.9876",
                                   "+12125559876", "+44 20 7946 0958", "2125559876",
                                   "12125559876"])
def test_phones_are_redacted(phone):
    cleaned = applog.redact(f"call {phone} now")
    assert phone not in cleaned and "[PHONE_REDACTED]" in cleaned


def test_database_error_details_are_cut_before_logging_or_storing():
    # psycopg's text of an error carries Postgres' DETAIL: the failing row's values.
    text = ('new row for relation "plaintiffs" violates check constraint "x"\n'
            'DETAIL:  Failing row contains (Zebulon "Z" Quintessa, 4587 Lane, 0).\n'
            'CONTEXT:  COPY import_staged_rows, line 3, column data: "{\"name\": \"Zeb\"}"')
    cleaned = applog.scrub(text)
    assert "Zebulon" not in cleaned and "4587" not in cleaned and "Zeb" not in cleaned
    assert cleaned.startswith('new row for relation "plaintiffs" violates check constraint')
    # and in a JSON line (a value ends at its closing quote, whatever the row held)
    line = orjson.dumps({"error": "Key (k)=(CV1 Zebulon) already exists", "n": 1}).decode()
    assert "Zebulon" not in applog.redact(line) and orjson.loads(applog.redact(line))["n"] == 1


def test_a_logged_database_error_keeps_its_message_and_loses_its_row():
    import logging

    formatter = applog.JsonFormatter("test")
    try:
        raise RuntimeError('duplicate key value\nDETAIL:  Key (dedupe_key)=(ZEBULON) exists.')
    except RuntimeError:
        import sys

        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", None,
                                   sys.exc_info())
    event = orjson.loads(formatter.format(record))
    assert "ZEBULON" not in formatter.format(record)
    assert event["error"].startswith("RuntimeError: duplicate key value")
