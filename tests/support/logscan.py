"""Look for secrets and personal data in everything the suite's processes logged.

Patterns of their own, not shared.logging's: a scan that reused the redaction's patterns could
not catch a mistake in them. Redaction markers ([JWT_REDACTED], [REDACTED]…) never match.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shared import logging as applog

PATTERNS = {
    "jwt": re.compile(r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}"),
    "bearer token": re.compile(r"(?i)\b(?:bearer|basic)\s+(?!\[)[A-Za-z0-9._~+/=-]{8,}"),
    "dsn password": re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/@:\"'\[\]]+:[^\s/@\"'\[\]]+@"),
    # user:password with the rest cut off ('postgresql://app:hu...'): anything but a port
    "dsn password (cut short)": re.compile(
        r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/@:\"'\[\]]+:(?!\d{1,5}(?:[^\w@]|$))(?!\[)"
        r"[^\s\"'@]+(?=$|[\s\"',])"),
    "aws key": re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    "webhook secret": re.compile(r"whsec_[A-Za-z0-9+/]{16,}"),
    "ssn": re.compile(r"\b\d{3}-\d{2}-\d{4}\b"),
    "email": re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b"),
    # Phones as people write them and as plaintiffs are stored (E.164); a bare run of digits
    # is too often an id or a size to scan for here (issue 20's test looks for its own).
    "phone": re.compile(r"\(\d{3}\)\s?\d{3}-\d{4}|(?<![\w+])\+\d{10,15}\b"),
}


@dataclass(frozen=True)
class Finding:
    path: Path
    kind: str
    line: str

    def __str__(self) -> str:
        return f"{self.path}: {self.kind}: {self.line[:300]}"


def scan_text(text: str) -> list[tuple[str, str]]:
    """(kind, line) for every line of text with something that should have been redacted."""
    found = []
    for line in text.splitlines():
        for kind, pattern in PATTERNS.items():
            if pattern.search(line):
                found.append((kind, line))
    return found


def _head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(256)


def _sizes(root: Path) -> dict[Path, tuple[bytes, int]]:
    """(first bytes, size) of every log. A test's folder is emptied when it starts, so a log of
    the same name may be a new file (even on the same inode): one whose start changed is read
    from its first byte."""
    return {p: (_head(p), p.stat().st_size) for p in root.rglob("*.log") if p.is_file()}


def scan_since(root: Path, before: dict[Path, tuple[bytes, int]]) -> list[Finding]:
    """What was written to root/**/*.log after ``before`` was taken."""
    findings = []
    for path, (head, size) in _sizes(root).items():
        old_head, old_size = before.get(path, (b"", 0))
        start = old_size if head[:len(old_head)] == old_head and size >= old_size else 0
        if size <= start:
            continue
        with open(path, "rb") as fh:
            fh.seek(start)
            text = fh.read().decode("utf-8", errors="replace")
        findings += [Finding(path, kind, line) for kind, line in scan_text(text)]
    return findings


@contextmanager
def watch(root: Path) -> Iterator[list[Finding]]:
    """Capture this process's log records as the processes format them (redacted JSON) into
    root/_inprocess/records.log, and on exit scan every log written meanwhile under root."""
    capture = root / "_inprocess" / "records.log"
    capture.parent.mkdir(parents=True, exist_ok=True)
    before = _sizes(root)
    handler = logging.FileHandler(capture, encoding="utf-8")
    handler.setFormatter(applog.JsonFormatter("pytest"))
    handler.setLevel(logging.INFO)
    logging.getLogger().addHandler(handler)
    findings: list[Finding] = []
    try:
        yield findings
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        findings += scan_since(root, before)
