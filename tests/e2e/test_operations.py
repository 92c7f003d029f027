"""Operations with real worker processes, real moto SQS (short visibility timeouts) and Postgres:
poison messages in the DLQ and their redrive, explicit retry, alert bursts, a dead webhook, and
secrets in exception texts."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from cli.embedded import MotoServer, free_port
from gateway.operations import crash_guard
from shared import db, objectstore
from tests.support import documents, ops, stack, submit
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy
from tests.support.webhook import Webhook

pytestmark = pytest.mark.slow


def _empty(queues) -> bool:
    return ops.depth(queues) == 0 and ops.depth(queues, queues.dlq_url) == 0


def _cli(stack_env, *args: str) -> subprocess.CompletedProcess:
    result = stack.ingest(list(args), stack_env)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def _completions(worker, run_id, status: str) -> int:
    events = (orjson.loads(line) for line in worker.logs().splitlines() if line.startswith("{"))
    return sum(1 for e in events if e.get("event") == "ingest_job_complete"
               and e.get("run_id") == str(run_id) and e.get("status") == status)


def _sweep_crashed(database_url: str) -> crash_guard.GuardResult:
    """The gateway's crash guard, with one-second windows instead of minutes."""
    async def go() -> crash_guard.GuardResult:
        pool = db.async_pool(database_url, min_size=1, max_size=2)
        await pool.open()
        try:
            return await crash_guard.sweep(pool, queued_ttl_s=3600, running_stale_s=1,
                                           republish_after_s=1)
        finally:
            await pool.close()

    return asyncio.run(go())


# ── poison messages, the DLQ, and redrive ───────────────────────────────────────────────────
def test_poison_messages_land_in_the_dlq_and_redrive_processes_them_exactly_once(
        conn, queues, moto: MotoServer, s3, tenants, stack_env, database_url, out_dir,
        store_root):
    # Given five jobs whose uploads live in S3, and a worker that reaches S3 through a proxy
    # (SQS directly): the proxy is down, so every read fails as transient and is left to SQS
    bucket = f"uploads-{uuid.uuid4().hex[:8]}"
    objectstore.ensure_bucket(s3, bucket, "us-east-1")
    proxy = TcpProxy(moto.port).start()
    proxy.stop()
    user = tenants.user()
    jobs = []
    for i in range(5):
        data = documents.make_markdown(1) + f"\n\nPoison {i}.\n".encode()
        job = submit.submit(conn, None, store_root, user, data, copies=0)
        key = f"uploads/{user.tenant_id}/{job.run_id}/doc.md"
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        moved = job.job.model_copy(update={"upload_uri": f"s3://{bucket}/{key}"})
        queues.queue.send(submit.jobs.encode(moved))
        jobs.append((job, moved))
    env = {k: v for k, v in stack_env.items() if k != "AWS_ENDPOINT_URL"}
    env |= {"AWS_ENDPOINT_URL_SQS": moto.url, "AWS_ENDPOINT_URL_S3": proxy.url,
            "UPLOAD_STORE_URI": f"s3://{bucket}/uploads"}  # where the jobs' uploads now are
    worker = stack.start_worker(env, out_dir)
    try:
        # When they exhaust their receives (maxReceiveCount, SQS_MAX_RECEIVE_COUNT's default)
        wait_until(lambda: ops.depth(queues, queues.dlq_url) == 5 and ops.depth(queues) == 0,
                   timeout=240, interval=1, message="five messages in the DLQ")
        # and the crash guard fails their abandoned runs, as it would after fifteen minutes
        assert _sweep_crashed(database_url).failed_running == 5
        assert all(submit.status(conn, j.run_id) == "failed" for j, _ in jobs)

        # Then `ingest dlq list` moves them into Postgres and shows all five with why they are there
        listed = orjson.loads(_cli(stack_env, "dlq", "list", "--json").stdout)
        assert {i["run_id"] for i in listed["items"]} == {str(j.run_id) for j, _ in jobs}
        for item in listed["items"]:
            assert item["reason"].startswith("Receive limit reached after")
            assert "last worker error: read: EndpointConnectionError" in item["reason"]
            assert item["run_status"] == "failed" and item["receive_count"] >= 3

        # And a dry run changes nothing
        before = [submit.run_row(conn, j.run_id) for j, _ in jobs]
        dry = orjson.loads(_cli(stack_env, "dlq", "redrive", "--all", "--dry-run",
                                "--json").stdout)
        assert dry["redriven"] == 5 and {i["outcome"] for i in dry["items"]} == {"would_redrive"}
        assert [submit.run_row(conn, j.run_id) for j, _ in jobs] == before
        assert ops.depth(queues, queues.dlq_url) == 0 and ops.depth(queues) == 0
        assert conn.execute("SELECT count(*) AS n FROM dead_letters WHERE status = 'open'"
                            ).fetchone()["n"] == 5
        assert conn.execute("SELECT count(*) AS n FROM run_actions").fetchone()["n"] == 0

        # When the cause is fixed (S3 reachable again) and the operator redrives everything
        proxy = TcpProxy(moto.port, listen_port=proxy.port).start()
        done = orjson.loads(_cli(stack_env, "dlq", "redrive", "--all", "--reason",
                                 "S3 outage over", "--json").stdout)
        assert done["redriven"] == 5 and all(i["reopened"] for i in done["items"])
        assert done["published"] == 5

        # Then each run is processed exactly once: succeeded, one version, queues empty
        wait_until(lambda: all(submit.status(conn, j.run_id) == "succeeded" for j, _ in jobs),
                   timeout=240, interval=1, message="redriven runs succeeded")
        wait_until(lambda: _empty(queues), timeout=30, message="queues empty")
    finally:
        worker.stop()
        proxy.stop()
    for job, _ in jobs:
        assert len(submit.versions(conn, job.doc_id)) == 1
        assert _completions(worker, job.run_id, "succeeded") == 1
        [action] = ops.actions(conn, job.run_id)
        assert action["action"] == "redrive" and action["reason"] == "S3 outage over"
        assert action["actor"].startswith("cli:") and action["details"]["reopened"] is True


