"""Run one records job under its run's lease: claim a tenant slot, then resume the batch from
wherever its status says — pending or processing: stage (after the last staged row);
staging_complete: budget, then promote; promoting: promote again (idempotent).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from shared import contracts, db, jobs, objectstore
from shared.contracts import ad_metrics
from shared.settings import WorkerSettings
from worker import runs
from worker.pipeline import read
from worker.records import (
    ad_promote,
    error_pages,
    fileread,
    jsonrows,
    prefetch,
    promote,
    rowlog,
    search_indexes,
    stage,
    table,
)
from worker.records.parse import BatchRejected

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("records.sql"))
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"
# The outbox's note on a job handed back for want of a slot; also how wake_waiting finds it.
WAITING = "waiting for a free import slot of the tenant"


@dataclass(frozen=True)
class RecordsResult:
    stats: dict[str, Any]


def tenant_key(tenant_id: UUID) -> int:
    """The tenant's int4 advisory-lock key (the two-int form's first half)."""
    return int.from_bytes(tenant_id.bytes[:4], "big", signed=True)




def contract_for(name: str, platform: str | None) -> contracts.Contract:
    """The batch's contract: an ad-metrics batch reads its platform's export headers."""
    if name == "ad_metrics":
        if platform is None:
            raise BatchRejected("The ad-metrics batch names no platform.", stage="parse",
                                code="batch_missing")
        return ad_metrics.for_platform(platform)
    return contracts.get(name)


class RecordsPipeline:
    def __init__(self, settings: WorkerSettings, s3: Any) -> None:
        self.settings = settings
        self.s3 = s3
        self.worker_id = settings.worker_id or WORKER_ID

    # ── the tenant's slots (docs/decisions/0097) ─────────────────────────────────────────
    def take_slot(self, lease: runs.RunLease, tenant_id: UUID) -> int | None:
        """Hold one of the tenant's slots on the lease's session (released with it, or by
        ``release_slot``); the slot's number, or None when all are taken."""
        key = tenant_key(tenant_id)
        for slot in range(self.settings.records_tenant_slots):
            row = lease.conn.execute(Q["tenant_slot"], {"tenant_key": key, "slot": slot}).fetchone()
            if row and row["locked"]:
                return slot
        return None

    def release_slot(self, lease: runs.RunLease, tenant_id: UUID, slot: int) -> None:
        """Give the slot back now and make the tenant's longest-waiting job due. Best effort:
        if the database is away the slot goes with the lease's session anyway, and a waiting
        job comes back at the end of its wait."""
        try:
            lease.conn.execute(Q["release_slot"], {"tenant_key": tenant_key(tenant_id),
                                                   "slot": slot})
            lease.conn.execute(Q["wake_waiting"], {"tenant_id": tenant_id, "why": WAITING})
        except psycopg.Error as exc:
            log.warning("could not release the tenant slot early; it goes with the session",
                        extra={"error": type(exc).__name__})

    def hand_back(self, lease: runs.RunLease, job: jobs.RecordsJob) -> str | None:
        """No slot: put the job back in the outbox, due after RECORDS_SLOT_WAIT_S. Returns the
        run's status (None: no such run); the job was handed back iff it is queued or running.
        Raises psycopg.Error when that cannot be written (then the message stays)."""
        row = lease.conn.execute(Q["hand_back_job"], {
            "run_id": job.run_id, "tenant_id": job.tenant_id, "payload": jobs.encode(job),
            "wait_s": self.settings.records_slot_wait_s, "why": WAITING}).fetchone()
        return None if row is None else str(row["status"])

    # ── the job ───────────────────────────────────────────────────────────────────────────
    def run(self, job: jobs.RecordsJob, lease: runs.RunLease,
            abort: threading.Event | None = None) -> RecordsResult:
        check = _Check(lease, abort, self._pause_point())
        times = Times()
        stats: dict[str, Any] = {"batch_id": str(job.batch_id), "file_hash": job.file_hash,
                                 "worker_id": self.worker_id, "contract": job.contract}
        with self._connect() as conn:
            batch = conn.execute(Q["batch"], {"batch_id": job.batch_id,
                                              "tenant_id": job.tenant_id}).fetchone()
            if batch is None:
                raise BatchRejected(f"batch {job.batch_id} does not exist in this tenant.",
                                    stage="parse", code="batch_missing")
            contract = contract_for(job.contract, batch["platform"])
            target = stage.Target(job.batch_id, job.tenant_id, job.run_id, lease.fence,
                                  stage.entity_type(contract))
            status = batch["status"]
            if status == "pending":
                conn.execute(Q["start_batch"], target.keys)
                status = "processing"
            if status == "processing":
                counts = self._stage(conn, job, contract, target, batch, check, times)
                status = "staging_complete"
            else:
                counts = promote.Counts(batch["rows_total"], batch["rows_invalid"],
                                        batch["rows_duplicate"])
            parse_ms = times.ms("read", "validate") or batch["parse_duration_ms"] or 0
            db_ms = times.ms("stage")
            stats.update(rows_total=counts.total, rows_invalid=counts.invalid,
                         rows_duplicate=counts.duplicate, parse_ms=parse_ms,
                         **times.stats())
            if status == "staging_complete":
                promote.check_budget(counts, batch["error_threshold_percent"],
                                     batch["force_partial"])
            elif status != "promoting":
                raise BatchRejected(f"batch {job.batch_id} is already {status}.",
                                    stage="promote", code="batch_finished")
            check.progress("promote", 0.92)
            promoted_at = time.monotonic()
            promotion_args = (conn, target, contract, batch, counts)
            promotion_kwargs: dict[str, Any] = {
                "stats": {**stats, "db_ms": db_ms}, "db_ms_before": db_ms,
                "hold": lambda: check.hold("promote")}
            if job.contract == "ad_metrics":
                result = ad_promote.promote(*promotion_args, **promotion_kwargs)
            else:
                result = promote.promote(
                    *promotion_args, **promotion_kwargs, connect=self._connect,
                    tick=lambda done: check.progress("promote", 0.92 + 0.07 * done))
        times.mark("promoted")
        promote_ms = round((time.monotonic() - promoted_at) * 1000)
        promote_ms += times.ms("promote")  # waiting for the slices ahead to end
        stats.update(result, db_ms=db_ms + promote_ms, promote_ms=promote_ms,
                     duration_ms=times.elapsed_ms(),
                     timeline_ms=times.at)
        with self._connect() as conn:
            if job.contract != "ad_metrics":  # the tables with trigram indexes (ADR 0334)
                search_indexes.merge_pending(conn)
            error_pages.make_visible(conn, target.keys)  # deep error pages (ADR 0335)
        self._remove_upload(job)
        return RecordsResult(stats)

    def _stage(self, conn: db.Conn, job: jobs.RecordsJob,
               contract: contracts.Contract, target: stage.Target, batch: dict[str, Any],
               check: _Check, times: Times) -> promote.Counts:
        """Read, validate and stage the file after the last staged row (issue 31: a chunk of
        rows at a time, as columns), then processing → staging_complete."""
        resume = stage.resume_point(conn, target, batch["last_staged_row"])
        if resume:
            log.info("records import resumes after the last staged row",
                     extra={"batch_id": str(job.batch_id), "resume_after_row": resume,
                            "worker_id": self.worker_id})
        check.progress("parse", 0.02)
        issues_log = rowlog.RowIssueLog(job.batch_id)
        reading: type[table.Table | jsonrows.JsonLines] = \
            jsonrows.JsonLines if job.file_format == "jsonl" else table.Table
        with read.open_upload(self._upload(job), self.s3) as path:
            with times.read():
                source = reading(path, contract, fileread.decimal_option(conn, target))
            staged_rows = self._stage_rows(conn, target, contract, batch, source, resume,
                                           check, times, issues_log)
        with times.stage():
            if contract.name == "ad_metrics":  # repeats and slices, before the budget counts
                ad_promote.prepare(conn, target)
            counts = promote.finish_staging(conn, target, contract, staged_rows,
                                            times.ms("read", "validate"))
        times.mark("staging_complete")
        return counts

    def _stage_rows(self, conn: db.Conn, target: stage.Target, contract: contracts.Contract,
                    batch: dict[str, Any], source: table.Table | jsonrows.JsonLines,
                    resume: int, check: _Check, times: Times,
                    issues_log: rowlog.RowIssueLog) -> int:
        """Each chunk after ``resume`` validated and staged, and promoted ahead where the
        contract's promotion is in slices (docs/decisions/0273); the number of the file's last
        row."""
        ahead = promote.Ahead(self._connect, target, contract, batch) \
            if promote.Ahead.applies(contract) else None
        try:
            last = self._stage_chunks(conn, target, contract, source, resume, check, times,
                                      issues_log, ahead)
            times.mark("chunks_staged")
            if ahead is not None:
                with times.promote():
                    ahead.finish()
                times.mark("slices_ahead_done")
        finally:
            if ahead is not None:
                ahead.stop()
                times.ahead = ahead.busy_s
        return last

    def _stage_chunks(self, conn: db.Conn, target: stage.Target, contract: contracts.Contract,
                      source: table.Table | jsonrows.JsonLines, resume: int, check: _Check,
                      times: Times, issues_log: rowlog.RowIssueLog,
                      ahead: promote.Ahead | None) -> int:
        rows = invalid = 0
        with source:
            with times.read():
                parsed = fileread.opened(conn, target, source)
            warnings = list(parsed.warnings) if resume == 0 else []
            chunks: Iterator[table.Chunk | jsonrows.Part] = source.chunks(stage.CHUNK_ROWS,
                                                                          after=resume)
            # The next chunk is read and validated while this one is staged (ADR 0460); the
            # read and validate times are then the thread's, beside stage's, not within it.
            with prefetch.Prefetch(_validated(chunks, contract, parsed.match, times)) as ready:
                for staged in ready:
                    prefetch.release_freed()  # the chunk staged before this one (ADR 0470)
                    staged.add_batch_issues(warnings)
                    warnings = []
                    with times.stage():
                        stage.write(conn, target, contract, staged)
                    rows += len(staged)
                    invalid += len({i[0] for i in staged.issues
                                    if i[3] == "critical" and i[0]})
                    if ahead is not None:
                        ahead.offer(staged.last, rows, invalid)
                    issues_log.chunk(staged)
                    check.progress("parse", 0.05 + 0.85 * source.position())
                    if len(staged) >= stage.CHUNK_ROWS:
                        check.hold("parse")  # a full chunk: a small file is never held
            with times.stage():
                fileread.finish(conn, target, source)
            return source.last

    def _connect(self) -> db.Conn:
        """A connection of this job's own, in autocommit: each ``transaction()`` block is a
        real commit (a chunk, a step), never a savepoint of one long transaction. Nothing is
        prepared: a statement run once per slice or group would otherwise be planned once and
        kept (a generic plan, made while the tables were small) for a batch whose tables grow
        under it; planned each time, it sees their size (docs/decisions/0183)."""
        return db.connect(self.settings.database_url, autocommit=True, connect_timeout=5,
                          prepare_threshold=None)

    def _upload(self, job: jobs.RecordsJob) -> str:
        try:
            return objectstore.confine_upload(job.upload_uri,
                                              store_uri=self.settings.upload_store_uri,
                                              tenant_id=job.tenant_id, run_id=job.run_id)
        except objectstore.OutsideStore as exc:
            raise BatchRejected(f"The job's upload_uri is {exc}, so it was not read.",
                                stage="parse", code="upload_outside_store") from exc

    def _remove_upload(self, job: jobs.RecordsJob) -> None:
        try:
            objectstore.delete(self._upload(job), self.s3)
        except Exception as exc:  # noqa: BLE001 - the batch is final; cleanup catches it
            log.warning("could not delete the raw upload", extra={"error": type(exc).__name__})

    def _pause_point(self) -> tuple[str, Path] | None:
        stage_name, flag = self.settings.worker_pause_at_stage, self.settings.worker_pause_file
        return (stage_name, Path(flag)) if stage_name and flag else None

    # ── failure (the handler's ACK-after-fail) ────────────────────────────────────────────
    def fail(self, lease: runs.RunLease, job: jobs.RecordsJob, reason: str, stage_name: str,
             stats: dict[str, Any], issues: list[contracts.Issue], code: str) -> None:
        """Batch and run failed in one transaction, the run with ``code`` (gateway/runs/
        failures.py judges it retryable or not); raises psycopg.Error when that cannot be
        persisted (then the message is not deleted)."""
        lease.stop_heartbeat()
        target = stage.Target(job.batch_id, job.tenant_id, job.run_id, lease.fence)
        _hold_before_fail(self._pause_point())
        with self._connect() as conn:
            if not promote.fail(conn, target, reason, stage_name, stats, issues, code):
                log.warning("the run is no longer ours; its failure was not recorded",
                            extra={"batch_id": str(job.batch_id)})
            else:  # a file over its error budget is the one whose errors are read most
                error_pages.make_visible(conn, target.keys)


