"""The plaintiffs contract: the spec's column mapping and example row, the rules its notes imply
(e-mail, phone, state, ZIP, status), its key and link, header matching and JSON rows."""

from __future__ import annotations

import csv
import io

import pytest

from shared import contracts
from shared.contracts import codes
from shared.contracts import normalise as n

P = contracts.PLAINTIFFS
HEADER = ["File #", "Plaintiff", "Address", "City", "State", "ZIP", "Phone", "Email",
          "Contact Person", "Status"]
GOOD = dict(zip(HEADER, ["2024-CV-12345", "Acme Collections LLC", "123 Main St", "New York",
                         "NY", "10001", "(212) 555-1234", "billing@acme.com", "Jane Smith",
                         "Active"], strict=True))


def row(**changes: str) -> contracts.RowResult:
    cells = {**GOOD, **changes}
    match = contracts.match_header(P, HEADER)
    return contracts.validate_row(P, [cells[h] for h in HEADER], match, 3)


def codes_of(result: contracts.RowResult) -> tuple[set[str], set[str]]:
    return {i.code for i in result.errors}, {i.code for i in result.warnings}


def test_the_spec_example_row():
    result = row()
    assert result.valid and not result.warnings
    assert result.values == {
        "case_number": "2024-CV-12345", "case_number_normalized": "2024CV12345",
        "name": "Acme Collections LLC", "name_normalized": "ACME COLLECTIONS",
        "address_line1": "123 Main St", "city": "New York", "state": "NY", "zip": "10001",
        "phone": "+12125551234", "email": "billing@acme.com", "contact_name": "Jane Smith",
        "status": "active"}


# ── e-mail: validated (no DNS) and lower-cased ────────────────────────────────────────────
def test_email_is_lower_cased():
    assert row(Email=" Billing@ACME.Com ").values["email"] == "billing@acme.com"


@pytest.mark.parametrize("email", ["not-an-email", "a@b", "two@@acme.com", "x@acme..com"])
def test_an_invalid_email_is_a_warning_and_left_empty(email):
    result = row(Email=email)
    assert result.valid and result.values["email"] is None
    assert [(i.code, i.field) for i in result.warnings] == [("PLAINTIFF_EMAIL_INVALID", "email")]


# ── phone: E.164, US by default ───────────────────────────────────────────────────────────
@pytest.mark.parametrize(("phone", "e164"), [
    ("(212) 555-1234", "+12125551234"),
    ("212.555.1234", "+12125551234"),
    ("+1 212 555 1234", "+12125551234"),
    ("+44 20 7946 0958", "+442079460958"),
])
def test_phone_becomes_e164(phone, e164):
    assert row(Phone=phone).values["phone"] == e164


@pytest.mark.parametrize("phone", ["123", "call me", "(000) 000-0000"])
def test_an_invalid_phone_is_a_warning_and_left_empty(phone):
    result = row(Phone=phone)
    assert result.valid and result.values["phone"] is None
    assert codes_of(result) == (set(), {"PLAINTIFF_PHONE_INVALID"})


# ── state, ZIP, status ────────────────────────────────────────────────────────────────────
def test_state_is_upper_cased():
    assert row(State="ny").values["state"] == "NY"


@pytest.mark.parametrize("state", ["New York", "XX", "N"])
def test_an_unknown_state_is_a_warning(state):
    result = row(State=state)
    assert result.valid and result.values["state"] is None
    assert codes_of(result) == (set(), {"PLAINTIFF_STATE_INVALID"})


@pytest.mark.parametrize(("zip_code", "value"), [
    ("10001", "10001"), ("02134", "02134"), ("10001-1234", "10001-1234"),
    ("100011234", "10001-1234")])
def test_zip_is_five_or_nine_digits(zip_code, value):
    assert row(ZIP=zip_code).values["zip"] == value


@pytest.mark.parametrize("zip_code", ["2134", "1000A", "10001-12", "123456"])
def test_an_invalid_zip_makes_the_row_invalid(zip_code):
    # The ZIP is part of the plaintiff's key: guessing it would merge or split plaintiffs.
    result = row(ZIP=zip_code)
    assert not result.valid and codes_of(result) == ({"PLAINTIFF_ZIP_INVALID"}, set())


@pytest.mark.parametrize(("given", "status"), [
    ("Active", "active"), ("OPEN", "active"), ("on  hold", "inactive"), ("Pending", "pending"),
    ("Settled", "closed"), ("closed", "closed")])
def test_status_is_mapped_to_the_enum(given, status):
    assert row(Status=given).values["status"] == status
    assert status in n.PLAINTIFF_STATUSES


def test_an_unknown_status_makes_the_row_invalid():
    result = row(Status="Maybe")
    assert codes_of(result) == ({"PLAINTIFF_STATUS_INVALID"}, set())


def test_empty_optional_fields_become_null():
    result = row(Address="", City=" ", State="", ZIP="", Phone="", Email="",
                 **{"Contact Person": ""}, Status="")
    assert result.valid and not result.warnings
    assert all(result.values[f] is None for f in (
        "address_line1", "city", "state", "zip", "phone", "email", "contact_name", "status"))


# ── required fields ───────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("cells", "code"), [
    ({"File #": ""}, "PLAINTIFF_CASE_NUMBER_MISSING"),
    ({"File #": "C" * 101}, "PLAINTIFF_CASE_NUMBER_TOO_LONG"),
    ({"Plaintiff": "  "}, "PLAINTIFF_NAME_MISSING"),
])
def test_required_fields(cells, code):
    result = row(**cells)
    assert not result.valid and codes_of(result) == ({code}, set())