def test_redrive_of_a_message_whose_run_succeeded_is_a_no_op(conn, queues, tenants, store_root,
                                                             stack_env, out_dir):
    # Given a run a worker finished, and a stray copy of its message in the DLQ
    user = tenants.user()
    job = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(1))
    worker = stack.start_worker(stack_env, out_dir)
    try:
        wait_until(lambda: submit.status(conn, job.run_id) == "succeeded", timeout=240, message="done")
        finished = submit.run_row(conn, job.run_id)
        ops.to_dlq(queues, job.body)

        # When it is redriven
        result = orjson.loads(_cli(stack_env, "dlq", "redrive", "--run-id", str(job.run_id),
                                   "--json").stdout)

        # Then it moved without reopening anything, and the worker discarded it
        [item] = result["items"]
        assert item["outcome"] == "redriven" and item["run_status"] == "succeeded"
        assert item["reopened"] is False
        wait_until(lambda: _empty(queues), timeout=60, message="queues empty")
        stack.wait_for_log(worker, "duplicate delivery of a finished run")
    finally:
        worker.stop()
    # (the worker counted the extra delivery, and changed nothing else)
    after = submit.run_row(conn, job.run_id)
    assert after.pop("delivery_count") == finished.pop("delivery_count") + 1
    assert after == finished
    assert len(submit.versions(conn, job.doc_id)) == 1


