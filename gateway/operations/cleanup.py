"""Remove stored files nothing needs any more (gateway-worker-ingestion.md §8.1).

Uploads: every object in the upload store older than UPLOAD_CLEANUP_TTL_HOURS is judged by the
runs that point at it (``config.upload_uri``):
  - no run points at it: an orphan (a request that died before its run committed, a skipped
    duplicate whose delete failed, a half-written ``.part``): removed;
  - a queued or running run: needed by the worker, kept;
  - a failed run finished less than UPLOAD_FAILED_TTL_DAYS ago: kept, the run is retryable;
  - every run that points at it succeeded, or failed longer ago than that: removed.
Artifacts: those of versions deactivated more than ARTIFACT_RETENTION_DAYS ago (< 0 keeps
them); an active version's artifact is never touched. Removals are recorded in
``storage_purges``, since versions belong to the worker.

One pass at a time across gateway replicas and the CLI: a session advisory lock on a dedicated
connection. Works for file:// and s3:// stores alike. See docs/decisions/0013.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from shared import db, objectstore

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("operations.sql"))
_LOCK_KEY = 0x1D6E57_0003
BATCH = 500


@dataclass(frozen=True)
class Policy:
    upload_ttl_s: float           # nothing younger is ever touched
    failed_ttl_s: float           # a failed run's upload is kept this long after it failed
    artifact_retention_s: float   # < 0: artifacts of deactivated versions are kept
    # Records imports (docs/decisions/0130): staged rows after their batch finished, row errors.
    staged_retention_s: float = 7 * 86400
    row_errors_retention_s: float = 90 * 86400
    # A partial batch's staged rows, kept for review (docs/decisions/0151).
    partial_staged_retention_s: float = 30 * 86400
    # Completion events whose deliveries are all final, with those deliveries (ADR 0161).
    event_retention_s: float = 90 * 86400

    @classmethod
    def from_settings(cls, settings: Any) -> Policy:
        days = settings.artifact_retention_days
        return cls(settings.upload_cleanup_ttl_hours * 3600,
                   settings.upload_failed_ttl_days * 86400, days * 86400 if days >= 0 else -1,
                   settings.import_staged_retention_days * 86400,
                   settings.import_errors_retention_days * 86400,
                   settings.import_partial_staged_retention_days * 86400,
                   settings.event_retention_days * 86400)


@dataclass
class Report:
    ran: bool = True
    scanned: int = 0
    removed_orphans: list[str] = field(default_factory=list)
    removed_finished: list[str] = field(default_factory=list)
    removed_artifacts: list[str] = field(default_factory=list)
    kept: int = 0
    errors: int = 0
    # Rows of records imports removed (or, in a dry run, that would be).
    staged_rows: int = 0
    row_errors: int = 0
    events: int = 0

    def summary(self) -> dict[str, int | bool]:
        return {"ran": self.ran, "scanned": self.scanned, "orphans": len(self.removed_orphans),
                "finished_uploads": len(self.removed_finished),
                "artifacts": len(self.removed_artifacts), "kept": self.kept, "errors": self.errors,
                "staged_rows": self.staged_rows, "row_errors": self.row_errors,
                "events": self.events}


@dataclass(frozen=True)
class Stored:
    uri: str
    modified: float   # epoch seconds


def run(database_url: str, s3: Any, *, upload_store_uri: str, artifact_store_uri: str,
        policy: Policy, dry_run: bool = False) -> Report:
    """One cleanup pass, unless another process is running one (then ``ran`` is False)."""
    with db.connect(database_url, autocommit=True) as conn:
        locked = conn.execute(Q["try_cleanup_lock"], {"key": _LOCK_KEY}).fetchone()
        if not locked or not locked["locked"]:
            return Report(ran=False)
        try:
            report = Report()
            _uploads(conn, s3, objectstore.open_store(upload_store_uri, s3), policy, dry_run,
                     report)
            if policy.artifact_retention_s >= 0:
                _artifacts(conn, s3, policy, dry_run, report)
            _expired_rows(conn, policy, dry_run, report)
        finally:
            conn.execute(Q["cleanup_unlock"], {"key": _LOCK_KEY})
    log.info("cleanup pass finished", extra={**report.summary(), "dry_run": dry_run})
    return report


# ── uploads ─────────────────────────────────────────────────────────────────────────────────
def _uploads(conn: db.Conn, s3: Any, store: objectstore.FileStore | objectstore.S3Store,
             policy: Policy, dry_run: bool, report: Report) -> None:
    cutoff = time.time() - policy.upload_ttl_s
    batch: list[Stored] = []
    for stored in _list(store, s3):
        report.scanned += 1
        if stored.modified > cutoff:
            report.kept += 1
            continue
        batch.append(stored)
        if len(batch) >= BATCH:
            _judge(conn, s3, batch, policy, dry_run, report)
            batch = []
    if batch:
        _judge(conn, s3, batch, policy, dry_run, report)


def _judge(conn: db.Conn, s3: Any, batch: list[Stored], policy: Policy,
           dry_run: bool, report: Report) -> None:
    owners: dict[str, list[dict[str, Any]]] = {}
    for row in conn.execute(Q["upload_owners"], {"uris": [s.uri for s in batch],
                                                 "failed_ttl_s": policy.failed_ttl_s}):
        owners.setdefault(row["uri"], []).append(row)
    for stored in batch:
        runs = owners.get(stored.uri, [])
        if runs and any(_needed(run) for run in runs):
            report.kept += 1
            continue
        if _remove(stored.uri, s3, dry_run, report):
            (report.removed_finished if runs else report.removed_orphans).append(stored.uri)


def _needed(run: dict[str, Any]) -> bool:
    """A worker may still read the upload, or a user may still retry the run."""
    if run["status"] in ("queued", "running"):
        return True
    return run["status"] == "failed" and not run["past_failed_ttl"]


def _remove(uri: str, s3: Any, dry_run: bool, report: Report) -> bool:
    if dry_run:
        return True
    try:
        objectstore.delete(uri, s3)
        return True
    except Exception as exc:  # noqa: BLE001 - one stubborn file must not stop the pass
        report.errors += 1
        log.warning("cleanup could not remove a file", extra={"uri": uri,
                                                              "error_type": type(exc).__name__})
        return False


def _list(store: objectstore.FileStore | objectstore.S3Store, s3: Any) -> Iterator[Stored]:
    if isinstance(store, objectstore.FileStore):
        yield from _list_files(store.root)
    else:
        yield from _list_s3(s3, store.bucket, store.prefix)


def _list_files(root: Path) -> Iterator[Stored]:
    if not root.is_dir():
        return
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            try:
                modified = path.stat().st_mtime
            except FileNotFoundError:
                continue  # removed meanwhile
            # Intake and the worker name uploads by Path.as_uri() of the same resolved root.
            yield Stored(path.as_uri(), modified)


def _list_s3(s3: Any, bucket: str, prefix: str) -> Iterator[Stored]:
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{prefix}/" if prefix else ""):
        for obj in page.get("Contents", []):
            yield Stored(f"s3://{bucket}/{obj['Key']}", obj["LastModified"].timestamp())


# ── artifacts ───────────────────────────────────────────────────────────────────────────────
def _artifacts(conn: db.Conn, s3: Any, policy: Policy, dry_run: bool,
               report: Report) -> None:
    after: tuple[Any, Any] = ("-infinity", "00000000-0000-0000-0000-000000000000")
    while True:
        rows = conn.execute(Q["expired_artifacts"], {
            "retention_s": policy.artifact_retention_s, "limit": BATCH,
            "after_at": after[0], "after_id": after[1]}).fetchall()
        if not rows:
            return
        after = (rows[-1]["deactivated_at"], rows[-1]["doc_version_id"])
        for row in rows:
            if not _supported(row["artifact_uri"]) or not _remove(row["artifact_uri"], s3,
                                                                   dry_run, report):
                continue
            report.removed_artifacts.append(row["artifact_uri"])
            if not dry_run:
                conn.execute(Q["record_purge"], {"uri": row["artifact_uri"],
                                                 "tenant_id": row["tenant_id"],
                                                 "doc_version_id": row["doc_version_id"]})


def _supported(uri: str) -> bool:
    return urlparse(uri).scheme in ("file", "s3")


# ── rows past their retention: records imports and completion events ────────────────────────
IMPORT_ROWS_CHUNK = 10_000


def _expired_rows(conn: db.Conn, policy: Policy, dry_run: bool, report: Report) -> None:
    """Staged rows of finished batches, old row errors and old settled events, in chunks (each
    its own commit, so a big purge never holds long locks); a dry run counts what would go."""
    for query, retention, counter in (("expired_staged_rows", policy.staged_retention_s,
                                       "staged_rows"),
                                      ("expired_row_errors", policy.row_errors_retention_s,
                                       "row_errors"),
                                      ("expired_events", policy.event_retention_s, "events")):
        limit = 2**31 - 1 if dry_run else IMPORT_ROWS_CHUNK
        while True:
            row = conn.execute(Q[query], {
                "retention_s": retention, "limit": limit, "dry_run": dry_run,
                "partial_retention_s": policy.partial_staged_retention_s}).fetchone()
            matched = int(row["matched"]) if row else 0
            setattr(report, counter, getattr(report, counter) + matched)
            if dry_run or matched < limit:
                break
