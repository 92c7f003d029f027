"""Process one ingest job body and say what should happen to its message.

Knows nothing of SQS: it returns Ack (delete), Leave (redeliver later) or DeadLetter (can never
succeed). The ACK rule (gateway-worker-ingestion.md §7.5): a message is deleted only once its
run's terminal status is durable in Postgres.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from shared import alerts, errors, jobs
from shared import logging as applog
from shared.settings import WorkerSettings
from worker import metrics as worker_metrics
from worker import runs
from worker.pipeline import index
from worker.pipeline.runner import Pipeline
from worker.records.parse import BatchRejected
from worker.records.pipeline import RecordsPipeline
from worker.share import SlotShare


@dataclass(frozen=True)
class Ack:
    reason: str


@dataclass(frozen=True)
class Leave:
    reason: str
    # Seconds until the message should be seen again; None keeps the queue's timeout.
    visible_after_s: float | None = None


@dataclass(frozen=True)
class DeadLetter:
    reason: str


Outcome = Ack | Leave | DeadLetter


@dataclass(frozen=True)
class Pending:
    """The job goes on without the thread that started it (a document waiting for its vectors
    and its write, docs/decisions/0301); the future's result is its Outcome, resolved once the
    run's outcome is durable and its lease let go."""

    future: concurrent.futures.Future  # type: ignore[type-arg]

log = logging.getLogger(__name__)
# Why an import waits in the outbox, as its log line says.
AT_LIMIT = "tenant at its concurrent import limit; the job waits in the outbox"
LAST_SLOT = ("tenant runs an import on this worker and this is its last free slot; the job "
             "waits in the outbox, the slot stays for another tenant")


