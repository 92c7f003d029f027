"""Every row-level code each records contract publishes, through the whole stack (issue 12).

For each contract: read its published rules (`GET /v1/contracts/{name}`), build one CSV in
which each row triggers exactly one of them (plus valid rows), upload it through the gateway
with `force_partial` (so the error budget cannot stop it), let a real `ingest worker --once`
parse, stage and promote it, then read the errors back through
`GET /intake/batches/{id}/errors`, page by page. A rule added to a contract without a trigger
row here fails the test by name; a code no file can trigger goes in UNREACHABLE, with why.
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from shared import contracts
from shared.contracts import normalise as n
from tests.e2e.test_records_worker import drain, submit
from tests.support import records
from tests.unit import test_contracts_judgments as judgment_units

# Published codes that no row of these files can trigger through the stack: code → why (and
# where they are triggered instead).
_ELSEWHERE = {
    "COLUMN_CONFLICT": "needs a header naming a column twice (unit tests: "
                       "test_a_column_repeated_with_the_same_value_is_fine_and_with_another…)",
    "ROW_UNREADABLE": "JSON lines only (tests/e2e/test_import_real_files_stack.py)",
}
UNREACHABLE: dict[str, str] = {
    **{f"{entity}_{code}": why for entity in ("JUDGMENT", "PLAINTIFF")
       for code, why in _ELSEWHERE.items()},
    # The contracts now check what the tables check (keys fold alike in Python and SQL, issue
    # 20), so no file row is known to reach these; staged rows the tables refuse do
    # (tests/integration/test_records_promotion.py).
    **{f"{entity}_NOT_STORED": "a row the table refuses after the contract passed it"
       for entity in ("JUDGMENT", "PLAINTIFF")},
    "JUDGMENT_AMOUNT_AMBIGUOUS": "needs a file whose numbers prove no decimal convention; "
                                 "these prove `.` (tests/integration/test_import_conventions.py)",
}
VALID_ROWS_BEFORE, VALID_ROWS_AFTER = 3, 1


def _first_per_code(cases: list[tuple[Any, ...]]) -> dict[str, dict[str, str]]:
    """The unit tests' trigger cells (header → text), the first case of each code."""
    out: dict[str, dict[str, str]] = {}
    for cells, code, *_ in cases:
        out.setdefault(code, cells)
    return out


@dataclass(frozen=True)
class Case:
    contract: str
    header: tuple[str, ...]
    valid: Callable[[int], dict[str, str]]   # row number → a valid row with its own identity
    triggers: dict[str, dict[str, str]]      # code → the cells that break a valid row so
    identity: Callable[[dict[str, str]], str]   # a row's cells → its record's identity
    promoted: str                            # SQL: the identities stored for %(tenant_id)s
    before: bytes | None = None              # a judgments file to import first


JUDGMENTS = Case(
    "judgments", tuple(judgment_units.HEADER),
    valid=lambda i: {"File #": f"2024-CV-{i:04d}", "Plaintiff": "Acme Collections LLC",
                     "Defendant": f"Defendant {i}", "Amount": f"{100 + i}.00",
                     "Entry Date": "01/15/2024", "Court": "Sup. Ct.", "County": "Kings Co."},
    triggers={
        **_first_per_code(judgment_units.CRITICAL_CASES),
        **_first_per_code(judgment_units.WARNING_CASES),
        "JUDGMENT_AMOUNT_TOO_LARGE": {"Amount": "$1,000,000,000.00"},
        "JUDGMENT_FILED_DATE_TOO_OLD": {"Entry Date": "12/31/1899"},
        "JUDGMENT_DEFENDANT_SAME_AS_PLAINTIFF": {"Plaintiff": "Acme LLC",
                                                 "Defendant": "ACME, L.L.C."},
        # Row 1's case number spelt another way, with another amount: row 1 must win.
        "JUDGMENT_DUPLICATE": {"File #": "2024 cv 0001", "Amount": "999.00"},
        # Issue 20: look-alike letters, letters outside the key, a NUL, a surplus cell.
        "JUDGMENT_CASE_NUMBER_MIXED_SCRIPT": {"File #": "2024-CV-С0098"},
        "JUDGMENT_CASE_NUMBER_LETTERS_IGNORED": {"File #": "2024-CV-É0099"},
        "JUDGMENT_TEXT_UNSTORABLE": {"Defendant": "Jane\x00Doe"},
        "JUDGMENT_ROW_TOO_WIDE": {"__extra__": "a surplus cell"},
    },
    identity=lambda cells: n.case_number_key(cells["File #"]),
    promoted="SELECT case_number_normalized AS id FROM judgments WHERE tenant_id = %(tenant_id)s",
)

