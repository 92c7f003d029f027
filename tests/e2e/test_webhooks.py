"""The IngestionCompleteEvent and its webhooks end to end (issue 13 item 7): real gateways, real
`ingest worker` processes, moto SQS, Postgres, and a real HTTP receiver in this process whose
deliveries are verified with the Standard Webhooks library receivers use."""

from __future__ import annotations

import json
import signal

import orjson
import pytest
from standardwebhooks import Webhook

from tests.e2e.test_records_worker import (
    HEADER,
    _held_worker,
    batch,
    drain,
    judgments,
    published,
    submit,
)
from tests.support import stack
from tests.support.receiver import Receiver
from tests.support.stack import wait_until

FAST_RETRIES = {"WEBHOOK_BACKOFF_BASE_S": "0.2", "WEBHOOK_BACKOFF_MAX_S": "0.5",
                "WEBHOOK_DISPATCH_POLL_S": "0.1"}


@pytest.fixture
def receiver():
    r = Receiver().start()
    yield r
    r.stop()


def events(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT * FROM event_outbox WHERE tenant_id = %s ORDER BY created_at",
                        (tenant_id,)).fetchall()


def register(gw: stack.Process, token: str, url: str) -> dict:
    with gw.client(token) as c:
        response = c.post("/v1/webhooks", json={"url": url, "event_types": ["ingestion.complete"]})
    assert response.status_code == 201, response.text
    return response.json()


def deliveries(gw: stack.Process, token: str, webhook_id: str) -> list[dict]:
    with gw.client(token) as c:
        response = c.get(f"/v1/webhooks/{webhook_id}/deliveries")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def allowing(stack_env: dict, url: str) -> dict:
    return {**stack_env, "WEBHOOK_URL_ALLOWLIST": json.dumps([url])}


# ── the event ───────────────────────────────────────────────────────────────────────────────
def test_a_completed_import_writes_one_event_and_a_failed_one_none(gateway, tenants, conn,
                                                                  stack_env, out_dir):
    # Given a good judgments file (2 valid, 0 invalid) and a file with no data rows
    user = tenants.user()
    good = submit(gateway, user, judgments(3), name="good.csv")
    failed = submit(gateway, user, HEADER.encode() + b"\n", name="empty.csv")

    # When both are imported
    drain(conn, stack_env, out_dir, good, failed)
    assert (batch(conn, good)["status"], batch(conn, failed)["status"]) == ("completed", "failed")

    # Then exactly one event exists, the good batch's, with the spec's fields
    [event] = events(conn, user.tenant_id)
    assert (event["batch_id"], event["event_type"]) == (batch(conn, good)["batch_id"],
                                                        "ingestion.complete")
    payload = event["payload"]
    assert set(payload) == {"upload_id", "workspace_id", "client_id", "platform", "status",
                            "contract", "metrics", "affected_dates", "timestamp"}
    assert payload["upload_id"] == good and payload["workspace_id"] == str(user.tenant_id)
    assert (payload["status"], payload["contract"], payload["platform"],
            payload["client_id"], payload["affected_dates"]) == (
        "completed", "judgments", None, None, [])
    assert payload["metrics"] == {
        "total_rows": 3, "promoted_rows": 3, "failed_rows": 0, "campaigns_upserted": 0,
        "ad_sets_upserted": 0, "ads_upserted": 0, "daily_metrics_upserted": 0,
        "judgments_upserted": 3}
    assert payload["timestamp"].endswith("Z")


def test_a_duplicate_sqs_delivery_writes_no_second_event(gateway, tenants, conn, queues,
                                                         stack_env, out_dir, receiver):
    # Given a completed import whose tenant has a webhook
    user = tenants.user()
    allow = stack.start_gateway(allowing(stack_env, receiver.url), out_dir, name="gw-allow")
    try:
        register(allow, user.token, receiver.url)
    finally:
        allow.stop()
    batch_id = submit(gateway, user, judgments(5))
    drain(conn, stack_env, out_dir, batch_id, env={"WEBHOOK_DISPATCH_ENABLED": "false"})
    assert batch(conn, batch_id)["status"] == "completed"

    # When SQS delivers its job message again and a worker handles it
    payload = conn.execute("SELECT o.payload FROM job_outbox o JOIN ingestion_runs r USING "
                           "(run_id) WHERE r.batch_id = %s", (batch_id,)).fetchone()["payload"]
    queues.queue.send(orjson.dumps(payload).decode())
    worker = stack.start_worker({**stack_env, "WEBHOOK_DISPATCH_ENABLED": "false"}, out_dir,
                                once=True, name="worker-again")
    assert worker.proc.wait(240) == 0, worker.logs()[-3000:]

    # Then the batch still has one event and the webhook one delivery
    assert len(events(conn, user.tenant_id)) == 1
    assert conn.execute("SELECT count(*) AS n FROM webhook_deliveries WHERE tenant_id = %s",
                        (user.tenant_id,)).fetchone()["n"] == 1


