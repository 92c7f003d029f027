"""Ad-metrics intake and advertiser clients through a real gateway, Postgres and S3 (moto):
POST /v1/imports with contract=ad_metrics (platform, client_id, source), and /v1/clients
(issue 13, docs/decisions/0146, 0147)."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.test_imports import COUNTED, batch_row, counts
from tests.integration.test_upload import assert_error, stored_files, upload_root
from tests.support import records
from tests.support.records import upload
from tests.unit.test_contracts_ad_metrics import google_export, meta_export

META = meta_export().encode()


def new_client(client, name: str = "Acme Shoes") -> str:
    response = client.post("/v1/clients", json={"name": name})
    assert response.status_code == 201, response.text
    return response.json()["client_id"]


def ad_upload(client, data: bytes = META, name: str = "meta.csv", **fields: str):
    return upload(client, name, data, contract="ad_metrics", **fields)


# ── intake ──────────────────────────────────────────────────────────────────────────────────
def test_an_ad_export_makes_a_batch_of_its_platform_client_source_and_uploader(
        gateway, tenants, conn):
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        client_id = new_client(client)
        response = ad_upload(client, platform="meta", client_id=client_id, source="api")
    assert response.status_code == 202, response.text
    body = response.json()
    # The spec's answer beside the batch API's.
    assert body["upload_id"] == body["batch_id"] and body["status"] == "pending"
    batch = batch_row(conn, body["batch_id"])
    assert (batch["contract"], batch["platform"], str(batch["client_id"]), batch["source"],
            batch["created_by"], batch["tenant_id"]) == (
        "ad_metrics", "meta", client_id, "api", admin.user_id, admin.tenant_id)
    run = conn.execute("SELECT config FROM ingestion_runs WHERE batch_id = %s",
                       (body["batch_id"],)).fetchone()
    assert run["config"]["platform"] == "meta" and run["config"]["client_id"] == client_id


def test_client_is_optional_and_every_spec_source_is_taken(gateway, tenants, conn):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        answers = [ad_upload(client, f"{i}\n".encode() + META, platform="google", source=s)
                   for i, s in enumerate(("manual", "api", "webhook"))]
        default = ad_upload(client, b"x\n" + META, platform="tiktok")
    assert [a.status_code for a in answers] == [202, 202, 202], [a.text for a in answers]
    assert [batch_row(conn, a.json()["batch_id"])["source"] for a in answers] == \
        ["manual", "api", "webhook"]
    batch = batch_row(conn, default.json()["batch_id"])
    assert (batch["source"], batch["platform"], batch["client_id"]) == ("manual", "tiktok", None)


@pytest.mark.parametrize(("contract", "fields", "code"), [
    ("ad_metrics", {}, "platform_required"),
    ("ad_metrics", {"platform": ""}, "platform_required"),
    ("ad_metrics", {"platform": "bing"}, "unknown_platform"),
    ("ad_metrics", {"platform": "META"}, "unknown_platform"),
    ("ad_metrics", {"platform": "x" * 17}, "field_too_large"),
    ("ad_metrics", {"platform": "meta", "source": "simplicity"}, "invalid_source"),
    ("ad_metrics", {"platform": "meta", "source": "email"}, "invalid_source"),
    ("judgments", {"platform": "meta"}, "unexpected_ad_field"),
    ("judgments", {"client_id": str(uuid.uuid4())}, "unexpected_ad_field"),
    ("plaintiffs", {"source": "webhook"}, "invalid_source"),
    ("ad_metrics", {"platform": "meta", "client_id": "not-a-uuid"}, "unknown_client"),
    ("ad_metrics", {"platform": "meta", "client_id": "'; DROP TABLE ad_clients; --"},
     "unknown_client"),
    ("ad_metrics", {"platform": "meta", "client_id": "0" * 65}, "field_too_large"),
])
def test_bad_ad_fields_are_refused_and_leave_nothing(gateway, tenants, conn, stack_env,
                                                     contract, fields, code):
    user = tenants.user()
    with gateway.client(user.token) as client:
        response = upload(client, "x.csv", META, contract=contract, **fields)
    # A client the tenant does not have is not found (docs/decisions/0200); the rest are 400
    assert_error(response, 404 if code == "unknown_client" else 400, code)
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(upload_root(stack_env)) == []


def test_another_tenants_client_reads_exactly_like_a_nonexistent_one(gateway, tenants, conn,
                                                                     stack_env):
    # Given a client of another tenant
    other = tenants.user(tenant="globex")
    with gateway.client(other.token) as client:
        theirs = new_client(client, "Globex Client")
    # When this tenant names it, or an id nobody has, on an upload
    me = tenants.user()
    with gateway.client(me.token) as client:
        foreign = ad_upload(client, platform="meta", client_id=theirs)
        unknown = ad_upload(client, platform="meta", client_id=str(uuid.uuid4()))
    # Then both answers are the same refusal, and nothing was written or kept
    # 404: a client id, well formed, that the tenant does not have (docs/decisions/0200)
    assert assert_error(foreign, 404, "unknown_client") == \
        assert_error(unknown, 404, "unknown_client")
    assert counts(conn) == dict.fromkeys(COUNTED, 0)
    assert stored_files(upload_root(stack_env)) == []


def test_same_export_for_two_clients_is_two_batches(gateway, tenants, conn):
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        first, second = new_client(client, "First"), new_client(client, "Second")
        a = ad_upload(client, platform="meta", client_id=first)
        b = ad_upload(client, platform="meta", client_id=second)
        again = ad_upload(client, platform="meta", client_id=first)
        without = ad_upload(client, platform="meta")
        without_again = ad_upload(client, platform="meta")
        as_tiktok = ad_upload(client, platform="tiktok", client_id=first)
    # Each client's upload is its own batch
    assert (a.status_code, b.status_code) == (202, 202), (a.text, b.text)
    assert a.json()["batch_id"] != b.json()["batch_id"]
    assert str(batch_row(conn, b.json()["batch_id"])["client_id"]) == second
    # and the same client's file again is that client's batch, never another's
    assert again.status_code == 200
    assert again.json() == {"batch_id": a.json()["batch_id"], "upload_id": a.json()["batch_id"],
                            "status": "pending", "duplicate": True}
    # A tenant's own (no client) upload is one batch too: NULL does not defeat the key
    assert without.status_code == 202 and without_again.status_code == 200
    assert without_again.json()["batch_id"] == without.json()["batch_id"]
    assert as_tiktok.status_code == 202
    assert counts(conn)["import_batches"] == 4


def test_records_files_still_dedup_by_contract_and_content(gateway, tenants, conn):
    """The wider key leaves the records contracts' rule as it was (NULLS NOT DISTINCT)."""
    user = tenants.user()
    data = records.judgments_csv(2)
    with gateway.client(user.token) as client:
        first = upload(client, "a.csv", data)
        second = upload(client, "b.csv", data)
    assert (first.status_code, second.status_code) == (202, 200)
    assert second.json()["batch_id"] == first.json()["batch_id"]


