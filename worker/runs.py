"""A worker's hold on one run: the advisory lock, the claim, and a live heartbeat.

Ownership is the lock (docs/decisions/0075-lock-is-ownership.md). The lock lives on a session
connection of this process (never a pooled or transaction-pooled one: the lock must stay with
this process), so it dies with the owner's process. A run whose lock can be taken has no live
owner and is taken over at once, whatever its heartbeat says; the heartbeat window only decides
about an owner whose session lives but has stopped beating (a wedged process).

Sessions (``LockSessions``): a records job holds a session of its own (its tenant slot is an
advisory lock on it too, and a session takes the same lock twice without a murmur), kept for
the process's next job when it ended cleanly (docs/decisions/0232). Document jobs share a few
sessions, each holding the locks of many runs (docs/decisions/0301): a GPU worker keeps
hundreds of documents between its job slots and its vectors, and a session each would be
hundreds of Postgres backends. The process itself refuses a second claim of a run it already
holds, which the lock alone would grant on a shared session.

Each session has one heartbeat thread, which writes ``updated_at``, ``stage`` and ``progress``
of every run it holds in one statement every few seconds, so if the connection drops the locks
are known to be gone and the jobs abort. A new stage is written at once (by that thread, never
by the reporting one: a callback of the embed queue may report), unless the session's previous
write was under a fifth of the heartbeat ago: then when that fifth is up, so a document done in
half a second costs one stage write, not five, and the stages of documents that move together
are written together. Every write names the run's ``takeover_count`` as of the claim (the
fence): once another worker has taken the run over, a previous owner's writes match nothing.

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
from collections.abc import Callable
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


class LockSession:
    """One session of this process holding run locks, and the heartbeat of those runs.

    Exclusive: one job's at a time (a records job: its tenant slot is a lock on it too). Shared:
    the locks of many document runs at once, each released on its own when its job ends.
    Statements of several threads on it run one at a time (psycopg serialises them).
    """

    def __init__(self, database_url: str, *, heartbeat_s: float, exclusive: bool) -> None:
        self.conn = open_lock_connection(database_url)
        self.exclusive = exclusive
        self.heartbeat_s = heartbeat_s
        self._min_report_s = heartbeat_s / 5
        self.users = 0  # leases on it, heartbeating or not (LockSessions picks the least used)
        self._beating: set[RunLease] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._last_write = time.monotonic()
        self._thread: threading.Thread | None = None
        self.dead = False

    @property
    def alive(self) -> bool:
        return not self.dead and not self.conn.closed

    def attach(self, lease: RunLease) -> None:
        with self._lock:
            self._beating.add(lease)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat_forever, daemon=True,
                                                name="heartbeat")
                self._thread.start()

    def detach(self, lease: RunLease) -> None:
        with self._lock:
            self._beating.discard(lease)

    def wake(self) -> None:
        self._wake.set()

    def kill(self, why: str) -> None:
        """The session is gone or must go: every run on it is lost, the locks go with it."""
        with self._lock:
            self.dead = True
            leases = list(self._beating)
            self._beating.clear()
        for lease in leases:
            lease.mark_lost(why)
        with contextlib.suppress(psycopg.Error):
            self.conn.close()
        self._wake.set()

    def beat(self, leases: list[RunLease] | None = None) -> None:
        """Write the runs' heartbeat now (all on this session unless given)."""
        with self._lock:
            leases = list(self._beating) if leases is None else leases
            self._last_write = time.monotonic()
        if not leases:
            return
        rows = [lease.snapshot() for lease in leases]
        try:
            cur = self.conn.execute(Q["heartbeat_many"], {
                key: [row[key] for row in rows]
                for key in ("run_ids", "tenant_ids", "stages", "progress", "fences", "attempts",
                            "times")})
            ours = {row["run_id"] for row in cur.fetchall()}
        except psycopg.Error:
            if not self.dead:
                log.error("heartbeat failed; the run's lock is gone, aborting the job",
                          extra={"runs": len(leases)})
                self.kill("heartbeat failed")
            return
        for lease in leases:
            if lease.job.run_id not in ours and lease.beating:
                # Taken over by another worker (after our session was ended) or finished.
                log.warning("the run is no longer ours; aborting the job",
                            extra={"run_id": str(lease.job.run_id)})
                lease.mark_lost("the run is no longer ours")

    def _beat_forever(self) -> None:
        while not self.dead:
            with self._lock:
                if not self._beating:
                    self._thread = None
                    return
                unwritten = any(lease.unwritten for lease in self._beating)
                since = time.monotonic() - self._last_write
            due = (self._min_report_s if unwritten else self.heartbeat_s) - since
            if due > 0:
                self._wake.wait(due)
                self._wake.clear()
                continue
            self.beat()


