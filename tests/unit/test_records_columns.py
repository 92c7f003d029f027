"""Column-wise validation (worker/records/columns.py) says of every row what the per-row
validation (``contracts.validate_row``) says: the same issues in the same order, the same valid
rows, values and natural keys (issue 31, docs/decisions/0271). The per-row code is the oracle:
hypothesis writes rows of numbers, dates, names and ids in every form the exports use, of any
Unicode, and of the traps of real files, for every contract and decimal convention; and every
real export of tests/data/ad_exports is read both ways."""

from __future__ import annotations

import string
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import contracts
from shared.contracts import ad_metrics
from tests.integration.test_records_any_text import REAL_WORLD
from tests.support.columns_oracle import differences
from tests.unit import test_contracts_judgments as judgment_units
from worker.records import parse

DATA = Path(__file__).parents[1] / "data" / "ad_exports"
CONTRACTS = [contracts.JUDGMENTS, contracts.PLAINTIFFS,
             *(ad_metrics.for_platform(p) for p in ad_metrics.PLATFORMS), contracts.AD_METRICS]

# Cells shaped like the values of real files, mostly printable ASCII (the column forms' own
# ground), and the forms only Python reads.
DIGITS = st.text(string.digits, min_size=1, max_size=22)
NUMBERS = st.one_of(
    DIGITS, st.builds(lambda a, b: f"{a}.{b}", DIGITS, DIGITS),
    st.builds(lambda a, b: f"{a},{b}", DIGITS, DIGITS),
    st.sampled_from(["1,234", "1.234", "1,234.56", "1.234,56", "12,5", "$12,500.00", "-3.5",
                     "+7", "0.005", "-0.004", "12.345", "99999999999999999.99", "1e5", "1 234",
                     "(12.00)", "12 %", "USD 12", "12.50 €", "0,50", ",5", "5.", "1,2,3",
                     "0001,000", "10000000000", "9999999999.995", "1.000.000", "000"]),
    st.builds(lambda s, a: f"{s}${a:,}.{a % 100:02d}", st.sampled_from(["", "-", "+"]),
              st.integers(0, 10**13)),
    st.builds(lambda a: f"{a:,}".replace(",", "."), st.integers(0, 10**9)))
DATES = st.one_of(
    st.dates().map(lambda d: d.isoformat()), st.dates().map(lambda d: f"{d:%m/%d/%Y}"),
    st.dates().map(lambda d: f"{d:%d-%b-%Y}".upper()), st.dates().map(lambda d: f"{d:%Y/%m/%d}"),
    st.dates().map(lambda d: f"{d.isoformat()} 00:00:00"), st.dates().map(lambda d: f"{d:%b %d, %Y}"),
    st.sampled_from(["2024-02-30", "0000-01-01", "13/01/2024", "1/5/2024", "2024-1-5",
                     "2099-01-01", "1899-12-31", "15-Jan-2024", "15-jan-2024", "15-Foo-2024",
                     "2024-01-15T10:00:00Z", "2024-01-15 7:00", "Monday, January 15, 2024"]))
WORDS = st.one_of(
    st.text(string.printable, max_size=12), st.text(string.ascii_letters + " .,'&-#", max_size=30),
    st.sampled_from(["Acme Collections, L.L.C.", "Smith & Associates, Inc.", "  Widget  Corp. ",
                     "Inc.", "CV-12345", "cv 12345", "--", "-", "'120210000000000001", "1.2E+17",
                     "123.0", ".0", "x" * 501, "y" * 101, "Sup. Ct.", "KINGS CO.", "usd", "US",
                     "NY", "ny", "10001", "12345-6789", "123456789", "Settled", "On  Hold",
                     "billing@acme.example", "(212) 555-1234", "Total", " ", "   --  "]))
CELLS = st.one_of(NUMBERS, DATES, WORDS, st.sampled_from(REAL_WORLD), st.text(max_size=8))


def header(contract: contracts.Contract) -> list[str]:
    return [c.headers[0] if c.headers else c.name for c in contract.columns]


@pytest.mark.parametrize("contract", CONTRACTS, ids=lambda c: c.variant or c.name)
@pytest.mark.parametrize("decimal", [None, ".", ","])
def test_any_rows_validate_column_wise_as_row_by_row(contract, decimal):
    names = header(contract)
    match = replace(contracts.match_header(contract, names), decimal=decimal,
                    context={"period": None, "titles": (), "fields": frozenset(names)})

    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(st.lists(CELLS, min_size=len(names), max_size=len(names) + 1),
                    min_size=1, max_size=30))
    def agree(rows):
        assert differences(contract, match, rows) == []

    agree()


def test_every_code_of_the_judgments_unit_tests_reads_alike():
    match = contracts.match_header(contracts.JUDGMENTS, judgment_units.HEADER)
    rows = [[judgment_units.GOOD[h] for h in judgment_units.HEADER]]
    for cells, *_ in judgment_units.CRITICAL_CASES + judgment_units.WARNING_CASES:
        merged = {**judgment_units.GOOD, **cells}
        rows.append([merged.get(h, "") for h in judgment_units.HEADER])
    for decimal in (None, ".", ","):
        assert differences(contracts.JUDGMENTS, replace(match, decimal=decimal), rows) == []


@pytest.mark.parametrize("path", sorted(DATA.glob("*/*.csv")), ids=lambda p: p.name)
def test_every_real_export_reads_alike(path):
    platform = {"google": "google", "meta": "meta", "reproduced": None}[path.parent.name]
    platform = platform or ("tiktok" if "tiktok" in path.name else "google")
    contract = ad_metrics.for_platform(platform)
    try:
        with parse.Reader(path, contract, "csv") as reader:
            rows = [cells for _, cells, _ in reader.rows()]
    except parse.BatchRejected:
        pytest.skip("refused as a file")
    assert differences(contract, reader.parsed.match, rows) == []
