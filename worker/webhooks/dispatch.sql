-- Webhook delivery (migrations/0023, 0041; docs/decisions/0154, 0195).

-- name: claim_lock
-- Claims take turns across the fleet (transaction-scoped), so two dispatchers counting the
-- same endpoint's in-flight deliveries cannot both take its last free place.
SELECT pg_advisory_xact_lock(hashtext('webhook-dispatch-claim'), 0);

-- name: claim
-- Due pending deliveries for %(limit)s free places of this dispatcher, in the same transaction
-- as claim_lock. In flight (fleet-wide) = pending, claimed (claim_token) and inside its lease.
-- An endpoint gets at most %(per_endpoint)s in flight; between tenants the claim is fair: each
-- delivery is ranked by its tenant's deliveries already in flight plus its place in that
-- tenant's queue (endpoints taking turns inside it), so a tenant with many slow endpoints
-- takes a free place only after every other tenant with due work has one more than it.
-- The claim is the lease: next_attempt_at moves past it (a crashed dispatcher's rows come due
-- again then) and a new claim_token fences the result. attempts counts claims, so a dispatcher
-- that dies inside every attempt still runs out of its retry window.
WITH busy AS (
    SELECT tenant_id, webhook_id, count(*) AS n FROM webhook_deliveries
    WHERE status = 'pending' AND claim_token IS NOT NULL AND next_attempt_at > now()
    GROUP BY tenant_id, webhook_id
), tenant_busy AS (
    SELECT tenant_id, sum(n) AS n FROM busy GROUP BY tenant_id
), due AS (
    SELECT d.delivery_id, d.tenant_id, d.webhook_id, coalesce(b.n, 0) AS endpoint_busy,
           row_number() OVER (PARTITION BY d.webhook_id
                              ORDER BY d.next_attempt_at, d.delivery_id) AS nth
    FROM webhook_deliveries d
    LEFT JOIN busy b ON b.tenant_id = d.tenant_id AND b.webhook_id = d.webhook_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= now()
), allowed AS (
    SELECT delivery_id, tenant_id,
           row_number() OVER (PARTITION BY tenant_id ORDER BY nth, delivery_id) AS turn
    FROM due WHERE endpoint_busy + nth <= %(per_endpoint)s
), picked AS (
    SELECT a.delivery_id FROM allowed a LEFT JOIN tenant_busy t USING (tenant_id)
    ORDER BY coalesce(t.n, 0) + a.turn, a.delivery_id
    LIMIT %(limit)s
), locked AS (
    SELECT delivery_id FROM webhook_deliveries
    WHERE delivery_id IN (SELECT delivery_id FROM picked) AND status = 'pending'
    FOR UPDATE SKIP LOCKED
)
UPDATE webhook_deliveries d
SET claim_token = gen_random_uuid(), attempts = d.attempts + 1,
    next_attempt_at = now() + make_interval(secs => %(lease_s)s), updated_at = now()
FROM locked, webhooks w, event_outbox e
WHERE d.delivery_id = locked.delivery_id
  AND w.tenant_id = d.tenant_id AND w.webhook_id = d.webhook_id
  AND e.tenant_id = d.tenant_id AND e.event_id = d.event_id
RETURNING d.delivery_id, d.tenant_id, d.webhook_id, d.event_id, d.message_id, d.claim_token,
          d.attempts, w.url, w.secret,
          -- The replaced secret signs too while its grace period lasts (ADR 0196).
          CASE WHEN w.previous_secret_expires_at > now() THEN w.previous_secret END
              AS previous_secret,
          e.event_type, e.payload, extract(epoch FROM (now() - d.created_at)) AS age_s;

-- name: delivered
-- Every settle clears claim_token: the delivery is no longer in flight.
UPDATE webhook_deliveries
SET status = 'delivered', delivered_at = now(), last_attempt_at = now(),
    last_status_code = %(status_code)s, last_error = NULL, next_attempt_at = now(),
    claim_token = NULL, updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: retry
UPDATE webhook_deliveries
SET last_attempt_at = now(), last_status_code = %(status_code)s, last_error = %(error)s,
    next_attempt_at = now() + make_interval(secs => %(delay_s)s), claim_token = NULL,
    updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: give_up
UPDATE webhook_deliveries
SET status = 'failed', last_attempt_at = now(), last_status_code = %(status_code)s,
    last_error = %(error)s, claim_token = NULL, updated_at = now()
WHERE delivery_id = %(delivery_id)s AND claim_token = %(claim_token)s AND status = 'pending';

-- name: backlog
-- The gauges: pending deliveries of every tenant and the age of the oldest (partial index).
SELECT count(*) AS pending,
       extract(epoch FROM (now() - min(created_at))) AS oldest_pending_s
FROM webhook_deliveries WHERE status = 'pending';