def test_a_takeover_mid_promotion_writes_the_event_once(gateway, tenants, conn, stack_env,
                                                        out_dir, tmp_path):
    # Given a batch held inside its promotion transaction, then its worker killed there
    user = tenants.user()
    batch_id = submit(gateway, user, judgments(300))
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")
    flag = tmp_path / "hold"
    flag.touch()
    first = _held_worker(stack_env, out_dir, flag, "promote", "worker-1")
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE query "
                                    "LIKE '%%INSERT INTO judgments%%' AND state = "
                                    "'idle in transaction'").fetchone()["n"] >= 1,
               timeout=120, message="promotion held uncommitted")
    first.signal(signal.SIGKILL)
    first.proc.wait(30)
    assert events(conn, user.tenant_id) == []

    # When another worker takes the job over and completes it
    second = stack.start_worker(stack_env, out_dir, name="worker-2")
    try:
        wait_until(lambda: batch(conn, batch_id)["status"] == "completed", timeout=240,
                   message="batch completed after takeover")
    finally:
        second.stop()

    # Then exactly one event, with the promotion's counts
    [event] = events(conn, user.tenant_id)
    assert event["payload"]["metrics"]["promoted_rows"] == 300


# ── delivery ────────────────────────────────────────────────────────────────────────────────
def test_a_receiver_failing_twice_then_succeeding_gets_the_signed_event(tenants, conn, stack_env,
                                                                       out_dir):
    # Given a receiver that answers 500, 503, then 200, registered (allow-listed) for the tenant
    receiver = Receiver([500, 503]).start()
    env = {**allowing(stack_env, receiver.url), **FAST_RETRIES}
    gw = stack.start_gateway(env, out_dir, name="gateway")
    worker = stack.start_worker(env, out_dir, name="worker")
    try:
        user = tenants.user()
        webhook = register(gw, user.token, receiver.url)

        # When a judgments import completes
        batch_id = submit(gw, user, judgments(4))
        wait_until(lambda: len(receiver.requests) >= 3, timeout=240,
                   message="three delivery attempts")
        wait_until(lambda: deliveries(gw, user.token, webhook["webhook_id"])[0]["status"]
                   == "delivered", timeout=30, message="delivery settled")
        log = deliveries(gw, user.token, webhook["webhook_id"])
    finally:
        worker.stop()
        gw.stop()
        receiver.stop()

    # Then the third attempt was taken, each carried the same webhook-id, and the library a
    # receiver uses verifies the signature with the secret shown at registration
    assert len(receiver.requests) == 3
    assert len({r.headers["webhook-id"] for r in receiver.requests}) == 1
    last = receiver.requests[-1]
    assert last.path == "/hooks/dragonfly?token=t0p"
    verified = Webhook(webhook["secret"]).verify(last.body, last.headers)
    assert verified["type"] == "ingestion.complete"
    assert verified["data"]["upload_id"] == batch_id
    assert verified["data"]["metrics"]["promoted_rows"] == 4
    assert verified["data"] == events(conn, user.tenant_id)[0]["payload"]
    # and a wrong secret does not verify
    with pytest.raises(Exception, match="signature"):
        Webhook("whsec_" + "A" * 43 + "=").verify(last.body, last.headers)
    # and the log shows one delivered entry after three attempts
    [entry] = log
    assert (entry["status"], entry["attempts"], entry["last_status_code"], entry["last_error"]) == (
        "delivered", 3, 200, None)
    assert entry["webhook_message_id"] == last.headers["webhook-id"]
    # and the worker's logs never carry the secret or the URL's query string
    logs = worker.logs()
    assert "webhook attempt failed; will retry" in logs and "webhook delivered" in logs
    assert webhook["secret"] not in logs and "t0p" not in logs


def test_dev_mode_lets_a_local_receiver_take_a_test_event(tenants, stack_env, out_dir, receiver):
    # Given a DEV_MODE gateway and worker (`make run`) and a receiver on this machine
    env = {**stack_env, "DEV_MODE": "true", **FAST_RETRIES}
    gw = stack.start_gateway(env, out_dir, name="gateway-dev")
    worker = stack.start_worker(env, out_dir, name="worker-dev")
    try:
        user = tenants.user()
        webhook = register(gw, user.token, receiver.url)

        # When the admin sends a test event
        with gw.client(user.token) as c:
            sent = c.post(f"/v1/webhooks/{webhook['webhook_id']}/test")
        assert sent.status_code == 202, sent.text
        wait_until(lambda: receiver.requests, timeout=120, message="test event delivered")
        wait_until(lambda: deliveries(gw, user.token, webhook["webhook_id"])[0]["status"]
                   == "delivered", timeout=30, message="delivery settled")
    finally:
        worker.stop()
        gw.stop()

    # Then it arrived signed, as a webhook.test event of this tenant
    [request] = receiver.requests
    verified = Webhook(webhook["secret"]).verify(request.body, request.headers)
    assert verified["type"] == "webhook.test"
    assert verified["data"]["workspace_id"] == str(user.tenant_id)
    assert request.headers["webhook-id"] == sent.json()["webhook_message_id"]


