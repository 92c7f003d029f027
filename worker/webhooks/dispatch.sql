-- Webhook delivery (migrations/0023_event_outbox_webhooks.sql, docs/decisions/0154).

-- name: claim
-- Due pending deliveries, oldest first, skipping rows another dispatcher holds. The claim is the
-- lease: next_attempt_at moves past it (a crashed dispatcher's rows come due again then) and a
-- new claim_token fences the result. attempts counts claims, so a dispatcher that dies inside
-- every attempt still runs out of its retry window.
WITH due AS (
    SELECT delivery_id FROM webhook_deliveries
    WHERE status = 'pending' AND next_attempt_at <= now()
    ORDER BY next_attempt_at, delivery_id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET claim_token = gen_random_uuid(), attempts = d.attempts + 1,
    next_attempt_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
FROM due, webhooks w, event_outbox e
WHERE d.delivery_id = due.delivery_id
  AND w.tenant_id = d.tenant_id AND w.webhook_id = d.webhook_id
  AND e.tenant_id = d.tenant_id AND e.event_id = d.event_id
RETURNING d.delivery_id, d.tenant_id, d.webhook_id, d.event_id, d.message_id, d.claim_token,
          d.attempts, w.url, w.secret, e.event_type, e.payload,
          extract(epoch FROM (now() - d.created_at)) AS age_s;

-- name: delivered
UPDATE webhook_deliveries
SET status = 'delivered', delivered_at = now(), last_attempt_at = now(),
    last_status_code = %(status_code)s, last_error = NULL, next_attempt_at = now(),
    updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: retry
UPDATE webhook_deliveries
SET last_attempt_at = now(), last_status_code = %(status_code)s, last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(delay_s)s), updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: give_up
UPDATE webhook_deliveries
SET status = 'failed', last_attempt_at = now(), last_status_code = %(status_code)s,
    last_error = %(error)s, updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: next_due
-- drain(): how long until the next pending delivery is due; NULL when none is pending.
SELECT extract(epoch FROM (min(next_attempt_at) - now())) AS due_in_s
FROM webhook_deliveries WHERE status = 'pending';

-- name: backlog
-- The gauges: pending deliveries of every tenant and the age of the oldest (partial index).
SELECT count(*) AS pending,
       extract(epoch FROM (now() - min(created_at))) AS oldest_pending_s
FROM webhook_deliveries WHERE status = 'pending';
