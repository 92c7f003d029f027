"""The IngestionCompleteEvent (staging-promotion-runtime.md §7): written into the event outbox
inside the transaction that ends an import ``completed`` or ``partial``, never otherwise.

Every contract's promotion calls ``emit_ingestion_complete`` just before it commits. The outbox
is unique per (batch, event type), so a promotion that runs again (a takeover in ``promoting``,
a duplicate SQS delivery) writes no second event. The same statement creates one delivery per
webhook endpoint of the tenant that subscribed to the event type; the dispatcher
(worker/webhooks/) delivers them at least once. Payload mapping: docs/decisions/0152.
"""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path
from uuid import UUID

from psycopg.types.json import Jsonb

from shared import db

Q = db.load_queries(Path(__file__).with_name("completion.sql"))

EVENT_TYPE = "ingestion.complete"
EMITTING_STATUSES = ("completed", "partial")
# The spec's metrics, in its order; a contract without ad entities reports 0 for them.
METRIC_KEYS = ("total_rows", "promoted_rows", "failed_rows", "campaigns_upserted",
               "ad_sets_upserted", "ads_upserted", "daily_metrics_upserted")
REQUIRED_METRICS = ("total_rows", "promoted_rows", "failed_rows")


def commit_time(conn: db.Conn) -> datetime:
    """The time to stamp a promotion's end with: read last thing before its commit. now() is
    the transaction's start, which a long promotion passed minutes ago."""
    row = conn.execute(Q["commit_time"]).fetchone()
    assert row is not None
    return row["at"]


def emit_ingestion_complete(conn: db.Conn, *, tenant_id: UUID | str, batch_id: UUID | str,
                            contract: str, status: str, client_id: UUID | str | None,
                            platform: str | None, metrics: dict[str, int],
                            affected_dates: list[date], at: datetime) -> None:
    """Write the batch's IngestionCompleteEvent in the caller's transaction when §7.3 says so
    (status completed/partial and promoted_rows > 0); a second call for the batch is a no-op.
    ``at`` is the event's timestamp: the promotion's commit time (``commit_time``)."""
    if status not in EMITTING_STATUSES or metrics.get("promoted_rows", 0) <= 0:
        return
    conn.execute(Q["emit_event"], {
        "tenant_id": tenant_id, "batch_id": batch_id, "event_type": EVENT_TYPE, "at": at,
        "payload": Jsonb(payload(tenant_id=tenant_id, batch_id=batch_id, contract=contract,
                                 status=status, client_id=client_id, platform=platform,
                                 metrics=metrics, affected_dates=affected_dates))})


def payload(*, tenant_id: UUID | str, batch_id: UUID | str, contract: str, status: str,
            client_id: UUID | str | None, platform: str | None, metrics: dict[str, int],
            affected_dates: list[date]) -> dict[str, object]:
    """§7.1's fields (the timestamp is added by the insert: the promotion's commit time), plus the
    contract name so a receiver can tell a judgments import from an ad-metrics one."""
    return {
        "upload_id": str(batch_id),
        "workspace_id": str(tenant_id),
        "client_id": None if client_id is None else str(client_id),
        "platform": platform,
        "status": status,
        "contract": contract,
        "metrics": _metrics(metrics),
        "affected_dates": sorted({d.isoformat() for d in affected_dates}),
    }


def _metrics(metrics: dict[str, int]) -> dict[str, int]:
    missing = [k for k in REQUIRED_METRICS if k not in metrics]
    extra = [k for k in metrics if k not in METRIC_KEYS and not k.endswith("_upserted")]
    if missing or extra:
        raise ValueError(f"IngestionCompleteEvent metrics: missing {missing}, unknown {extra}")
    spec = {k: int(metrics.get(k, 0)) for k in METRIC_KEYS}
    # A records contract's own entity count (judgments_upserted, …) after the spec's keys.
    return spec | {k: int(v) for k, v in metrics.items() if k not in METRIC_KEYS}