def test_delivery_checks_the_url_again_and_sends_nothing_where_no_longer_allowed(
        tenants, stack_env, out_dir, receiver):
    # Given a loopback receiver registered through a DEV_MODE gateway (loopback allowed there)
    port = receiver.url.split(":")[2].split("/")[0]
    url = f"https://127.0.0.1:{port}/hooks/dragonfly"
    gw = stack.start_gateway({**stack_env, "DEV_MODE": "true"}, out_dir, name="gateway-dev")
    # and a worker whose rules refuse loopback (production mode, no allowlist)
    worker = stack.start_worker({**stack_env, **FAST_RETRIES}, out_dir, name="worker")
    try:
        user = tenants.user()
        webhook = register(gw, user.token, url)

        # When an event is sent to it
        with gw.client(user.token) as c:
            assert c.post(f"/v1/webhooks/{webhook['webhook_id']}/test").status_code == 202
        wait_until(lambda: (deliveries(gw, user.token, webhook["webhook_id"])[0]["attempts"]
                            >= 2), timeout=120, message="two attempts")
        [entry] = deliveries(gw, user.token, webhook["webhook_id"])
    finally:
        worker.stop()
        gw.stop()

    # Then no request reached it; the log says why and the delivery stays pending for retry
    assert receiver.requests == []
    assert entry["status"] == "pending" and entry["last_status_code"] is None
    assert entry["last_error"].startswith("not sent:") and "resolves to 127.0.0.1" in entry[
        "last_error"]


def test_a_receiver_that_never_takes_it_fails_after_the_retry_window(tenants, stack_env, out_dir):
    # Given a receiver that always answers 500, and a retry window of three seconds
    receiver = Receiver(default=500).start()
    env = {**allowing(stack_env, receiver.url), **FAST_RETRIES, "WEBHOOK_RETRY_WINDOW_S": "3"}
    gw = stack.start_gateway(env, out_dir, name="gateway")
    worker = stack.start_worker(env, out_dir, name="worker")
    try:
        stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
        user = tenants.user()
        webhook = register(gw, user.token, receiver.url)
        with gw.client(user.token) as c:
            assert c.post(f"/v1/webhooks/{webhook['webhook_id']}/test").status_code == 202

        # When the window has passed
        wait_until(lambda: deliveries(gw, user.token, webhook["webhook_id"])[0]["status"]
                   == "failed", timeout=120, message="delivery failed for good")
        [entry] = deliveries(gw, user.token, webhook["webhook_id"])
        attempts = len(receiver.requests)
    finally:
        worker.stop()
        gw.stop()
        receiver.stop()

    # Then it stays in the log as failed, with every attempt counted and the last answer
    assert entry["attempts"] == attempts >= 2
    assert (entry["last_status_code"], entry["last_error"]) == (500, "HTTP 500")
    assert entry["next_attempt_at"] is None


def test_a_dispatcher_killed_mid_post_leaves_the_delivery_to_another(tenants, stack_env, out_dir):
    # Given a receiver that never answers the first request, and a short claim lease
    receiver = Receiver(hang_first=True).start()
    env = {**allowing(stack_env, receiver.url), **FAST_RETRIES, "WEBHOOK_TIMEOUT_S": "60",
           "WEBHOOK_DISPATCH_LEASE_S": "3"}
    gw = stack.start_gateway(env, out_dir, name="gateway")
    first = stack.start_worker(env, out_dir, name="worker-1")
    try:
        user = tenants.user()
        webhook = register(gw, user.token, receiver.url)
        with gw.client(user.token) as c:
            assert c.post(f"/v1/webhooks/{webhook['webhook_id']}/test").status_code == 202
        wait_until(lambda: receiver.requests, timeout=120, message="first attempt in flight")

        # When its dispatcher is killed mid-POST and another worker runs
        first.signal(signal.SIGKILL)
        first.proc.wait(30)
        second = stack.start_worker(env, out_dir, name="worker-2")
        try:
            wait_until(lambda: deliveries(gw, user.token, webhook["webhook_id"])[0]["status"]
                       == "delivered", timeout=120, message="delivered by the second worker")
        finally:
            second.stop()
        [entry] = deliveries(gw, user.token, webhook["webhook_id"])
    finally:
        gw.stop()
        receiver.stop()

    # Then the claim came back after its lease and the message went again, same webhook-id
    assert len(receiver.requests) == 2 and entry["attempts"] == 2
    assert receiver.requests[0].headers["webhook-id"] == receiver.requests[1].headers["webhook-id"]
    assert "webhook delivered" in second.logs()
