"""The judgments contract: records-data-contract.md's normalisation examples, every code of its
validation matrix and Appendix A, header matching, and JSON rows (docs/decisions/0080, 0081)."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest

from shared import contracts
from shared.contracts import codes
from shared.contracts import normalise as n

J = contracts.JUDGMENTS
HEADER = ["File #", "Plaintiff", "Defendant", "Amount", "Entry Date", "Court", "County"]
GOOD = {"File #": "2024-CV-12345", "Plaintiff": "Acme Collections LLC",
        "Defendant": "John Q. Public", "Amount": "$12,500.00", "Entry Date": "01/15/2024",
        "Court": "New York Supreme Court", "County": "New York"}


def row(**changes: str) -> contracts.RowResult:
    """The spec's example row as a CSV line, with some cells changed (by header name)."""
    cells = {**GOOD, **{k.replace("_", " "): v for k, v in changes.items()}}
    match = contracts.match_header(J, HEADER)
    return contracts.validate_row(J, [cells[h] for h in HEADER], match, 7)


def codes_of(result: contracts.RowResult) -> tuple[set[str], set[str]]:
    return {i.code for i in result.errors}, {i.code for i in result.warnings}


# ── normalisation examples (spec §4); contradictions follow the rules (ADR 0081) ──────────
def test_names_example_without_contradiction():
    assert n.name_key("John Q. Public") == "JOHN Q PUBLIC"


@pytest.mark.parametrize(("given", "key"), [
    # The spec's examples keep `LLC` and leave a double space; its rules remove legal suffixes
    # for deduplication and collapse spaces. The rules win (ADR 0081 §1).
    ("Acme   Collections,  LLC", "ACME COLLECTIONS"),
    ("Smith & Associates, Inc.", "SMITH ASSOCIATES"),
    # Entity indicators are unified before the suffix goes: L.L.C. → LLC, Inc. → INC.
    ("Acme Collections, L.L.C.", "ACME COLLECTIONS"),
    ("Widget Corp. ", "WIDGET"),
    ("Inc.", "INC"),  # a name that is only a suffix keeps it
])
def test_names_follow_the_rules(given, key):
    assert n.name_key(given) == key


def test_names_are_stored_as_given_with_spaces_collapsed():
    result = row(Plaintiff="  Acme   Collections,  LLC ")
    assert result.valid
    assert result.values["plaintiff_name"] == "Acme Collections, LLC"
    assert result.values["plaintiff_name_normalized"] == "ACME COLLECTIONS"


@pytest.mark.parametrize(("given", "value"), [
    ("$12,500.00", Decimal("12500.00")),
    ("1234.567", Decimal("1234.57")),
    ("USD 999.99", Decimal("999.99")),
    ("999.99 usd", Decimal("999.99")),
    ("0.005", Decimal("0.01")),  # half up, as money is rounded
])
def test_amount_examples(given, value):
    assert n.amount(given, ".") == value


@pytest.mark.parametrize(("given", "key"), [
    # The spec's snippet keeps hyphens (`2024-CV-12345`); its own rule says CV-12345 ≈
    # CV12345 and DESIGN.md keeps only A–Z and 0–9. The rule wins (ADR 0081 §3).
    ("2024-CV-12345", "2024CV12345"),
    ("cv 12345", "CV12345"),
    ("CV#12345", "CV12345"),
    ("CV-12345", "CV12345"),
    ("00123", "00123"),  # leading zeros kept: 00123 ≠ 123
])
def test_case_number_examples(given, key):
    assert n.case_number_key(given) == key


def test_case_number_is_displayed_as_given_and_keyed_normalised():
    result = row(**{"File #": " cv 12345 "})
    assert result.values["case_number"] == "cv 12345"
    assert result.values["case_number_normalized"] == "CV12345"
    assert contracts.natural_key(J, result.values) == "CV12345"
    assert contracts.natural_key(J, row(**{"File #": "CV-12345"}).values) == "CV12345"
    assert contracts.natural_key(J, row(**{"File #": "00123"}).values) != \
        contracts.natural_key(J, row(**{"File #": "123"}).values)


@pytest.mark.parametrize(("given", "value"), [
    ("NEW YORK CO.", "New York County"),
    # The snippet would give `Sup. Court` (its `Ct.` pattern runs first); the rule and the
    # example say `Supreme Court` (ADR 0081 §4).
    ("SUP. CT.", "Supreme Court"),
    ("Kings Dist. Ct.", "Kings District Court"),
    ("  queens   ct. ", "Queens Court"),
    ("o'brien county", "O'brien County"),
])
def test_location_examples(given, value):
    assert n.location(given) == value


