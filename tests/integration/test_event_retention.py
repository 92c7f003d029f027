"""Cleanup removes completion events and their webhook deliveries once every delivery is final
and the event is older than the retention; an event still being delivered stays, however old
(docs/decisions/0161). Through the real cleanup pass on real Postgres."""

from __future__ import annotations

from datetime import timedelta

from gateway.operations import cleanup

SECRET = "whsec_dGVzdA=="


def webhook(conn, tenant_id):
    return conn.execute(
        "INSERT INTO webhooks (tenant_id, url, event_types, secret) VALUES (%s, "
        "'https://hooks.example.com/in', '{webhook.test}', %s) RETURNING webhook_id",
        (tenant_id, SECRET)).fetchone()["webhook_id"]


def event(conn, tenant_id, webhook_id, ago: timedelta, *statuses: str):
    """A test event created ``ago``, with one delivery per status (each to its own endpoint)."""
    event_id = conn.execute(
        "INSERT INTO event_outbox (tenant_id, event_type, payload, created_at) VALUES "
        "(%s, 'webhook.test', '{}', now() - %s) RETURNING event_id",
        (tenant_id, ago)).fetchone()["event_id"]
    for status in statuses:
        hook = webhook_id if status == statuses[0] else webhook(conn, tenant_id)
        conn.execute(
            "INSERT INTO webhook_deliveries (tenant_id, webhook_id, event_id, status, "
            "delivered_at) VALUES (%s, %s, %s, %s, CASE WHEN %s = 'delivered' THEN now() END)",
            (tenant_id, hook, event_id, status, status))
    return event_id


def left(conn, *event_ids) -> dict:
    return {e: (conn.execute("SELECT count(*) AS n FROM event_outbox WHERE event_id = %s",
                             (e,)).fetchone()["n"],
                conn.execute("SELECT count(*) AS n FROM webhook_deliveries WHERE event_id = %s",
                             (e,)).fetchone()["n"]) for e in event_ids}


def run(database_url, tmp_path, *, dry_run: bool = False) -> cleanup.Report:
    return cleanup.run(database_url, None, upload_store_uri=(tmp_path / "u").as_uri(),
                       artifact_store_uri=(tmp_path / "a").as_uri(),
                       policy=cleanup.Policy(86400, 7 * 86400, -1), dry_run=dry_run)


def test_settled_events_go_after_the_retention_with_their_deliveries(database_url, conn,
                                                                     tenants, tmp_path):
    tenant = tenants.user().tenant_id
    hook = webhook(conn, tenant)
    old_delivered = event(conn, tenant, hook, timedelta(days=91), "delivered", "failed")
    old_no_receiver = event(conn, tenant, hook, timedelta(days=91))
    old_pending = event(conn, tenant, hook, timedelta(days=200), "delivered", "pending")
    recent = event(conn, tenant, hook, timedelta(days=89), "delivered")

    # A dry run counts and removes nothing
    assert run(database_url, tmp_path, dry_run=True).events == 2
    assert left(conn, old_delivered, old_no_receiver)[old_delivered] == (1, 2)

    report = run(database_url, tmp_path)

    assert report.events == 2
    assert left(conn, old_delivered, old_no_receiver, old_pending, recent) == {
        old_delivered: (0, 0), old_no_receiver: (0, 0), old_pending: (1, 2), recent: (1, 1)}
