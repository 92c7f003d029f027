"""Judgments, plaintiffs and their links written straight into Postgres, in the shape the
worker's records pipeline promotes them (worker/records/records.sql on branch recordsworker:
upsert_judgments, upsert_plaintiffs; migrations/0009_records.sql). The read-back tests need
records to read, not a pipeline run: the values here are what the contracts' normalisers
produce (case number as given, names spaces-collapsed, amounts to cents, E.164 phones,
lower-case e-mails, 2-letter states, 5-digit ZIPs).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import date
from decimal import Decimal
from typing import Any

import psycopg


def batch(conn: psycopg.Connection, tenant_id: uuid.UUID, contract: str = "judgments",
          status: str = "completed") -> uuid.UUID:
    """An import batch row for records to point at (batch_id filters). Completed by default:
    readers see a batch's records only once it is (docs/decisions/0181)."""
    tag = uuid.uuid4().hex
    return conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status) VALUES (%s, %s, '1', %s, %s, 10, %s,"
        " 'simplicity', %s) RETURNING batch_id",
        (tenant_id, contract, f"{tag}.csv", hashlib.sha256(tag.encode()).hexdigest(),
         f"file:///tmp/{tag}.csv", status)).fetchone()["batch_id"]


def judgment(conn: psycopg.Connection, tenant_id: uuid.UUID, case_number: str, *,
             plaintiff_name: str = "Acme Collections LLC", defendant_name: str = "John Q. Public",
             amount: str = "12500.00", filed_date: date = date(2024, 1, 15),
             court: str | None = "New York Supreme Court", county: str | None = "New York",
             batch_id: uuid.UUID | None = None, created_at: Any = None) -> uuid.UUID:
    return conn.execute(
        "INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name, amount,"
        " filed_date, court, county, source, batch_id, created_at)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 'simplicity', %s, COALESCE(%s, now()))"
        " RETURNING id",
        (tenant_id, case_number, plaintiff_name, defendant_name, Decimal(amount), filed_date,
         court, county, batch_id, created_at)).fetchone()["id"]


def plaintiff(conn: psycopg.Connection, tenant_id: uuid.UUID, name: str, *,
              address_line1: str | None = None, city: str | None = None,
              state: str | None = None, zip: str | None = None, phone: str | None = None,
              email: str | None = None, contact_name: str | None = None,
              status: str = "active", batch_id: uuid.UUID | None = None) -> uuid.UUID:
    return conn.execute(
        "INSERT INTO plaintiffs (tenant_id, name, address_line1, city, state, zip, phone, email,"
        " contact_name, status, source, batch_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'simplicity', %s) RETURNING id",
        (tenant_id, name, address_line1, city, state, zip, phone, email, contact_name, status,
         batch_id)).fetchone()["id"]


def link(conn: psycopg.Connection, tenant_id: uuid.UUID, plaintiff_id: uuid.UUID,
         judgment_id: uuid.UUID) -> None:
    conn.execute("INSERT INTO plaintiff_judgments (tenant_id, plaintiff_id, judgment_id)"
                 " VALUES (%s, %s, %s)", (tenant_id, plaintiff_id, judgment_id))


def plaintiffs_bulk(conn: psycopg.Connection, tenant_id: uuid.UUID, names: list[str]) -> None:
    """Many plaintiffs at once (COPY, as the pipeline stages)."""
    with conn.cursor().copy("COPY plaintiffs (tenant_id, name, zip, status, source)"
                            " FROM STDIN") as copy:
        for i, name in enumerate(names):
            copy.write_row((tenant_id, name, f"{10000 + i % 80000:05d}", "active", "simplicity"))
