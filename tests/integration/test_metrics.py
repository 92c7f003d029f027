"""/metrics (Prometheus) and /api/metrics (JSON) agree with the database and the queues."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared import objectstore
from tests.support import ops, stack
from tests.support.stack import wait_until

TOKEN = "metrics-token-" + "y" * 20


@pytest.fixture
def store_root(stack_env):
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


@pytest.fixture
def ops_gateway(stack_env, out_dir):
    process = stack.start_gateway({**stack_env, "HOUSEKEEPING_INTERVAL_S": "0.5",
                                   "METRICS_TOKEN": TOKEN, "METRICS_STALE_AFTER_S": "60"},
                                  out_dir)
    yield process
    process.stop()


def _scrape(gateway) -> dict[tuple[str, tuple], float]:
    with gateway.client(TOKEN) as client:
        response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.text)
            for s in family.samples}


def _one(conn, sql: str, *params):
    return next(iter(conn.execute(sql, params).fetchone().values()))


def test_metrics_and_dashboard_agree_with_the_database(ops_gateway, conn, queues, tenants,
                                                       store_root):
    # Given runs in every state across two tenants, a stale one, a takeover, operator actions,
    # and messages on both queues
    a, b = tenants.user("acme"), tenants.user("globex")
    made = {"queued": 3, "running": 2, "succeeded": 4, "failed": 2}
    runs = {s: [ops.make_run(conn, store_root, u, status=s) for u in (a, b)
                for _ in range(n // 2 + n % 2 if u is a else n // 2)]
            for s, n in made.items()}
    stale = runs["running"][0].run_id
    conn.execute("UPDATE ingestion_runs SET updated_at = now() - %s, takeover_count = 2 "
                 "WHERE run_id = %s", (timedelta(minutes=10), stale))
    old_failure = runs["failed"][0].run_id
    conn.execute("UPDATE ingestion_runs SET finished_at = now() - %s WHERE run_id = %s",
                 (timedelta(days=2), old_failure))
    conn.execute("UPDATE ingestion_runs SET started_at = finished_at - %s "
                 "WHERE status = 'succeeded'", (timedelta(seconds=30),))
    conn.execute("INSERT INTO run_actions (tenant_id, run_id, action, actor, reason) "
                 "VALUES (%s, %s, 'redrive', 'cli:x', 'test'), (%s, %s, 'retry', 'cli:x', 't')",
                 (a.tenant_id, runs["queued"][0].run_id, a.tenant_id, runs["queued"][1].run_id))
    for job in runs["failed"]:
        ops.to_dlq(queues, job.body)
    for job in runs["queued"]:
        queues.queue.send(job.body)

    # When both endpoints are read (once the cached queue depths have caught up)
    samples = wait_until(lambda: (s := _scrape(ops_gateway)).get(
        ("ingest_queue_messages", (("queue", "dead_letter"), ("state", "visible")))) == 2 and s,
        timeout=15, message="cached queue depths")
    with ops_gateway.client(TOKEN) as client:
        board = client.get("/api/metrics").json()["ingest"]

    # Then every figure is the database's (or the queue's)
    for status in made:
        count = _one(conn, "SELECT count(*) FROM ingestion_runs WHERE status = %s", status)
        assert count == made[status]
        assert samples[("ingest_runs", (("status", status),))] == count
        assert board["runs_by_status"][status] == count
    backlog = _one(conn, "SELECT count(*) FROM ingestion_runs WHERE status IN "
                         "('queued', 'running')")
    failed_24h = _one(conn, "SELECT count(*) FROM ingestion_runs WHERE status = 'failed' "
                            "AND finished_at > now() - interval '24 hours'")
    avg = _one(conn, "SELECT avg(EXTRACT(EPOCH FROM finished_at - started_at)) "
                     "FROM ingestion_runs WHERE status = 'succeeded'")
    last = conn.execute("SELECT run_id, finished_at FROM ingestion_runs WHERE status = 'failed' "
                        "ORDER BY finished_at DESC LIMIT 1").fetchone()
    assert backlog == 5 and failed_24h == 1
    assert board["backlog_count"] == samples[("ingest_backlog_runs", ())] == backlog
    assert board["failed_24h"] == samples[("ingest_failed_runs_24h", ())] == failed_24h
    assert board["stale_runs"] == samples[("ingest_stale_runs", ())] == 1
    assert board["avg_processing_s"] == pytest.approx(float(avg), abs=0.01) == 30
    assert samples[("ingest_processing_seconds_avg_24h", ())] == pytest.approx(30, abs=0.01)
    assert board["last_failed_batch"] == str(last["run_id"])
    assert board["last_failed_at"] == last["finished_at"].isoformat()
    assert samples[("ingest_last_failure_timestamp_seconds", ())] == pytest.approx(
        last["finished_at"].timestamp())
    assert board["dlq_depth"] == 2 and board["queue_depth"] == {"visible": 3, "in_flight": 0}
    assert samples[("ingest_queue_messages", (("queue", "ingest"), ("state", "visible")))] == 3
    assert samples[("ingest_run_takeovers_total", ())] == board["takeovers_total"] == 2
    assert samples[("ingest_operator_actions_total", (("action", "redrive"),))] == 1
    assert samples[("ingest_operator_actions_total", (("action", "retry"),))] == 1
    assert board["operator_actions"] == {"retry": 1, "redrive": 1, "dlq_purge": 0}
    # Outbox figures are there too (nothing pending in this database)
    assert samples[("ingest_outbox_pending_jobs", ())] == board["outbox_pending"] == 0
    assert ("ingest_outbox_publish_failures_total", ()) in samples
    # and no label anywhere names a tenant
    assert not any("tenant" in dict(labels) for _, labels in samples)


def test_metrics_need_the_metrics_token_when_one_is_set(ops_gateway, tenants):
    admin = tenants.user()
    with ops_gateway.client() as anonymous:
        assert anonymous.get("/metrics").status_code == 401
        assert anonymous.get("/api/metrics").json()["code"] == "unauthorized"
    with ops_gateway.client(admin.token) as with_jwt:
        # A login token is not the metrics token: the figures are fleet-wide, not a tenant's
        assert with_jwt.get("/metrics").status_code == 401
    with ops_gateway.client(TOKEN) as scraper:
        assert scraper.get("/metrics").status_code == 200
        assert scraper.get("/api/metrics").status_code == 200


def test_metrics_are_open_without_a_token_setting(gateway):
    with gateway.client() as scraper:
        response = scraper.get("/metrics")
    assert response.status_code == 200 and "ingest_runs" in response.text
