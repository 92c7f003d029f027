"""The dispatcher's figures on the worker's metrics port (worker/metrics.py serves the registry)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ATTEMPTS = Counter("ingest_webhook_attempts", "Webhook delivery attempts this worker made, by "
                   "outcome (delivered, retry, failed).", ["outcome"])
ATTEMPT_SECONDS = Histogram("ingest_webhook_attempt_duration_seconds",
                            "Time of one webhook attempt, check and connect to the whole answer "
                            "(at most WEBHOOK_TIMEOUT_S).",
                            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
PENDING = Gauge("ingest_webhook_pending_deliveries", "Pending webhook deliveries, every tenant.")
OLDEST = Gauge("ingest_webhook_oldest_pending_seconds",
               "Age of the oldest pending webhook delivery; 0 when none waits.")
IN_FLIGHT = Gauge("ingest_webhook_in_flight", "Webhook attempts this worker has in flight "
                  "(at most WEBHOOK_CONCURRENCY).")
