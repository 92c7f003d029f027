"""A worker's hold on one run: the advisory lock, the claim, and a live heartbeat.

The lock lives on a dedicated session connection opened for the job (never a pooled or
transaction-pooled one: the lock must stay with this job). The heartbeat thread writes
``updated_at``, ``stage`` and ``progress`` on that same connection every few seconds, so if the
connection drops, the heartbeat notices, the lock is known to be gone, and the job aborts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
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
    TAKEN_OVER = "taken_over"    # running with a stale heartbeat: ours now
    BUSY = "busy"                # another worker holds the lock or a fresh heartbeat
    DONE = "done"                # succeeded or failed already: nothing to do
    MISSING = "missing"          # no such run: the job can never succeed


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    status: str | None = None
    # For BUSY: seconds until the current holder's heartbeat would count as stale.
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
    """A signed 64-bit advisory lock key from the run id."""
    return int.from_bytes(run_id.bytes[:8], "big", signed=True)


class RunLease:
    def __init__(self, database_url: str, job: jobs.IngestJob, *, stale_after_s: float,
                 heartbeat_s: float) -> None:
        self.job = job
        self.keys = {"run_id": job.run_id, "tenant_id": job.tenant_id}
        self.stale_after_s = stale_after_s
        self.heartbeat_s = heartbeat_s
        # Opening may raise psycopg.OperationalError: the caller leaves the message for later.
        self.conn = db.connect(database_url, autocommit=True, connect_timeout=5)
        self.stage = "starting"
        self.progress = 0.0
        self._stop = threading.Event()
        self.lost = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> ClaimResult:
        """Count the delivery, take the lock, and move the run to running if it is ours to run."""
        row = self.conn.execute(Q["count_delivery"], self.keys).fetchone()
        if row is None:
            return ClaimResult(Claim.MISSING)
        if row["status"] in ("succeeded", "failed"):
            return ClaimResult(Claim.DONE, row["status"])
        locked = self.conn.execute(Q["try_lock_run"], {"key": lock_key(self.job.run_id)}).fetchone()
        if not locked or not locked["locked"]:
            return ClaimResult(Claim.BUSY, row["status"], retry_after_s=self.stale_after_s)
        wait_s = None
        if row["status"] == "queued":
            started = self.conn.execute(Q["start_run"], self.keys).fetchone()
            if started is not None:
                wait_s = (started["started_at"] - row["created_at"]).total_seconds()
                return ClaimResult(Claim.STARTED, "queued", queue_wait_s=wait_s)
        taken = self.conn.execute(Q["take_over_run"], {**self.keys, "stale_s": self.stale_after_s}
                                  ).fetchone()
        if taken is not None:
            log.warning("stale takeover", extra={
                "run_id": str(self.job.run_id), "tenant_id": str(self.job.tenant_id),
                "heartbeat_age_s": round(float(row["heartbeat_age_s"]), 1),
                "takeover_count": taken["takeover_count"]})
            return ClaimResult(Claim.TAKEN_OVER, "running",
                               stale_s=float(row["heartbeat_age_s"]),
                               takeover_count=taken["takeover_count"])
        # Running with a fresh heartbeat, yet its lock was free: its worker let go moments ago
        # (shutdown) or is on the way out. Come back once that heartbeat is stale.
        remaining = max(1.0, self.stale_after_s - float(row["heartbeat_age_s"]))
        return ClaimResult(Claim.BUSY, row["status"], retry_after_s=remaining)

    # ── heartbeat ─────────────────────────────────────────────────────────────────────────
    def start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat_forever, daemon=True,
                                        name=f"heartbeat-{self.job.run_id}")
        self._thread.start()

    def report(self, stage: str, progress: float) -> None:
        """Record where the job is; written with the next heartbeat, and at once on a new stage."""
        changed = stage != self.stage
        self.stage, self.progress = stage, max(0.0, min(1.0, progress))
        if changed:
            self.beat()
        self.check()

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"lost the lock on run {self.job.run_id}")

    def beat(self) -> None:
        try:
            self.conn.execute(Q["heartbeat"], {**self.keys, "stage": self.stage,
                                                "progress": self.progress})
        except psycopg.Error:
            if not self._stop.is_set():
                log.error("heartbeat failed; the run's lock is gone, aborting the job",
                          extra={"run_id": str(self.job.run_id)})
                self.lost.set()

    def _beat_forever(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            self.beat()
            if self.lost.is_set():
                return

    # ── endings ───────────────────────────────────────────────────────────────────────────
    def note_retry(self, error: str) -> None:
        """Best effort: say why this attempt gave up, for the DLQ listing if it lands there."""
        self.stop_heartbeat()
        with contextlib.suppress(psycopg.Error):  # the database may well be what failed
            self.conn.execute(Q["note_retry"], {**self.keys, "error": error[:300]})

    def fail(self, error: str, stats: dict[str, Any]) -> None:
        """Persist failed with its reason; raises if the database cannot be reached."""
        self.stop_heartbeat()
        self.conn.execute(Q["fail_run"], {**self.keys, "error": error, "stats": Jsonb(stats),
                                          "stage": self.stage})

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def close(self) -> None:
        self.stop_heartbeat()
        with contextlib.suppress(psycopg.Error):
            self.conn.close()  # releases the advisory lock