def test_retry_of_a_failed_run_succeeds(conn, queues, tenants, stack_env, out_dir):
    # Given an upload whose run failed (say the queue lost it), with its file still stored
    user = tenants.user(role="user")
    gateway = stack.start_gateway(stack_env, out_dir)
    try:
        with gateway.client(user.token) as client:
            accepted = client.post("/v1/ingest", files={
                "file": ("notes.md", documents.make_markdown(1))}).json()
            run_id = accepted["run_id"]
            wait_until(lambda: ops.depth(queues) == 1, timeout=15, message="published")
            ops.drain(queues, queues.url)
            ops.set_status(conn, run_id, "failed", error="Queue publish failed.")

            # When its user retries it and a worker runs
            assert client.post(f"/v1/ingestion-runs/{run_id}/retry").status_code == 202
            worker = stack.start_worker(stack_env, out_dir)
            try:
                wait_until(lambda: client.get(f"/v1/ingestion-runs/{run_id}").json()["status"]
                           == "succeeded", timeout=240, interval=0.5, message="retried run done")
            finally:
                worker.stop()
            run = client.get(f"/v1/ingestion-runs/{run_id}").json()
    finally:
        gateway.stop()

    # Then the same run succeeded with the same upload, once
    assert run["status"] == "succeeded" and run["error"] is None
    assert len(submit.versions(conn, accepted["doc_id"])) == 1
    assert [a["action"] for a in ops.actions(conn, run_id)] == ["retry"]


# ── alerts ──────────────────────────────────────────────────────────────────────────────────
def test_a_burst_of_fifty_failures_raises_one_alert(conn, queues, tenants, store_root, stack_env,
                                                    out_dir):
    # Given a webhook and fifty jobs that all fail the same way
    hook = Webhook().start()
    user = tenants.user()
    jobs = [submit.submit(conn, queues.queue, store_root, user, documents.make_corrupt_pdf(),
                          name="broken.pdf") for _ in range(50)]
    env = {**stack_env, "ALERT_WEBHOOK_URLS": hook.url, "ALERT_WINDOW_S": "600"}
    try:
        # When a worker processes them all
        worker = stack.start_worker(env, out_dir, once=True)
        assert worker.proc.wait(240) == 0, worker.logs()[-3000:]
        # The worker has exited, so whatever it posted has reached the webhook by now or never
        # will; wait only for the receiver's thread to record it.
        wait_until(lambda: hook.received, timeout=10, message="the alert arrives")
    finally:
        hook.stop()

    # Then all fifty failed, and the webhook received exactly one alert naming one of them
    assert all(submit.status(conn, j.run_id) == "failed" for j in jobs)
    assert len(hook.received) == 1, hook.texts()
    [text] = hook.texts()
    assert text.startswith("[INGEST FAILURE] run ") and "extraction_error at stage extract" in text
    assert any(str(j.run_id) in text for j in jobs)
    assert hook.received[0]["content"] == text
    assert hook.paths == ["/hooks/T000/SECRET-PATH"]


