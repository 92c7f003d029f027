"""The webhook dispatcher: claim due deliveries, POST each, settle it (docs/decisions/0154).

Runs as a thread of `ingest worker` beside the SQS consumer (WEBHOOK_DISPATCH_ENABLED), on a
connection of its own in autocommit; a broken connection is dropped and opened again on the next
step. Delivery is at least once: a claim hides its rows for a lease, so the rows of a dispatcher
that dies mid-POST come due again, and a receiver may see a message twice (same webhook-id).

An attempt is delivered on a 2xx answer. Anything else (another status, a redirect, which is never
followed, a timeout, a URL that now resolves to a refused address) is retried after a full-jitter
backoff until WEBHOOK_RETRY_WINDOW_S after the event, then the delivery is failed and stays in
the log. Logs name the delivery, tenant, endpoint and the URL without its query string; never the
secret or the body.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from shared import db, errors, retry
from shared.settings import WorkerSettings
from shared.webhooks import signing, urls
from worker.background import TableLoop
from worker.webhooks import metrics

log = logging.getLogger(__name__)
Q = db.load_queries(Path(__file__).with_name("dispatch.sql"))
MAX_ERROR_CHARS = 500
REPORT_EVERY_S = 10.0
USER_AGENT = "dragonfly-ingest-webhooks/1"


backoff_s = retry.full_jitter_s


def body(delivery: dict[str, Any]) -> bytes:
    """The Standard Webhooks envelope: the event's type, its timestamp, and the event as data."""
    payload = delivery["payload"]
    return orjson.dumps({"type": delivery["event_type"], "timestamp": payload.get("timestamp"),
                         "data": payload})


class Dispatcher(TableLoop):
    name = "webhook-dispatcher"

    def __init__(self, settings: WorkerSettings) -> None:
        super().__init__(settings.database_url, settings.webhook_dispatch_poll_s)
        self.settings = settings
        self._last_report = 0.0
        # Redirects are never followed: a public URL must not bounce the POST to a private one.
        self._http = httpx.Client(follow_redirects=False, timeout=settings.webhook_timeout_s,
                                  headers={"user-agent": USER_AGENT}, trust_env=False)

    def drain(self) -> None:
        """`ingest worker --once`: deliver what is due now, again until nothing is; retries that
        come due later are left to a running worker."""
        while not self.stopping.is_set() and self.step():
            pass

    def step(self) -> bool:
        """One claim and its deliveries; True when it claimed any."""
        self._report()
        conn = self.conn()
        claimed = conn.execute(Q["claim"], {
            "limit": self.settings.webhook_dispatch_batch,
            "lease_s": self.settings.webhook_dispatch_lease_s}).fetchall()
        for delivery in claimed:
            if self.stopping.is_set():
                break  # the rest come due again when their lease ends
            self._one(conn, delivery)
        return bool(claimed)

    def close(self) -> None:
        super().close()
        self._http.close()

    # ── one delivery ───────────────────────────────────────────────────────────────────────
    def _one(self, conn: db.Conn, delivery: dict[str, Any]) -> None:
        context = {"delivery_id": delivery["delivery_id"], "tenant_id": str(delivery["tenant_id"]),
                   "webhook_id": str(delivery["webhook_id"]), "event_id": str(delivery["event_id"]),
                   "event_type": delivery["event_type"], "attempt": delivery["attempts"],
                   "url": urls.loggable(delivery["url"])}
        started = time.monotonic()
        status_code, error = self._post(delivery)
        metrics.ATTEMPT_SECONDS.observe(time.monotonic() - started)
        keys = {"delivery_id": delivery["delivery_id"], "claim_token": delivery["claim_token"],
                "status_code": status_code}
        if error is None:
            conn.execute(Q["delivered"], keys)
            metrics.ATTEMPTS.labels("delivered").inc()
            log.info("webhook delivered", extra={**context, "status_code": status_code})
            return
        delay = backoff_s(delivery["attempts"], self.settings.webhook_backoff_base_s,
                          self.settings.webhook_backoff_max_s)
        error = error[:MAX_ERROR_CHARS]
        if float(delivery["age_s"]) + delay > self.settings.webhook_retry_window_s:
            conn.execute(Q["give_up"], {**keys, "error": error})
            metrics.ATTEMPTS.labels("failed").inc()
            log.warning("webhook delivery failed for good", extra={
                **context, "status_code": status_code, "error": error})
            return
        conn.execute(Q["retry"], {**keys, "error": error, "delay_s": delay})
        metrics.ATTEMPTS.labels("retry").inc()
        log.info("webhook attempt failed; will retry", extra={
            **context, "status_code": status_code, "error": error,
            "retry_in_s": round(delay, 2)})

    def _post(self, delivery: dict[str, Any]) -> tuple[int | None, str | None]:
        """(status code, error): error None when the receiver took the message."""
        url = delivery["url"]
        try:
            # Again at delivery: the host may resolve elsewhere since registration.
            urls.check(url, allowlist=self.settings.webhook_url_allowlist,
                       dev_mode=self.settings.dev_mode)
        except errors.AppError as exc:
            return None, f"not sent: {exc.detail}"
        data = body(delivery)
        headers = signing.headers(delivery["secret"], delivery["message_id"], int(time.time()),
                                  data)
        try:
            response = self._http.post(url, content=data, headers=headers)
        except httpx.TimeoutException:
            return None, f"timed out after {self.settings.webhook_timeout_s:g} s"
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: could not reach the receiver"
        if 200 <= response.status_code < 300:
            return response.status_code, None
        if 300 <= response.status_code < 400:
            return response.status_code, f"HTTP {response.status_code}: redirects are not followed"
        return response.status_code, f"HTTP {response.status_code}"

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        row = self.conn().execute(Q["backlog"]).fetchone() or {}
        metrics.PENDING.set(row.get("pending") or 0)
        metrics.OLDEST.set(float(row.get("oldest_pending_s") or 0))


def start(dispatcher: Dispatcher) -> threading.Thread:
    return dispatcher.start()