def _validated(chunks: Iterator[table.Chunk | jsonrows.Part], contract: contracts.Contract,
               match: contracts.HeaderMatch, times: Times) -> Iterator[stage.Staged]:
    """Each chunk read and validated, as the rows and issues ``stage.write`` takes. Only
    those wait for the writer: the file's cells are let go once validated (ADR 0470)."""
    while True:
        with times.read():
            chunk = next(chunks, None)
        if chunk is None:
            return
        with times.validate():
            staged = _staged(chunk, contract, match)
        del chunk  # not held while this item waits: a chunk's cells are most of its memory
        yield staged


def _staged(chunk: table.Chunk | jsonrows.Part, contract: contracts.Contract,
            match: contracts.HeaderMatch) -> stage.Staged:
    validated, raw = chunk.validated(contract, match)
    return stage.Staged(chunk.previous, chunk.last, validated.values,
                        stage.issue_rows(validated.issues, raw))


class _Check:
    """Progress on the lease, lease/abort checks, and the test-only pause point."""

    def __init__(self, lease: runs.RunLease, abort: threading.Event | None,
                 pause: tuple[str, Path] | None) -> None:
        self.lease, self.abort, self.pause = lease, abort, pause

    def __call__(self) -> None:
        if self.abort is not None and self.abort.is_set():
            raise runs.Aborted("the worker is shutting down")
        self.lease.check()

    def progress(self, stage_name: str, value: float) -> None:
        self()
        self.lease.report(stage_name, value)

    def hold(self, stage_name: str) -> None:
        """Test-only: wait here while the pause file exists, heartbeating and still stopping
        on shutdown or a lost lease (WORKER_PAUSE_AT_STAGE = parse | promote)."""
        if self.pause is None or self.pause[0] != stage_name:
            return
        while self.pause[1].exists():
            self()
            time.sleep(0.05)