class LockSessions:
    """The lock sessions of one worker process: exclusive ones for records jobs, kept between
    jobs (up to ``keep`` idle), and ``shared`` ones that document jobs share; and the runs this
    process holds, so it never claims one twice."""

    def __init__(self, database_url: str, *, keep: int, shared: int = 0,
                 heartbeat_s: float = 5.0) -> None:
        self.database_url = database_url
        self.keep = keep
        self.heartbeat_s = heartbeat_s
        self._idle: list[LockSession] = []
        self._shared: list[LockSession | None] = [None] * shared
        self._held: set[UUID] = set()
        self._lock = threading.Lock()

    def take(self, *, exclusive: bool = True) -> tuple[LockSession, bool]:
        """A session and whether it was kept from earlier; opening may raise
        psycopg.OperationalError (the caller leaves the message for later)."""
        if not exclusive and self._shared:
            return self._take_shared()
        with self._lock:
            while self._idle:
                session = self._idle.pop()
                if session.alive:
                    session.users += 1
                    return session, True
        session = self._open(exclusive=True)
        session.users += 1
        return session, False

    def _take_shared(self) -> tuple[LockSession, bool]:
        with self._lock:
            live = [(k, s) for k, s in enumerate(self._shared) if s is not None and s.alive]
            free = [k for k, s in enumerate(self._shared) if s is None or not s.alive]
            if free and (not live or min(s.users for _, s in live) > 0):
                k = free[0]
            else:
                k = min(live, key=lambda ks: ks[1].users)[0]
            session = self._shared[k]
            if session is not None and session.alive:
                session.users += 1
                return session, True
            self._shared[k] = None
        opened = self._open(exclusive=False)
        with self._lock:
            if self._shared[k] is None:
                self._shared[k] = opened
            else:  # another thread opened it meanwhile: use that one
                with contextlib.suppress(psycopg.Error):
                    opened.conn.close()
                opened = self._shared[k]  # type: ignore[assignment]
            opened.users += 1
        return opened, False

    def _open(self, *, exclusive: bool) -> LockSession:
        return LockSession(self.database_url, heartbeat_s=self.heartbeat_s, exclusive=exclusive)

    def replace(self, session: LockSession) -> LockSession:
        """A session found dead: every run on it is lost; a live one in its place."""
        session.kill("the session died")
        self.give_back(session, clean=False)
        return self.take(exclusive=session.exclusive)[0]

    def give_back(self, session: LockSession, *, clean: bool) -> None:
        """A lease is done with ``session``. An exclusive one that ended ``clean`` is kept for
        the next job with every advisory lock of it released (the run's, a tenant slot: what
        closing released); otherwise it is closed. A shared one stays for the others."""
        with self._lock:
            session.users -= 1
        if not session.exclusive:
            return
        if clean and session.alive:
            try:
                session.conn.execute(Q["unlock_all"])
            except psycopg.Error:
                session.kill("unlock failed")
                return
            with self._lock:
                if len(self._idle) < self.keep:
                    self._idle.append(session)
                    return
        with contextlib.suppress(psycopg.Error):
            session.conn.close()

    def hold(self, run_id: UUID) -> bool:
        """Mark ``run_id`` as held by this process; False if it already is."""
        with self._lock:
            if run_id in self._held:
                return False
            self._held.add(run_id)
            return True

    def let_go(self, run_id: UUID) -> None:
        with self._lock:
            self._held.discard(run_id)

    def abandon(self) -> None:
        """Shutdown: close the shared sessions, so every document run's lock goes at once."""
        with self._lock:
            shared = [s for s in self._shared if s is not None]
        for session in shared:
            session.kill("the worker is shutting down")

    def close(self) -> None:
        with self._lock:
            sessions = self._idle + [s for s in self._shared if s is not None]
            self._idle, self._shared = [], [None] * len(self._shared)
        for session in sessions:
            session.kill("closed")


def open_lock_connection(database_url: str) -> db.Conn:
    return db.connect(database_url, autocommit=True, connect_timeout=5)


