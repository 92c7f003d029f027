"""/metrics (Prometheus) and /api/metrics (JSON) agree with the database and the queues, name no
tenant, and need METRICS_TOKEN outside dev mode; /v1/metrics is a tenant admin's own figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.operations import dlq
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
                                   "METRICS_TOKEN": TOKEN, "METRICS_STALE_AFTER_S": "60",
                                   "DLQ_ARCHIVE_INTERVAL_S": "0"}, out_dir)
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
    # Dead letters: A's archived and open, B's archived and purged, then two still in SQS
    for job in runs["failed"]:
        ops.to_dlq(queues, job.body)
    dlq.archive(dlq.DeadLetterQueue(queues.client, queues.dlq_url), conn)
    dlq.purge(conn, older_than_s=0, actor=dlq.reopen.Actor("cli:t"), reason="t",
              tenant_id=b.tenant_id)
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
    assert "last_failed_batch" not in board  # a run id names a tenant's run
    assert board["last_failed_at"] == last["finished_at"].isoformat()
    assert samples[("ingest_last_failure_timestamp_seconds", ())] == pytest.approx(
        last["finished_at"].timestamp())
    # dlq_depth: two still in SQS plus one archived and open (the purged one is resolved)
    assert board["dlq_depth"] == 3 and board["dead_letters_archived_open"] == 1
    assert samples[("ingest_dead_letters_open", ())] == 1
    assert board["queue_depth"] == {"visible": 3, "in_flight": 0}
    assert samples[("ingest_queue_messages", (("queue", "ingest"), ("state", "visible")))] == 3
    assert samples[("ingest_run_takeovers_total", ())] == board["takeovers_total"] == 2
    assert samples[("ingest_operator_actions_total", (("action", "redrive"),))] == 1
    assert samples[("ingest_operator_actions_total", (("action", "retry"),))] == 1
    assert board["operator_actions"] == {"retry": 1, "redrive": 1, "dlq_purge": 1}
    # Outbox figures are there too (nothing pending in this database)
    assert samples[("ingest_outbox_pending_jobs", ())] == board["outbox_pending"] == 0
    assert ("ingest_outbox_publish_failures_total", ()) in samples
    # and no label anywhere names a tenant
    assert not any("tenant" in dict(labels) for _, labels in samples)
    # nor does any figure: no tenant, run or document id in either body
    with ops_gateway.client(TOKEN) as client:
        bodies = client.get("/metrics").text + client.get("/api/metrics").text
    named = conn.execute("SELECT tenant_id::text AS id FROM tenants UNION ALL "
                         "SELECT run_id::text FROM ingestion_runs UNION ALL "
                         "SELECT doc_id::text FROM documents").fetchall()
    assert len(named) > 10 and not [r["id"] for r in named if r["id"] in bodies]


def test_a_tenant_admin_gets_its_own_figures_at_v1_metrics(ops_gateway, conn, queues, tenants,
                                                           store_root):
    # Given runs of two tenants, B's failure the most recent, and a dead letter of each
    a, b = tenants.user("acme"), tenants.user("globex")
    user_a, operator = tenants.user("acme", role="user"), tenants.user("platform", "operator")
    a_runs = [ops.make_run(conn, store_root, a, status=s) for s in ("failed", "succeeded",
                                                                    "queued")]
    b_failed = ops.make_run(conn, store_root, b, status="failed")
    conn.execute("UPDATE ingestion_runs SET finished_at = now() - interval '1 hour' "
                 "WHERE run_id = %s", (a_runs[0].run_id,))
    for job in (a_runs[0], b_failed):
        ops.to_dlq(queues, job.body)
    dlq.archive(dlq.DeadLetterQueue(queues.client, queues.dlq_url), conn)

    with ops_gateway.client(a.token) as client:
        own = client.get("/v1/metrics")
        page = client.get("/admin")
    with ops_gateway.client(user_a.token) as client:
        refused = client.get("/v1/metrics")
    with ops_gateway.client(operator.token) as client:
        operators_own = client.get("/v1/metrics").json()["ingest"]
        fleet_page = client.get("/admin/fleet")

    # Then A's admin sees A's runs and A's last failure (its run id), never B's
    assert own.status_code == 200, own.text
    f = own.json()["ingest"]
    assert f["runs_by_status"] == {"queued": 1, "running": 0, "succeeded": 1, "failed": 1}
    assert f["failed_24h"] == 1 and f["backlog_count"] == 1
    assert f["last_failed_run_id"] == str(a_runs[0].run_id)
    assert f["dead_letters_open"] == 1
    assert "queue_depth" not in f and "dlq_depth" not in f
    assert str(b_failed.run_id) not in own.text and str(b.tenant_id) not in own.text
    # and the overview page shows the same, linking its own failed run
    assert page.status_code == 200 and f'/runs/{a_runs[0].run_id}' in page.text
    assert str(b_failed.run_id) not in page.text
    # a plain user may not; an operator's /v1/metrics is its own (empty) tenant's too
    assert refused.status_code == 403
    assert operators_own["runs_by_status"] == {"queued": 0, "running": 0, "succeeded": 0,
                                               "failed": 0}
    # and the fleet page shows no run id of anyone
    assert fleet_page.status_code == 200
    assert str(b_failed.run_id) not in fleet_page.text
    assert str(a_runs[0].run_id) not in fleet_page.text


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


def test_the_gateway_refuses_to_start_without_a_metrics_token_outside_dev_mode(stack_env,
                                                                              out_dir):
    # Given a production configuration without METRICS_TOKEN (set empty: nothing inherited)
    env = {**stack_env, "METRICS_TOKEN": "", "DEV_MODE": "false"}

    # When the gateway starts, Then it exits at once and says why
    process = stack.spawn("gateway-no-token", ["gateway", "--port", "0"], env, out_dir)
    try:
        code = process.proc.wait(timeout=60)
    finally:
        process.stop()
    assert code != 0
    assert "METRICS_TOKEN must be set outside DEV_MODE" in process.logs()


def test_metrics_are_open_without_a_token_in_dev_mode(stack_env, out_dir):
    process = stack.start_gateway({**stack_env, "DEV_MODE": "true", "METRICS_TOKEN": ""},
                                  out_dir, "gateway-dev")
    try:
        with process.client() as scraper:
            response = scraper.get("/metrics")
    finally:
        process.stop()
    assert response.status_code == 200 and "ingest_runs" in response.text
