"""docs/decisions/0012: a full alert queue drops (and says so) instead of blocking, and with
Postgres unreachable the alert window falls back to the process's own."""

from __future__ import annotations

import logging
import urllib.parse

import pytest

from shared import alerts
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy
from tests.support.webhook import Webhook


def test_a_full_alert_queue_drops_alerts_and_says_so(caplog):
    # Given an alerter whose queue holds two alerts, its thread stuck on a webhook that takes
    # 2 s to answer the first one
    slow = Webhook(delay_s=2).start()
    alerter = alerts.Alerter([slow.url], window_s=0.001, timeout_s=10, max_pending=2)
    try:
        alerter.send(alerts.backlog(101, 100))
        wait_until(lambda: slow.received, timeout=10, message="the first alert is being posted")

        # When five more alerts arrive while it is stuck
        with caplog.at_level(logging.WARNING, logger="shared.alerts"):
            for i in range(5):
                alerter.send(alerts.dlq_depth(10 + i, 5))

        # Then two wait in the queue and three were dropped at once, each with a log line
        assert alerter.dropped == 3
        full = [r for r in caplog.records if r.getMessage() == "alert queue full; alert dropped"]
        assert len(full) == 3 and all(r.alert == "dlq_depth" for r in full)
        # and the two that fitted are still delivered once the webhook answers
        assert alerter.flush(15)
        assert len(slow.received) == 3 and alerter.sent == 3
    finally:
        alerter.close(1)
        slow.stop()


@pytest.fixture
def pg_link(pg):
    """A cuttable link to the test Postgres."""
    port = urllib.parse.urlsplit(pg.url()).port
    proxy = TcpProxy(port).start()
    yield proxy
    proxy.stop()


def test_with_postgres_down_the_window_is_the_processs_own(database_url, conn, pg_link, caplog):
    # Given an alerter whose database is reachable only through a link that is now cut
    proxied = urllib.parse.urlsplit(database_url)._replace(
        netloc=f"{urllib.parse.urlsplit(database_url).username}@127.0.0.1:{pg_link.port}")
    hook = Webhook().start()
    alerter = alerts.Alerter([hook.url], window_s=60, database_url=proxied.geturl())
    pg_link.stop()
    try:
        # When a burst of one incident is reported
        with caplog.at_level(logging.WARNING, logger="shared.alerts"):
            for _ in range(10):
                alerter.send(alerts.dlq_depth(9, 5))
            assert alerter.flush(30)

        # Then the burst still raised one alert, the window being the process's own, and the
        # log says why
        assert len(hook.received) == 1 and alerter.suppressed == 9
        assert any(r.getMessage().startswith("alert window unavailable in the database")
                   for r in caplog.records)
        assert conn.execute("SELECT count(*) AS n FROM alert_windows").fetchone()["n"] == 0
    finally:
        alerter.close(1)
        hook.stop()
