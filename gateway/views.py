"""JSON shapes of runs and documents as the API returns them (gateway-worker-ingestion.md §4)."""

from __future__ import annotations

from typing import Any

from gateway import paging
from gateway.runs import failures

RUN_FIELDS = ("run_id", "tenant_id", "doc_id", "status", "run_type", "source_id", "initiated_by",
              "stage", "progress", "delivery_count", "takeover_count", "created_at", "started_at",
              "updated_at", "finished_at", "config", "stats", "error", "error_code")
ATTEMPT_FIELDS = ("attempt_no", "kind", "actor", "worker", "queued_at", "started_at", "ended_at",
                  "outcome", "error", "error_code", "stages", "queue_wait_s", "duration_s")


def run(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in RUN_FIELDS}
    return out | failures.annotate(out)


def attempt(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ATTEMPT_FIELDS}
    return out | {"retryable": failures.judge(row["error_code"])[0]
                  if row["outcome"] == "failed" else None}


def document(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: row[k] for k in ("doc_id", "title", "source_type", "source_uri", "source_id",
                               "created_at")}
    if "parent_doc_id" in row:  # an e-mail attachment's message (docs/decisions/0250)
        out["parent_doc_id"] = row["parent_doc_id"]
    if "doc_version_id" in row:
        out["active_version"] = {k: row[k] for k in (
            "doc_version_id", "version_number", "content_hash", "chunk_count", "char_count",
            "page_count", "embedding_model")} | {"created_at": row["version_created_at"]}
    return out


def page_params(page: int, limit: int) -> tuple[int, int]:
    """For listings that take page/limit by hand; routes declare gateway/paging.py instead."""
    paging.check_page(page, limit)
    return limit, (page - 1) * limit


def paged(items: list[dict[str, Any]], rows: list[dict[str, Any]], page: int, limit: int) -> dict:
    return {"items": items, "page": page, "limit": limit, "total": rows[0]["total"] if rows else 0}
