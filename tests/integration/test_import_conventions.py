"""Any CSV people make (issue 20): the delimiter from the header, the decimal convention from
the file (or the upload), any encoding with a byte-order mark or recognisable UTF-16; never
`1.234,56` read as 1.23. Through the worker's own handler on the real Postgres."""

from __future__ import annotations

import codecs
from decimal import Decimal

import pytest

from tests.support.records_inproc import Importer

HEADER = ["File #", "Plaintiff", "Defendant", "Amount", "Entry Date"]


def judgments_file(rows: list[list[str]], delimiter: str = ",") -> str:
    return "\r\n".join(delimiter.join(r) for r in [HEADER, *rows]) + "\r\n"


def amounts(conn, tenant_id) -> dict[str, Decimal]:
    return {r["case_number"]: r["amount"] for r in conn.execute(
        "SELECT case_number, amount FROM judgments WHERE tenant_id = %s", (tenant_id,))}


@pytest.fixture
def importer(database_url, conn, tmp_path) -> Importer:
    return Importer(database_url, conn, tmp_path)


@pytest.mark.parametrize(("delimiter", "name"), [(",", "comma"), (";", "semicolon"),
                                                  ("\t", "tab"), ("|", "pipe")])
def test_the_delimiter_is_the_one_the_header_is_split_by(importer, conn, tenants, delimiter,
                                                         name):
    tenant = tenants.user(f"delim-{name}").tenant_id
    text = judgments_file([["CV-1", "Acme, Inc.", "Bob", "10", "2024-01-15"]], delimiter) \
        if delimiter != "," else judgments_file([["CV-1", '"Acme, Inc."', "Bob", "10",
                                                   "2024-01-15"]])
    batch = importer.run(tenant, text.encode(), "judgments")
    assert (batch["status"], batch["file_delimiter"]) == ("completed", name)
    assert conn.execute("SELECT plaintiff_name FROM judgments WHERE tenant_id = %s",
                        (tenant,)).fetchone()["plaintiff_name"] == "Acme, Inc."


def test_a_file_whose_delimiter_cannot_be_told_fails_saying_so(importer, tenants):
    tenant = tenants.user("delim-unknown").tenant_id
    batch = importer.run(tenant, b"File # Plaintiff Defendant Amount\nCV-1 Acme Bob 10\n",
                         "judgments")
    assert (batch["status"], batch["run_error_code"]) == ("failed", "BATCH_DELIMITER_UNKNOWN")
    assert "delimiter cannot be told" in batch["rejection_reason"]


def test_a_european_excel_file_reads_decimal_commas_never_as_something_else(importer, conn,
                                                                            tenants):
    # Semicolons, decimal commas and dots grouping thousands: `1.234,56` is 1234.56.
    tenant = tenants.user("decimal-comma").tenant_id
    text = judgments_file([["CV-1", "A", "B", "1.234,56", "2024-01-15"],
                           ["CV-2", "A", "B", "12,5", "2024-01-15"],
                           ["CV-3", "A", "B", "1.000", "2024-01-15"]], ";")
    batch = importer.run(tenant, text.encode("cp1252"), "judgments")
    assert (batch["status"], batch["decimal_separator_read"]) == ("completed", ",")
    assert amounts(conn, tenant) == {"CV-1": Decimal("1234.56"), "CV-2": Decimal("12.50"),
                                     "CV-3": Decimal("1000.00")}


def test_values_that_read_two_ways_are_row_errors_until_the_upload_names_the_convention(
        importer, conn, tenants):
    # No value proves a convention: `1,234` is 1234 or 1.234, so each is refused with a code.
    text = judgments_file([["CV-1", "A", "B", '"1,234"', "2024-01-15"],
                           ["CV-2", "A", "B", '"5,000"', "2024-01-15"],
                           ["CV-3", "A", "B", "7", "2024-01-15"]]).encode()
    tenant = tenants.user("decimal-unknown").tenant_id
    batch = importer.run(tenant, text, "judgments", threshold="70")
    assert (batch["status"], batch["rows_invalid"], batch["decimal_separator_read"]) == (
        "completed", 2, None)
    assert {r["code"] for r in conn.execute(
        "SELECT code FROM import_row_errors WHERE batch_id = %s AND severity = 'critical'",
        (batch["batch_id"],))} == {"JUDGMENT_AMOUNT_AMBIGUOUS"}
    # and with decimal_separator named, the same file reads as the upload says
    other = tenants.user("decimal-named").tenant_id
    named = importer.run(other, text, "judgments", decimal_separator=",")
    assert (named["status"], named["decimal_separator_read"]) == ("completed", ",")
    assert amounts(conn, other) == {"CV-1": Decimal("1.23"), "CV-2": Decimal("5.00"),
                                    "CV-3": Decimal("7.00")}


def test_an_ambiguous_value_under_the_chosen_convention_is_a_row_error(importer, conn, tenants):
    # `1,2,3` and ` 12 34 ` are no number under `.` either: refused, not read as 123 or 1234.
    text = judgments_file([["CV-1", "A", "B", '"1,2,3"', "2024-01-15"],
                           ["CV-2", "A", "B", " 12 34 ", "2024-01-15"],
                           ["CV-3", "A", "B", "10.50", "2024-01-15"]]).encode()
    tenant = tenants.user("decimal-bad").tenant_id
    batch = importer.run(tenant, text, "judgments", threshold="70")
    assert (batch["status"], batch["rows_invalid"], batch["decimal_separator_read"]) == (
        "completed", 2, ".")
    assert amounts(conn, tenant) == {"CV-3": Decimal("10.50")}


@pytest.mark.parametrize(("encoding", "bom", "label"), [
    ("utf-16-le", codecs.BOM_UTF16_LE, "UTF-16LE with BOM"),
    ("utf-16-be", codecs.BOM_UTF16_BE, "UTF-16BE with BOM"),
    ("utf-32-le", codecs.BOM_UTF32_LE, "UTF-32LE with BOM"),
    ("utf-8", codecs.BOM_UTF8, "UTF-8 with BOM"),
    ("utf-16-le", b"", "UTF-16LE without BOM"),
    ("utf-16-be", b"", "UTF-16BE without BOM"),
    ("cp1252", b"", "cp1252"),
])
def test_any_unicode_encoding_with_a_bom_or_recognisable_utf16_reads_alike(
        importer, conn, tenants, encoding, bom, label):
    tenant = tenants.user(f"enc-{encoding}-{len(bom)}").tenant_id
    text = judgments_file([["CV-1", "Zoë Ærøskøbing", "Şükrü Işıklı" if "cp" not in encoding
                            else "Francois", "10", "2024-01-15"]], "\t")
    batch = importer.run(tenant, bom + text.encode(encoding), "judgments")
    assert (batch["status"], batch["file_encoding"]) == ("completed", label)
    assert conn.execute("SELECT plaintiff_name FROM judgments WHERE tenant_id = %s",
                        (tenant,)).fetchone()["plaintiff_name"] == "Zoë Ærøskøbing"
