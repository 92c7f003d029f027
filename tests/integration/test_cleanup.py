"""Cleanup (gateway/operations/cleanup.py) removes what nothing needs and keeps what a worker, a retry or an
active version needs: uploads on file:// and s3://, artifacts of deactivated versions."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from datetime import timedelta
from pathlib import Path

import orjson
import pytest
from psycopg.types.json import Jsonb

from gateway.operations import cleanup
from shared import db, objectstore
from tests.integration import test_imports_ops as imports_ops
from tests.support import ops, records, stack

DAY = 86400.0
POLICY = cleanup.Policy(upload_ttl_s=DAY, failed_ttl_s=7 * DAY, artifact_retention_s=30 * DAY)


@pytest.fixture
def roots(tmp_path) -> tuple[Path, Path]:
    return tmp_path / "uploads", tmp_path / "artifacts"


def _backdate(path: Path, days: float) -> None:
    stamp = time.time() - days * DAY
    os.utime(path, (stamp, stamp))


def _finished_ago(conn, run_id, days: float) -> None:
    conn.execute("UPDATE ingestion_runs SET finished_at = now() - %s WHERE run_id = %s",
                 (timedelta(days=days), run_id))


def _orphan(root: Path, name: str, days: float) -> Path:
    path = root / str(uuid.uuid4()) / str(uuid.uuid4()) / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"left behind")
    _backdate(path, days)
    return path


def _run(database_url, s3, roots, policy=POLICY, dry_run=False) -> cleanup.Report:
    return cleanup.run(database_url, s3, upload_store_uri=roots[0].as_uri(),
                       artifact_store_uri=roots[1].as_uri(), policy=policy, dry_run=dry_run)


def _uploads_by_state(conn, root: Path, user) -> dict[str, Path]:
    """One upload per case, each old enough (3 days) for the orphan TTL."""
    cases = {}
    for state, status, failed_days in (("queued", "queued", None), ("running", "running", None),
                                       ("failed_recently", "failed", 2),
                                       ("failed_long_ago", "failed", 8),
                                       ("succeeded", "succeeded", None)):
        job = ops.make_run(conn, root, user, status=status)
        if failed_days is not None:
            _finished_ago(conn, job.run_id, failed_days)
        _backdate(job.upload_path, 3)
        cases[state] = job.upload_path
    return cases


def test_cleanup_removes_orphans_and_finished_uploads_and_keeps_what_is_needed(
        database_url, conn, tenants, roots, s3):
    # Given uploads in every situation, all older than the 24 h orphan TTL but two
    user = tenants.user()
    cases = _uploads_by_state(conn, roots[0], user)
    old_orphan = _orphan(roots[0], "lost.pdf", days=2)
    half_written = _orphan(roots[0], "upload.pdf.part", days=2)
    fresh_orphan = _orphan(roots[0], "in-flight.pdf", days=0.1)
    fresh_failed = ops.make_run(conn, roots[0], user, status="failed")

    # When cleanup runs
    report = _run(database_url, s3, roots)

    # Then orphans and the uploads of finished runs are gone
    assert not old_orphan.exists() and not half_written.exists()
    assert not cases["failed_long_ago"].exists() and not cases["succeeded"].exists()
    assert sorted(report.removed_orphans) == sorted([old_orphan.as_uri(), half_written.as_uri()])
    assert sorted(report.removed_finished) == sorted(
        [cases["failed_long_ago"].as_uri(), cases["succeeded"].as_uri()])
    # and what a worker or a retry still needs is kept, as is anything younger than the TTL
    for needed in ("queued", "running", "failed_recently"):
        assert cases[needed].exists(), needed
    assert fresh_orphan.exists() and fresh_failed.upload_path.exists()
    assert report.errors == 0
    # and emptied folders went with their files
    assert not old_orphan.parent.exists()

    # When it runs again, nothing more goes
    again = _run(database_url, s3, roots)
    assert again.removed_orphans == again.removed_finished == []


def test_dry_run_removes_nothing(database_url, conn, tenants, roots, s3):
    orphan = _orphan(roots[0], "lost.pdf", days=2)
    report = _run(database_url, s3, roots, dry_run=True)
    assert report.removed_orphans == [orphan.as_uri()] and orphan.exists()


def test_only_one_cleanup_runs_at_a_time(database_url, roots, s3):
    # Given another process in the middle of a pass (it holds the cleanup lock)
    with db.connect(database_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", (cleanup._LOCK_KEY,))
        # When a second pass starts, it steps aside
        assert _run(database_url, s3, roots).ran is False
    assert _run(database_url, s3, roots).ran is True


def _version(conn, user, *, active: bool, deactivated_days: float | None, root: Path) -> Path:
    job = ops.make_run(conn, root.parent / "uploads", user, status="succeeded")
    version_id = uuid.uuid4()
    artifact = root / str(user.tenant_id) / str(job.doc_id) / f"{version_id}.json"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("{}")
    conn.execute(
        "INSERT INTO document_versions (doc_version_id, tenant_id, doc_id, run_id, version_number,"
        " content_hash, is_active, embedding_model, embedding_dim, artifact_uri, deactivated_at,"
        " created_at) VALUES (%s, %s, %s, %s, 1, %s, %s, 'm', 384, %s, now() - %s::interval, "
        " now() - interval '100 days')",
        (version_id, user.tenant_id, job.doc_id, job.run_id, job.job.content_hash, active,
         artifact.as_uri(), timedelta(days=deactivated_days) if deactivated_days else None))
    return artifact


def test_artifacts_of_long_deactivated_versions_go_and_active_ones_stay(database_url, conn,
                                                                        tenants, roots, s3):
    # Given an active version (100 days old), one deactivated 40 days ago and one 5 days ago
    user = tenants.user()
    active = _version(conn, user, active=True, deactivated_days=None, root=roots[1])
    long_gone = _version(conn, user, active=False, deactivated_days=40, root=roots[1])
    recent = _version(conn, user, active=False, deactivated_days=5, root=roots[1])

    # When cleanup runs with a 30-day retention
    report = _run(database_url, s3, roots)

    # Then only the long-deactivated version's artifact is removed, and that is on record
    assert report.removed_artifacts == [long_gone.as_uri()]
    assert not long_gone.exists() and active.exists() and recent.exists()
    purged = conn.execute("SELECT uri, tenant_id FROM storage_purges").fetchall()
    assert purged == [{"uri": long_gone.as_uri(), "tenant_id": user.tenant_id}]
    assert _run(database_url, s3, roots).removed_artifacts == []

    # And a negative retention keeps every artifact
    keep = cleanup.Policy(upload_ttl_s=DAY, failed_ttl_s=7 * DAY, artifact_retention_s=-1)
    conn.execute("DELETE FROM storage_purges")
    assert _run(database_url, s3, roots, policy=keep).removed_artifacts == []


def test_cleanup_works_on_an_s3_upload_store(database_url, conn, tenants, s3, roots):
    # Given an s3:// upload store holding an orphan, a queued run's upload, a recently failed
    # run's upload and one of a run that failed long ago
    bucket = f"uploads-{uuid.uuid4().hex[:8]}"
    objectstore.ensure_bucket(s3, bucket, "us-east-1")
    user = tenants.user()
    uris = {}
    for state, status, failed_days in (("queued", "queued", None), ("failed_recently", "failed", 2),
                                       ("failed_long_ago", "failed", 8), ("orphan", None, None)):
        key = f"uploads/{user.tenant_id}/{uuid.uuid4()}/doc.md"
        s3.put_object(Bucket=bucket, Key=key, Body=b"bytes")
        uris[state] = f"s3://{bucket}/{key}"
        if status is None:
            continue
        job = ops.make_run(conn, roots[0], user, status=status)
        conn.execute("UPDATE ingestion_runs SET config = config || %s WHERE run_id = %s",
                     (Jsonb({"upload_uri": uris[state]}), job.run_id))
        if failed_days:
            _finished_ago(conn, job.run_id, failed_days)

    # When cleanup runs (S3 objects cannot be backdated: an orphan TTL of 0 judges them all)
    policy = cleanup.Policy(upload_ttl_s=0, failed_ttl_s=7 * DAY, artifact_retention_s=-1)
    report = cleanup.run(database_url, s3, upload_store_uri=f"s3://{bucket}/uploads",
                         artifact_store_uri=roots[1].as_uri(), policy=policy)

    # Then the orphan and the long-failed run's upload are gone; the others stay
    assert report.removed_orphans == [uris["orphan"]]
    assert report.removed_finished == [uris["failed_long_ago"]]
    for state in ("queued", "failed_recently"):
        assert objectstore.exists(uris[state], s3), state
    assert not objectstore.exists(uris["orphan"], s3)


def test_cli_cleanup(conn, tenants, stack_env, out_dir):
    # Given an old orphan in the configured upload store, and an import batch finished 8 days
    # ago with 3 staged rows and a 91-day-old row error
    root = objectstore.file_path(stack_env["UPLOAD_STORE_URI"])
    orphan = _orphan(root, "lost.pdf", days=2)
    tenant_id = tenants.user().tenant_id
    batch_id, _ = imports_ops.failed_batch(conn, tenant_id, "old.csv", ago=timedelta(days=8))
    imports_ops.stage(conn, batch_id, tenant_id, 3)
    records.add_errors(conn, batch_id, [imports_ops.error("JUDGMENT_AMOUNT_INVALID", 4)])
    conn.execute("UPDATE import_row_errors SET created_at = now() - interval '91 days' "
                 "WHERE batch_id = %s", (batch_id,))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return stack.ingest(["cleanup", *args], stack_env)

    # When the operator looks first, then cleans
    preview = cli("--dry-run", "--json")
    done = cli()
    (out_dir / "cli.log").write_text(preview.stderr + done.stderr)

    # Then the preview changed nothing and the real pass removed the orphan
    assert preview.returncode == 0, preview.stderr
    assert orjson.loads(preview.stdout)["removed"] == [orphan.as_uri()]
    assert done.returncode == 0, done.stderr
    assert not orphan.exists() and "removed 1 orphaned upload(s)" in done.stdout
    # and the plain summary counts the import rows it removed
    assert "removed 3 staged import row(s) of finished batches and 1 import row error(s)" \
        in done.stdout, done.stdout
