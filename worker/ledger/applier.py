"""The applier loop: claim due pending events, apply each, settle failures (docs/decisions/0139).

One row never holds the others back (docs/decisions/0193): the connection reads stored values
Python cannot hold (a time in year 0, a 5,000-digit number) as markers instead of failing the
claim's fetch, such a row is dead-lettered with the column it could not read, and anything else
one row raises is settled on that row alone while the rest of the claim goes on.

Runs as a thread of `ingest worker`, beside the SQS consumer (LEDGER_APPLY_ENABLED), on a
connection of its own in autocommit (each ``transaction()`` block is one transaction); a broken
connection is dropped and opened again on the next step. ``drain()`` (``ingest worker --once``) applies until nothing
pending is left to it, waiting out retry backoffs, so tests need no sleeps. Between claims that
find nothing it polls every LEDGER_APPLY_POLL_S.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import db, retry
from shared import logging as applog
from shared.db import lenient
from shared.settings import WorkerSettings
from worker.background import TableLoop
from worker.ledger import Rejected, apply, metrics

log = logging.getLogger(__name__)
Q = apply.Q
PAUSE_STAGE = "ledger_apply"  # WORKER_PAUSE_AT_STAGE value that holds an apply (tests only)
MAX_ERROR_CHARS = 2000
DRAIN_LOOKS = 5  # claims that find nothing while a row is due before drain() stops


backoff_s = retry.full_jitter_s


class Applier(TableLoop):
    name = "ledger-applier"

    def __init__(self, settings: WorkerSettings) -> None:
        super().__init__(settings.database_url, settings.ledger_apply_poll_s)
        self.settings = settings
        self.applied = 0
        self._last_report = 0.0
        self._after: UUID | None = None  # the tenant served last: the next claim starts past it
        stage, flag = settings.worker_pause_at_stage, settings.worker_pause_file
        self._pause = Path(flag) if stage == PAUSE_STAGE and flag else None

    def conn(self) -> db.Conn:
        fresh = self._conn is None or self._conn.closed
        conn = super().conn()
        if fresh:
            lenient.register(conn)
        return conn

    # ── loops (run_forever: worker/background.py) ──────────────────────────────────────────
    def drain(self) -> None:
        """Apply until no pending event is left to this worker: waits for rows whose retry
        comes due, returns when the rest (if any) are held by other appliers."""
        due_but_unclaimed = 0
        while not self.stopping.is_set():
            if self.step():
                due_but_unclaimed = 0
                continue
            due = self.conn().execute(Q["next_due"]).fetchone() or {}
            if not due.get("pending") or due["due_in_s"] is None:
                return  # nothing left
            if due["due_in_s"] <= 0:
                # Either a retry came due between the claim and this look (try again), or the
                # row is locked by another applier's claim: give up after a few looks.
                due_but_unclaimed += 1
                if due_but_unclaimed > DRAIN_LOOKS:
                    return
            self.stopping.wait(min(max(float(due["due_in_s"]), 0.01),
                                   self.settings.ledger_apply_poll_s))

    def step(self) -> bool:
        """One claim and its events; True when it claimed any."""
        self._report_lag()
        conn = self.conn()
        claimed = conn.execute(Q["claim"], {
            "limit": self.settings.ledger_apply_batch,
            "lease_s": self.settings.ledger_apply_lease_s, "after": self._after}).fetchall()
        if claimed:
            self._after = last_served(self._after, {row["tenant_id"] for row in claimed})
        for row in claimed:
            if self.stopping.is_set():
                break  # unapplied claims come back when their lease ends
            try:
                self._row(conn, row)
            except Exception as exc:
                if db.is_unavailable(exc):
                    raise  # the database, not the row: the loop reconnects
                self._isolate(conn, row, exc)
        return bool(claimed)

    # ── one event ──────────────────────────────────────────────────────────────────────────
    def _row(self, conn: db.Conn, row: dict[str, Any]) -> None:
        bad = lenient.unreadable(row)
        if not bad:
            self._one(conn, apply.Event.of(row))
            return
        columns = ", ".join(f"{name} ({value.type_name}: {value.reason})"
                            for name, value in bad.items())
        self._dead_letter_row(conn, row, f"the stored event cannot be read back: {columns}; "
                                         "correct it (edit and replay) or discard it")

    def _isolate(self, conn: db.Conn, row: dict[str, Any], exc: Exception) -> None:
        """Something this row raised outside the apply's own handling: set it aside, so the
        claim's other rows, and the next claims, go on."""
        log.exception("ledger event could not be handled; dead-lettering it", extra={
            "ledger_id": row["ledger_id"], "tenant_id": str(row["tenant_id"])})
        try:
            self._dead_letter_row(conn, row, f"the applier could not handle this event "
                                             f"({type(exc).__name__}); see the worker's logs")
        except Exception as again:
            if db.is_unavailable(again):
                raise
            # Even that failed: the row comes back after its lease and counts another attempt.
            log.exception("ledger event could not be dead-lettered", extra={
                "ledger_id": row["ledger_id"], "tenant_id": str(row["tenant_id"])})

    def _dead_letter_row(self, conn: db.Conn, row: dict[str, Any], error: str) -> None:
        context = {"ledger_id": row["ledger_id"], "tenant_id": str(row["tenant_id"]),
                   "attempt": row["apply_attempt_count"] - (row.get("apply_attempt_base") or 0)}
        keys = {"ledger_id": row["ledger_id"], "tenant_id": row["tenant_id"],
                "attempt": row["apply_attempt_count"]}
        self._settle_keys(conn, keys, "dead_letter", context, error=error)

    def _one(self, conn: db.Conn, event: apply.Event) -> None:
        context = {"ledger_id": event.ledger_id, "tenant_id": str(event.tenant_id),
                   "event_type": event.type[:100], "attempt": event.used}
        max_attempts = self.settings.ledger_apply_max_attempts
        if event.used > max_attempts:
            # Claimed more often than allowed without ever settling: the applier died inside
            # every attempt (a crash loop). Give up on the record.
            self._settle(conn, event, "dead_letter", context, error=(
                f"gave up after {max_attempts} attempts: the applier stopped mid-apply each "
                "time; see the worker's logs"))
            return
        started = time.monotonic()
        try:
            outcome = apply.apply(conn, event, hold=self._hold)
        except apply.NotOurs:
            log.info("ledger event claimed by another applier meanwhile", extra=context)
            return
        except Rejected as exc:
            self._settle(conn, event, "dead_letter", context, error=str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - every other failure is retried, then dead
            error = f"{type(exc).__name__}: {exc}"
            if event.used >= max_attempts:
                self._settle(conn, event, "dead_letter", context,
                             error=f"failed {event.used} times; last: {error}")
            else:
                delay = backoff_s(event.used, self.settings.ledger_apply_backoff_base_s,
                                  self.settings.ledger_apply_backoff_max_s)
                self._settle(conn, event, "retry", context, error=error, delay_s=delay)
            return
        self.applied += 1
        metrics.APPLIED.labels("superseded" if outcome.superseded else "applied").inc()
        metrics.APPLY_SECONDS.observe(time.monotonic() - started)
        log.info("ledger event applied", extra={**context, "outcome": outcome.note})

    def _settle(self, conn: db.Conn, event: apply.Event, how: str, context: dict[str, Any],
                *, error: str, delay_s: float = 0.0) -> None:
        self._settle_keys(conn, event.keys, how, context, error=error, delay_s=delay_s)

    def _settle_keys(self, conn: db.Conn, keys: dict[str, Any], how: str,
                     context: dict[str, Any], *, error: str, delay_s: float = 0.0) -> None:
        # A database error's DETAIL holds the row's values: never into the table. It may also
        # quote a value with a NUL in it, which a text column refuses.
        error = applog.scrub(error).replace("\x00", "\\0")[:MAX_ERROR_CHARS]
        params = {**keys, "error": error, "delay_s": delay_s, "entity_key": None}
        query = "dead_letter" if how == "dead_letter" else "retry_later"
        with conn.transaction():
            done = conn.execute(Q[query], params).fetchone()
        if done is None:
            return  # another applier claimed it after us; theirs to settle
        metrics.APPLIED.labels(how).inc()
        level = logging.WARNING if how == "dead_letter" else logging.INFO
        log.log(level, "ledger event dead-lettered" if how == "dead_letter"
                else "ledger event failed; retrying later",
                extra={**context, "error": error[:300], "retry_in_s": round(delay_s, 3)})

    def _hold(self) -> None:
        """Test-only: wait inside the apply transaction while the pause file exists."""
        if self._pause is None:
            return
        if self._pause.exists():
            log.info("ledger apply paused", extra={"pause_file": str(self._pause)})
        while self._pause.exists() and not self.stopping.is_set():
            time.sleep(0.05)

    # ── figures ────────────────────────────────────────────────────────────────────────────
    def _report_lag(self, force: bool = False) -> dict[str, Any]:
        now = time.monotonic()
        if not force and now - self._last_report < self.settings.ledger_apply_report_s:
            return {}
        self._last_report = now
        backlog = self.conn().execute(Q["backlog"]).fetchone() or {}
        metrics.observe_backlog(backlog)
        return backlog

    def report_start(self) -> None:
        """At start (event-ledger.md, boot-time rehydration): what the ledger holds, logged
        and in the gauges; the loop then resumes the pending rows."""
        backlog = self._report_lag(force=True)
        oldest = backlog.get("oldest_pending_s")
        log.info("ledger applier started", extra={
            "pending": backlog.get("pending"), "dead_letter": backlog.get("dead_letter"),
            "oldest_pending_s": round(float(oldest), 1) if oldest is not None else None})


def last_served(after: UUID | None, tenants: set[UUID]) -> UUID:
    """The last of ``tenants`` in the claim's round (those past ``after``, then from the start):
    the next claim begins after it, so a claim that could not reach every tenant does not
    serve the same first ones again."""
    turn = sorted(t for t in tenants if after is None or t > after) + sorted(
        t for t in tenants if after is not None and t <= after)
    return turn[-1]


def start(applier: Applier) -> threading.Thread:
    return applier.start()