def test_ingestion_goes_on_while_the_alert_webhook_is_down(conn, queues, tenants, store_root,
                                                          stack_env, out_dir):
    # Given one webhook nobody listens on and one that hangs for longer than any job
    down = Webhook().start()
    down_url = down.url
    down.stop()
    hanging = Webhook(delay_s=30).start()
    user = tenants.user()
    bad = [submit.submit(conn, queues.queue, store_root, user, documents.make_corrupt_pdf(),
                         name=f"broken-{i}.pdf") for i in range(3)]
    good = submit.submit(conn, queues.queue, store_root, user, documents.make_markdown(1))
    metrics_port = free_port()
    # One job at a time, and a webhook timeout far longer than any of these jobs: an alert
    # posted on the job's path would hold the next job back by ALERT_TIMEOUT_S.
    alert_timeout_s = 20
    env = {**stack_env, "ALERT_WEBHOOK_URLS": f"{down_url},{hanging.url}",
           "ALERT_WINDOW_S": "0.1", "ALERT_TIMEOUT_S": str(alert_timeout_s),
           "WORKER_MAX_CONCURRENT_JOBS": "1", "WORKER_METRICS_PORT": str(metrics_port)}
    try:
        # When a worker processes them
        worker = stack.start_worker(env, out_dir)
        wait_until(lambda: submit.status(conn, good.run_id) == "succeeded"
                   and all(submit.status(conn, j.run_id) == "failed" for j in bad),
                   timeout=240, interval=0.5, message="every run finished")
        stack.wait_for_log(worker, "alert webhook failed; alert dropped", timeout=30)
        samples = _worker_metrics(metrics_port)
        code = worker.stop()
    finally:
        hanging.stop()

    # Then every run reached its status, the worker stopped cleanly, and the alert was dropped
    assert code == 0
    assert _empty(queues)
    assert "SECRET-PATH" not in worker.logs()
    # and no job waited for an alert: each started right after the previous one finished,
    # although every failure sent an alert to a webhook that answers after 30 s
    timeline = conn.execute(
        "SELECT started_at, finished_at FROM ingestion_runs WHERE run_id = ANY(%s) "
        "ORDER BY started_at", ([j.run_id for j in (*bad, good)],)).fetchall()
    gaps = [(later["started_at"] - earlier["finished_at"]).total_seconds()
            for earlier, later in zip(timeline, timeline[1:], strict=False)]
    assert len(gaps) == 3 and max(gaps) < alert_timeout_s / 2, gaps
    # and the worker's own metrics counted the jobs, timed them and their stages, and the alerts
    assert samples[("ingest_worker_jobs_total", (("status", "failed"),))] == 3
    assert samples[("ingest_worker_jobs_total", (("status", "succeeded"),))] == 1
    assert samples[("ingest_job_duration_seconds_count", (("status", "succeeded"),))] == 1
    for stage in ("read", "extract", "chunk", "embed", "index"):
        assert samples[("ingest_stage_duration_seconds_count", (("stage", stage),))] == 1, stage
    assert samples[("ingest_worker_messages_total", (("outcome", "ack"),))] == 4
    assert samples[("ingest_alerts_total", (("result", "dropped"),))] >= 1


def _worker_metrics(port: int) -> dict:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


# ── secrets in exceptions never reach the logs ──────────────────────────────────────────────
HOSTILE_BUCKET = "jane.doe@example.com"


def test_secrets_in_exception_texts_are_redacted_in_every_process_log(conn, queues, tenants,
                                                                     store_root, stack_env,
                                                                     out_dir, database_url):
    # Given a job whose upload URI names a bucket that is an e-mail address: the S3 client's
    # exception quotes it
    user = tenants.user()
    job = submit.submit(conn, None, store_root, user, documents.make_markdown(1), copies=0)
    hostile = job.job.model_copy(update={
        "upload_uri": f"s3://{HOSTILE_BUCKET}/{user.tenant_id}/{job.run_id}/123-45-6789.md"})
    queues.queue.send(submit.jobs.encode(hostile))

    # When a worker fails it
    # (its upload store is that bucket, so the URI passes confinement and reaches S3)
    worker = stack.start_worker({**stack_env, "UPLOAD_STORE_URI": f"s3://{HOSTILE_BUCKET}"},
                                out_dir, once=True)
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]
    # and a gateway refuses to start because the DSN, password and all, was pasted into the
    # wrong variable (the settings error quotes the value)
    dsn = database_url.replace("postgres@", "postgres:hunter2-secret@")
    crashed = stack.spawn("gateway-misconfigured", ["gateway"], {
        **stack_env, "DATABASE_URL": dsn, "DB_POOL_MAX": dsn}, out_dir)
    assert crashed.proc.wait(60) != 0

    # Then the run failed with a reason that names no file, and neither log holds the secrets,
    # while both logged the exception (redacted) as JSON
    assert submit.run_row(conn, job.run_id)["error"].startswith("read: unexpected error")
    for process, must_mention in ((worker, "[EMAIL_REDACTED]"),
                                  (crashed, "postgres:[REDACTED]")):
        logs = process.logs()
        assert must_mention in logs, logs[-2000:]
        for secret in (HOSTILE_BUCKET, "jane.doe", "hunter2-secret", "123-45-6789"):
            assert secret not in logs, (process.name, secret)
        for line in logs.splitlines():
            assert orjson.loads(line)["process"] in ("worker", "gateway"), line