# Bad values as tests/unit/test_contracts_plaintiffs.py uses them. Every valid row names case
# CV-1, imported first, so only the row meant to trigger it finds no judgment.
PLAINTIFFS = Case(
    "plaintiffs", ("File #", "Plaintiff", "Address", "City", "State", "ZIP", "Phone", "Email",
                   "Contact Person", "Status"),
    valid=lambda i: {"File #": "CV-1", "Plaintiff": f"Plaintiff {i} Holdings",
                     "Address": f"{i} Main St", "City": "New York", "State": "NY",
                     "ZIP": "10001", "Phone": "(212) 555-1234", "Email": f"ops{i}@acme.com",
                     "Contact Person": "Jane Smith", "Status": "Active"},
    triggers={
        "PLAINTIFF_CASE_NUMBER_MISSING": {"File #": ""},
        "PLAINTIFF_CASE_NUMBER_TOO_LONG": {"File #": "C" * 101},
        "PLAINTIFF_NAME_MISSING": {"Plaintiff": "  "},
        "PLAINTIFF_NAME_TOO_LONG": {"Plaintiff": "N" * 700},
        "PLAINTIFF_STATE_INVALID": {"State": "XX"},
        "PLAINTIFF_ZIP_INVALID": {"ZIP": "1000A"},
        "PLAINTIFF_PHONE_INVALID": {"Phone": "call me"},
        "PLAINTIFF_EMAIL_INVALID": {"Email": "two@@acme.com"},
        "PLAINTIFF_STATUS_INVALID": {"Status": "Maybe"},
        # Row 1's name, address and ZIP, spelt in another case and spacing.
        "PLAINTIFF_DUPLICATE": {"Plaintiff": " plaintiff 1 HOLDINGS ", "Address": "1 MAIN ST"},
        "PLAINTIFF_CASE_NUMBER_NOT_FOUND": {"File #": "CV-404"},
        "PLAINTIFF_CASE_NUMBER_MIXED_SCRIPT": {"File #": "CV-1С"},
        "PLAINTIFF_CASE_NUMBER_LETTERS_IGNORED": {"File #": "CV-1É"},
        "PLAINTIFF_ADDRESS_LINE1_TOO_LONG": {"Address": "7" + " Long Road" * 60},
        "PLAINTIFF_CITY_TOO_LONG": {"City": "C" * 501},
        "PLAINTIFF_CONTACT_NAME_TOO_LONG": {"Contact Person": "P" * 501},
        "PLAINTIFF_TEXT_UNSTORABLE": {"City": "New\x00York"},
        "PLAINTIFF_ROW_TOO_WIDE": {"__extra__": "a surplus cell"},
    },
    identity=lambda cells: cells["Address"][:500],
    promoted="SELECT address_line1 AS id FROM plaintiffs WHERE tenant_id = %(tenant_id)s",
    before=(records.CSV_HEADER + "CV-1,A Co,B Roe,100,01/15/2024,,\n").encode(),
)


def _csv(header: tuple[str, ...], rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[row[h] for h in header] + ([row["__extra__"]] if "__extra__" in row
                                                   else []) for row in rows])
    return out.getvalue().encode()


