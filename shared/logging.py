"""JSON-lines logging with request/run/tenant context and redaction of secrets and personal data.

Redaction is a filter on the handler, so it applies to every record whoever logs it, including
the text of exceptions (import-runs-state-machine.md §5.3–5.4).
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import orjson

# Never mutated in place: context() and bind() set a new dict.
_context: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar(
    "log_context", default={})  # noqa: B039

REDACTIONS: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]*)?"), "[JWT_REDACTED]"),
    (re.compile(r"(?i)\b(bearer\s+|basic\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1[TOKEN_REDACTED]"),
    (re.compile(r"(?i)\b(postgres(?:ql)?|mysql|redis|amqp)://[^@\s/]+@"), r"\1://[REDACTED]@"),
    # Any other URL with a password (postgresql+psycopg://, https://user:pw@host, and DSNs that a
    # library cut short, as pydantic does: 'postgresql://app:hu...5432/db').
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/@:\"'\[]+:)([^\s\"']*)"),
     lambda m: _userinfo(m)),
    # key=value and "key": "value" (JSON of an extra field, a dict in an exception's text).
    (re.compile(r"(?i)((?:\b|_)(?:password|passwd|pwd|secret|token|api_?key)[\"']?\s*[=:]\s*[\"']?)"
                r"(?!\[)[^\s&;,\"'}]+"), r"\1[REDACTED]"),
    (re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"), "[AWS_KEY_REDACTED]"),
    (re.compile(r"(?i)(aws_?secret_?access_?key\W{1,3}|SecretAccessKey\W{1,3})[A-Za-z0-9/+=]{40}"),
     r"\1[REDACTED]"),
    (re.compile(r"\b\d{3}-\d{2}-\d{4}\b"), "[SSN_REDACTED]"),
    (re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"), "[EMAIL_REDACTED]"),
    # Phones: E.164 and international (+1 212 555 9876), North American written forms
    # ((212) 555-9876, 212-555-9876, 212.555.9876) and bare 10- or 11-digit numbers.
    (re.compile(r"(?<![\w+])\+\d(?:[\s.()-]?\d){7,14}\b"), "[PHONE_REDACTED]"),
    (re.compile(r"(?<!\w)\(\d{3}\)\s?\d{3}[\s.-]\d{4}\b"), "[PHONE_REDACTED]"),
    (re.compile(r"\b\d{3}[.-]\d{3}[.-]\d{4}\b"), "[PHONE_REDACTED]"),
    (re.compile(r"\b1?\d{10}\b"), "[PHONE_REDACTED]"),
    # Postgres writes row values into an error's DETAIL ("Failing row contains (…)", "Key (…)=
    # (…) already exists") and CONTEXT (COPY's "line 3, column data: …"); psycopg's text of an
    # exception carries both. In a JSON line the value ends at its closing quote.
    (re.compile(r"(DETAIL|CONTEXT):(?:[^\"\\]|\\.)*"), r"\1: [REDACTED]"),
    (re.compile(r"Failing row contains(?:[^\"\\]|\\.)*"), "Failing row contains [REDACTED]"),
    (re.compile(r"\bKey \((?:[^\"\\]|\\.)*?\)=\((?:[^\"\\]|\\.)*"), "Key [REDACTED]"),
]
# The same Postgres details in a plain string (before it is serialised): to its end, whatever
# quotes the row's values hold.
_DB_DETAILS = [
    (re.compile(r"(?s)(DETAIL|CONTEXT):.*"), r"\1: [REDACTED]"),
    (re.compile(r"(?s)Failing row contains.*"), "Failing row contains [REDACTED]"),
    (re.compile(r"(?s)\bKey \(.*?\)=\(.*"), "Key [REDACTED]"),
]

# LogRecord attributes that are plumbing, not fields of the event.
_RESERVED = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def _userinfo(match: re.Match[str]) -> str:
    """``scheme://user:`` then a port (kept), a password up to ``@``, or a cut-off password."""
    rest = match.group(2)
    if re.match(r"\d{1,5}(?:[^\w@]|$)", rest):
        return match.group(0)
    at = rest.find("@")
    return match.group(1) + "[REDACTED]" + (rest[at:] if at >= 0 else "")


def redact(text: str) -> str:
    for pattern, replacement in REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


def scrub(text: str) -> str:
    """A database error's text fit to log or store: its DETAIL and CONTEXT (row values) cut
    off, then redacted like any log line. For exception texts written to tables (a dead
    letter's reason) as much as to logs."""
    for pattern, replacement in _DB_DETAILS:
        text = pattern.sub(replacement, text)
    return redact(text)


# Extra fields whose string value is a secret whatever it looks like.
_SECRET_KEY = re.compile(r"(?i)(passw|secret|^token$|_token$|api_?key|authorization|credential)")


def _redact_value(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: "[REDACTED]" if isinstance(v, str) and _SECRET_KEY.search(str(k))
                else _redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(v) for v in value]
    return value


class JsonFormatter(logging.Formatter):
    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        event: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "process": self.process,
            "logger": record.name,
            "event": record.getMessage(),
        }
        event.update(_context.get())
        for key, value in vars(record).items():
            if key not in _RESERVED and not key.startswith("_"):
                event[key] = value
        if record.exc_info:
            exc = record.exc_info[1]
            event["error_type"] = type(exc).__name__
            event["error"] = "".join(traceback.format_exception_only(exc)).strip()
            event["traceback"] = "".join(traceback.format_exception(*record.exc_info))
        return redact(orjson.dumps(_redact_value(event), default=str).decode())


def setup(process: str, level: str = "INFO") -> None:
    """Send every logger's records to stderr as redacted JSON lines.

    Uncaught exceptions (main thread and others) and warnings go through the same handler:
    left to Python they would print raw tracebacks, secrets and all, past the redaction.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("botocore", "boto3", "urllib3", "s3transfer", "httpx", "sentence_transformers"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.captureWarnings(True)
    sys.excepthook = _log_uncaught
    threading.excepthook = _log_uncaught_in_thread


def _log_uncaught(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
    if issubclass(exc_type, KeyboardInterrupt):
        sys.__excepthook__(exc_type, exc, tb)
        return
    logging.getLogger("uncaught").critical("uncaught exception", exc_info=(exc_type, exc, tb))


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    logging.getLogger("uncaught").error(
        "uncaught exception in a thread",
        extra={"thread_name": args.thread.name if args.thread else None},
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback))


@contextmanager
def context(**fields: Any) -> Iterator[None]:
    """Attach fields (run_id, tenant_id, request_id…) to every record logged inside the block."""
    merged = {**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}}
    token = _context.set(merged)
    try:
        yield
    finally:
        _context.reset(token)


def bind(**fields: Any) -> None:
    """Attach fields for the rest of the current task (an ASGI request, a worker job thread)."""
    _context.set({**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}})