@pytest.mark.parametrize(("given", "value"), [
    ("01/15/2024", date(2024, 1, 15)),
    ("2024-01-15", date(2024, 1, 15)),
    ("15-JAN-2024", date(2024, 1, 15)),
    ("15-jan-2024", date(2024, 1, 15)),
])
def test_date_examples(given, value):
    assert n.filed_date(given) == value


@pytest.mark.parametrize("given", [
    "01-15-2024",  # the snippet's fourth format is not among the rule's three (ADR 0081 §5)
    "02/30/2024", "2024/01/15", "15-FOO-2024", "yesterday", "13/01/2024",
])
def test_dates_outside_the_rules_are_invalid(given):
    assert n.filed_date(given) is contracts.INVALID


def test_court_and_county_are_normalised_in_a_row():
    result = row(Court="SUP. CT.", County="NEW YORK CO.")
    assert (result.values["court"], result.values["county"]) == ("Supreme Court",
                                                                 "New York County")


# ── the validation matrix and Appendix A: one row per code ───────────────────────────────
def test_the_example_row_is_valid():
    result = row()
    assert result.valid and not result.errors and not result.warnings
    assert result.row == 7
    assert result.values["amount"] == Decimal("12500.00")
    assert result.values["filed_date"] == date(2024, 1, 15)


TOMORROW = (n.today() + timedelta(days=1)).isoformat()

CRITICAL_CASES = [
    ({"File #": ""}, "JUDGMENT_CASE_NUMBER_MISSING", "case_number"),
    ({"File #": "  -#- "}, "JUDGMENT_CASE_NUMBER_MISSING", "case_number"),
    ({"File #": "C" * 101}, "JUDGMENT_CASE_NUMBER_TOO_LONG", "case_number"),
    ({"Plaintiff": "   "}, "JUDGMENT_PLAINTIFF_MISSING", "plaintiff_name"),
    ({"Defendant": ""}, "JUDGMENT_DEFENDANT_MISSING", "defendant_name"),
    ({"Amount": "NOT_A_NUMBER"}, "JUDGMENT_AMOUNT_INVALID", "amount"),
    ({"Amount": "1.2.3"}, "JUDGMENT_AMOUNT_INVALID", "amount"),
    ({"Amount": "NaN"}, "JUDGMENT_AMOUNT_INVALID", "amount"),
    ({"Amount": ""}, "JUDGMENT_AMOUNT_INVALID", "amount"),
    ({"Amount": "-$100"}, "JUDGMENT_AMOUNT_NEGATIVE", "amount"),
    ({"Amount": "$10,000,000,000.00"}, "JUDGMENT_AMOUNT_OUT_OF_RANGE", "amount"),
    ({"Amount": "9" * 40}, "JUDGMENT_AMOUNT_OUT_OF_RANGE", "amount"),
    ({"Entry Date": "2024-13-45"}, "JUDGMENT_FILED_DATE_INVALID", "filed_date"),
    ({"Entry Date": ""}, "JUDGMENT_FILED_DATE_INVALID", "filed_date"),
    ({"Entry Date": TOMORROW}, "JUDGMENT_FILED_DATE_FUTURE", "filed_date"),
]


@pytest.mark.parametrize(("cells", "code", "field"), CRITICAL_CASES)
def test_critical_codes_make_the_row_invalid(cells, code, field):
    result = row(**cells)
    assert not result.valid
    assert [(i.code, i.field, i.severity, i.row) for i in result.errors] == \
        [(code, field, contracts.Severity.CRITICAL, 7)]
    assert result.values[field] is None  # nothing half-read is kept
    assert result.errors[0].message.endswith(".")


WARNING_CASES = [
    ({"Plaintiff": "P" * 501}, "JUDGMENT_PLAINTIFF_TOO_LONG", "plaintiff_name", 500),
    ({"Defendant": "D" * 600}, "JUDGMENT_DEFENDANT_TOO_LONG", "defendant_name", 500),
    ({"Court": "Court " * 40}, "JUDGMENT_COURT_TOO_LONG", "court", 200),
    ({"County": "K" * 101}, "JUDGMENT_COUNTY_TOO_LONG", "county", 100),
]


@pytest.mark.parametrize(("cells", "code", "field", "limit"), WARNING_CASES)
def test_too_long_is_a_warning_and_truncates(cells, code, field, limit):
    result = row(**cells)
    assert result.valid
    assert [(i.code, i.field, i.severity) for i in result.warnings] == \
        [(code, field, contracts.Severity.WARNING)]
    assert len(result.values[field]) == limit


