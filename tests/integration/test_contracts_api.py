"""GET /v1/contracts and /v1/contracts/{name} against a real gateway process."""

from __future__ import annotations

import csv
import io

from shared import contracts


def test_any_signed_in_user_lists_the_contracts(gateway, tenants):
    # Given a plain user (not an admin)
    user = tenants.user(role="user")
    # When the contracts are listed
    with gateway.client(user.token) as client:
        response = client.get("/v1/contracts")
    # Then each one is named, versioned and described
    assert response.status_code == 200, response.text
    items = response.json()["items"]
    assert [(c["name"], c["version"]) for c in items] == [("judgments", "1.0.0"),
                                                          ("plaintiffs", "1.0.0"),
                                                          ("ad_metrics", "2.0.0")]
    assert all(c["description"] for c in items)


def test_describe_publishes_columns_rules_key_and_a_sample_file(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get("/v1/contracts/judgments")
    assert response.status_code == 200, response.text
    described = response.json()
    columns = {c["name"]: c for c in described["columns"]}
    assert columns["case_number"] == {
        "name": "case_number", "headers": ["File #"], "required": True,
        "description": columns["case_number"]["description"]}
    assert not columns["county"]["required"]
    rules = {r["code"]: (r["severity"], r["field"]) for r in described["rules"]}
    assert rules["JUDGMENT_AMOUNT_INVALID"] == ("critical", "amount")
    assert rules["JUDGMENT_FILED_DATE_TOO_OLD"] == ("warning", "filed_date")
    assert rules["JUDGMENT_DUPLICATE"] == ("warning", None)
    assert {r["code"] for r in described["batch_rules"]} >= {"BATCH_MISSING_COLUMN",
                                                            "BATCH_EMPTY_FILE"}
    assert described["natural_key"]["fields"] == ["case_number"]
    assert described["example_row"]["Amount"] == "$12,500.00"
    # The sample file is one a client can upload as is: it passes its own contract.
    rows = list(csv.reader(io.StringIO(described["sample_csv"])))
    match = contracts.match_header(contracts.JUDGMENTS, rows[0])
    assert match.ok and len(rows) > 1
    assert all(contracts.validate_row(contracts.JUDGMENTS, r, match, i).valid
               for i, r in enumerate(rows[1:], 1))


def test_plaintiffs_are_described_too(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        described = client.get("/v1/contracts/plaintiffs").json()
    assert described["natural_key"]["fields"] == ["name", "address_line1", "zip"]
    assert "PLAINTIFF_EMAIL_INVALID" in {r["code"] for r in described["rules"]}
    # the warning only promotion can find is published with the rest
    assert {"code": "PLAINTIFF_CASE_NUMBER_NOT_FOUND", "severity": "warning",
            "field": "case_number",
            "message": "No judgment of this tenant has the case number; the plaintiff was kept "
                       "without a link."} in described["rules"]


def test_ad_metrics_publishes_every_platforms_mapping_rules_and_sample(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get("/v1/contracts/ad_metrics")
    assert response.status_code == 200, response.text
    described = response.json()
    assert described["natural_key"]["fields"] == ["metric_date", "campaign_external_id",
                                                  "ad_set_external_id", "ad_external_id"]
    platforms = described["variants"]
    assert set(platforms) == {"meta", "google", "tiktok"}
    headers = {p: {c["name"]: c["headers"] for c in v["columns"]} for p, v in platforms.items()}
    assert "Amount spent (USD)" in headers["meta"]["spend"]
    # Link clicks first, Clicks (all) when an export has no Link clicks (issue 20)
    assert headers["meta"]["clicks"][:2] == ["Link clicks", "Clicks (all)"]
    assert "Results" in headers["meta"]["results"]
    assert "Result type" in headers["meta"]["result_indicator"]
    assert "Conversions" in headers["google"]["conversions"]
    assert "Impr." in headers["google"]["impressions"]
    assert "Ad group ID" in headers["google"]["ad_set_external_id"]
    assert "Ad group name" in headers["tiktok"]["ad_set_name"]
    assert platforms["google"]["layout"]["empty_cell_markers"] == ["--"]
    for name, view in platforms.items():
        codes = {r["code"] for r in view["rules"]}
        assert {"AD_METRIC_SPEND_NEGATIVE", "AD_METRIC_METRIC_DATE_INVALID",
                "AD_METRIC_DUPLICATE", "AD_METRIC_REPEATED_ROW", "AD_METRIC_DAY_MISSING",
                "AD_METRIC_TEXT_UNSTORABLE"} <= codes, name
        # Each platform's sample is a file its own contract reads without a problem.
        contract = contracts.ad_metrics.for_platform(name)
        rows = list(csv.reader(io.StringIO(view["sample_csv"])))
        match = contracts.match_header(contract, rows[0])
        assert match.ok and not match.extra, name
        assert all(contracts.validate_row(contract, r, match, i).valid
                   for i, r in enumerate(rows[1:], 1)), name


def test_an_unknown_contract_is_404_unknown_contract(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        response = client.get("/v1/contracts/adwords")
    assert response.status_code == 404
    body = response.json()
    assert body["code"] == "unknown_contract" and "judgments" in body["detail"]


def test_contracts_need_a_signed_in_user(gateway):
    with gateway.client() as client:
        for path in ("/v1/contracts", "/v1/contracts/judgments", "/v1/contracts/nope"):
            response = client.get(path)
            assert response.status_code == 401, path
            assert response.json()["code"] == "unauthorized"
    with gateway.client("not-a-token") as client:
        assert client.get("/v1/contracts").status_code == 401


def test_schema_declares_the_routes_and_their_errors(gateway):
    with gateway.client() as client:
        paths = client.get("/schema/openapi.json").json()["paths"]
    listing = paths["/v1/contracts"]["get"]
    one = paths["/v1/contracts/{name}"]["get"]
    assert "401" in listing["responses"] and listing["security"] == [{"bearer": []}]
    assert {"200", "401", "404"} <= set(one["responses"])
