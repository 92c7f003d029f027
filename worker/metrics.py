"""This worker process's Prometheus metrics, on a port of its own (WORKER_METRICS_PORT, 0 = off).

Job and stage durations are histograms here, where jobs run; the gateway's /metrics holds the
fleet's figures from Postgres and SQS. With several workers on one host, give each its own port.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

from shared.alerts import Alerter

log = logging.getLogger(__name__)

JOB_SECONDS = Histogram(
    "ingest_job_duration_seconds", "Time from claim to terminal status, by status.", ["status"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800))
STAGE_SECONDS = Histogram(
    "ingest_stage_duration_seconds", "Time spent in each pipeline stage.", ["stage"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300))
JOBS = Counter("ingest_worker_jobs", "Jobs this worker finished, by terminal status.", ["status"])
MESSAGES = Counter("ingest_worker_messages", "Messages this worker settled, by outcome.",
                   ["outcome"])
TAKEOVERS = Counter("ingest_worker_takeovers", "Stale runs this worker took over.")
IN_FLIGHT = Gauge("ingest_worker_jobs_in_flight", "Jobs this worker is running now.")


def serve(port: int, addr: str, alerter: Alerter | None = None) -> None:
    if not port:
        return
    if alerter is not None:
        REGISTRY.register(_AlertCollector(alerter))  # type: ignore[arg-type]
    start_http_server(port, addr)
    log.info("worker metrics listening", extra={"port": port, "addr": addr})


def job_finished(status: str, stats: dict[str, Any]) -> None:
    JOBS.labels(status).inc()
    if stats.get("duration_ms") is not None:
        JOB_SECONDS.labels(status).observe(stats["duration_ms"] / 1000)
    for name, ms in (stats.get("stages") or {}).items():
        # Timings are recorded as "<stage>_ms" (worker/pipeline/runner.py).
        STAGE_SECONDS.labels(name.removesuffix("_ms")).observe(ms / 1000)


def settled(outcome: str) -> None:
    MESSAGES.labels(outcome).inc()


class _AlertCollector:
    def __init__(self, alerter: Alerter) -> None:
        self.alerter = alerter

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("ingest_alerts", "Alerts of this process by result.",
                                     labels=["result"])
        for result in ("sent", "suppressed", "dropped"):
            family.add_metric([result], getattr(self.alerter, result))
        yield family