@pytest.mark.parametrize("amount", ["$1,000,000,000.00", "999999999.999", "$9,999,999,999.99"])
def test_a_billion_or_more_is_a_warning_not_an_error(amount):
    # DESIGN.md: amount ≥ $1B is a warning (the snippet rejected it).
    result = row(Amount=amount)
    assert result.valid and codes_of(result) == (set(), {"JUDGMENT_AMOUNT_TOO_LARGE"})
    assert result.values["amount"] >= Decimal("1000000000")


def test_just_under_a_billion_is_clean():
    result = row(Amount="$999,999,999.99")
    assert result.valid and not result.warnings


def test_a_date_before_1900_is_a_warning():
    result = row(**{"Entry Date": "12/31/1899"})
    assert result.valid and codes_of(result) == (set(), {"JUDGMENT_FILED_DATE_TOO_OLD"})
    assert result.values["filed_date"] == date(1899, 12, 31)
    assert row(**{"Entry Date": "1900-01-01"}).warnings == []


def test_today_is_not_the_future():
    assert row(**{"Entry Date": n.today().isoformat()}).valid


def test_plaintiff_equal_to_defendant_is_allowed_with_a_warning():
    result = row(Plaintiff="Acme LLC", Defendant="ACME, L.L.C.")
    assert result.valid
    assert codes_of(result) == (set(), {"JUDGMENT_DEFENDANT_SAME_AS_PLAINTIFF"})


def test_several_problems_are_all_collected():
    result = row(**{"File #": "", "Amount": "-1", "Entry Date": TOMORROW, "County": "K" * 101})
    errors, warnings = codes_of(result)
    assert errors == {"JUDGMENT_CASE_NUMBER_MISSING", "JUDGMENT_AMOUNT_NEGATIVE",
                      "JUDGMENT_FILED_DATE_FUTURE"}
    assert warnings == {"JUDGMENT_COUNTY_TOO_LONG"}


def test_special_characters_and_formulas_are_stored_verbatim():
    # CSV-injection escaping is for CSV the product writes, never for stored values.
    result = row(Plaintiff="=cmd|' /c calc'!A0", Defendant="@#$% Holdings")
    assert result.valid
    assert result.values["plaintiff_name"] == "=cmd|' /c calc'!A0"
    assert result.values["defendant_name"] == "@#$% Holdings"


def test_empty_optional_fields_become_null():
    result = row(Court="", County="   ")
    assert result.valid and result.values["court"] is None and result.values["county"] is None


def test_every_code_of_the_spec_is_declared():
    declared = {rule.code: rule.severity for _, rule in J.rules()}
    declared |= {rule.code: rule.severity for rule in codes.BATCH_RULES}
    critical, warning = contracts.Severity.CRITICAL, contracts.Severity.WARNING
    spec = {  # the validation matrix and Appendix A
        "JUDGMENT_CASE_NUMBER_MISSING": critical, "JUDGMENT_CASE_NUMBER_TOO_LONG": critical,
        "JUDGMENT_PLAINTIFF_MISSING": critical, "JUDGMENT_PLAINTIFF_TOO_LONG": warning,
        "JUDGMENT_DEFENDANT_MISSING": critical, "JUDGMENT_DEFENDANT_TOO_LONG": warning,
        "JUDGMENT_AMOUNT_INVALID": critical, "JUDGMENT_AMOUNT_NEGATIVE": critical,
        "JUDGMENT_AMOUNT_TOO_LARGE": warning, "JUDGMENT_FILED_DATE_INVALID": critical,
        "JUDGMENT_FILED_DATE_FUTURE": critical, "JUDGMENT_FILED_DATE_TOO_OLD": warning,
        "JUDGMENT_COURT_TOO_LONG": warning, "JUDGMENT_COUNTY_TOO_LONG": warning,
        "BATCH_MISSING_COLUMN": critical, "BATCH_EMPTY_FILE": critical,
        "BATCH_ENCODING_WARNING": warning, "JUDGMENT_DUPLICATE": warning,
    }
    assert {code: declared.get(code) for code in spec} == spec
    for code in declared:  # <ENTITY>_<FIELD>_<REASON>
        assert code.split("_")[0] in ("JUDGMENT", "BATCH") and code == code.upper()


