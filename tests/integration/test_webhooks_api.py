"""Webhook endpoints over the real gateway and Postgres (issue 13 item 7): registration with a
secret shown once, the URL rule (no loopback/private/link-local unless allow-listed or, for
loopback, DEV_MODE), admins only, and tenancy: another tenant's webhook answers like none."""

from __future__ import annotations

import base64
import json

import pytest

from tests.support import stack

RECEIVER = "http://127.0.0.1:9/hooks/ok?token=abc"
HOSTILE = [
    "http://169.254.169.254/latest/meta-data/",        # cloud metadata
    "https://169.254.169.254/hook",
    "https://[::ffff:169.254.169.254]/hook",            # the same, IPv4-mapped
    "https://10.1.2.3/hook",                            # private
    "https://192.168.0.10:8443/hook",
    "https://127.0.0.1/hook",                           # loopback outside DEV_MODE
    "https://localhost/hook",
    "https://2130706433/hook",                          # 127.0.0.1 spelled as a number
    "https://[::127.0.0.1]/hook",                       # IPv4-compatible loopback (reserved)
    "ftp://example.com/hook",
    "https://user:pw@example.com/hook",
    "not a url",
]
MALFORMED = {"ftp://example.com/hook", "not a url"}


def _create(gw: stack.Process, token: str, url: str, types=("ingestion.complete",)):
    with gw.client(token) as c:
        return c.post("/v1/webhooks", json={"url": url, "event_types": list(types)})


@pytest.fixture
def allowing_gateway(stack_env, out_dir):
    process = stack.start_gateway({**stack_env, "WEBHOOK_URL_ALLOWLIST": json.dumps([RECEIVER])},
                                  out_dir, name="gateway-allow")
    yield process
    process.stop()


def test_admin_registers_a_webhook_and_sees_the_secret_once(allowing_gateway, tenants, conn):
    admin = tenants.user()
    response = _create(allowing_gateway, admin.token, RECEIVER)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    created = response.json()
    secret = created["secret"]
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert created["url"] == RECEIVER and created["event_types"] == ["ingestion.complete"]
    stored = conn.execute("SELECT tenant_id, secret FROM webhooks WHERE webhook_id = %s",
                          (created["webhook_id"],)).fetchone()
    assert (stored["tenant_id"], stored["secret"]) == (admin.tenant_id, secret)

    with allowing_gateway.client(admin.token) as c:
        listed = c.get("/v1/webhooks").json()
    assert [w["webhook_id"] for w in listed["items"]] == [created["webhook_id"]]
    assert listed["total"] == 1 and secret not in json.dumps(listed)
    assert "secret" not in listed["items"][0]


@pytest.mark.parametrize("url", HOSTILE)
def test_loopback_private_and_metadata_urls_are_refused(gateway, tenants, conn, url):
    admin = tenants.user()
    response = _create(gateway, admin.token, url)
    # 400 when malformed, 403 when the rules keep deliveries from it (docs/decisions/0200)
    assert response.status_code == (400 if url in MALFORMED else 403), response.text
    assert response.json()["code"] == "webhook_url_not_allowed"
    assert conn.execute("SELECT count(*) AS n FROM webhooks").fetchone()["n"] == 0


def test_dev_mode_lets_a_loopback_receiver_through_but_not_private_addresses(
        stack_env, out_dir, tenants):
    dev = stack.start_gateway({**stack_env, "DEV_MODE": "true"}, out_dir, name="gateway-dev")
    try:
        admin = tenants.user()
        assert _create(dev, admin.token, "http://127.0.0.1:8999/hook").status_code == 201
        for url in ("http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/hook",
                    "http://[fd00::1]/hook"):
            response = _create(dev, admin.token, url)
            assert response.status_code == 403 and response.json()["code"] == (
                "webhook_url_not_allowed"), url
    finally:
        dev.stop()


def test_unknown_event_types_and_non_admins_are_refused(allowing_gateway, tenants):
    admin, member = tenants.user(), tenants.user(role="user")
    for types in ([], ["ingestion.completed"], ["webhook.test"]):
        response = _create(allowing_gateway, admin.token, RECEIVER, types)
        assert (response.status_code, response.json()["code"]) == (400, "unknown_event_type")
    assert _create(allowing_gateway, member.token, RECEIVER).status_code == 403
    with allowing_gateway.client(member.token) as c:
        assert c.get("/v1/webhooks").status_code == 403


