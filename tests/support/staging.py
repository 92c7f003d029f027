"""Rows staged as the worker leaves them, for tests of promotion that start from a staged batch
(tests/integration/test_records_promotion.py, test_ad_promotion.py, test_records_plans.py):
each contract's values, by field name, written into its typed stage (migrations/0070) with the
natural key the worker would give them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import orjson

from worker.records import stage

# The natural key the worker stages for a row, when the test gives none (its SQL twin: the
# keys are one definition, tests/integration/test_records_any_text.py).
KEYS = {
    "judgments": "records_case_key(r.case_number)",
    "plaintiffs": "coalesce(records_fold(r.name), '') || '|' || "
                  "coalesce(records_fold(r.address_line1), '') || '|' || "
                  "coalesce(records_fold(r.zip), '')",
    "ad_metrics": "r.natural_key",
}


def stage_rows(conn: Any, contract: str, tenant_id: UUID, batch_id: UUID,
               rows: Sequence[Mapping[str, Any]], *, first: int = 1) -> None:
    """Stage ``rows`` (field → value as JSON would carry it) as rows first, first + 1, …"""
    names = stage.VALUES[contract]
    table = stage.STAGES[contract]
    hashed = ", encode(sha256(convert_to(r.natural_key, 'UTF8')), 'hex')" \
        if contract == "ad_metrics" else ""
    conn.execute(
        f"INSERT INTO {table} (batch_id, tenant_id, row_number, natural_key, "
        f"{', '.join(names)}{', natural_key_hash' if hashed else ''}) "
        f"SELECT %(batch_id)s, %(tenant_id)s, %(first)s + r.ordinality - 1, {KEYS[contract]}, "
        f"{', '.join(f'r.{n}' for n in names)}{hashed} "
        f"FROM jsonb_populate_recordset(NULL::{table}, %(rows)s::jsonb) WITH ORDINALITY AS r",
        {"batch_id": batch_id, "tenant_id": tenant_id, "first": first,
         "rows": orjson.dumps(list(rows), default=str).decode()})