def _hold_before_fail(pause: tuple[str, Path] | None) -> None:
    """Test-only (WORKER_PAUSE_AT_STAGE = fail): wait here, right before the failure is
    written, while the pause file exists. No lease check: the failure is being written because
    the job is over, and a fault test cuts the database exactly here."""
    if pause is None or pause[0] != "fail" or not pause[1].exists():
        return
    log.info("held at the test pause point", extra={"stage": "fail"})
    while pause[1].exists():
        time.sleep(0.05)


class Times:
    """Where a job's time goes, by stage (read, validate, stage, promote), for its run's stats
    and the benches' shares (bench/records.py, bench/ad_metrics.py); and when it reached each
    step, in ms from its start: the stages overlap (a chunk is validated while the one before
    is staged, slices are promoted beside both), so their sums cannot show the path the job's
    time took (docs/decisions/0550)."""

    STAGES = ("read", "validate", "stage", "promote")

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(self.STAGES, 0.0)
        self.ahead = 0.0  # slices promoted while staging went on (docs/decisions/0273)
        self.started = time.monotonic()  # the job's start: its duration and every step's
        self.at: dict[str, int] = {}

    def elapsed_ms(self) -> int:
        return round((time.monotonic() - self.started) * 1000)

    def mark(self, step: str) -> None:
        self.at[step] = self.elapsed_ms()

    @contextlib.contextmanager
    def _timing(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] += time.monotonic() - started

    def read(self) -> contextlib.AbstractContextManager[None]:
        return self._timing("read")

    def validate(self) -> contextlib.AbstractContextManager[None]:
        return self._timing("validate")

    def stage(self) -> contextlib.AbstractContextManager[None]:
        return self._timing("stage")

    def promote(self) -> contextlib.AbstractContextManager[None]:
        return self._timing("promote")

    def ms(self, *names: str) -> int:
        return round(sum(self.seconds[n] for n in names) * 1000)

    def stats(self) -> dict[str, int]:
        return {**{f"{name}_ms": self.ms(name) for name in self.STAGES},
                "promote_ahead_ms": round(self.ahead * 1000)}