def test_a_repeated_case_number_is_a_duplicate_warning():
    first, again = row(**{"File #": "CV-12345"}), row(**{"File #": "cv 12345"})
    assert contracts.natural_key(J, first.values) == contracts.natural_key(J, again.values)
    issue = contracts.duplicate_issue(J, 9)
    assert (issue.code, issue.severity, issue.row) == (codes.JUDGMENT_DUPLICATE,
                                                      contracts.Severity.WARNING, 9)


# ── header matching ───────────────────────────────────────────────────────────────────────
def test_header_in_any_order_case_and_spacing():
    header = ["  entry date", "COUNTY", "amount ", "file#", "DEFENDANT", "plaintiff", "Court"]
    match = contracts.match_header(J, header)
    assert match.ok and match.extra == () and match.missing == ()
    cells = {"  entry date": "2024-01-15", "COUNTY": "New York", "amount ": "12500",
             "file#": "CV-1", "DEFENDANT": "John Doe", "plaintiff": "Acme LLC",
             "Court": "SUP. CT."}
    result = contracts.validate_row(J, [cells[h] for h in header], match, 1)
    assert result.valid
    assert result.values["case_number"] == "CV-1" and result.values["county"] == "New York"
    assert result.values["amount"] == Decimal("12500.00")
    assert result.values["court"] == "Supreme Court"


def test_canonical_field_names_are_accepted_as_headers():
    header = ["case_number", "plaintiff_name", "defendant_name", "amount", "filed_date"]
    match = contracts.match_header(J, header)
    assert match.ok and set(match.index) == set(header)


def test_extra_columns_are_listed_and_ignored():
    header = [*HEADER, "Notes", "\ufeffInternal Id"]
    match = contracts.match_header(J, header)
    assert match.ok and match.extra == ("Notes", "\ufeffInternal Id")
    result = contracts.validate_row(J, [*GOOD.values(), "note", "42"], match, 1)
    assert result.valid and "Notes" not in result.values
    # One warning however many unknown columns there are, naming the first few (issue 20).
    [issue] = contracts.header_issues(J, match)
    assert (issue.code, issue.severity) == (codes.BATCH_EXTRA_COLUMN, contracts.Severity.WARNING)
    assert "'Notes'" in issue.message and issue.message.startswith("2 column(s)")


def test_a_million_unknown_columns_are_one_warning_naming_five_and_the_count():
    header = [*HEADER, *(f"extra {i}" for i in range(1_000_000))]
    [issue] = contracts.header_issues(J, contracts.match_header(J, header))
    assert issue.message.startswith("1,000,000 column(s)")
    assert "'extra 4'" in issue.message and "'extra 5'" not in issue.message
    assert "and 999,995 more" in issue.message


def test_a_bom_on_the_first_header_still_matches():
    match = contracts.match_header(J, ["\ufeffFile #", *HEADER[1:]])
    assert match.ok and match.index["case_number"] == 0


def test_missing_required_columns_fail_the_batch():
    match = contracts.match_header(J, ["File #", "Plaintiff", "Amount", "Court"])
    assert not match.ok
    assert match.missing == ("defendant_name", "filed_date")
    issues = contracts.header_issues(J, match)
    assert [(i.code, i.field, i.severity) for i in issues] == [
        (codes.BATCH_MISSING_COLUMN, "defendant_name", contracts.Severity.CRITICAL),
        (codes.BATCH_MISSING_COLUMN, "filed_date", contracts.Severity.CRITICAL)]
    assert "'Defendant'" in issues[0].message


def test_missing_optional_columns_are_fine():
    match = contracts.match_header(J, HEADER[:5])
    assert match.ok
    result = contracts.validate_row(J, list(GOOD.values())[:5], match, 1)
    assert result.valid and result.values["court"] is None


def test_a_column_repeated_with_the_same_value_is_fine_and_with_another_a_row_error():
    # The same header twice (exports repeat `Currency code`): equal cells are one value.
    match = contracts.match_header(J, [*HEADER, "File #"])
    assert match.ok and match.repeats == (("case_number", len(HEADER)),)
    values = list(GOOD.values())
    assert contracts.validate_row(J, [*values, values[0]], match, 1).valid
    conflict = contracts.validate_row(J, [*values, "CV-OTHER"], match, 2)
    assert codes_of(conflict)[0] == {"JUDGMENT_COLUMN_CONFLICT"}
    # Another name of the same field: the contract's first-listed header wins, with a warning.
    match = contracts.match_header(J, [*HEADER, "case_number"])
    assert match.ok and match.ignored == (("case_number", "File #"),)
    assert [i.code for i in contracts.header_issues(J, match)] == [codes.BATCH_EXTRA_COLUMN]


