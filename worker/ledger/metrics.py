"""The applier's figures on the worker's metrics port (worker/metrics.py serves the registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

APPLIED = Counter("ingest_ledger_events", "Ledger events this worker settled, by outcome "
                  "(applied, superseded, retry, dead_letter).", ["outcome"])
APPLY_SECONDS = Histogram("ingest_ledger_apply_duration_seconds",
                          "Time to apply one ledger event.",
                          buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
# Apply lag (event-ledger.md): now − first seen of the oldest pending event; 0 when none waits.
LAG = Gauge("ingest_ledger_apply_lag_seconds",
            "Age of the oldest pending ledger event since it was first seen.")
PENDING = Gauge("ingest_ledger_pending_events", "Pending ledger events, every tenant.")
DEAD = Gauge("ingest_ledger_dead_letter_events", "Dead-letter ledger events, every tenant.")


def observe_backlog(backlog: Mapping[str, Any]) -> None:
    PENDING.set(backlog.get("pending") or 0)
    DEAD.set(backlog.get("dead_letter") or 0)
    LAG.set(float(backlog.get("oldest_pending_s") or 0))