class RunLease:
    def __init__(self, database_url: str, job: jobs.IngestJob | jobs.RecordsJob, *,
                 stale_after_s: float, heartbeat_s: float, worker: str | None = None,
                 connections: LockSessions | None = None, shared: bool = False) -> None:
        self.job = job
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        # Our attempt's number once the claim opened it, and its stage times (ms) so far:
        # the pipeline's stepper writes them, the heartbeat and the endings store them.
        self.attempt_no: int | None = None
        self.timings: dict[str, int] = {}
        self.keys = {"run_id": job.run_id, "tenant_id": job.tenant_id}
        self.stale_after_s = stale_after_s
        self._sessions = connections or LockSessions(database_url, keep=0,
                                                     heartbeat_s=heartbeat_s)
        # Opening may raise psycopg.OperationalError: the caller leaves the message for later.
        self.session, self._reused = self._sessions.take(exclusive=not shared)
        self.stage = "starting"
        self.progress = 0.0
        self.unwritten = False  # a stage the heartbeat has not written yet
        self.beating = False
        self._held = False  # this process's mark that it holds the run (LockSessions.hold)
        self._locked = False  # the run's advisory lock is ours, on self.session
        self._released = False
        # takeover_count as of our claim; every later write of ours is conditional on it.
        self.fence = 0
        self.lost = threading.Event()
        self._on_lost: list[Callable[[], None]] = []
        self._lost_lock = threading.Lock()

    @property
    def conn(self) -> db.Conn:
        return self.session.conn

    def claim(self) -> ClaimResult:
        """Count the delivery, take the lock, and move the run to running if it is ours to run."""
        try:
            row = self.conn.execute(Q["count_delivery"], self.keys).fetchone()
        except psycopg.OperationalError:
            if not self._reused:
                raise
            # A kept session that died while idle (a restart, a terminated backend): a new one.
            self.session, self._reused = self._sessions.replace(self.session), False
            row = self.conn.execute(Q["count_delivery"], self.keys).fetchone()
        if row is None:
            return ClaimResult(Claim.MISSING)
        if row["status"] in ("succeeded", "failed"):
            return ClaimResult(Claim.DONE, row["status"])
        if not self._sessions.hold(self.job.run_id):
            # This process runs it already (a second delivery); a shared session would grant
            # the lock again, so the process itself says no.
            return self._busy(row)
        self._held = True
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
        self._locked = bool(locked and locked["locked"])
        return self._locked

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
        self.beating = True
        self.session.attach(self)

    def report(self, stage: str, progress: float) -> None:
        """Record where the job is; written with the next heartbeat, and on a new stage at once
        (or, right after another write of the session, a fifth of a heartbeat later), by the
        session's heartbeat thread: this never waits for the database."""
        changed = stage != self.stage
        self.stage, self.progress = stage, max(0.0, min(1.0, progress))
        if changed and self.beating:
            self.unwritten = True
            self.session.wake()
        self.check()

    def check(self) -> None:
        if self.lost.is_set():
            raise LeaseLost(f"lost the lock on run {self.job.run_id}")

    def when_lost(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from whichever thread finds out) once the lease is lost; at once
        if it already is. Callbacks must not block."""
        with self._lost_lock:
            if not self.lost.is_set():
                self._on_lost.append(callback)
                return
        callback()

    def mark_lost(self, why: str) -> None:
        with self._lost_lock:
            if self.lost.is_set():
                return
            self.lost.set()
            callbacks, self._on_lost = self._on_lost, []
        for callback in callbacks:
            try:
                callback()
            except Exception:  # noqa: BLE001 - one job's cleanup never stops the heartbeat
                log.exception("a lost-lease callback failed", extra={"why": why})

    def snapshot(self) -> dict[str, Any]:
        """This run's row of the session's heartbeat statement."""
        self.unwritten = False
        return {"run_ids": self.job.run_id, "tenant_ids": self.job.tenant_id,
                "stages": self.stage, "progress": self.progress, "fences": self.fence,
                "attempts": self.attempt_no, "times": Jsonb(dict(self.timings))}

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
        self.beating = False
        self.session.detach(self)

    def close(self) -> None:
        """Let go of the run: on an exclusive session every lock of it goes (the session is
        kept for the next job if this one ended cleanly, else closed); on a shared one, this
        run's lock only."""
        if self._released:
            return
        self._released = True
        self.stop_heartbeat()
        session = self.session
        if not session.exclusive and session.alive and self._locked:
            try:
                session.conn.execute(Q["unlock_run"], self.keys)
            except psycopg.Error:
                session.kill("unlock failed")
        self._sessions.give_back(session, clean=not self.lost.is_set())
        if self._held:
            self._sessions.let_go(self.job.run_id)

    def abandon(self) -> None:
        """Let go of the run now, from another thread (shutdown): the lock goes with the
        connection (an exclusive session's, or the shared sessions, which the caller closes
        once for all), so the worker that receives the released message takes the run over at
        once. The job's own thread notices at its next check; its writes are fenced."""
        self.mark_lost("abandoned")
        self.beating = False
        if self.session.exclusive:
            with contextlib.suppress(psycopg.Error):
                self.session.conn.close()