def _api_errors(client, batch_id: str) -> list[dict[str, Any]]:
    """Every error of the batch, read 100 at a time as a client would."""
    found: list[dict[str, Any]] = []
    page = 1
    while True:
        response = client.get(f"/intake/batches/{batch_id}/errors",
                              params={"page": page, "limit": 100})
        assert response.status_code == 200, response.text
        body = response.json()
        found += body["errors"]
        total = body["totalErrors"] + body["totalWarnings"]
        if not body["errors"] or len(found) >= total:
            assert len(found) == total
            return found
        page += 1


@pytest.mark.parametrize("case", [JUDGMENTS, PLAINTIFFS], ids=lambda c: c.contract)
def test_every_published_row_code_reaches_its_row_through_the_stack(
        case, gateway, tenants, conn, stack_env, out_dir):
    user = tenants.user()
    # Given the contract's rules as the API publishes them, each with a trigger row
    with gateway.client(user.token) as client:
        response = client.get(f"/v1/contracts/{case.contract}")
    assert response.status_code == 200, response.text
    published = {r["code"]: r["severity"] for r in response.json()["rules"]}
    assert published == {r.code: r.severity.value
                         for _, r in contracts.get(case.contract).rules()}
    untested = set(published) - set(case.triggers) - set(UNREACHABLE)
    assert not untested, f"published codes without a trigger row here: {sorted(untested)}"
    wanted = [code for code in published if code not in UNREACHABLE]

    # and one file: valid rows, then one row per code, then a valid row again
    rows: list[dict[str, str]] = []
    code_of: dict[int, str | None] = {}
    for code in [None] * VALID_ROWS_BEFORE + wanted + [None] * VALID_ROWS_AFTER:
        number = len(rows) + 1
        rows.append({**case.valid(number), **(case.triggers[code] if code else {})})
        code_of[number] = code

    # When it is imported (after the judgments its plaintiffs link to), budget waived
    if case.before is not None:
        drain(conn, stack_env, out_dir, submit(gateway, user, case.before))
    batch_id = submit(gateway, user, _csv(case.header, rows), name=f"{case.contract}.csv",
                      contract=case.contract, force_partial="true")
    drain(conn, stack_env, out_dir, batch_id)

    # Then the API reports every code on the row that triggers it, and nothing else
    with gateway.client(user.token) as client:
        status = client.get(f"/intake/batches/{batch_id}").json()
        reported = _api_errors(client, batch_id)
    observed: dict[int, set[str]] = defaultdict(set)
    for error in reported:
        observed[error["rowNumber"]].add(error["errorCode"])
    assert dict(observed) == {row: {code} for row, code in code_of.items() if code}
    reachable = set(published) - set(UNREACHABLE)
    assert {e["errorCode"] for e in reported} == reachable

    # and the batch counts them: critical rows invalid, the budget waived, one duplicate
    critical = {row for row, code in code_of.items() if code and published[code] == "critical"}
    assert (status["status"], status["rowCountTotal"], status["rowCountInvalid"],
            status["rowCountDuplicate"]) == ("partial", len(rows), len(critical), 1)

    # and warnings' rows were promoted, critical rows were not, the duplicate kept row 1
    duplicate = contracts.get(case.contract).duplicate.code
    kept = {case.identity(rows[row - 1]) for row, code in code_of.items()
            if row not in critical and code != duplicate}
    stored = {r["id"] for r in conn.execute(case.promoted, {"tenant_id": user.tenant_id})}
    assert stored == kept
    if case.contract == "judgments":
        amount = conn.execute("SELECT amount FROM judgments WHERE tenant_id = %s AND "
                              "case_number_normalized = '2024CV0001'",
                              (user.tenant_id,)).fetchone()["amount"]
        assert str(amount) == "101.00"
    else:
        # every kept plaintiff is linked to CV-1 but the one whose case number names none
        linked = {r["id"] for r in conn.execute(
            "SELECT p.address_line1 AS id FROM plaintiff_judgments pj JOIN plaintiffs p "
            "ON p.id = pj.plaintiff_id WHERE pj.tenant_id = %s", (user.tenant_id,))}
        orphan = next(r for r, c in code_of.items() if c == "PLAINTIFF_CASE_NUMBER_NOT_FOUND")
        assert linked == kept - {case.identity(rows[orphan - 1])}
