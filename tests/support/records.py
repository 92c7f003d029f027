"""Records imports in tests: upload a file through the gateway, and stand in for the worker's
records pipeline by writing the states it reaches straight into Postgres.

The pipeline (parse → stage → promote) is not built yet; `finish_batch` and `add_errors`
write exactly what it leaves behind — a batch walked through the status machine with its
counts and durations, its row errors — so the batch API can be tested against real rows.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import psycopg

CSV_HEADER = "File #,Plaintiff,Defendant,Amount,Entry Date,Court,County\n"


def judgments_csv(rows: int = 3, seed: str = "") -> bytes:
    lines = [f"2024-CV-{seed}{i:05d},Acme Collections LLC,John Q. Public,\"$12,500.00\","
             f"01/15/2024,New York Supreme Court,New York\n" for i in range(rows)]
    return (CSV_HEADER + "".join(lines)).encode()


def upload(client: httpx.Client, name: str, data: bytes, contract: str = "judgments",
           **fields: str) -> httpx.Response:
    return client.post("/v1/imports", files={"file": (name, data)},
                       data={"contract": contract, **fields})


def walk(conn: psycopg.Connection, batch_id: uuid.UUID | str, *statuses: str) -> None:
    for status in statuses:
        conn.execute("UPDATE import_batches SET status = %s WHERE batch_id = %s",
                     (status, batch_id))


def finish_batch(conn: psycopg.Connection, batch_id: uuid.UUID | str, status: str = "completed",
                 **counts: Any) -> None:
    """What the pipeline leaves on a batch it finished: the path through the machine, the
    counts and durations, and completed_at; ``status`` failed leaves it after staging."""
    with conn.transaction():
        walk(conn, batch_id, "processing", "staging_complete")
        if status != "failed":
            walk(conn, batch_id, "promoting")
        columns = {**counts, "status": status}
        sets = ", ".join(f"{k} = %({k})s" for k in columns)
        conn.execute(f"UPDATE import_batches SET {sets}, completed_at = now() "
                     "WHERE batch_id = %(batch_id)s", {**columns, "batch_id": batch_id})


def add_errors(conn: psycopg.Connection, batch_id: uuid.UUID | str,
               errors: list[dict[str, Any]]) -> None:
    """Row errors as the pipeline writes them (row_number, field, code, severity, message, raw)."""
    tenant_id = conn.execute("SELECT tenant_id FROM import_batches WHERE batch_id = %s",
                             (batch_id,)).fetchone()["tenant_id"]
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO import_row_errors (tenant_id, batch_id, row_number, field, code, "
            "severity, message, raw) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            [(tenant_id, batch_id, e["row_number"], e.get("field"), e["code"],
              e.get("severity", "critical"), e["message"],
              json.dumps(e["raw"]) if e.get("raw") is not None else None) for e in errors])
