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
        batches: dict[UUID, list[apply.Item]] = {}
        alone: list[apply.Item] = []
        refused: list[tuple[dict[str, Any], str]] = []
        for row in claimed:
            try:
                item = self._checked(row)
            except Exception as exc:  # noqa: BLE001 - this row alone, never the claim
                refused.append((row, _refusal(exc)))
                if not isinstance(exc, Rejected | Unreadable):
                    log.exception("ledger event could not be handled; dead-lettering it",
                                  extra=_context(row))
                continue
            # A row claimed before and never settled may be what stopped the applier (a crash
            # loop): it goes alone, so it costs no other event an attempt (ADR 0281).
            (alone if item.event.used > 1 else batches.setdefault(
                item.event.tenant_id, [])).append(item)
        self._dead_letter(conn, refused)
        for tenant_id, items in batches.items():
            if self.stopping.is_set():
                break  # unapplied claims come back when their lease ends
            self._apply(conn, tenant_id, items)
        for item in alone:
            if self.stopping.is_set():
                break
            self._apply(conn, item.event.tenant_id, [item])
        return bool(claimed)

    # ── one claim's events ─────────────────────────────────────────────────────────────────
    def _checked(self, row: dict[str, Any]) -> apply.Item:
        """The row as an event that may go into a batch; raises what dead-letters it now."""
        bad = lenient.unreadable(row)
        if bad:
            raise Unreadable(bad)
        event = apply.Event.of(row)
        max_attempts = self.settings.ledger_apply_max_attempts
        if event.used > max_attempts:
            # Claimed more often than allowed without ever settling: the applier died inside
            # every attempt (a crash loop). Give up on the record.
            raise Rejected(f"gave up after {max_attempts} attempts: the applier stopped "
                           "mid-apply each time; see the worker's logs")
        return apply.Item(event, apply.validate(event))

    def _apply(self, conn: db.Conn, tenant_id: UUID, items: list[apply.Item]) -> None:
        """Apply a batch in one transaction; one that fails is split in halves, each applied on
        its own, until the event at fault is alone and settles alone (ADR 0281)."""
        started = time.monotonic()
        try:
            outcomes = apply.apply_batch(conn, tenant_id, items, hold=self._hold)
        except Exception as exc:
            if db.is_unavailable(exc):
                raise  # the database, not the batch: the loop reconnects
            if len(items) > 1:
                log.info("ledger batch failed (%s); splitting it", type(exc).__name__,
                         extra={"tenant_id": str(tenant_id), "events": len(items)})
                half = len(items) // 2
                self._apply(conn, tenant_id, items[:half])
                self._apply(conn, tenant_id, items[half:])
            else:
                self._failed(conn, items[0].event, exc)
            return
        superseded = sum(o.superseded for o in outcomes)
        self.applied += len(outcomes)
        metrics.APPLIED.labels("applied").inc(len(outcomes) - superseded)
        metrics.APPLIED.labels("superseded").inc(superseded)
        metrics.APPLY_SECONDS.observe(time.monotonic() - started)
        for outcome in outcomes:  # an ad metric that names what does not exist says so
            if outcome.note not in ("written", "superseded"):
                log.info("ledger event applied", extra={
                    "ledger_id": outcome.ledger_id, "tenant_id": str(tenant_id),
                    "outcome": outcome.note})
        log.info("ledger batch applied", extra={
            "tenant_id": str(tenant_id), "events": len(outcomes), "superseded": superseded,
            "skipped": len(items) - len(outcomes),
            "seconds": round(time.monotonic() - started, 3)})

    def _failed(self, conn: db.Conn, event: apply.Event, exc: Exception) -> None:
        """One event's apply failed alone: dead-letter it if it can never apply (or its budget
        is spent), else retry it after a full-jitter backoff, the error kept for triage."""
        max_attempts = self.settings.ledger_apply_max_attempts
        if isinstance(exc, Rejected):
            error = str(exc)
        elif event.used >= max_attempts:
            error = f"failed {event.used} times; last: {type(exc).__name__}: {exc}"
        else:
            delay = backoff_s(event.used, self.settings.ledger_apply_backoff_base_s,
                              self.settings.ledger_apply_backoff_max_s)
            error = _clean(f"{type(exc).__name__}: {exc}")
            with conn.transaction():
                done = conn.execute(Q["retry_later"], {**event.keys, "error": error,
                                                       "delay_s": delay}).fetchone()
            if done is not None:
                metrics.APPLIED.labels("retry").inc()
                log.info("ledger event failed; retrying later", extra={
                    **_context(event), "error": error[:300], "retry_in_s": round(delay, 3)})
            return
        self._dead_letter(conn, [(event.keys, error)])

    def _dead_letter(self, conn: db.Conn, rows: list[tuple[dict[str, Any], str]]) -> None:
        """Dead-letter these claimed rows with their errors, in one statement, each fenced on
        its own claim (a row another applier claimed since is theirs to settle)."""
        if not rows:
            return
        errors = [_clean(error) for _, error in rows]
        with conn.transaction():
            done = {r["ledger_id"] for r in conn.execute(Q["dead_letter"], {
                "ledger_ids": [r["ledger_id"] for r, _ in rows],
                "tenant_ids": [r["tenant_id"] for r, _ in rows],
                "attempts": [r.get("attempt", r.get("apply_attempt_count")) for r, _ in rows],
                "errors": errors})}
        metrics.APPLIED.labels("dead_letter").inc(len(done))
        for (row, _), error in zip(rows, errors, strict=True):
            if row["ledger_id"] in done:
                log.warning("ledger event dead-lettered", extra={
                    **_context(row), "error": error[:300]})

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


class Unreadable(Exception):
    """A claimed row holds a stored value Python cannot read back (docs/decisions/0193)."""

    def __init__(self, columns: dict[str, lenient.Unreadable]) -> None:
        self.columns = columns
        super().__init__(", ".join(columns))

    def remedy(self) -> str:
        """What works for it: an edit can correct the time, sequence and payload (ADR 0284)."""
        shown = ", ".join(f"{name} ({value.type_name}: {value.reason})"
                          for name, value in self.columns.items())
        fields = " and ".join(sorted(self.columns))
        return (f"the stored event cannot be read back: {shown}; correct its {fields} "
                "(edit it: it is then applied again) or discard it")


def _refusal(exc: Exception) -> str:
    if isinstance(exc, Unreadable):
        return exc.remedy()
    if isinstance(exc, Rejected):
        return str(exc)
    return f"the applier could not handle this event ({type(exc).__name__}); see the worker's logs"


def _clean(error: str) -> str:
    """A database error's DETAIL holds the row's values: never into the table. It may also
    quote a value with a NUL in it, which a text column refuses."""
    return applog.scrub(error).replace("\x00", "\\0")[:MAX_ERROR_CHARS]


def _context(row: Any) -> dict[str, Any]:
    if isinstance(row, apply.Event):
        return {"ledger_id": row.ledger_id, "tenant_id": str(row.tenant_id),
                "event_type": row.type[:100], "attempt": row.used}
    return {"ledger_id": row["ledger_id"], "tenant_id": str(row["tenant_id"])}


def last_served(after: UUID | None, tenants: set[UUID]) -> UUID:
    """The last of ``tenants`` in the claim's round (those past ``after``, then from the start):
    the next claim begins after it, so a claim that could not reach every tenant does not
    serve the same first ones again."""
    turn = sorted(t for t in tenants if after is None or t > after) + sorted(
        t for t in tenants if after is not None and t <= after)
    return turn[-1]


def start(applier: Applier) -> threading.Thread:
    return applier.start()
