"""GET /v1/records/judgments, /plaintiffs and /plaintiffs/duplicates through a real gateway
and Postgres (18, with pg_trgm and fuzzystrmatch from migration 0015).

The records are written straight into the tables in the shape the worker's records pipeline
promotes them (tests/support/records_rows.py): these tests are about reading them back.
"""

from __future__ import annotations

import random
import string
import uuid
from datetime import date

import pytest

from gateway.records import service
from tests.integration.test_upload import assert_error
from tests.support import records_rows as rows
from worker.records import search_indexes


def _get(gateway, token, path, **params):
    with gateway.client(token) as client:
        return client.get(path, params=params)


def _ok(gateway, token, path, **params) -> dict:
    response = _get(gateway, token, path, **params)
    assert response.status_code == 200, response.text
    return response.json()


def _cases(body) -> list[str]:
    return [item["case_number"] for item in body["items"]]


# ── judgments ───────────────────────────────────────────────────────────────────────────────
def test_a_case_number_is_found_in_any_spelling_and_names_by_part(gateway, tenants, conn):
    # Given judgments of one tenant
    user = tenants.user(role="user")
    rows.judgment(conn, user.tenant_id, "CV-12345", plaintiff_name="Acme Collections LLC",
                  defendant_name="Jane Roe")
    rows.judgment(conn, user.tenant_id, "2024-CV-99999", plaintiff_name="Zenith Funding",
                  defendant_name="Richard Miles")

    # When they search by the case number written other ways, the one judgment answers
    for spelling in ("CV-12345", "cv 12345", "CV#12345", "  cv12345 "):
        body = _ok(gateway, user.token, "/v1/records/judgments", q=spelling)
        assert _cases(body) == ["CV-12345"], spelling
        body = _ok(gateway, user.token, "/v1/records/judgments", case_number=spelling)
        assert _cases(body) == ["CV-12345"] and body["total"] == 1, spelling
    # and by a part of a party's name, in any case
    assert _cases(_ok(gateway, user.token, "/v1/records/judgments", q="zenith")) == ["2024-CV-99999"]
    assert _cases(_ok(gateway, user.token, "/v1/records/judgments", q="jane ROE")) == ["CV-12345"]
    # and the item is displayed as given, with its key beside it
    [item] = _ok(gateway, user.token, "/v1/records/judgments", q="cv 12345")["items"]
    assert item["case_number_normalized"] == "CV12345" and item["amount"] == "12500.00"
    # LIKE's wildcards in a search are plain characters, not "everything"
    assert _ok(gateway, user.token, "/v1/records/judgments", q="%")["items"] == []
    assert _ok(gateway, user.token, "/v1/records/judgments", q="_")["items"] == []
    # an exact case number is not a prefix search
    assert _ok(gateway, user.token, "/v1/records/judgments", case_number="CV-1234")["items"] == []


def test_judgment_filters_narrow_the_listing(gateway, tenants, conn):
    user = tenants.user(role="user")
    t = user.tenant_id
    b = rows.batch(conn, t)
    rows.judgment(conn, t, "A-1", county="Kings", court="Civil Court", amount="100.00",
                  filed_date=date(2023, 5, 1), batch_id=b)
    rows.judgment(conn, t, "A-2", county="Kings", court="Supreme Court", amount="5000.00",
                  filed_date=date(2024, 2, 1))
    rows.judgment(conn, t, "A-3", county="Queens", court="Civil Court", amount="25000.00",
                  filed_date=date(2024, 8, 1), batch_id=b)

    def cases(**params):
        return sorted(_cases(_ok(gateway, user.token, "/v1/records/judgments", **params)))

    assert cases() == ["A-1", "A-2", "A-3"]
    assert cases(county="kings") == ["A-1", "A-2"]
    assert cases(court="Civil Court") == ["A-1", "A-3"]
    assert cases(county="Kings", court="civil court") == ["A-1"]
    assert cases(filed_from="2024-01-01") == ["A-2", "A-3"]
    assert cases(filed_to="2024-02-01") == ["A-1", "A-2"]  # inclusive
    assert cases(filed_from="2024-01-01", filed_to="2024-03-01") == ["A-2"]
    assert cases(amount_min="5000") == ["A-2", "A-3"]
    assert cases(amount_max="5000.00") == ["A-1", "A-2"]
    assert cases(amount_min="101", amount_max="24999.99") == ["A-2"]
    assert cases(batch_id=str(b)) == ["A-1", "A-3"]
    assert cases(batch_id=str(uuid.uuid4())) == []


