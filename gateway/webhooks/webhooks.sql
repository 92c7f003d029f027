-- Webhook endpoints and their delivery log (migrations/0023_event_outbox_webhooks.sql). Every
-- query names the tenant: another tenant's webhook id finds no row.

-- name: count_webhooks
SELECT count(*) AS n FROM webhooks WHERE tenant_id = %(tenant_id)s;

-- name: insert_webhook
INSERT INTO webhooks (tenant_id, url, event_types, secret, created_by)
VALUES (%(tenant_id)s, %(url)s, %(event_types)s, %(secret)s, %(created_by)s)
RETURNING webhook_id, url, event_types, created_by, created_at, secret_rotated_at,
          previous_secret_expires_at;

-- name: list_webhooks
SELECT webhook_id, url, event_types, created_by, created_at, secret_rotated_at,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret_expires_at END
           AS previous_secret_expires_at,
       (SELECT count(*) FROM webhooks c WHERE c.tenant_id = %(tenant_id)s) AS total
FROM webhooks WHERE tenant_id = %(tenant_id)s
ORDER BY created_at DESC, webhook_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: get_webhook
SELECT webhook_id, url, event_types, created_by, created_at, secret_rotated_at,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret_expires_at END
           AS previous_secret_expires_at
FROM webhooks WHERE tenant_id = %(tenant_id)s AND webhook_id = %(webhook_id)s;

-- name: rotate_secret
-- The new secret signs from now on; the one it replaces keeps signing beside it until the
-- grace period ends (docs/decisions/0196). Rotating again within a grace period drops the
-- oldest: only the last two secrets ever sign. The delivery log is not touched.
UPDATE webhooks
SET previous_secret = secret, secret = %(secret)s, secret_rotated_at = now(),
    previous_secret_expires_at = now() + make_interval(secs => %(grace_s)s)
WHERE tenant_id = %(tenant_id)s AND webhook_id = %(webhook_id)s
RETURNING webhook_id, url, event_types, created_by, created_at, secret_rotated_at,
          previous_secret_expires_at;

-- name: delete_webhook
-- Its deliveries go with it (ON DELETE CASCADE); a claim in flight then settles nothing.
DELETE FROM webhooks WHERE tenant_id = %(tenant_id)s AND webhook_id = %(webhook_id)s
RETURNING webhook_id;

-- name: list_deliveries
SELECT d.delivery_id, d.event_id, e.event_type, e.batch_id, d.message_id, d.status, d.attempts,
       d.last_status_code, d.last_error, d.last_attempt_at, d.next_attempt_at, d.delivered_at,
       d.created_at,
       (SELECT count(*) FROM webhook_deliveries c
        WHERE c.tenant_id = %(tenant_id)s AND c.webhook_id = %(webhook_id)s) AS total
FROM webhook_deliveries d
JOIN event_outbox e ON e.tenant_id = d.tenant_id AND e.event_id = d.event_id
WHERE d.tenant_id = %(tenant_id)s AND d.webhook_id = %(webhook_id)s
ORDER BY d.created_at DESC, d.delivery_id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: send_test_event
-- A webhook.test event for this endpoint only, through the same outbox and dispatcher as
-- every other event; nothing when the webhook is not the tenant's.
WITH w AS (
    SELECT tenant_id, webhook_id FROM webhooks
    WHERE tenant_id = %(tenant_id)s AND webhook_id = %(webhook_id)s
), event AS (
    INSERT INTO event_outbox (tenant_id, event_type, payload)
    SELECT tenant_id, 'webhook.test', jsonb_build_object(
        'webhook_id', webhook_id, 'workspace_id', tenant_id,
        'message', 'A test event from Dragonfly Ingest: your endpoint received and can verify it.',
        'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))
    FROM w
    RETURNING tenant_id, event_id
)
INSERT INTO webhook_deliveries (tenant_id, webhook_id, event_id)
SELECT event.tenant_id, w.webhook_id, event.event_id FROM event, w
RETURNING delivery_id, event_id, message_id;
