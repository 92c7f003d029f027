"""Webhook alerts (import-runs-state-machine.md §5.2): one per incident per window, never in the
way.

Callers hand an ``Alert`` to ``Alerter.send``, which only puts it on an in-memory queue and
returns: a background thread decides whether the incident's window is open and posts
Slack/Discord-compatible JSON (``{"text": …, "content": …}``) with a short timeout. A webhook
that is slow, down or refusing costs a log line and the alert, never a job.

The window is claimed in Postgres (``alert_windows``), so fifty workers failing fifty runs of
one kind raise one alert, and the next alert after the window says how many were held back.
If the database is unreachable the process falls back to a window of its own.

Alerts carry ids, codes and counts only: no file names, titles, error texts or e-mail.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import orjson
import psycopg

from shared import db
from shared import logging as applog

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("alerts.sql"))


@dataclass(frozen=True)
class Alert:
    key: str      # the incident kind: occurrences with the same key share one window
    text: str
    severity: str = "warning"


# ── the alerts of §5.2 ──────────────────────────────────────────────────────────────────────
def job_failed(run_id: object, tenant_id: object, code: str, stage: str | None) -> Alert:
    return Alert(f"job_failed:{code}",
                 f"[INGEST FAILURE] run {run_id} (tenant {tenant_id}): {code}"
                 f"{f' at stage {stage}' if stage else ''}", "error")


def runs_interrupted(run_ids: list[Any], never_picked_up: int, no_heartbeat: int) -> Alert:
    shown = ", ".join(str(r) for r in run_ids[:5]) + (" …" if len(run_ids) > 5 else "")
    return Alert("job_failed:interrupted",
                 f"[INGEST FAILURE] crash guard failed {len(run_ids)} run(s): {never_picked_up} "
                 f"never picked up, {no_heartbeat} without heartbeat ({shown})", "error")


def stale_takeover(run_id: object, tenant_id: object, stale_s: float | None,
                   takeover_count: int | None) -> Alert:
    age = f"{stale_s / 3600:.2f}h ({stale_s:.0f} s without heartbeat)" if stale_s else "a while"
    return Alert("stale_takeover",
                 f"[STALE TAKEOVER] run {run_id} (tenant {tenant_id}) abandoned for {age}; "
                 f"taken over (takeover #{takeover_count or '?'})")


def dlq_depth(count: int, threshold: int) -> Alert:
    return Alert("dlq_depth", f"Ingest dead-letter queue has {count} messages "
                              f"(threshold {threshold}); see docs/operations.md#growing-dlq")


def backlog(count: int, threshold: int) -> Alert:
    return Alert("backlog", f"Ingest backlog at {count} pending jobs (threshold {threshold}); "
                            "see docs/operations.md#backlog")


# Records imports (docs/decisions/0130): batch ids and counts, never a file name.
def imports_failed(count: int, threshold: int) -> Alert:
    return Alert("imports_failed", f"[INGEST FAILURE] {count} import batches failed in the last "
                                   f"hour (threshold {threshold}); see "
                                   "docs/operations.md#failed-imports", "error")


def stale_imports(count: int, oldest_batch_id: object, hours: float) -> Alert:
    return Alert("stale_imports", f"[STALE IMPORTS] {count} import batch(es) unfinished and silent "
                                  f"for over 1h, the oldest {oldest_batch_id} for {hours:.1f}h; "
                                  "see docs/operations.md#stale-imports")


# ── delivery ────────────────────────────────────────────────────────────────────────────────
class Alerter:
    def __init__(self, urls: list[str], *, window_s: float, timeout_s: float = 3.0,
                 database_url: str | None = None, process: str = "ingest",
                 max_pending: int = 200) -> None:
        self.urls = urls
        self.window_s = window_s
        self.timeout_s = timeout_s
        self.database_url = database_url
        self.process = process
        self._pending: queue.Queue[Alert | None] = queue.Queue(maxsize=max_pending)
        self._local: dict[str, tuple[float, int, int]] = {}  # key → (sent_at, suppressed, carried)
        self._conn: db.Conn | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.sent = self.suppressed = self.dropped = 0

    @classmethod
    def from_settings(cls, settings: Any, process: str) -> Alerter:
        return cls(settings.alert_urls, window_s=settings.alert_window_s,
                   timeout_s=settings.alert_timeout_s, database_url=settings.database_url,
                   process=process)

    def send(self, alert: Alert) -> None:
        """Queue an occurrence of an incident; returns at once and never raises."""
        if not self.urls:
            return
        self._start()
        try:
            self._pending.put_nowait(alert)
        except queue.Full:
            self.dropped += 1
            log.warning("alert queue full; alert dropped", extra={"alert": alert.key})

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until queued alerts are handled (for shutdown and tests)."""
        deadline = time.monotonic() + timeout
        while self._pending.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self._pending.unfinished_tasks

    def close(self, timeout: float = 5.0) -> None:
        if self._thread is None:
            return
        self.flush(timeout)
        self._pending.put(None)
        self._thread.join(timeout)
        if self._conn is not None:
            self._conn.close()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="alerts")
                self._thread.start()

    def _loop(self) -> None:
        while (alert := self._pending.get()) is not None:
            try:
                self._handle(alert)
            except Exception:  # noqa: BLE001 - the alert thread must outlive any one alert
                log.exception("alert handling failed; alert dropped")
            finally:
                self._pending.task_done()
        self._pending.task_done()

    def _handle(self, alert: Alert) -> None:
        send, carried = self._claim(alert.key)
        if not send:
            self.suppressed += 1
            return
        text = alert.text
        if carried:
            text += f" (+{carried} more of this kind in the previous {self.window_s:.0f} s window)"
        self._post(applog.redact(text), alert)

    # ── windows ───────────────────────────────────────────────────────────────────────────
    def _claim(self, key: str) -> tuple[bool, int]:
        if self.database_url:
            try:
                return self._claim_in_database(key)
            except psycopg.Error as exc:
                log.warning("alert window unavailable in the database; using this process's",
                            extra={"error": str(exc)})
                self._drop_connection()
        return self._claim_locally(key)

    def _claim_in_database(self, key: str) -> tuple[bool, int]:
        if self._conn is None or self._conn.closed:
            assert self.database_url is not None
            self._conn = db.connect(self.database_url, autocommit=True, connect_timeout=3)
        row = self._conn.execute(Q["claim_window"], {"key": key, "window_s": self.window_s}
                                 ).fetchone()
        assert row is not None
        return bool(row["send"]), int(row["carried"] or 0) if row["send"] else 0

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def _claim_locally(self, key: str) -> tuple[bool, int]:
        now = time.monotonic()
        sent_at, suppressed, _ = self._local.get(key, (float("-inf"), 0, 0))
        if now - sent_at >= self.window_s:
            self._local[key] = (now, 0, suppressed)
            return True, suppressed
        self._local[key] = (sent_at, suppressed + 1, 0)
        return False, 0

    # ── webhooks ──────────────────────────────────────────────────────────────────────────
    def _post(self, text: str, alert: Alert) -> None:
        body = orjson.dumps({"text": text, "content": text})
        for url in self.urls:
            request = urllib.request.Request(url, data=body, method="POST", headers={
                "Content-Type": "application/json",
                "User-Agent": f"dragonfly-ingest/{self.process}"})
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    response.read(1024)
                self.sent += 1
                log.info("alert sent", extra={"alert": alert.key, "target": _host(url)})
            except Exception as exc:  # noqa: BLE001 - any failure: drop it, say so, go on
                self.dropped += 1
                log.warning("alert webhook failed; alert dropped", extra={
                    "alert": alert.key, "target": _host(url), "error_type": type(exc).__name__})


def _host(url: str) -> str:
    """Where an alert went, without the path: Slack and Discord put the secret in the path."""
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.hostname}{f':{parsed.port}' if parsed.port else ''}"
