"""Records imports in this process, for tests that import hundreds of files (property tests):
the batch, its run and its job are written as the gateway's intake writes them (its own
statements, gateway/imports/intake.sql), then the worker's own handler runs the job
(worker/handler.py: lease, tenant slot, the records pipeline, the fail path and its codes)
against the real Postgres. No gateway, queue or worker process per example; the end-to-end
tests cover those.
"""

from __future__ import annotations

import hashlib
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from gateway.imports import intake
from shared import jobs
from shared.settings import WorkerSettings
from worker.handler import IngestHandler
from worker.records.pipeline import RecordsPipeline


class Importer:
    def __init__(self, database_url: str, conn: psycopg.Connection, folder: Path, *,
                 pause_at: str = "", pause_file: Path | None = None) -> None:
        self.conn = conn
        self.store = folder / "uploads"
        self.store.mkdir(parents=True, exist_ok=True)
        self.settings = WorkerSettings(
            database_url=database_url, upload_store_uri=self.store.as_uri(),
            heartbeat_interval_s=5, running_stale_after_s=600, records_tenant_slots=3,
            ledger_apply_enabled=False, webhook_dispatch_enabled=False,
            # The worker's test-only pause point (worker/records/pipeline.py _Check.hold).
            worker_pause_at_stage=pause_at, worker_pause_file=str(pause_file or ""))
        self.handler = IngestHandler(self.settings, pipeline=None,  # type: ignore[arg-type]
                                     records=RecordsPipeline(self.settings, s3=None))

    def run(self, tenant_id: uuid.UUID, data: bytes, contract: str, *, platform: str | None = None,
            name: str = "file.csv", threshold: str = "10", force_partial: bool = False,
            decimal_separator: str | None = None) -> dict[str, Any]:
        """Import ``data`` as one batch and return its row (with the run's status and code)."""
        run_id, tag = uuid.uuid4(), uuid.uuid4().hex
        folder = self.store / str(tenant_id) / str(run_id)
        folder.mkdir(parents=True)
        path = folder / name
        path.write_bytes(data)
        digest = hashlib.sha256(data + tag.encode()).hexdigest()  # a fresh batch every call
        file_format = "jsonl" if name.endswith(".jsonl") else "csv"
        batch_id = self.conn.execute(intake.Q["insert_batch"], {
            "tenant_id": tenant_id, "contract": contract,
            "contract_version": intake.CONTRACTS[contract], "file_name": name,
            "file_hash": digest, "byte_size": max(1, len(data)), "upload_uri": path.as_uri(),
            "source": "manual", "source_reference": None,
            "error_threshold_percent": Decimal(threshold), "force_partial": force_partial,
            "created_by": None, "platform": platform, "client_id": None,
            "decimal_separator": decimal_separator}).fetchone()["batch_id"]
        job = jobs.RecordsJob(
            job_type="records_import", run_id=run_id, batch_id=batch_id, tenant_id=tenant_id,
            contract=contract, contract_version=intake.CONTRACTS[contract],
            upload_uri=path.as_uri(), original_filename=name, file_format=file_format,
            file_hash=digest, error_threshold_percent=float(threshold),
            force_partial=force_partial, submitted_at="2026-01-01T00:00:00Z")
        self.conn.execute(intake.Q["insert_run"], {
            "tenant_id": tenant_id, "run_id": run_id, "batch_id": batch_id,
            "initiated_by": None, "config": Jsonb({"contract": contract})})
        self.handler(jobs.encode(job))
        return self.conn.execute(
            "SELECT b.*, r.status AS run_status, r.error AS run_error, "
            "r.error_code AS run_error_code FROM import_batches b JOIN ingestion_runs r "
            "USING (batch_id) WHERE b.batch_id = %s", (batch_id,)).fetchone()
