"""Any text in any cell of any contract ends a batch the way a file's content can end it —
completed, partial, or failed by its budget (or with no rows left) — never with an unexpected
error (issue 20): nothing that passes validation can break staging or promotion, and nothing
that fails it fails more than its row.

Hypothesis writes files of arbitrary Unicode (NUL and other control characters, lone combining
marks, right-to-left text, full-width digits, look-alike letters, huge cells) and real-world
values into every column of every contract, as UTF-8 or as Google's UTF-16 tab-separated
"Excel CSV", and the worker's own handler imports each one against the real Postgres
(tests/support/records_inproc.py).
"""

from __future__ import annotations

import codecs
import csv
import io
from datetime import date

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import contracts
from shared.contracts import ad_metrics
from tests.support.records_inproc import Importer

# Text people really type, and the traps of real exports.
REAL_WORLD = [
    "Zoë Ærøskøbing", "Şükrü Işıklı", "İSTANBUL", "ıi İI", "Straße", "STRASSE", "ﬃ ligature",
    "Ｃａｆé", "ＣＶ－１２３４５", "１２３", "CV-123С", "Сергей Петров", "محمد علي", "李小龙",
    "👩‍⚖️ Law", "\u200b", "\ufeff", " \u00a0 ", "--", " --", "-", "n/a", "1.234,56", "1,234.56",
    "1,2,3", " 12 34 ", "12,5", "(12.00)", "$12,500.00", "1e400", "NaN", "-1", "0",
    "99999999999999999999999", "2024-02-30", "01/15/2024", "2026-01-05", "Jan 5, 2026",
    "Total: Account", "Total of 3 results", "=HYPERLINK(\"x\")", "a\x00b", "\x00",
    "line\nbreak", "tab\there", "\"quoted\"", "x" * 600, "9" * 120, "\U0010ffff", "\u0301",
    "(212) 555-1234", "billing@acme.example", "10001", "12345-6789", "NY", "ny", "Settled",
]


def cells(examples: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=30), st.sampled_from(REAL_WORLD),
                     st.sampled_from(examples or [""]))


def header_and_examples(contract: contracts.Contract) -> tuple[list[str], list[list[str]]]:
    header = [c.headers[0] if c.headers else c.name for c in contract.columns]
    examples = [[e.get(c.name, "") for e in contract.examples] for c in contract.columns]
    return header, examples


def render(header: list[str], rows: list[list[str]], wide: bool) -> bytes:
    out = io.StringIO()
    csv.writer(out, delimiter="\t" if wide else ",", lineterminator="\r\n").writerows(
        [header, *rows])
    text = out.getvalue()
    # Google's "Excel CSV": UTF-16LE with a byte-order mark, tab separated.
    return codecs.BOM_UTF16_LE + text.encode("utf-16-le", "surrogatepass") if wide \
        else text.encode("utf-8", "surrogatepass")


def rows(examples: list[list[str]]) -> st.SearchStrategy[list[str]]:
    """A row of any text in any column, or an example row with some of its cells replaced by
    any text (so that files mix rows that pass with rows that do not)."""
    anything = st.tuples(*(cells(e) for e in examples)).map(list)
    base = [e[0] if e else "" for e in examples]
    edits = st.lists(st.tuples(st.integers(0, len(examples) - 1), cells([])), max_size=3)
    edited = edits.map(lambda changes: [dict(changes).get(i, v) for i, v in enumerate(base)])
    return st.one_of(anything, edited)


def files(contract: contracts.Contract) -> st.SearchStrategy[tuple[bytes, str, bool]]:
    header, examples = header_and_examples(contract)
    row = rows(examples)
    return st.tuples(st.lists(row, min_size=1, max_size=6), st.booleans(),
                     st.sampled_from(["10", "100", "0"]), st.booleans()).map(
        lambda t: (render(header, t[0], t[1]), t[2], t[3]))


CASES = [("judgments", None, contracts.JUDGMENTS), ("plaintiffs", None, contracts.PLAINTIFFS),
         *(("ad_metrics", p, ad_metrics.for_platform(p)) for p in ad_metrics.PLATFORMS)]
# How a batch may end for what its file holds; anything else (unexpected_error) is a defect.
FILE_ENDS = {"BATCH_ERROR_BUDGET_EXCEEDED", "BATCH_NO_VALID_ROWS", "BATCH_EMPTY_FILE"}