def test_google_export_with_title_lines_is_taken_as_csv(gateway, tenants, conn):
    user = tenants.user()
    with gateway.client(user.token) as client:
        response = ad_upload(client, google_export().encode(), "Campaign report.csv",
                             platform="google")
    assert response.status_code == 202, response.text


# ── advertiser clients ──────────────────────────────────────────────────────────────────────
def test_admins_create_clients_and_members_list_their_tenants_only(gateway, tenants):
    admin, member = tenants.user(), tenants.user(role="user")
    outsider = tenants.user(tenant="globex")
    with gateway.client(admin.token) as client:
        created = client.post("/v1/clients", json={"name": "  Acme   Shoes "})
        new_client(client, "beta corp")
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["name"] == "Acme Shoes" and body["created_by"] == str(admin.user_id)
    uuid.UUID(body["client_id"])
    with gateway.client(member.token) as client:
        listed = client.get("/v1/clients")
        refused = client.post("/v1/clients", json={"name": "Member's"})
    assert listed.status_code == 200
    assert [c["name"] for c in listed.json()["items"]] == ["Acme Shoes", "beta corp"]
    assert_error(refused, 403, "forbidden")
    with gateway.client(outsider.token) as client:
        assert client.get("/v1/clients").json() == {"items": [], "total": 0}


@pytest.mark.parametrize(("payload", "code"), [
    ({"name": ""}, "invalid_client_name"),
    ({"name": "   "}, "invalid_client_name"),
    ({"name": "x" * 201}, "invalid_client_name"),
    ({"name": "Acme\x00Shoes"}, "invalid_client_name"),
    ({"name": "Acme\u202eseohS"}, "invalid_client_name"),
    ({}, "invalid_request"),
    ({"name": 7}, "invalid_client_name"),  # the field's code, whatever is wrong with it (ADR 0200)
])
def test_bad_client_names_are_refused(gateway, tenants, conn, payload, code):
    admin = tenants.user()
    with gateway.client(admin.token) as client:
        response = client.post("/v1/clients", json=payload)
    assert_error(response, 400, code)
    assert conn.execute("SELECT count(*) AS n FROM ad_clients").fetchone()["n"] == 0


def test_a_clients_name_is_unique_within_its_tenant_only(gateway, tenants):
    admin, other = tenants.user(), tenants.user(tenant="globex")
    with gateway.client(admin.token) as client:
        new_client(client, "Acme")
        assert_error(client.post("/v1/clients", json={"name": "Acme"}), 409, "client_exists")
    with gateway.client(other.token) as client:
        new_client(client, "Acme")


def test_clients_need_a_signed_in_user(gateway):
    with gateway.client() as client:
        assert_error(client.get("/v1/clients"), 401, "unauthorized")
        assert_error(client.post("/v1/clients", json={"name": "x"}), 401, "unauthorized")
