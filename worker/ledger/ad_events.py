"""`ad_metric.daily` events: one row of a platform's daily export, applied as a file row is.

The payload is one row of the `ad_metrics` contract for ``platform`` (keyed by that platform's
column names, e.g. "Amount spent (USD)", or by field names, e.g. "spend"), plus ``platform``
(meta | google | tiktok) and, optionally, ``client_id`` (an advertiser client of the tenant,
GET /v1/clients), as an upload names them beside its file. It is validated by the platform's
contract and written by the batch promotion's own statements (worker/records/ad_metrics.sql)
over a one-row source instead of a group of staged rows: campaign, ad set and ad first (only a
row that names one creates or renames it), then the day's figures, changed only where they
differ (docs/decisions/0167).

A fact naming an ad set or ad that does not exist is kept with a NULL reference, as a file row
is; a file records that as a warning row of its batch, and an event, which has no batch, says it
in the applier's log line instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from uuid import UUID

from shared import contracts, db
from shared.contracts import ad_metrics
from worker.ledger import Rejected
from worker.records import ad_promote, stage

TYPE = "ad_metric.daily"
CONTEXT = ("platform", "client_id")  # beside the row, as an upload names them

_STATEMENTS = db.load_queries(Path(ad_promote.__file__).with_name("ad_metrics.sql"))
# Where ad_metrics.sql reads a group of staged rows, and the warnings it files on the batch.
_GROUP = """WITH grp AS (
    SELECT * FROM import_staged_ad_metrics
    WHERE batch_id = %(batch_id)s AND tenant_id = %(tenant_id)s AND NOT is_duplicate
      AND row_number > %(after)s AND row_number <= %(upto)s
), """
# One event's row, read as a row of the typed stage (migrations/0070).
_ONE_ROW = ("WITH grp AS (SELECT * FROM jsonb_populate_record(NULL::import_staged_ad_metrics, "
            "%(data)s::jsonb || '{\"row_number\": 1}')), ")
_WARNINGS_START, _WARNINGS_END = "), warned AS (", "), resolved AS ("


def _one_row(name: str) -> str:
    """ad_metrics.sql's statement over one JSON row, without the batch's warning rows. Fails at
    import if the statement stops having that shape, rather than drifting apart."""
    text = _STATEMENTS[name]
    if _GROUP not in text:
        raise RuntimeError(f"ad_metrics.sql {name} no longer reads its group as "
                           "worker/ledger/ad_events.py expects; update it with the statement")
    text = text.replace(_GROUP, _ONE_ROW)
    if _WARNINGS_START in text:
        head, _, rest = text.partition(_WARNINGS_START)
        _, sep, tail = rest.partition(_WARNINGS_END)
        if not sep:
            raise RuntimeError(f"ad_metrics.sql {name}: its warnings no longer end where "
                               "worker/ledger/ad_events.py expects")
        text = head + _WARNINGS_END + tail
    return text


# Each level as a file's group runs it (worker/records/ad_promote.py LEVELS): an id seen later
# attaches to the entity its names made, and a row naming an entity by name only makes it.
DIMENSIONS = [_one_row(name) for _, names in ad_promote.LEVELS for name in names]
FACT = _one_row("upsert_daily_metrics")
MISSING_PARENTS = """
SELECT %(data)s::jsonb->>'ad_set_external_id' IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM ad_sets WHERE lookup_key = %(key_prefix)s::text
                                                    || (%(data)s::jsonb->>'ad_set_external_id'))
           AS ad_set_missing,
       %(data)s::jsonb->>'ad_external_id' IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM ads WHERE lookup_key = %(key_prefix)s::text
                                                || (%(data)s::jsonb->>'ad_external_id'))
           AS ad_missing"""
CLIENT = "SELECT 1 FROM ad_clients WHERE tenant_id = %(tenant_id)s AND client_id = %(client_id)s"


def validate(payload: Mapping[str, Any]) -> tuple[contracts.Contract, dict[str, Any], str,
                                                   dict[str, Any]]:
    """(contract, values, entity key, context) of a payload; Rejected with what is wrong."""
    platform = payload.get("platform")
    if not isinstance(platform, str) or platform not in ad_metrics.PLATFORMS:
        raise Rejected(f"payload.platform must be one of {', '.join(ad_metrics.PLATFORMS)} "
                       "(the export the row comes from)")
    client_id = payload.get("client_id")
    if client_id is not None:
        try:
            client_id = UUID(str(client_id))
        except ValueError:
            raise Rejected("payload.client_id must be the id of one of your tenant's "
                           "advertiser clients (GET /v1/clients)") from None
    contract = ad_metrics.for_platform(platform)
    row = {k: v for k, v in payload.items() if k not in CONTEXT}
    result = contracts.validate_row(contract, row)
    if not result.valid:
        raise Rejected("; ".join(f"{i.code}: {i.message}" for i in result.errors))
    key = f"{platform}|{client_id or ''}|{contracts.natural_key(contract, result.values)}"
    return contract, result.values, key, {"platform": platform, "client_id": client_id}


def write(conn: db.Conn, tenant_id: UUID, values: dict[str, Any],
          context: dict[str, Any]) -> str:
    """Dimensions then the fact, in the caller's transaction: inserted | updated | unchanged,
    and the missing parents' codes when there are any."""
    params = {"tenant_id": tenant_id, "batch_id": None, "data": stage.to_json(values),
              "platform": context["platform"], "client_id": context["client_id"],
              "key_prefix": ad_promote.key_prefix(tenant_id, context["platform"],
                                                  context["client_id"])}
    if params["client_id"] is not None and conn.execute(CLIENT, params).fetchone() is None:
        raise Rejected("payload.client_id names no advertiser client of your tenant "
                       "(GET /v1/clients lists them)")
    for statement in DIMENSIONS:
        conn.execute(statement, params)
    missing = conn.execute(MISSING_PARENTS, params).fetchone() or {}
    fact = conn.execute(FACT, params).fetchone() or {}
    note = "inserted" if fact.get("inserted") else "updated" if fact.get("updated") else "unchanged"
    codes = [rule.code for rule, gone in (
        (ad_metrics.AD_SET_NOT_FOUND, missing.get("ad_set_missing")),
        (ad_metrics.AD_NOT_FOUND, missing.get("ad_missing"))) if gone]
    return "; ".join([note, *codes])