def test_another_tenants_webhook_answers_like_a_missing_one(allowing_gateway, tenants, conn):
    # Given a webhook of tenant A with a test delivery in its log
    a, b = tenants.user("acme"), tenants.user("globex")
    webhook_id = _create(allowing_gateway, a.token, RECEIVER).json()["webhook_id"]
    with allowing_gateway.client(a.token) as c:
        assert c.post(f"/v1/webhooks/{webhook_id}/test").status_code == 202

    # When tenant B's admin lists, reads the log of, tests or deletes it
    with allowing_gateway.client(b.token) as c:
        listed = c.get("/v1/webhooks").json()
        answers = [c.get(f"/v1/webhooks/{webhook_id}/deliveries"),
                   c.post(f"/v1/webhooks/{webhook_id}/test"),
                   c.delete(f"/v1/webhooks/{webhook_id}")]
        missing = c.get("/v1/webhooks/00000000-0000-4000-8000-000000000000/deliveries")

    # Then B sees nothing, and each answer is the one for an id that does not exist
    assert listed == {"items": [], "page": 1, "limit": 20, "total": 0}
    for response in answers:
        assert response.status_code == 404, response.text
        assert response.json() == missing.json()
    # and A's webhook, its one delivery and its one event are untouched
    with allowing_gateway.client(a.token) as c:
        log = c.get(f"/v1/webhooks/{webhook_id}/deliveries").json()
    assert log["total"] == 1 and log["items"][0]["event_type"] == "webhook.test"
    assert conn.execute("SELECT count(*) AS n FROM event_outbox WHERE tenant_id = %s",
                        (b.tenant_id,)).fetchone()["n"] == 0


def test_deleting_a_webhook_removes_it_and_its_log(allowing_gateway, tenants, conn):
    admin = tenants.user()
    webhook_id = _create(allowing_gateway, admin.token, RECEIVER).json()["webhook_id"]
    with allowing_gateway.client(admin.token) as c:
        assert c.post(f"/v1/webhooks/{webhook_id}/test").status_code == 202
        assert c.delete(f"/v1/webhooks/{webhook_id}").status_code == 204
        assert c.get(f"/v1/webhooks/{webhook_id}/deliveries").status_code == 404
        assert c.delete(f"/v1/webhooks/{webhook_id}").status_code == 404
        assert c.get("/v1/webhooks").json()["total"] == 0
    assert conn.execute("SELECT count(*) AS n FROM webhook_deliveries").fetchone()["n"] == 0


def test_an_admin_rotates_the_secret_and_the_old_one_keeps_signing_for_the_grace(
        allowing_gateway, tenants, conn):
    # Given a webhook with a delivery in its log
    admin, other, member = tenants.user("acme"), tenants.user("globex"), tenants.user(
        "acme", role="user")
    created = _create(allowing_gateway, admin.token, RECEIVER).json()
    webhook_id, first = created["webhook_id"], created["secret"]
    with allowing_gateway.client(admin.token) as c:
        assert c.post(f"/v1/webhooks/{webhook_id}/test").status_code == 202

        # When the admin rotates it (default grace), then again with a grace of a minute
        rotated = c.post(f"/v1/webhooks/{webhook_id}/rotate-secret")
        assert rotated.status_code == 200, rotated.text
        assert rotated.headers["cache-control"] == "no-store"
        second = rotated.json()["secret"]
        stored = conn.execute("SELECT secret, previous_secret, previous_secret_expires_at - "
                              "now() AS left FROM webhooks WHERE webhook_id = %s",
                              (webhook_id,)).fetchone()
        again = c.post(f"/v1/webhooks/{webhook_id}/rotate-secret", json={"grace_period_s": 60})
        third = again.json()["secret"]
        for bad in (-1, 8 * 86400):
            refused = c.post(f"/v1/webhooks/{webhook_id}/rotate-secret",
                             json={"grace_period_s": bad})
            assert refused.status_code == 400, bad
        listed = c.get("/v1/webhooks").json()["items"][0]
        log = c.get(f"/v1/webhooks/{webhook_id}/deliveries").json()
    with allowing_gateway.client(other.token) as c:
        theirs = c.post(f"/v1/webhooks/{webhook_id}/rotate-secret")
    with allowing_gateway.client(member.token) as c:
        forbidden = c.post(f"/v1/webhooks/{webhook_id}/rotate-secret")

    # Then each rotation gave a new whsec_ secret and kept the one it replaced for the grace
    assert len({first, second, third}) == 3 and third.startswith("whsec_")
    assert (stored["secret"], stored["previous_secret"]) == (second, first)
    assert 86000 < stored["left"].total_seconds() <= 86400
    final = conn.execute("SELECT secret, previous_secret FROM webhooks WHERE webhook_id = %s",
                         (webhook_id,)).fetchone()
    assert (final["secret"], final["previous_secret"]) == (third, second)
    # and the list says when the old one stops signing, never a secret; the log survived
    assert listed["previous_secret_expires_at"] and listed["secret_rotated_at"]
    assert "secret" not in listed and log["total"] == 1
    # and nobody else may rotate it
    assert (theirs.status_code, theirs.json()["code"]) == (404, "webhook_not_found")
    assert forbidden.status_code == 403