def test_cursor_pages_read_every_judgment_once_newest_first(gateway, tenants, conn):
    user = tenants.user(role="user")
    # Created at distinct and at equal instants: the id breaks ties in the keyset
    for i in range(25):
        rows.judgment(conn, user.tenant_id, f"P-{i:03d}",
                      created_at=f"2024-01-01T00:00:{i // 2:02d}Z")

    body = _ok(gateway, user.token, "/v1/records/judgments", limit=10)
    assert body["total"] == 25
    everything, pages = _cases(body), 1
    while body["next_cursor"]:
        body = _ok(gateway, user.token, "/v1/records/judgments", limit=10,
                   cursor=body["next_cursor"])
        everything += _cases(body)
        pages += 1
    assert pages == 3 and len(everything) == 25 and len(set(everything)) == 25
    listed = conn.execute("SELECT case_number FROM judgments WHERE tenant_id = %s"
                          " ORDER BY created_at DESC, id DESC", (user.tenant_id,)).fetchall()
    assert everything == [r["case_number"] for r in listed]

    # A cursor is a position (docs/decisions/0200): under another filter it pages that
    # filter's rows, and another tenant holding it sees only its own
    cursor = _ok(gateway, user.token, "/v1/records/judgments", limit=10)["next_cursor"]
    assert _ok(gateway, user.token, "/v1/records/judgments", limit=10, cursor=cursor,
               county="Kings")["items"] == []
    other = tenants.user(tenant="globex", role="admin")
    assert _ok(gateway, other.token, "/v1/records/judgments", limit=10, cursor=cursor)[
        "items"] == []


@pytest.mark.parametrize(("path", "params", "code"), [
    ("/v1/records/judgments", {"amount_min": "-1"}, "invalid_filter"),
    ("/v1/records/judgments", {"amount_max": "NaN"}, "invalid_filter"),
    ("/v1/records/judgments", {"amount_min": "lots"}, "invalid_filter"),
    ("/v1/records/judgments", {"filed_from": "15/01/2024"}, "invalid_request"),
    ("/v1/records/judgments", {"batch_id": "not-a-uuid"}, "invalid_request"),
    ("/v1/records/judgments", {"q": "x" * 201}, "invalid_request"),
    ("/v1/records/judgments", {"limit": "0"}, "invalid_paging"),
    ("/v1/records/judgments", {"cursor": "forged.cursor"}, "invalid_cursor"),
    ("/v1/records/plaintiffs", {"status": "bogus"}, "invalid_filter"),
    ("/v1/records/plaintiffs", {"state": "ny"}, "invalid_filter"),
    ("/v1/records/plaintiffs", {"state": "NEW"}, "invalid_request"),
    ("/v1/records/plaintiffs/duplicates", {"page": "1001"}, "invalid_paging"),
])
def test_bad_inputs_are_400_with_a_code(gateway, tenants, path, params, code):
    user = tenants.user(role="user")
    assert_error(_get(gateway, user.token, path, **params), 400, code)


@pytest.mark.parametrize("params", [
    {"filed_from": "2024-03-01", "filed_to": "2024-01-01"}, {"amount_min": "10", "amount_max": "5"},
    {"case_number": "---"}])
def test_filters_that_can_match_nothing_match_nothing(gateway, tenants, conn, params):
    # /schema cannot say "from before to" or "a letter somewhere": the server takes what it
    # allows, and such a filter is an empty page (docs/decisions/0200)
    user = tenants.user(role="user")
    rows.judgment(conn, user.tenant_id, "CV-1")
    assert _ok(gateway, user.token, "/v1/records/judgments", **params)["items"] == []


def test_records_need_a_token(gateway):
    for path in ("/v1/records/judgments", "/v1/records/plaintiffs",
                 "/v1/records/plaintiffs/duplicates"):
        assert_error(_get(gateway, None, path), 401, "unauthorized")


