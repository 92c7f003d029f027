"""Alerts: Slack/Discord JSON, one per incident per window, never blocking the caller."""

from __future__ import annotations

import logging
import socket
import time
import uuid

import pytest

from shared import alerts
from tests.support.webhook import Webhook


@pytest.fixture
def hook():
    server = Webhook().start()
    yield server
    server.stop()


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hooks/SECRET"


def test_an_alert_is_posted_as_slack_and_discord_compatible_json(hook):
    # Given an alerter with one webhook
    alerter = alerts.Alerter([hook.url], window_s=60)
    run_id, tenant_id = uuid.uuid4(), uuid.uuid4()

    # When a terminal failure is reported
    alerter.send(alerts.job_failed(run_id, tenant_id, "extraction_error", "extract"))
    assert alerter.flush(5)

    # Then one POST carries the same text as "text" (Slack) and "content" (Discord)
    [body] = hook.received
    assert body["text"] == body["content"]
    assert body["text"] == (f"[INGEST FAILURE] run {run_id} (tenant {tenant_id}): "
                            "extraction_error at stage extract")
    assert alerter.sent == 1


def test_a_burst_of_one_incident_raises_one_alert_per_window(hook):
    # Given a window of 0.5 s
    alerter = alerts.Alerter([hook.url], window_s=0.5)

    # When fifty failures of one kind arrive inside the window
    for _ in range(50):
        alerter.send(alerts.job_failed(uuid.uuid4(), uuid.uuid4(), "no_text", "chunk"))
    assert alerter.flush(5)

    # Then one alert went out and 49 were held back
    assert len(hook.received) == 1 and alerter.suppressed == 49

    # And the first alert of the next window says how many were held back
    time.sleep(0.6)
    alerter.send(alerts.job_failed(uuid.uuid4(), uuid.uuid4(), "no_text", "chunk"))
    assert alerter.flush(5)
    assert len(hook.received) == 2
    assert "+49 more of this kind" in hook.texts()[1]


def test_different_incidents_have_their_own_windows(hook):
    alerter = alerts.Alerter([hook.url], window_s=60)
    alerter.send(alerts.job_failed(uuid.uuid4(), uuid.uuid4(), "no_text", "chunk"))
    alerter.send(alerts.job_failed(uuid.uuid4(), uuid.uuid4(), "encrypted_document", "extract"))
    alerter.send(alerts.dlq_depth(9, 5))
    alerter.send(alerts.backlog(150, 100))
    alerter.send(alerts.stale_takeover(uuid.uuid4(), uuid.uuid4(), 7200.0, 1))
    assert alerter.flush(5)
    texts = hook.texts()
    assert len(texts) == 5
    assert "Ingest dead-letter queue has 9 messages" in texts[2]
    assert "Ingest backlog at 150 pending jobs" in texts[3]
    assert "[STALE TAKEOVER]" in texts[4] and "abandoned for 2.00h" in texts[4]


def test_a_webhook_that_is_down_costs_a_log_line_not_the_caller(caplog):
    # Given a webhook nobody listens on
    alerter = alerts.Alerter([_closed_port_url()], window_s=60)

    # When an alert is sent
    with caplog.at_level(logging.WARNING, logger="shared.alerts"):
        started = time.monotonic()
        alerter.send(alerts.backlog(101, 100))
        returned_after = time.monotonic() - started
        assert alerter.flush(10)

    # Then the caller got control back at once, the alert was dropped and said so, and the
    # log names the host only: Slack and Discord keep the webhook's secret in the path
    assert returned_after < 0.05
    assert alerter.dropped == 1 and alerter.sent == 0
    [record] = [r for r in caplog.records if r.getMessage() == "alert webhook failed; alert dropped"]
    assert record.target.startswith("http://127.0.0.1:") and "SECRET" not in record.target


def test_a_slow_webhook_never_blocks_the_caller():
    # Given a webhook that takes longer than the timeout to answer
    slow = Webhook(delay_s=3).start()
    try:
        alerter = alerts.Alerter([slow.url], window_s=0.01, timeout_s=0.5)
        # When many alerts are sent at once
        started = time.monotonic()
        for i in range(20):
            alerter.send(alerts.backlog(100 + i, 100))
        # Then sending took no time at all
        assert time.monotonic() - started < 0.1
    finally:
        slow.stop()


def test_alert_text_is_redacted():
    # An alert text is built from ids and codes; should one ever carry a secret, it is redacted.
    hook = Webhook().start()
    try:
        alerter = alerts.Alerter([hook.url], window_s=60)
        alerter.send(alerts.Alert("x", "mail jane.doe@example.com about 123-45-6789"))
        assert alerter.flush(5)
        assert "jane.doe" not in hook.texts()[0] and "123-45-6789" not in hook.texts()[0]
    finally:
        hook.stop()


def test_no_webhook_configured_means_no_thread_and_no_work():
    alerter = alerts.Alerter([], window_s=60)
    alerter.send(alerts.backlog(1000, 100))
    assert alerter._thread is None and alerter.flush(0.1)
