"""A worker's hold on one run: the advisory lock, the claim, and a live heartbeat.

Ownership is the lock (docs/decisions/0075-lock-is-ownership.md). The lock lives on a dedicated
session connection held by the job alone (never a pooled or transaction-pooled one: the lock
must stay with this job), so it dies with the owner's process. A run whose lock can be taken has
no live owner and is taken over at once, whatever its heartbeat says; the heartbeat window only
decides about an owner whose session lives but has stopped beating (a wedged process). When a
job ends cleanly its session's advisory locks are all released and the session is kept for the
process's next job (``LeaseConnections``, docs/decisions/0232): a small document then costs no
new connection; a session that may still hold anything (lost, abandoned, failed) is closed.

The heartbeat thread writes ``updated_at``, ``stage`` and ``progress`` on the lock connection
every few seconds, so if the connection drops the lock is known to be gone and the job aborts.
A new stage is written at once, unless the previous write was under a fifth of the heartbeat
ago: then the heartbeat thread writes it when that fifth is up, so a document done in half a
second costs one stage write, not five. Every write names the run's ``takeover_count`` as of the
claim (the fence): once another worker has taken the run over, a previous owner's writes match
nothing.

Each claim that runs the job opens an attempt (``run_attempts``, docs/decisions/0100): a first
delivery starts the attempt a retry or redrive queued, or adds one; a takeover ends the dead
owner's attempt and adds its own. Stage times go to the attempt with the heartbeat.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from shared import db, jobs

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("queries.sql"))


class Claim(Enum):
    STARTED = "started"          # queued → running: ours
    TAKEN_OVER = "taken_over"    # running without a live owner (or a wedged one): ours now
    BUSY = "busy"                # another live worker holds the lock
    DONE = "done"                # succeeded or failed already: nothing to do
    MISSING = "missing"          # no such run: the job can never succeed


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    status: str | None = None
    # For BUSY: seconds until the current holder's heartbeat would count as stale, rounded up.
    retry_after_s: float | None = None
    queue_wait_s: float | None = None
    # For TAKEN_OVER: how long the run had gone without a heartbeat, and its takeover number.
    stale_s: float | None = None
    takeover_count: int | None = None


class LeaseLost(Exception):
    """The lock connection dropped: another worker may take the run over, so stop now."""


class Aborted(Exception):
    """The worker is shutting down and gave up on this job."""


def lock_key(run_id: UUID) -> int:
    """A signed 64-bit advisory lock key from an id: the first 8 bytes, big-endian.

    Runs are locked through SQL's run_lock_key() (migrations/0008), which computes the same
    number; this one keys the per-document lock of the content transaction.
    """
    return int.from_bytes(run_id.bytes[:8], "big", signed=True)


class LeaseConnections:
    """Lock sessions kept between jobs of one process: a job takes one (or opens one), and one
    that ended cleanly gives it back with every advisory lock of the session released."""

    def __init__(self, database_url: str, *, keep: int) -> None:
        self.database_url = database_url
        self.keep = keep
        self._idle: list[db.Conn] = []
        self._lock = threading.Lock()

    def take(self) -> tuple[db.Conn, bool]:
        """A session and whether it was kept from an earlier job; opening may raise
        psycopg.OperationalError (the caller leaves the message for later)."""
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    return conn, True
        return open_lock_connection(self.database_url), False

    def give_back(self, conn: db.Conn) -> None:
        try:
            # The run's lock and any tenant slot of a records job: as if the session closed.
            conn.execute(Q["unlock_all"])
        except psycopg.Error:
            conn.close()
            return
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(psycopg.Error):
                conn.close()


def open_lock_connection(database_url: str) -> db.Conn:
    return db.connect(database_url, autocommit=True, connect_timeout=5)


class RunLease:
    def __init__(self, database_url: str, job: jobs.IngestJob | jobs.RecordsJob, *,
                 stale_after_s: float, heartbeat_s: float, worker: str | None = None,
                 connections: LeaseConnections | None = None) -> None:
        self.job = job
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        # Our attempt's number once the claim opened it, and its stage times (ms) so far:
        # the pipeline's stepper writes them, the heartbeat and the endings store them.
        self.attempt_no: int | None = None
        self.timings: dict[str, int] = {}
        self.keys = {"run_id": job.run_id, "tenant_id": job.tenant_id}
        self.stale_after_s = stale_after_s
        self.heartbeat_s = heartbeat_s
        self._database_url = database_url
        self._connections = connections
        # Opening may raise psycopg.OperationalError: the caller leaves the message for later.
        if connections is not None:
            self.conn, self._reused = connections.take()
        else:
            self.conn, self._reused = open_lock_connection(database_url), False
        self.stage = "starting"
        self.progress = 0.0
        # A stage change within this long of the last write waits for the heartbeat thread.
        self._min_report_s = heartbeat_s / 5
        self._last_write = time.monotonic()
        self._unwritten = False
        self._wake = threading.Event()
        # takeover_count as of our claim; every later write of ours is conditional on it.
        self.fence = 0
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> ClaimResult:
        """Count the delivery, take the lock, and move the run to running if it is ours to run."""
        try:
            row = self.conn.execute(Q["count_delivery"], self.keys).fetchone()
        except psycopg.OperationalError:
            if not self._reused:
                raise
            # A kept session that died while idle (a restart, a terminated backend): a new one.
            self.conn.close()
            self.conn, self._reused = open_lock_connection(self._database_url), False
            row = self.conn.execute(Q["count_delivery"], self.keys).fetchone()
        if row is None:
            return ClaimResult(Claim.MISSING)
        if row["status"] in ("succeeded", "failed"):
            return ClaimResult(Claim.DONE, row["status"])
        if not self._try_lock() and not self._end_stuck_owner(row):
            return self._busy(row)
        self.fence = row["takeover_count"]
        if row["status"] == "queued":
            started = self.conn.execute(Q["start_run"], self.keys).fetchone()
            if started is not None:
                wait_s = self._open_attempt("delivery")
                return ClaimResult(Claim.STARTED, "queued", queue_wait_s=wait_s)
        # We hold the lock, so no live worker owns the run: take it over now.
        taken = self.conn.execute(Q["take_over_run"], self.keys).fetchone()
        if taken is None:
            # It finished between our first look and the lock (its owner let go on success).
            return ClaimResult(Claim.DONE, "finished")
        self.fence = taken["takeover_count"]
        age = round(float(row["heartbeat_age_s"]), 1)
        self._end_attempts("taken_over", ago_s=age, error=(
            f"The worker stopped responding (no heartbeat for {age:g} s); another worker "
            "took the run over."))
        self._open_attempt("takeover", waited_s=age)
        log.warning("took over a run with no live owner", extra={
            "run_id": str(self.job.run_id), "tenant_id": str(self.job.tenant_id),
            "heartbeat_age_s": age, "takeover_count": taken["takeover_count"]})
        return ClaimResult(Claim.TAKEN_OVER, "running", stale_s=age,
                           takeover_count=taken["takeover_count"])

    def _open_attempt(self, kind: str, waited_s: float = 0.0) -> float:
        row = self.conn.execute(Q["open_attempt"], {**self.keys, "kind": kind,
                                                    "worker": self.worker,
                                                    "waited_s": waited_s}).fetchone()
        assert row is not None  # the INSERT runs whenever nothing pending was started
        self.attempt_no = row["attempt_no"]
        return float(row["queue_wait_s"])

    def _end_attempts(self, outcome: str, *, error: str, ago_s: float = 0.0,
                      only_ours: bool = False) -> None:
        self.conn.execute(Q["end_attempts"], {
            **self.keys, "outcome": outcome, "error": error, "ago_s": ago_s,
            "stages": Jsonb(self.timings if only_ours else {}),
            "attempt_no": self.attempt_no if only_ours else None})

    def _try_lock(self) -> bool:
        locked = self.conn.execute(Q["try_lock_run"], self.keys).fetchone()
        return bool(locked and locked["locked"])

    def _end_stuck_owner(self, row: dict[str, Any]) -> bool:
        """An owner that lives but stopped beating for the stale window loses its session."""
        if row["status"] != "running" or float(row["heartbeat_age_s"]) < self.stale_after_s:
            return False
        ended = self.conn.execute(Q["end_stuck_owner"],
                                  {**self.keys, "stale_s": self.stale_after_s}).fetchall()
        if not any(r["ended"] for r in ended):
            return False
        log.warning("ended the session of a wedged owner", extra={
            "run_id": str(self.job.run_id), "heartbeat_age_s": round(float(row["heartbeat_age_s"]), 1)})
        return self._try_lock()

    def _busy(self, row: dict[str, Any]) -> ClaimResult:
        """A live owner holds the run. Its death shows in its own message (which comes back
        after the visibility timeout); for this copy, only a stale heartbeat can change the
        answer, so come back exactly then, rounded up so the next look cannot be early."""
        age = float(row["heartbeat_age_s"]) if row["status"] == "running" else 0.0
        remaining = math.ceil(max(1.0, self.stale_after_s - age))
        return ClaimResult(Claim.BUSY, row["status"], retry_after_s=remaining)

    # ── heartbeat ─────────────────────────────────────────────────────────────────────────
    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat_forever, daemon=True,
                                        name=f"heartbeat-{self.job.run_id}")
        self._thread.start()

    def report(self, stage: str, progress: float) -> None:
        """Record where the job is; written with the next heartbeat, and on a new stage at once
        (or, right after another write, a fifth of a heartbeat later)."""
        changed = stage != self.stage
        self.stage, self.progress = stage, max(0.0, min(1.0, progress))
        if changed:
            if time.monotonic() - self._last_write >= self._min_report_s:
                self.beat()
            else:
                self._unwritten = True
                self._wake.set()
        self.check()

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"lost the lock on run {self.job.run_id}")

    def beat(self) -> None:
        self._last_write = time.monotonic()
        self._unwritten = False
        try:
            done = self.conn.execute(Q["heartbeat"], {
                **self.keys, "stage": self.stage, "progress": self.progress, "fence": self.fence,
                "attempt_no": self.attempt_no, "stages": Jsonb(dict(self.timings))})
        except psycopg.Error:
            if not self._stop.is_set():
                log.error("heartbeat failed; the run's lock is gone, aborting the job",
                          extra={"run_id": str(self.job.run_id)})
                self.lost.set()
            return
        if done.rowcount == 0 and not self._stop.is_set():
            # Taken over by another worker (after our session was ended) or already finished.
            log.warning("the run is no longer ours; aborting the job",
                        extra={"run_id": str(self.job.run_id)})
            self.lost.set()

    def _beat_forever(self) -> None:
        while not self._stop.is_set():
            since = time.monotonic() - self._last_write
            due = (self._min_report_s if self._unwritten else self.heartbeat_s) - since
            if due > 0:
                self._wake.wait(due)
                self._wake.clear()
                continue
            self.beat()
            if self.lost.is_set():
                return

    # ── endings ───────────────────────────────────────────────────────────────────────────
    def note_retry(self, error: str) -> None:
        """Best effort: say why this attempt gave up, for the DLQ listing if it lands there."""
        self.stop_heartbeat()
        with contextlib.suppress(psycopg.Error):  # the database may well be what failed
            self.conn.execute(Q["note_retry"], {**self.keys, "error": error[:300]})
            # The message comes back to a worker that takes the run over: a new attempt.
            self._end_attempts("released", error=f"Gave up on a passing fault ({error[:300]}); "
                               "the queue delivers the job again.", only_ours=True)

    def fail(self, error: str, stats: dict[str, Any], code: str | None = None) -> None:
        """Persist failed with its reason and code; raises if the database cannot be reached.

        The stages finished before the failure go with the stats, so the run and its attempt
        (ended by the trigger of migrations/0011) show where the time went.
        """
        self.stop_heartbeat()
        stats = {"stages": dict(self.timings), **stats}
        self.conn.execute(Q["fail_run"], {**self.keys, "error": error, "stats": Jsonb(stats),
                                          "error_code": code, "stage": self.stage,
                                          "fence": self.fence})

    def stop_heartbeat(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def close(self) -> None:
        """Let go of the run: its lock is released with the session's, or the session closes."""
        self.stop_heartbeat()
        idle = self._thread is None or not self._thread.is_alive()
        if self._connections is not None and idle and not self.lost.is_set() and not self.conn.closed:
            self._connections.give_back(self.conn)
            return
        with contextlib.suppress(psycopg.Error):
            self.conn.close()  # releases the advisory lock

    def abandon(self) -> None:
        """Let go of the run now, from another thread (shutdown): the lock goes with the
        connection, so the worker that receives the released message takes the run over at
        once. The job's own thread notices at its next check; its writes are fenced."""
        self._stop.set()
        self._wake.set()
        self.lost.set()
        with contextlib.suppress(psycopg.Error):
            self.conn.close()