class IngestHandler:
    def __init__(self, settings: WorkerSettings, pipeline: Pipeline,
                 alerter: alerts.Alerter | None = None,
                 records: RecordsPipeline | None = None) -> None:
        self.settings = settings
        self.pipeline = pipeline
        # Records jobs (DESIGN.md "Records imports"): same lease, heartbeat and ACK rule.
        self.records = records
        # Terminal failures and stale takeovers raise alerts (import-runs-state-machine.md §5.2);
        # sending is queued, so a webhook never slows a job down.
        self.alerts = alerter or alerts.Alerter([], window_s=600)
        # Leases of the jobs in flight, so a shutdown can let go of their runs at once.
        self._leases: set[runs.RunLease] = set()
        self._leases_lock = threading.Lock()
        # Lock sessions: a records job's own, kept for the next one (one per slot, ADR 0232);
        # and as many shared ones, which hold the locks of every document in flight (0301).
        slots = settings.worker_max_concurrent_jobs
        self.connections = runs.LockSessions(settings.database_url, keep=slots, shared=slots,
                                             heartbeat_s=settings.heartbeat_interval_s)
        # Where a document that went on without its thread ends: its outcome, its lease.
        self._finisher = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(2, slots), thread_name_prefix="document-end")
        # Which tenant runs imports on this worker's slots (docs/decisions/0261).
        self.share = SlotShare(settings.worker_max_concurrent_jobs)

    def abandon(self) -> None:
        """Release every run this process holds (shutdown, before its messages are released)."""
        with self._leases_lock:
            leases = list(self._leases)
        for lease in leases:
            lease.abandon()
        self.connections.abandon()  # the shared sessions: every document run's lock at once

    def __call__(self, body: str, *, abort: Any = None) -> Outcome | Pending:
        try:
            job = jobs.parse(body)
            if isinstance(job, jobs.RecordsJob) and self.records is None:
                raise jobs.InvalidJob("this worker runs no records pipeline.")
        except jobs.InvalidJob as exc:
            log.error("invalid job message", extra={"reason": exc.detail})
            return DeadLetter(exc.detail)
        subject = ({"batch_id": job.batch_id} if isinstance(job, jobs.RecordsJob)
                   else {"doc_id": job.doc_id})
        with applog.context(run_id=job.run_id, tenant_id=job.tenant_id, **subject), \
                self.share.job():
            return self._handle(job, abort)

    def _handle(self, job: jobs.IngestJob | jobs.RecordsJob, abort: Any) -> Outcome | Pending:
        try:
            lease = runs.RunLease(self.settings.database_url, job,
                                  stale_after_s=self.settings.running_stale_after_s,
                                  heartbeat_s=self.settings.heartbeat_interval_s,
                                  worker=self.settings.worker_id,
                                  connections=self.connections,
                                  shared=isinstance(job, jobs.IngestJob))
        except psycopg.OperationalError:
            log.error("database unreachable; leaving the message for redelivery")
            return Leave("database unreachable")
        with self._leases_lock:
            self._leases.add(lease)
        outcome: Outcome | Pending | None = None
        try:
            outcome = self._with_lease(lease, job, abort)
            return outcome
        finally:
            if not isinstance(outcome, Pending):  # a pending job lets go when it ends
                self._let_go(lease)

    def _let_go(self, lease: runs.RunLease) -> None:
        with self._leases_lock:
            self._leases.discard(lease)
        lease.close()

    def _with_lease(self, lease: runs.RunLease, job: jobs.IngestJob | jobs.RecordsJob,
                    abort: Any) -> Outcome | Pending:
        if not isinstance(job, jobs.RecordsJob) or self.records is None:
            return self._claim(lease, job, abort)
        with self.share.import_of(job.tenant_id) as admitted:
            if not admitted:
                return self._wait_for_slot(lease, job, LAST_SLOT)
            return self._import(lease, job, abort)

    def _import(self, lease: runs.RunLease, job: jobs.RecordsJob, abort: Any) -> Outcome | Pending:
        assert self.records is not None
        try:
            slot = self.records.take_slot(lease, job.tenant_id)
        except psycopg.Error as exc:
            log.error("could not take a tenant slot; leaving the message",
                      extra={"error": str(exc)})
            return Leave("database error while taking a slot")
        if slot is None:
            return self._wait_for_slot(lease, job, AT_LIMIT)
        try:
            return self._claim(lease, job, abort)
        finally:
            self.records.release_slot(lease, job.tenant_id, slot)

    def _wait_for_slot(self, lease: runs.RunLease, job: jobs.RecordsJob, why: str) -> Outcome:
        """The tenant has its imports running: wait, never fail (docs/decisions/0097, 0261). The
        job goes back to the outbox and this message is deleted, so a wait is never a receive
        that counts toward the DLQ; the relay publishes a fresh message when the wait is over,
        or as soon as one of the tenant's imports ends."""
        assert self.records is not None
        try:
            status = self.records.hand_back(lease, job)
        except psycopg.Error as exc:
            log.error("could not hand the job back to the outbox; leaving the message",
                      extra={"error": str(exc)})
            return Leave("database error while handing back", self.settings.records_slot_wait_s)
        if status is None:
            return DeadLetter(f"run {job.run_id} does not exist in tenant {job.tenant_id}.")
        if status not in ("queued", "running"):
            log.info("duplicate delivery of a finished run; deleting it",
                     extra={"status": status, "reason": "duplicate_completed"})
            return Ack(f"run already {status}")
        log.info(why, extra={"batch_id": str(job.batch_id),
                             "wait_s": self.settings.records_slot_wait_s})
        return Ack("handed back to the outbox to wait for a slot")

    def _claim(self, lease: runs.RunLease, job: jobs.IngestJob | jobs.RecordsJob,
               abort: Any) -> Outcome | Pending:
        try:
            claim = lease.claim()
        except psycopg.Error as exc:
            log.error("could not claim the run; leaving the message", extra={"error": str(exc)})
            return Leave("database error while claiming")
        if claim.claim is runs.Claim.MISSING:
            return DeadLetter(f"run {job.run_id} does not exist in tenant {job.tenant_id}.")
        if claim.claim is runs.Claim.DONE:
            log.info("duplicate delivery of a finished run; deleting it",
                     extra={"status": claim.status, "reason": "duplicate_completed"})
            return Ack(f"run already {claim.status}")
        if claim.claim is runs.Claim.BUSY:
            log.info("run is held by another worker; leaving the message",
                     extra={"retry_after_s": claim.retry_after_s})
            return Leave("run held by another worker", claim.retry_after_s)
        return self._run(lease, job, claim, abort)

    def _run(self, lease: runs.RunLease, job: jobs.IngestJob | jobs.RecordsJob,
             claim: runs.ClaimResult, abort: Any) -> Outcome | Pending:
        started = time.monotonic()
        lease.start_heartbeat()
        log.info("job started", extra={"claim": claim.claim.value, **self._subject(job)})
        if claim.claim is runs.Claim.TAKEN_OVER:
            worker_metrics.TAKEOVERS.inc()
            self.alerts.send(alerts.stale_takeover(job.run_id, job.tenant_id, claim.stale_s,
                                                   claim.takeover_count))
        if isinstance(job, jobs.RecordsJob):
            assert self.records is not None  # checked on receipt
            try:
                with worker_metrics.IN_FLIGHT.track_inprogress():
                    result = self.records.run(job, lease, abort=abort)
            except BaseException as exc:  # noqa: BLE001 - mapped to the message's outcome
                return self._ended(lease, job, claim, started, exc)
            return self._succeeded(job, result, claim)
        worker_metrics.IN_FLIGHT.inc()
        try:
            running = self.pipeline.start(job, lease, abort=abort)
        except BaseException as exc:  # noqa: BLE001 - mapped to the message's outcome
            worker_metrics.IN_FLIGHT.dec()
            return self._ended(lease, job, claim, started, exc)
        # Waiting for its vectors and its write costs the document no thread (ADR 0301).
        outcome: concurrent.futures.Future = concurrent.futures.Future()  # type: ignore[type-arg]
        running.add_done_callback(lambda done: self._finisher.submit(
            self._end_document, lease, job, claim, started, done, outcome))
        return Pending(outcome)

    def _end_document(self, lease: runs.RunLease, job: jobs.IngestJob, claim: runs.ClaimResult,
                      started: float, done: concurrent.futures.Future,  # type: ignore[type-arg]
                      outcome: concurrent.futures.Future) -> None:  # type: ignore[type-arg]
        """A pending document ended: its outcome made durable (a failure persisted), its lease
        let go, then the consumer told (which deletes the message)."""
        result: Outcome = Leave("handler crashed")
        with applog.context(run_id=job.run_id, tenant_id=job.tenant_id, doc_id=job.doc_id):
            try:
                exc = done.exception()
                result = (self._succeeded(job, done.result(), claim) if exc is None
                          else self._ended(lease, job, claim, started, exc))
            except Exception:
                log.exception("handler crashed; leaving the message for redelivery")
            finally:
                worker_metrics.IN_FLIGHT.dec()
                self._let_go(lease)
        outcome.set_result(result)

    def _succeeded(self, job: jobs.IngestJob | jobs.RecordsJob, result: Any,
                   claim: runs.ClaimResult) -> Outcome:
        _log_complete(job, "succeeded", result.stats, claim)
        return Ack("succeeded")

    def _ended(self, lease: runs.RunLease, job: jobs.IngestJob | jobs.RecordsJob,
               claim: runs.ClaimResult, started: float, error: BaseException) -> Outcome:
        """What a job that raised ``error`` means for its run and its message."""
        try:
            raise error
        except (runs.LeaseLost, runs.Aborted, concurrent.futures.CancelledError) as exc:
            # Someone else may own the run now (or we are shutting down): touch nothing.
            log.warning("job stopped before finishing; the run will be taken over",
                        extra={"reason": str(exc) or type(exc).__name__})
            # Our lock is gone (or goes with lease.close): the next delivery takes the run over,
            # so the message comes back after the queue's visibility timeout, not later.
            return Leave(str(exc) or type(exc).__name__)
        except index.RunNoLongerRunning:
            log.warning("run left 'running' while we worked (crash guard?); content rolled back")
            return Ack("run no longer running")
        except errors.BadDocument as exc:
            return self._fail(lease, job, exc.detail, exc.stage, started, claim,
                              code=exc.code, exc=exc)
        except Exception as exc:
            if _is_infrastructure(exc):
                log.error("infrastructure failure; leaving the message for redelivery",
                          exc_info=exc)
                # Type only: an exception's text may name a file or a host.
                lease.note_retry(f"{lease.stage}: {type(exc).__name__} (transient)")
                return Leave(f"infrastructure failure: {type(exc).__name__}")
            log.error("job failed unexpectedly", exc_info=exc)
            reason = (f"{lease.stage}: unexpected error ({type(exc).__name__}); "
                      "retry the run, and report it if it keeps failing.")
            return self._fail(lease, job, reason, lease.stage, started, claim,
                              code="unexpected_error")

    def _subject(self, job: jobs.IngestJob | jobs.RecordsJob) -> dict[str, Any]:
        """What import-runs-state-machine.md §5.1 wants on a records job's first line."""
        if not isinstance(job, jobs.RecordsJob) or self.records is None:
            return {}
        return {"batch_id": str(job.batch_id), "file_hash": job.file_hash,
                "worker_id": self.records.worker_id}

    def _fail(self, lease: runs.RunLease, job: jobs.IngestJob | jobs.RecordsJob, reason: str,
              stage: str, started: float, claim: runs.ClaimResult, *, code: str,
              exc: BaseException | None = None) -> Outcome:
        stats = {"stage": stage, "duration_ms": round((time.monotonic() - started) * 1000)}
        if isinstance(exc, BatchRejected):
            code = exc.batch_code  # BATCH_MISSING_COLUMN…: the file's fault, not retryable
        try:
            if isinstance(job, jobs.RecordsJob) and self.records is not None:
                # Batch and run fail together, with the file-level issues beside them.
                issues = exc.issues if isinstance(exc, BatchRejected) else []
                self.records.fail(lease, job, reason, stage, stats, issues, code)
            else:
                lease.fail(reason, stats, code)
        except psycopg.Error as exc:
            # Not durable, so not deleted: SQS redelivers, and after maxReceiveCount the DLQ.
            log.error("could not persist the failure; leaving the message",
                      extra={"error": str(exc)})
            return Leave("could not persist failure")
        _log_complete(job, "failed", {**stats, "error": reason}, claim)
        self.alerts.send(alerts.job_failed(job.run_id, job.tenant_id, code, stage))
        return Ack("failed")


def _is_infrastructure(exc: BaseException) -> bool:
    from shared import retry

    return retry.is_transient(exc) or isinstance(exc, psycopg.OperationalError | MemoryError)


def _log_complete(job: jobs.IngestJob | jobs.RecordsJob, status: str, stats: dict[str, Any],
                  claim: runs.ClaimResult) -> None:
    subject = ({"batch_id": str(job.batch_id), "file_hash": job.file_hash}
               if isinstance(job, jobs.RecordsJob) else {"doc_id": str(job.doc_id)})
    log.info("ingest_job_complete", extra={
        "status": status, "run_id": str(job.run_id), "tenant_id": str(job.tenant_id),
        **subject, "claim": claim.claim.value,
        "queue_wait_ms": round(claim.queue_wait_s * 1000) if claim.queue_wait_s else None,
        **{k: v for k, v in stats.items() if k != "error"},
        **({"error": stats["error"]} if "error" in stats else {}),
    })
    worker_metrics.job_finished(status, stats)
