"""Alerts across the fleet: one window per incident in Postgres, and the gateway's threshold
checks (DLQ depth, backlog) and crash-guard failures reaching a real webhook."""

from __future__ import annotations

import re
import time
import uuid
from datetime import timedelta

import pytest

from shared import alerts, objectstore
from tests.support import ops, stack
from tests.support.stack import wait_until
from tests.support.webhook import Webhook


@pytest.fixture
def hook():
    server = Webhook().start()
    yield server
    server.stop()


def test_processes_share_one_window_per_incident(database_url, hook):
    # Given two processes' alerters on one database (two workers, say)
    first = alerts.Alerter([hook.url], window_s=60, database_url=database_url)
    second = alerts.Alerter([hook.url], window_s=60, database_url=database_url)

    # When both report a burst of the same incident
    for i in range(20):
        (first if i % 2 else second).send(
            alerts.job_failed(uuid.uuid4(), uuid.uuid4(), "extraction_error", "extract"))
    assert first.flush(10) and second.flush(10)

    # Then one alert went out in total
    assert len(hook.received) == 1
    assert first.suppressed + second.suppressed == 19
    first.close()
    second.close()


def test_a_window_that_closed_reports_what_it_held_back(database_url, hook):
    alerter = alerts.Alerter([hook.url], window_s=0.5, database_url=database_url)
    for _ in range(5):
        alerter.send(alerts.dlq_depth(7, 5))
    assert alerter.flush(10)
    time.sleep(0.7)
    alerter.send(alerts.dlq_depth(9, 5))
    assert alerter.flush(10)
    assert len(hook.received) == 2
    assert "+4 more of this kind" in hook.texts()[1]
    alerter.close()


def test_gateway_alerts_on_dlq_depth_backlog_and_crash_guard_once_each(
        stack_env, out_dir, conn, queues, tenants, hook):
    # Given six dead letters (threshold 5), four queued runs (threshold 3), one of them queued
    # long ago so that the crash guard fails it
    store = objectstore.file_path(stack_env["UPLOAD_STORE_URI"])
    user = tenants.user()
    for _ in range(6):
        ops.to_dlq(queues, "dead letter")
    queued = [ops.make_run(conn, store, user, status="queued") for _ in range(5)]
    conn.execute("UPDATE ingestion_runs SET created_at = now() - %s WHERE run_id = %s",
                 (timedelta(hours=3), queued[0].run_id))

    # When a gateway runs its checks every half second for a while
    gateway = stack.start_gateway({
        **stack_env, "ALERT_WEBHOOK_URLS": hook.url, "ALERT_DLQ_DEPTH": "5",
        "ALERT_BACKLOG": "3", "HOUSEKEEPING_INTERVAL_S": "0.5", "ALERT_WINDOW_S": "600",
        "CRASH_GUARD_INTERVAL_S": "0.5"}, out_dir)
    try:
        wait_until(lambda: len(hook.received) >= 3, timeout=20, message="three alerts")
        # Each later check of a still-open incident is counted in its window: wait for six
        # more checks of both thresholds, which would each have alerted without the window.
        wait_until(lambda: _held_back(conn, "dlq_depth") >= 6
                   and _held_back(conn, "backlog") >= 6,
                   timeout=60, message="six more checks of each threshold")
    finally:
        gateway.stop()

    # Then each incident raised exactly one alert, with counts and ids only
    texts = hook.texts()
    assert len(texts) == 3, texts
    [backlog] = [t for t in texts if t.startswith("Ingest backlog")]
    [dead] = [t for t in texts if t.startswith("Ingest dead-letter queue")]
    [failure] = [t for t in texts if t.startswith("[INGEST FAILURE]")]
    # 4, or 5 if the backlog check ran before the crash guard failed the old run.
    assert re.search(r"Ingest backlog at [45] pending jobs \(threshold 3\)", backlog), backlog
    assert "Ingest dead-letter queue has 6 messages (threshold 5)" in dead
    assert failure.startswith("[INGEST FAILURE] crash guard failed 1 run(s): 1 never picked up")
    assert str(queued[0].run_id) in failure
    assert all("@" not in t for t in texts)


def _held_back(conn, key: str) -> int:
    row = conn.execute("SELECT suppressed FROM alert_windows WHERE key = %s", (key,)).fetchone()
    return row["suppressed"] if row else 0
