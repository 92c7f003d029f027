"""The job payload (spec §5): what the gateway encodes, the worker decodes — or refuses, saying why."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import orjson
import pytest

from shared import errors, jobs

HASH = "sha256:" + "ab" * 32


def payload(**changes) -> dict:
    base = {
        "schema_version": 1, "job_type": "upload_ingest", "run_id": str(uuid.uuid4()),
        "doc_id": str(uuid.uuid4()), "tenant_id": str(uuid.uuid4()),
        "upload_uri": "file:///data/uploads/t/r/foo.pdf", "title": "IT Security Policy",
        "source_type": "pdf", "source_uri": f"upload://{HASH}", "original_filename": "foo.pdf",
        "content_hash": HASH, "embedding_model": "sentence-transformers/all-MiniLM-L6-v2",
        "embedding_dim": 384, "submitted_at": "2026-02-15T00:00:00Z",
        # docs/decisions/0250: an attachment's nesting depth; 0 for an upload's own document.
        "attachment_depth": 0,
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


def refusal(body: str | bytes) -> str:
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.decode(body)
    reason = info.value.detail
    # One sentence: no newlines, ends with a full stop, no Python repr noise.
    assert "\n" not in reason and reason.endswith(".") and len(reason) < 300
    assert info.value.code == "invalid_job" and isinstance(info.value, errors.AppError)
    return reason


def test_round_trip_keeps_every_field():
    job = jobs.IngestJob.model_validate(payload())
    again = jobs.decode(jobs.encode(job))
    assert again == job
    assert again.submitted_at == datetime(2026, 2, 15, tzinfo=UTC)
    assert isinstance(again.run_id, uuid.UUID)


def test_encoded_job_is_the_spec_json():
    data = payload()
    encoded = orjson.loads(jobs.encode(jobs.decode(orjson.dumps(data))))
    assert set(encoded) == set(data)
    assert encoded["content_hash"] == HASH and encoded["run_id"] == data["run_id"]


def test_decode_accepts_bytes_and_str():
    body = orjson.dumps(payload())
    assert jobs.decode(body) == jobs.decode(body.decode())


def test_unknown_fields_are_ignored_for_rolling_upgrades():
    job = jobs.decode(orjson.dumps(payload(priority="high")))
    assert not hasattr(job, "priority")


def test_missing_schema_version_means_version_one():
    assert jobs.decode(orjson.dumps(payload(schema_version=...))).schema_version == 1


def test_garbage_json_is_refused():
    assert "not JSON" in refusal(b"{not json at all")


def test_empty_body_is_refused():
    assert "not JSON" in refusal(b"")


@pytest.mark.parametrize("body", [b"[1, 2]", b'"a string"', b"42", b"null"])
def test_json_that_is_not_an_object_is_refused(body):
    assert "not an object" in refusal(body)


@pytest.mark.parametrize("field", ["run_id", "doc_id", "tenant_id", "upload_uri", "content_hash",
                                   "submitted_at"])
def test_missing_field_is_refused_and_named(field):
    assert field in refusal(orjson.dumps(payload(**{field: ...})))


@pytest.mark.parametrize("bad", ["abc", "sha256:xyz", "sha256:" + "AB" * 32, "md5:" + "ab" * 16,
                                 "sha256:" + "ab" * 31, "ab" * 32])
def test_bad_content_hash_is_refused(bad):
    assert "content_hash" in refusal(orjson.dumps(payload(content_hash=bad)))


@pytest.mark.parametrize("version", [0, 2, "1x"])
def test_unknown_schema_version_is_refused(version):
    assert "schema_version" in refusal(orjson.dumps(payload(schema_version=version)))


def test_bad_uuid_is_refused():
    assert "run_id" in refusal(orjson.dumps(payload(run_id="not-a-uuid")))


def test_unknown_source_type_is_refused():
    assert "source_type" in refusal(orjson.dumps(payload(source_type="exe")))


def test_empty_upload_uri_is_refused():
    assert "upload_uri" in refusal(orjson.dumps(payload(upload_uri="")))


def test_non_positive_embedding_dim_is_refused():
    assert "embedding_dim" in refusal(orjson.dumps(payload(embedding_dim=0)))


def test_the_count_of_problems_is_reported():
    reason = refusal(orjson.dumps(payload(run_id=..., doc_id=...)))
    assert "2 problem" in reason


# ── records jobs: the same queue, told apart by job_type ────────────────────────────────────
def records_payload(**changes) -> dict:
    base = {
        "schema_version": 1, "job_type": "records_import", "run_id": str(uuid.uuid4()),
        "batch_id": str(uuid.uuid4()), "tenant_id": str(uuid.uuid4()),
        "contract": "judgments", "contract_version": "1",
        "upload_uri": "file:///data/uploads/t/r/export.csv", "original_filename": "export.csv",
        "file_format": "csv", "file_hash": "cd" * 32, "error_threshold_percent": 12.5,
        "force_partial": False, "submitted_at": "2026-02-15T00:00:00Z",
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not ...}


def test_parse_tells_records_and_document_jobs_apart():
    records = jobs.parse(orjson.dumps(records_payload()))
    document = jobs.parse(orjson.dumps(payload()))
    assert isinstance(records, jobs.RecordsJob) and records.contract == "judgments"
    assert isinstance(document, jobs.IngestJob) and document.source_type == "pdf"
    assert jobs.parse(jobs.encode(records)) == records


def test_a_document_job_without_job_type_still_decodes():
    # Messages from before job_type was required: IngestJob defaulted it.
    old = payload(job_type=...)
    assert isinstance(jobs.parse(orjson.dumps(old)), jobs.IngestJob)
    assert jobs.decode(orjson.dumps(old)).job_type == "upload_ingest"


def test_decode_stays_the_document_pipelines_entry():
    reason = refusal(orjson.dumps(records_payload()))
    assert "records_import" in reason and "not a document job" in reason


@pytest.mark.parametrize(("changes", "field"), [
    ({"batch_id": ...}, "batch_id"),
    ({"file_hash": "sha256:" + "cd" * 32}, "file_hash"),
    ({"error_threshold_percent": 101}, "error_threshold_percent"),
    ({"file_format": "xlsx"}, "file_format"),
    ({"contract": ""}, "contract"),
])
def test_a_bad_records_job_is_refused_naming_its_field(changes, field):
    with pytest.raises(jobs.InvalidJob) as info:
        jobs.parse(orjson.dumps(records_payload(**changes)))
    assert f"'{field}'" in info.value.detail


def test_an_unknown_job_type_is_refused():
    with pytest.raises(jobs.InvalidJob):
        jobs.parse(orjson.dumps(payload(job_type="ledger_apply")))
