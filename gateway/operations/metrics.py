"""What the gateway reports about the fleet: Prometheus text for /metrics, JSON for /api/metrics.

Figures come from Postgres at each request (the truth, and cheap: indexed counts) and from a
cache of the queue depths that the housekeeping loop refreshes, so a scrape never calls SQS.
Every fleet figure is an aggregate: no label or field names a tenant, a run, a file or a user.
A tenant admin's own figures (/v1/metrics, the overview page) come from the same queries
filtered by their tenant, and may name their own runs.
Job and stage duration histograms live in the workers (worker/metrics.py), where jobs run.
See docs/decisions/0011-metrics.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector

from shared import db
from shared.alerts import Alerter
from shared.queue import Queue

Q = db.load_queries(Path(__file__).with_name("operations.sql"))
STATUSES = ("queued", "running", "succeeded", "failed")
ACTIONS = ("retry", "redrive", "dlq_purge")


# ── queue depths, cached ────────────────────────────────────────────────────────────────────
@dataclass
class DepthCache:
    main: dict[str, int] | None = None
    dead: dict[str, int] | None = None
    updated_at: float | None = None   # time.time() of the last successful refresh

    async def refresh(self, queue: Queue) -> None:
        main = await asyncio.to_thread(queue.depth)
        dead = await asyncio.to_thread(queue.depth, url=queue.dlq_url) if queue.dlq_url else None
        self.main, self.dead, self.updated_at = main, dead, time.time()

    @property
    def dlq_depth(self) -> int | None:
        """Messages still in the SQS dead-letter queue (not yet archived by the mover)."""
        return None if self.dead is None else self.dead["visible"] + self.dead["in_flight"]

    @property
    def age_s(self) -> float | None:
        return None if self.updated_at is None else time.time() - self.updated_at


# ── the snapshot both endpoints read ────────────────────────────────────────────────────────
@dataclass
class Snapshot:
    runs: dict[str, int]
    dashboard: dict[str, Any]
    last_failed: dict[str, Any] | None
    takeovers: int
    actions: dict[str, int]
    outbox: dict[str, Any]
    dead_letters_open: int = 0   # archived, neither redriven nor purged
    depths: DepthCache = field(default_factory=DepthCache)
    # Records imports: unfinished, failed in 24 h, stale batches (docs/decisions/0129).
    imports: dict[str, int] = field(default_factory=dict)

    @property
    def dlq_depth(self) -> int | None:
        """Dead letters waiting for someone: still in SQS plus archived and unresolved."""
        in_sqs = self.depths.dlq_depth
        return None if in_sqs is None else in_sqs + self.dead_letters_open


async def snapshot(pool: db.AsyncPool, depths: DepthCache, *, stale_s: float,
                   tenant_id: UUID | None = None) -> Snapshot:
    """Fleet-wide figures, or with ``tenant_id`` that tenant's (queue depths stay fleet-wide:
    the queues are shared and their counts say nothing about any tenant's content)."""
    async with pool.connection() as conn:
        async def rows(name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
            return await (await conn.execute(Q[name], {"tenant_id": tenant_id, **(params or {})})
                          ).fetchall()

        runs = {r["status"]: int(r["runs"]) for r in await rows("runs_by_status")}
        [dashboard] = await rows("dashboard", {"stale_s": stale_s})
        last_failed = await rows("last_failed")
        [takeovers] = await rows("takeovers_total")
        actions = {r["action"]: int(r["actions"]) for r in await rows("actions_by_kind")}
        [outbox] = await rows("outbox_lag")
        [dead] = await rows("open_dead_letters")
        [imports] = await rows("imports_dashboard")
    return Snapshot({s: runs.get(s, 0) for s in STATUSES}, dashboard,
                    last_failed[0] if last_failed else None, int(takeovers["takeovers"]),
                    {a: actions.get(a, 0) for a in ACTIONS}, outbox, int(dead["open"]), depths,
                    {k: int(v) for k, v in imports.items()})


def dashboard_json(snap: Snapshot) -> dict[str, Any]:
    """import-runs-state-machine.md §6, fleet-wide (operators, scrapers). The last failure is
    only a time: its run id (or file name) belongs to a tenant, and fleet figures name none."""
    age = snap.depths.age_s
    return {"ingest": {
        **_run_figures(snap),
        "last_failed_at": _iso(snap.last_failed["finished_at"]) if snap.last_failed else None,
        "dlq_depth": snap.dlq_depth,
        "dead_letters_in_sqs": snap.depths.dlq_depth,
        "dead_letters_archived_open": snap.dead_letters_open,
        "queue_depth": snap.depths.main,
        "queue_depth_age_s": round(age, 1) if age is not None else None,
        "outbox_lag_s": round(float(snap.outbox["oldest_s"]), 3),
        "imports": snap.imports,
    }}


def tenant_json(snap: Snapshot) -> dict[str, Any]:
    """One tenant's figures for its admins (/v1/metrics, the overview page): its runs, its
    failures with the last one's file name and run id, its open dead letters and imports; no
    shared-queue figure. ``last_failed_batch`` is the file name, as the spec's §6 example."""
    last = snap.last_failed
    return {"ingest": {
        **_run_figures(snap),
        "last_failed_batch": last["file_name"] if last else None,
        "last_failed_run_id": str(last["run_id"]) if last else None,
        "last_failed_at": _iso(last["finished_at"]) if last else None,
        "dead_letters_open": snap.dead_letters_open,
        "imports": snap.imports,
    }}


def _run_figures(snap: Snapshot) -> dict[str, Any]:
    d = snap.dashboard
    avg = d["avg_processing_s"]
    return {
        "backlog_count": int(d["backlog_count"]),
        "failed_24h": int(d["failed_24h"]),
        "stale_runs": int(d["stale_runs"]),
        "avg_processing_s": round(float(avg), 3) if avg is not None else None,
        "runs_by_status": snap.runs,
        "outbox_pending": int(snap.outbox["pending"]),
        "takeovers_total": snap.takeovers,
        "operator_actions": snap.actions,
    }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


# ── Prometheus ──────────────────────────────────────────────────────────────────────────────
class Exporter:
    """One registry per app: the process's own metrics plus the latest snapshot."""

    def __init__(self, relay: Any = None, alerter: Alerter | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.collector = _SnapshotCollector(relay, alerter)
        self.registry.register(self.collector)  # type: ignore[arg-type]

    def render(self, snap: Snapshot) -> bytes:
        self.collector.snap = snap
        return generate_latest(self.registry)


class _SnapshotCollector:
    def __init__(self, relay: Any, alerter: Alerter | None) -> None:
        self.relay = relay
        self.alerter = alerter
        self.snap: Snapshot | None = None

    def collect(self) -> Iterator[Metric]:
        snap = self.snap
        if snap is None:
            return
        yield from _run_metrics(snap)
        yield from _queue_metrics(snap.depths, snap.outbox)
        yield _gauge("ingest_dead_letters_open",
                     "Dead letters archived from SQS and neither redriven nor purged.",
                     snap.dead_letters_open)
        yield from _counters(snap, self.relay, self.alerter)


def _gauge(name: str, doc: str, value: float | None) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    if value is not None:
        family.add_metric([], float(value))
    return family


def _run_metrics(snap: Snapshot) -> Iterator[Metric]:
    runs = GaugeMetricFamily("ingest_runs", "Ingestion runs by status.", labels=["status"])
    for status, count in snap.runs.items():
        runs.add_metric([status], count)
    yield runs
    d = snap.dashboard
    yield _gauge("ingest_backlog_runs", "Runs queued or running.", d["backlog_count"])
    yield _gauge("ingest_failed_runs_24h", "Runs that failed in the last 24 h.", d["failed_24h"])
    yield _gauge("ingest_stale_runs", "Running runs without a recent heartbeat.", d["stale_runs"])
    yield _gauge("ingest_processing_seconds_avg_24h",
                 "Mean processing time of runs that succeeded in the last 24 h.",
                 d["avg_processing_s"])
    last = snap.last_failed["finished_at"].timestamp() if snap.last_failed else None
    yield _gauge("ingest_last_failure_timestamp_seconds", "When the last run failed.", last)
    imports = snap.imports
    yield _gauge("ingest_import_backlog", "Import batches not finished yet.",
                 imports.get("backlog_count"))
    yield _gauge("ingest_imports_failed_24h", "Import batches failed in the last 24 h.",
                 imports.get("failed_24h"))
    yield _gauge("ingest_stale_imports", "Import batches silent for over an hour.",
                 imports.get("stale_count"))


def _queue_metrics(depths: DepthCache, outbox: dict[str, Any]) -> Iterator[Metric]:
    queue = GaugeMetricFamily("ingest_queue_messages",
                              "Messages in the ingest queue and its dead-letter queue (cached).",
                              labels=["queue", "state"])
    for name, depth in (("ingest", depths.main), ("dead_letter", depths.dead)):
        for state, count in (depth or {}).items():
            queue.add_metric([name, state], count)
    yield queue
    yield _gauge("ingest_queue_depth_age_seconds", "Age of the cached queue depths.", depths.age_s)
    yield _gauge("ingest_outbox_pending_jobs", "Committed jobs not yet published to SQS.",
                 outbox["pending"])
    yield _gauge("ingest_outbox_lag_seconds", "Age of the oldest unpublished job.",
                 outbox["oldest_s"])


def _counters(snap: Snapshot, relay: Any, alerter: Alerter | None) -> Iterator[Metric]:
    takeovers = CounterMetricFamily("ingest_run_takeovers", "Stale runs taken over by a worker.")
    takeovers.add_metric([], snap.takeovers)
    yield takeovers
    actions = CounterMetricFamily("ingest_operator_actions",
                                  "Recorded operator actions on runs (retry, redrive, dlq_purge).",
                                  labels=["action"])
    for action, count in snap.actions.items():
        actions.add_metric([action], count)
    yield actions
    if relay is not None:
        published = CounterMetricFamily("ingest_outbox_published",
                                        "Jobs this gateway published to SQS.")
        published.add_metric([], relay.published_total)
        failures = CounterMetricFamily("ingest_outbox_publish_failures",
                                       "Jobs this gateway failed to publish (retried later).")
        failures.add_metric([], relay.publish_failures_total)
        yield published
        yield failures
    if alerter is not None:
        yield alert_counters(alerter)


def alert_counters(alerter: Alerter) -> CounterMetricFamily:
    family = CounterMetricFamily("ingest_alerts", "Alerts of this process by result.",
                                 labels=["result"])
    for result in ("sent", "suppressed", "dropped"):
        family.add_metric([result], getattr(alerter, result))
    return family