def test_a_long_name_is_truncated_with_a_warning():
    result = row(Plaintiff="N" * 700)
    assert result.valid and len(result.values["name"]) == 500
    assert codes_of(result) == (set(), {"PLAINTIFF_NAME_TOO_LONG"})


def test_every_code_follows_the_format_and_names_a_severity():
    for field, rule in P.rules():
        entity, *rest = rule.code.split("_")
        assert entity == "PLAINTIFF" and rest and rule.code == rule.code.upper()
        assert rule.message.endswith(".") and rule.severity in contracts.Severity
        assert field is None or field in {c.name for c in P.columns}


# ── key and link ──────────────────────────────────────────────────────────────────────────
def test_natural_key_is_name_address_zip_upper_cased_and_trimmed():
    result = row(Plaintiff="  Acme  Collections LLC ", Address=" 123 main st ", ZIP="10001")
    assert contracts.natural_key(P, result.values) == "ACME COLLECTIONS LLC|123 MAIN ST|10001"
    # e-mail and phone are duplicate signals, not the key
    other = row(Phone="(718) 555-0100", Email="other@acme.com")
    assert contracts.natural_key(P, other.values) == contracts.natural_key(P, row().values)


def test_natural_key_with_empty_parts():
    result = row(Address="", ZIP="")
    assert contracts.natural_key(P, result.values) == "ACME COLLECTIONS LLC||"


def test_the_case_number_links_to_the_judgments_key():
    plaintiff = row(**{"File #": "cv 12345"})
    judgment = contracts.validate_row(contracts.JUDGMENTS, {
        "File #": "CV-12345", "Plaintiff": "Acme", "Defendant": "Doe", "Amount": "1",
        "Entry Date": "2024-01-01"})
    assert plaintiff.values["case_number_normalized"] == \
        contracts.natural_key(contracts.JUDGMENTS, judgment.values) == "CV12345"
    assert P.promotion_order > contracts.JUDGMENTS.promotion_order
    assert [t.table for t in P.targets] == ["plaintiffs", "plaintiff_judgments"]


def test_an_unmatched_case_number_is_a_published_promotion_warning():
    # Only promotion can tell (it needs the tenant's judgments); the contract still owns the code
    from worker.records import promote

    rule = dict((r.code, (f, r)) for f, r in P.rules())[codes.PLAINTIFF_CASE_NUMBER_NOT_FOUND]
    assert rule == ("case_number", promote.PLAINTIFF_JUDGMENT_NOT_FOUND)
    assert rule[1].severity is contracts.Severity.WARNING
    described = {r["code"]: r for r in contracts.describe(P)["rules"]}
    assert described[codes.PLAINTIFF_CASE_NUMBER_NOT_FOUND]["field"] == "case_number"
    assert codes.PLAINTIFF_CASE_NUMBER_NOT_FOUND not in {r.code for _, r in contracts.JUDGMENTS.rules()}


def test_a_repeated_plaintiff_is_a_duplicate_warning():
    issue = contracts.duplicate_issue(P, 4)
    assert (issue.code, issue.severity) == (codes.PLAINTIFF_DUPLICATE, contracts.Severity.WARNING)


# ── headers and JSON rows ─────────────────────────────────────────────────────────────────
def test_header_aliases_order_and_extras():
    header = ["email", "CONTACT PERSON", "zip", "file #", "plaintiff", "Fax"]
    match = contracts.match_header(P, header)
    assert match.ok and match.extra == ("Fax",)
    result = contracts.validate_row(
        P, ["A@B.COM", "Jane", "10001", "CV-1", "Acme", "555"], match, 1)
    assert result.valid
    assert (result.values["email"], result.values["zip"], result.values["address_line1"]) == \
        ("a@b.com", "10001", None)


def test_missing_required_columns():
    match = contracts.match_header(P, ["Address", "City"])
    assert match.missing == ("case_number", "name")
    assert {i.code for i in contracts.header_issues(P, match)} == {codes.BATCH_MISSING_COLUMN}


def test_json_rows_by_column_or_field_names():
    by_column = contracts.validate_row(P, dict(GOOD))
    by_field = contracts.validate_row(P, {"case_number": "2024-CV-12345",
                                          "name": "Acme Collections LLC",
                                          "address_line1": "123 Main St", "zip": 10001,
                                          "email": "BILLING@acme.com"})
    assert by_column.valid and by_field.valid
    assert contracts.natural_key(P, by_column.values) == contracts.natural_key(P, by_field.values)
    assert by_field.values["email"] == "billing@acme.com"


def test_sample_csv_and_describe():
    rows = list(csv.reader(io.StringIO(contracts.sample_csv(P))))
    assert rows[0] == HEADER
    match = contracts.match_header(P, rows[0])
    assert all(contracts.validate_row(P, r, match, i).valid for i, r in enumerate(rows[1:], 1))
    described = contracts.describe(P)
    assert described["natural_key"]["fields"] == ["name", "address_line1", "zip"]
    assert {r["code"] for r in described["rules"]} >= {
        "PLAINTIFF_EMAIL_INVALID", "PLAINTIFF_PHONE_INVALID", "PLAINTIFF_STATE_INVALID",
        "PLAINTIFF_ZIP_INVALID", "PLAINTIFF_STATUS_INVALID"}
    assert described["example_row"]["Email"] == "billing@acme.com"


def test_lookup_by_name():
    assert contracts.get("plaintiffs") is P
    with pytest.raises(contracts.UnknownContract) as refused:
        contracts.get("adwords")
    assert refused.value.code == "unknown_contract"
    assert list(contracts.CONTRACTS) == ["judgments", "plaintiffs", "ad_metrics"]