def test_a_short_row_reads_missing_cells_as_empty():
    match = contracts.match_header(J, HEADER)
    result = contracts.validate_row(J, ["CV-1", "Acme", "Doe", "10", "2024-01-01"], match, 3)
    assert result.valid and result.values["county"] is None
    result = contracts.validate_row(J, ["CV-1", "Acme"], match, 4)
    assert codes_of(result)[0] == {"JUDGMENT_DEFENDANT_MISSING", "JUDGMENT_AMOUNT_INVALID",
                                   "JUDGMENT_FILED_DATE_INVALID"}


def test_a_csv_row_needs_its_header_match():
    with pytest.raises(TypeError):
        contracts.validate_row(J, list(GOOD.values()), None, 1)


# ── JSON rows (the event ledger sends one object at a time) ───────────────────────────────
def test_json_row_keyed_by_column_names():
    result = contracts.validate_row(J, dict(GOOD), row_number=1)
    assert result.valid and result.values["case_number_normalized"] == "2024CV12345"


def test_json_row_keyed_by_field_names_with_json_numbers_and_nulls():
    result = contracts.validate_row(J, {
        "case_number": "2024-CV-12345", "plaintiff_name": "Acme", "defendant_name": "Doe",
        "amount": 12500.5, "filed_date": "2024-01-15", "court": None, "extra": [1, 2]})
    assert result.valid
    assert result.values["amount"] == Decimal("12500.50") and result.values["court"] is None


def test_json_row_missing_required_fields_is_invalid():
    result = contracts.validate_row(J, {"case_number": "CV-1", "Plaintiff": "Acme"})
    assert codes_of(result)[0] == {"JUDGMENT_DEFENDANT_MISSING", "JUDGMENT_AMOUNT_INVALID",
                                   "JUDGMENT_FILED_DATE_INVALID"}


# ── what the API publishes ────────────────────────────────────────────────────────────────
def test_sample_csv_is_valid_under_its_own_contract():
    rows = list(csv.reader(io.StringIO(contracts.sample_csv(J))))
    assert rows[0] == HEADER
    match = contracts.match_header(J, rows[0])
    results = [contracts.validate_row(J, r, match, i) for i, r in enumerate(rows[1:], 1)]
    assert len(results) >= 2 and all(r.valid and not r.warnings for r in results)


def test_describe_publishes_columns_rules_key_and_example():
    described = contracts.describe(J)
    assert (described["name"], described["version"]) == ("judgments", "1.0.0")
    columns = {c["name"]: c for c in described["columns"]}
    assert columns["case_number"]["headers"] == ["File #"]
    assert columns["case_number"]["required"] and not columns["court"]["required"]
    rules = {r["code"]: r for r in described["rules"]}
    assert rules["JUDGMENT_AMOUNT_TOO_LARGE"]["severity"] == "warning"
    assert rules["JUDGMENT_AMOUNT_INVALID"]["field"] == "amount"
    assert {r["code"] for r in described["batch_rules"]} >= {
        "BATCH_MISSING_COLUMN", "BATCH_EMPTY_FILE", "BATCH_ENCODING_WARNING"}
    assert described["natural_key"]["fields"] == ["case_number"]
    assert described["example_row"]["File #"] == "2024-CV-12345"
    assert described["sample_csv"].startswith("File #,Plaintiff,Defendant,")
    assert described["targets"] == [{"table": "judgments",
                                     "upsert_key": ["case_number_normalized"]}]


def test_a_platform_column_map_fits_the_model():
    # ad_metrics will read each platform's own export headers onto the same fields and rules.
    other = contracts.with_headers(J, name="judgments:jbi",
                                   headers={"case_number": ("Case No.",),
                                            "filed_date": ("Judgment Date", "Entered")})
    match = contracts.match_header(other, ["Case No.", "Plaintiff", "Defendant", "Amount",
                                           "Entered"])
    assert match.ok
    result = contracts.validate_row(other, ["cv 1", "A", "B", "-1", "2024-01-01"], match, 1)
    assert [i.code for i in result.errors] == ["JUDGMENT_AMOUNT_NEGATIVE"]
    assert not contracts.match_header(other, HEADER).ok  # `File #` is not its header
    with pytest.raises(ValueError):
        contracts.with_headers(J, name="x", headers={"nope": ("X",)})


def test_a_header_claimed_by_two_columns_is_refused_at_definition():
    with pytest.raises(ValueError):
        contracts.with_headers(J, name="x", headers={"court": ("County",)})