# ── tenants ─────────────────────────────────────────────────────────────────────────────────
def test_another_tenant_never_sees_records_or_pairs(gateway, tenants, conn):
    # Given tenant A with a judgment, a linked plaintiff and a duplicate pair
    a = tenants.user(tenant="acme", role="admin")
    j = rows.judgment(conn, a.tenant_id, "CV-777")
    p = rows.plaintiff(conn, a.tenant_id, "Acme Collections LLC", email="ar@acme.test")
    rows.link(conn, a.tenant_id, p, j)
    rows.plaintiff(conn, a.tenant_id, "Acme Collection LLC")
    # and tenant B with a near name of A's plaintiff, and nothing else
    b = tenants.user(tenant="globex", role="admin")
    rows.plaintiff(conn, b.tenant_id, "Acme Collections LLC.")

    # A sees its own
    assert _ok(gateway, a.token, "/v1/records/judgments")["total"] == 1
    assert _ok(gateway, a.token, "/v1/records/plaintiffs", case_number="cv 777")["total"] == 1
    a_pairs = _ok(gateway, a.token, "/v1/records/plaintiffs/duplicates")
    assert a_pairs["total"] == 1
    # B, even searching for A's records by their exact values, sees none of them
    assert _ok(gateway, b.token, "/v1/records/judgments")["items"] == []
    assert _ok(gateway, b.token, "/v1/records/judgments", q="CV-777")["total"] == 0
    assert _ok(gateway, b.token, "/v1/records/plaintiffs", case_number="CV-777")["total"] == 0
    listed = _ok(gateway, b.token, "/v1/records/plaintiffs")["items"]
    assert [x["name"] for x in listed] == ["Acme Collections LLC."]
    # and no pair joins B's plaintiff to A's, though the names are nearly the same
    assert _ok(gateway, b.token, "/v1/records/plaintiffs/duplicates")["items"] == []
    a_ids = {str(x) for x in (p,)} | {a_pairs["items"][0]["a"]["id"], a_pairs["items"][0]["b"]["id"]}
    b_ids = {x["id"] for x in listed}
    assert not a_ids & b_ids


# ── plaintiffs ──────────────────────────────────────────────────────────────────────────────
def test_contact_details_only_for_the_tenants_admins(gateway, tenants, conn):
    admin = tenants.user(role="admin")
    plain = tenants.user(role="user")
    j = rows.judgment(conn, admin.tenant_id, "2024-CV-00042")
    p = rows.plaintiff(conn, admin.tenant_id, "Maria Lopez", address_line1="1 Main St",
                       city="Albany", state="NY", zip="12207", phone="+15185550100",
                       email="maria@example.org", contact_name="Pat Doe", status="pending")
    rows.link(conn, admin.tenant_id, p, j)

    [seen_by_admin] = _ok(gateway, admin.token, "/v1/records/plaintiffs")["items"]
    assert seen_by_admin["email"] == "maria@example.org"
    assert seen_by_admin["phone"] == "+15185550100" and seen_by_admin["contact_name"] == "Pat Doe"
    assert seen_by_admin["case_numbers"] == ["2024-CV-00042"]

    [seen_by_user] = _ok(gateway, plain.token, "/v1/records/plaintiffs")["items"]
    # The keys are absent, not null: null would claim there is no e-mail
    assert not {"email", "phone", "contact_name"} & set(seen_by_user)
    assert seen_by_user["name"] == "Maria Lopez" and seen_by_user["city"] == "Albany"
    # nor does any value reach the plain user elsewhere in the answer
    raw = _get(gateway, plain.token, "/v1/records/plaintiffs").text
    assert "maria@example.org" not in raw and "5550100" not in raw and "Pat Doe" not in raw
    pairs = _get(gateway, plain.token, "/v1/records/plaintiffs/duplicates").text
    assert "maria@example.org" not in pairs


def test_plaintiff_filters(gateway, tenants, conn):
    user = tenants.user(role="user")
    t = user.tenant_id
    b = rows.batch(conn, t, "plaintiffs")
    rows.plaintiff(conn, t, "Acme Collections LLC", state="NY", status="active", batch_id=b)
    rows.plaintiff(conn, t, "Zenith  Funding", state="NJ", status="closed")
    rows.plaintiff(conn, t, "Acme Holdings", state="NJ", status="pending")

    def names(**params):
        return sorted(x["name"] for x in
                      _ok(gateway, user.token, "/v1/records/plaintiffs", **params)["items"])

    assert names(q="acme") == ["Acme Collections LLC", "Acme Holdings"]
    assert names(q="zenith funding") == ["Zenith  Funding"]  # spaces collapsed in the match
    assert names(status="closed") == ["Zenith  Funding"]
    assert names(state="NJ") == ["Acme Holdings", "Zenith  Funding"]
    assert names(state="NJ", q="acme") == ["Acme Holdings"]
    assert names(batch_id=str(b)) == ["Acme Collections LLC"]


