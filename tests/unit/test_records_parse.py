"""The parse stage on real exports and hostile files (worker/records/parse.py, issue 20): what
it reads, what it skips and why, and what fails a file as a whole. No database."""

from __future__ import annotations

import codecs
from pathlib import Path

import pytest

from shared import contracts
from shared.contracts import ad_metrics
from worker.records import parse

DATA = Path(__file__).parents[1] / "data" / "ad_exports"


def read(path: Path, contract: contracts.Contract, file_format: str = "csv"):
    with parse.Reader(path, contract, file_format) as reader:
        rows = list(reader.rows())
    return reader, rows


def test_googles_excel_csv_is_read_with_its_title_period_and_totals_skipped():
    reader, rows = read(DATA / "google" / "campaign-report-gbp-utf16.csv",
                        ad_metrics.for_platform("google"))
    parsed = reader.parsed
    assert (parsed.encoding, parsed.delimiter, parsed.decimal) == ("UTF-16LE with BOM", "\t",
                                                                     ".")
    assert parsed.header[:2] == ("Campaign status", "Campaign")
    assert [c for c in rows[0][1] if c][:2] == ["Enabled", "Office Fruit Campaign"]
    assert dict(parsed.skipped) == {"total row": 2}
    assert str(parsed.match.context["period"]) == \
        "(datetime.date(2026, 1, 27), datetime.date(2026, 2, 23))"


def test_metas_summary_row_is_skipped_and_a_file_of_only_furniture_is_empty(tmp_path):
    reader, rows = read(DATA / "meta" / "campaigns-period-idr.csv",
                        ad_metrics.for_platform("meta"))
    assert dict(reader.parsed.skipped) == {"summary row": 1} and len(rows) == 10
    with pytest.raises(parse.BatchRejected) as refused:
        read(DATA / "meta" / "campaigns-no-data.csv", ad_metrics.for_platform("meta"))
    assert refused.value.batch_code == "BATCH_EMPTY_FILE"
    assert str(refused.value.detail) == "The file contains no data rows, only 1 note."


def test_a_report_without_a_day_or_a_range_is_refused_with_the_platforms_steps(tmp_path):
    path = tmp_path / "no-day.csv"
    path.write_text("Campaign name,Amount spent (USD)\nSpring,10.00\n", encoding="utf-8")
    with pytest.raises(parse.BatchRejected) as refused:
        read(path, ad_metrics.for_platform("meta"))
    assert refused.value.batch_code == "BATCH_NO_REPORT_DATE"
    assert "Breakdown → By time → Day" in refused.value.detail


@pytest.mark.parametrize(("encoding", "label"), [("utf-16-be", "UTF-16BE without BOM"),
                                                 ("utf-16-le", "UTF-16LE without BOM")])
def test_utf16_without_a_bom_is_recognised(tmp_path, encoding, label):
    path = tmp_path / "j.csv"
    path.write_bytes("File #;Plaintiff;Defendant;Amount;Entry Date\r\n"
                     "CV-1;Zoë;Bob;1,5;2024-01-15\r\n".encode(encoding))
    reader, rows = read(path, contracts.JUDGMENTS)
    assert (reader.parsed.encoding, reader.parsed.delimiter, reader.parsed.decimal) == (
        label, ";", ",")
    assert rows[0][1][1] == "Zoë"


def test_raw_rows_are_bounded_and_storable(tmp_path):
    path = tmp_path / "wide.csv"
    header = ["File #", "Plaintiff", "Defendant", "Amount", "Entry Date",
              *(f"x{i}" for i in range(300))]
    cells = ["CV-1", "A\x00B", "C", "1", "2024-01-15", *(["y" * 20_000] * 300)]
    path.write_text(",".join(header) + "\n" + ",".join(cells) + "\n", encoding="utf-8")
    _, [(_, _, raw)] = read(path, contracts.JUDGMENTS)
    assert raw["Plaintiff"] == "A\ufffdB"
    assert len(raw) == parse.RAW_COLUMNS + 1 and raw["…"] == "105 more cells"
    assert raw["x0"].endswith("[10,000 more characters]")


def test_a_json_line_that_is_no_object_is_that_rows_error(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"File #": "CV-1", "Plaintiff": "A"}\n[1, 2]\n"\\ud800"\n', encoding="utf-8")
    reader, rows = read(path, contracts.PLAINTIFFS, "jsonl")
    assert [r[1] is contracts.UNREADABLE for r in rows] == [False, True, True]
    result = contracts.validate_row(contracts.PLAINTIFFS, rows[1][1], reader.parsed.match, 2)
    assert [i.code for i in result.errors] == ["PLAINTIFF_ROW_UNREADABLE"]


def test_a_header_a_delimiter_cannot_split_fails_the_file(tmp_path):
    path = tmp_path / "j.csv"
    path.write_text("File # Plaintiff Defendant\nCV-1 A B\n", encoding="utf-8")
    with pytest.raises(parse.BatchRejected) as refused:
        read(path, contracts.JUDGMENTS)
    assert refused.value.batch_code == "BATCH_DELIMITER_UNKNOWN"


def test_bom_detection_prefers_utf32_over_utf16(tmp_path):
    path = tmp_path / "j.csv"
    path.write_bytes(codecs.BOM_UTF32_LE + "File #,Plaintiff,Defendant,Amount,Entry Date\n"
                     "CV-1,A,B,1,2024-01-15\n".encode("utf-32-le"))
    reader, rows = read(path, contracts.JUDGMENTS)
    assert reader.parsed.encoding == "UTF-32LE with BOM" and rows[0][1][0] == "CV-1"