@pytest.mark.parametrize(("contract_name", "platform", "contract"), CASES,
                         ids=[c[1] or c[0] for c in CASES])
def test_any_text_in_any_column_never_ends_in_an_unexpected_error(
        database_url, conn, tenants, tmp_path, contract_name, platform, contract):
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user(f"any-{platform or contract_name}").tenant_id
    outcomes: set[str] = set()

    @settings(max_examples=25, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(files(contract))
    def imported(case: tuple[bytes, str, bool]) -> None:
        data, threshold, force = case
        batch = importer.run(tenant, data, contract_name, platform=platform,
                             threshold=threshold, force_partial=force)
        assert batch["run_error_code"] != "unexpected_error", batch["run_error"]
        if batch["status"] == "failed":
            assert batch["run_error_code"] in FILE_ENDS, (batch["run_error_code"],
                                                          batch["rejection_reason"])
        else:
            assert batch["status"] in ("completed", "partial"), batch["status"]
            assert batch["run_status"] == "succeeded"
        outcomes.add(batch["status"])

    imported()
    # The generator reached both ends: some files imported, some were refused by their rows.
    assert outcomes & {"completed", "partial"}, outcomes


def test_a_real_world_judgments_file_keys_its_case_numbers_as_folded(database_url, conn, tenants,
                                                                    tmp_path):
    # Full-width, lower-case and ß-spelled case numbers are one judgment each; a Cyrillic С
    # among Latin letters is refused; nothing of it fails the batch.
    header = "File #,Plaintiff,Defendant,Amount,Entry Date\r\n"
    rows = ["ＣＶ-１２３４５,Zoë Ærøskøbing,Şükrü Işıklı,\"$1,000.00\",01/15/2024",
            "cv 12345,Zoë Ærøskøbing,Şükrü Işıklı,\"$1,000.00\",01/15/2024",
            "STRAẞE-1,Ａｃｍｅ,Bob,12.50,2024-01-02",
            "strasse-1,Acme,Bob,12.50,2024-01-02",
            "CV-12345С,Acme,Bob,1,2024-01-02"]
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user("unicode-keys").tenant_id
    batch = importer.run(tenant, (header + "\r\n".join(rows)).encode(), "judgments",
                         threshold="50")
    assert (batch["status"], batch["rows_invalid"], batch["rows_duplicate"]) == (
        "completed", 1, 2)
    stored = [r["case_number_normalized"] for r in conn.execute(
        "SELECT case_number_normalized FROM judgments WHERE tenant_id = %s ORDER BY 1",
        (tenant,))]
    assert stored == ["CV12345", "STRASSE1"]
    assert conn.execute("SELECT code FROM import_row_errors WHERE batch_id = %s AND "
                        "severity = 'critical'", (batch["batch_id"],)).fetchone()["code"] == \
        "JUDGMENT_CASE_NUMBER_MIXED_SCRIPT"


def test_plaintiff_duplicates_fold_non_ascii_case(database_url, conn, tenants, tmp_path):
    header = "File #,Plaintiff,Address,ZIP\r\n"
    rows = ["CV-1,Café Ünited,Straße 1,10001", "CV-2,CAFÉ ÜNITED,STRASSE 1,10001"]
    importer = Importer(database_url, conn, tmp_path)
    tenant = tenants.user("unicode-plaintiffs").tenant_id
    batch = importer.run(tenant, (header + "\r\n".join(rows)).encode(), "plaintiffs")
    assert (batch["status"], batch["rows_duplicate"]) == ("completed", 1)
    assert conn.execute("SELECT count(*) AS n FROM plaintiffs WHERE tenant_id = %s",
                        (tenant,)).fetchone()["n"] == 1


def test_python_and_postgres_fold_keys_alike(conn):
    # The Python key (validation, duplicates) and the SQL key (the unique column) are one
    # definition: a key Python finds non-empty is never empty in Postgres.
    texts = [t for t in REAL_WORLD if "\x00" not in t] + [
        "ǰ", "ẞ", "ŉ", "ﬀ", "ſ", "K", "Ω", "Å", "ｶ", "Ⅻ", "①", "𝐀𝐁𝐂", "ǅ", "ᾈ", date.today().isoformat()]
    from shared.contracts import normalise as n

    for text in texts:
        sql = conn.execute("SELECT records_case_key(%s) AS k", (text,)).fetchone()["k"]
        assert sql == n.case_number_key(text), text