# ── duplicates ──────────────────────────────────────────────────────────────────────────────
def test_duplicates_pair_near_names_only_most_likely_first(gateway, tenants, conn):
    user = tenants.user(role="user")
    t = user.tenant_id
    # Same name and all contact signals: the most likely pair
    strong_a = rows.plaintiff(conn, t, "Jonathan Smithfield Holdings", address_line1="1 Main St",
                              zip="10001", phone="+12125550100", email="j@smith.test")
    strong_b = rows.plaintiff(conn, t, "Jonathan  Smithfield Holdings", address_line1="1 main st",
                              zip="10001-1234", phone="+12125550100", email="J@smith.test".lower())
    # A one-letter variant at different addresses: a weaker pair
    weak_a = rows.plaintiff(conn, t, "Riverside Capital Partners Holdings", address_line1="9 Elm Rd",
                            zip="60601")
    weak_b = rows.plaintiff(conn, t, "Riverside Capitol Partners Holdings", address_line1="77 Oak Ave",
                            zip="94105")
    # Different names, even at the same address, are no pair
    rows.plaintiff(conn, t, "Blue Harbor Recovery", address_line1="1 Main St", zip="10001")
    rows.plaintiff(conn, t, "Northwind Receivables", address_line1="1 Main St", zip="10001")

    body = _ok(gateway, user.token, "/v1/records/plaintiffs/duplicates")
    pairs = [{x["a"]["id"], x["b"]["id"]} for x in body["items"]]
    assert pairs == [{str(strong_a), str(strong_b)}, {str(weak_a), str(weak_b)}]
    assert body["total"] == 2
    strong, weak = body["items"]
    assert strong["confidence"] > weak["confidence"]
    assert strong["address_match"] and strong["zip_match"] and strong["phone_match"]
    assert strong["email_match"] and strong["name_distance"] == 0
    assert strong["confidence"] == 1.0
    assert not (weak["address_match"] or weak["zip_match"] or weak["phone_match"])
    assert weak["name_distance"] == 1 and weak["name_similarity"] > service.MIN_SIMILARITY
    assert 0.4 < weak["confidence"] < 0.5

    # Paged: one pair per page, in the same order
    page2 = _ok(gateway, user.token, "/v1/records/plaintiffs/duplicates", limit=1, page=2)
    assert [{x["a"]["id"], x["b"]["id"]} for x in page2["items"]] == [pairs[1]]


def _random_names(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    letters = string.ascii_uppercase
    return [" ".join("".join(rnd.choices(letters, k=rnd.randint(5, 9))) for _ in range(3))
            for _ in range(n)]


def test_duplicate_pairs_use_the_trigram_index(gateway, tenants, conn):
    # Given a tenant of 3,000 plaintiffs with random names and one near pair among them, and
    # another tenant of 1,000 more
    user = tenants.user(role="user")
    names = _random_names(3000, seed=12)
    names[1500] = "Quentin Arbuckle Recovery Services"
    names[2500] = "Quentin Arbuckle Recovery Service"
    rows.plaintiffs_bulk(conn, user.tenant_id, names)
    other = tenants.user(tenant="globex")
    rows.plaintiffs_bulk(conn, other.tenant_id, _random_names(1000, seed=13))
    search_indexes.merge_pending(conn)  # as the worker does once an import commits (ADR 0334)
    conn.execute("ANALYZE plaintiffs")

    # When the pairs query is planned as the service runs it
    with conn.transaction():
        conn.execute(service.Q["similarity_threshold"], {"threshold": "0.8"})
        plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
            "EXPLAIN " + service.Q["duplicate_pairs"],
            {"tenant_id": user.tenant_id, "min_similarity": 0.8, "limit": 21,
             "offset": 0}).fetchall())

    # Then each plaintiff's partners come from the trigram index, not a scan of every pair
    assert "idx_plaintiffs_name_trgm" in plan, plan
    # and through the API the one near pair is found among 4.5 million possible ones
    body = _ok(gateway, user.token, "/v1/records/plaintiffs/duplicates")
    assert body["total"] == 1
    assert {body["items"][0]["a"]["name"], body["items"][0]["b"]["name"]} == {
        "Quentin Arbuckle Recovery Services", "Quentin Arbuckle Recovery Service"}
