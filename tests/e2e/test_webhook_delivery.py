"""Webhook delivery under hostile receivers and load (issue 22): a real `ingest worker` or the
dispatcher in this process, real Postgres, real HTTP receivers on this machine.

Endpoints and their deliveries are written straight into the tables in the shape the gateway
writes them (POST /v1/webhooks, "send test event": gateway/webhooks/webhooks.sql), so a test
can hold twenty of them without twenty registrations.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook

from shared import db
from shared.settings import WorkerSettings
from shared.webhooks import signing
from tests.support import stack
from tests.support.receiver import Dribbler, Receiver
from tests.support.stack import wait_until
from worker.webhooks import dispatcher, send

WEBHOOKS_SQL = db.load_queries(
    Path(__file__).resolve().parents[2] / "gateway" / "webhooks" / "webhooks.sql")


def endpoint(conn, tenant_id, url: str, secret: str | None = None) -> tuple[str, str]:
    secret = secret or signing.new_secret()
    row = conn.execute("INSERT INTO webhooks (tenant_id, url, event_types, secret) VALUES "
                       "(%s, %s, %s, %s) RETURNING webhook_id",
                       (tenant_id, url, ["ingestion.complete"], secret)).fetchone()
    return str(row["webhook_id"]), secret


def send_test_event(conn, tenant_id, webhook_id) -> dict:
    return conn.execute(WEBHOOKS_SQL["send_test_event"], {
        "tenant_id": tenant_id, "webhook_id": webhook_id}).fetchone()


def delivery(conn, delivery_id: int) -> dict:
    return conn.execute("SELECT * FROM webhook_deliveries WHERE delivery_id = %s",
                        (delivery_id,)).fetchone()


def test_twenty_dribbling_endpoints_of_one_tenant_delay_another_by_at_most_one_deadline(
        tenants, conn, stack_env, out_dir):
    # Given a tenant with 20 endpoints that answer 200 and then send one byte a second (for
    # 100 s each), two events for each, and a worker with 4 places and a 2 s deadline
    deadline = 2.0
    slow, fast = Dribbler(length=100, every_s=1.0).start(), Receiver().start()
    try:
        noisy, quiet = tenants.user(tenant="noisy").tenant_id, tenants.user(tenant="quiet").tenant_id
        urls = [slow.url(f"/slow/{n}") for n in range(20)]
        hooks = [endpoint(conn, noisy, url)[0] for url in urls]
        for webhook_id in hooks * 2:
            send_test_event(conn, noisy, webhook_id)
        mine, _ = endpoint(conn, quiet, fast.url)
        env = {**stack_env, "WEBHOOK_URL_ALLOWLIST": json.dumps([*urls, fast.url]),
               "WEBHOOK_TIMEOUT_S": str(deadline), "WEBHOOK_CONCURRENCY": "4",
               "WEBHOOK_PER_ENDPOINT": "1", "WEBHOOK_DISPATCH_POLL_S": "0.2",
               "WEBHOOK_BACKOFF_BASE_S": "30", "LEDGER_APPLY_ENABLED": "false"}
        worker = stack.start_worker(env, out_dir)
        try:
            wait_until(lambda: slow.most_open >= 4, timeout=120,
                       message="the slow endpoints hold every place")

            # When the other tenant's event is sent while every place is taken
            sent_at = time.monotonic()
            send_test_event(conn, quiet, mine)
            wait_until(lambda: fast.requests, timeout=30, message="the quiet tenant's delivery")
            waited = time.monotonic() - sent_at
            # (more of the noisy tenant's attempts, to see the per-endpoint bound hold)
            wait_until(lambda: len(slow.arrivals) >= 12, timeout=60, message="12 slow attempts")
        finally:
            worker.stop()
    finally:
        slow.stop()
        fast.stop()

    # Then it arrived within one deadline, plus the poll and a loaded machine's slack
    assert waited < deadline + 2.0, f"the quiet tenant waited {waited:.1f} s"
    # and the slow endpoints never had more than 4 attempts open, nor one endpoint two
    assert slow.most_open <= 4 and max(slow.most_open_per_path.values()) == 1
    # and each slow attempt ended at the deadline, not when the receiver finished dribbling
    rows = conn.execute("SELECT last_error FROM webhook_deliveries WHERE tenant_id = %s "
                        "AND attempts > 0 AND last_error IS NOT NULL", (noisy,)).fetchall()
    assert rows and {r["last_error"] for r in rows} == {f"no complete answer within {deadline:g} s"}


def _settings(database_url: str, **overrides) -> WorkerSettings:
    return WorkerSettings(database_url=database_url, webhook_dispatch_poll_s=0.1, **overrides)


def test_after_a_rotation_deliveries_carry_both_signatures_until_the_grace_ends(
        tenants, conn, database_url):
    # Given an endpoint whose secret was rotated with a grace period, and one rotated with none
    receiver = Receiver().start()
    try:
        user = tenants.user()
        old = signing.new_secret()
        webhook_id, _ = endpoint(conn, user.tenant_id, receiver.url, secret=old)
        new = signing.new_secret()
        rotated = conn.execute(WEBHOOKS_SQL["rotate_secret"], {
            "tenant_id": user.tenant_id, "webhook_id": webhook_id, "secret": new,
            "grace_s": 3600}).fetchone()
        assert rotated is not None
        send_test_event(conn, user.tenant_id, webhook_id)

        # When the dispatcher delivers
        settings = _settings(database_url, webhook_url_allowlist=(receiver.url,))
        dispatcher.Dispatcher(settings).drain()
        [during] = receiver.requests

        # and again once the grace period is over
        conn.execute("UPDATE webhooks SET previous_secret_expires_at = now() - interval '1 s' "
                     "WHERE webhook_id = %s", (webhook_id,))
        send_test_event(conn, user.tenant_id, webhook_id)
        dispatcher.Dispatcher(settings).drain()
        after = receiver.requests[1]
    finally:
        receiver.stop()

    # Then the first carried two signatures, each verifiable with its secret by the library
    # receivers use; the second only the new one
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    for secret in (new, old):
        assert Webhook(secret).verify(during.body, during.headers)["type"] == "webhook.test"
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    assert Webhook(new).verify(after.body, after.headers)
    with pytest.raises(Exception, match="signature"):
        Webhook(old).verify(after.body, after.headers)


def test_the_delivery_connects_to_the_address_it_checked(tenants, conn, database_url):
    # Given an endpoint by name whose lookup answers a loopback address at the check and
    # something else on any later lookup (a rebinding name; the receiver listens on loopback)
    receiver = Receiver().start()
    try:
        port = receiver.url.split(":")[2].split("/")[0]
        url = f"http://rebind.invalid:{port}/hooks/in"
        user = tenants.user()
        webhook_id, secret = endpoint(conn, user.tenant_id, url)
        sent = send_test_event(conn, user.tenant_id, webhook_id)
        lookups: list[str] = []

        def rebinding(host: str, port: int) -> list[str]:
            lookups.append(host)
            return ["127.0.0.1"] if len(lookups) == 1 else ["10.9.9.9"]

        # When a DEV_MODE dispatcher (loopback allowed) delivers it
        d = dispatcher.Dispatcher(_settings(database_url, dev_mode=True), resolve=rebinding)
        d.drain()
    finally:
        receiver.stop()

    # Then the one lookup was the check's, the POST went to the address it approved, and the
    # request still named the host
    assert lookups == ["rebind.invalid"]
    [request] = receiver.requests
    assert {k.lower(): v for k, v in request.headers.items()}["host"] == f"rebind.invalid:{port}"
    assert Webhook(secret).verify(request.body, request.headers)
    assert delivery(conn, sent["delivery_id"])["status"] == "delivered"


def test_https_keeps_the_host_for_tls_while_connecting_to_the_checked_address():
    from shared.webhooks import urls

    url, headers, extensions = send.pinned(
        "https://hooks.example.com:8443/in?x=1",
        urls.Target("hooks.example.com", "2606:2800:220:1::1"))
    assert url == "https://[2606:2800:220:1::1]:8443/in?x=1"
    assert headers == {"host": "hooks.example.com:8443"}
    assert extensions == {"sni_hostname": "hooks.example.com"}


def test_a_receiver_that_dribbles_is_cut_at_the_deadline():
    # One attempt on its own: the answer's status came at once, the body never ends.
    slow = Dribbler(length=100, every_s=0.5).start()
    try:
        item = {"url": slow.url("/in"), "payload": {"timestamp": "t"}, "event_type": "x",
                "secret": signing.new_secret(), "message_id": "msg_1"}

        async def once() -> send.Result:
            async with send.client(1) as http:
                return await send.attempt(http, item, deadline_s=1.5, allowlist=[item["url"]],
                                          dev_mode=False)

        started = time.monotonic()
        result = asyncio.run(once())
        took = time.monotonic() - started
    finally:
        slow.stop()
    assert result == send.Result(None, "no complete answer within 1.5 s")
    assert 1.4 < took < 3.0
