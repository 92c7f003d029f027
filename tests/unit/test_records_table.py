"""The column reader (worker/records/table.py) reads every file as the per-row reader
(worker/records/parse.py) does: the same header, titles, delimiter and decimal separator, the
same rows with the same numbers and cells, the same furniture skipped and the same failures
(issue 31, docs/decisions/0271). Real exports, and files hypothesis writes with title lines,
totals, notes, blank and ragged rows, quoted line breaks, every line end and encoding."""

from __future__ import annotations

import codecs
import csv
import io
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared import contracts
from shared.contracts import ad_metrics
from worker.records import parse, table

DATA = Path(__file__).parents[1] / "data" / "ad_exports"


def per_row(path: Path, contract: contracts.Contract) -> tuple:
    try:
        with parse.Reader(path, contract, "csv") as reader:
            rows = [(n, list(cells)) for n, cells, _ in reader.rows()]
    except parse.BatchRejected as exc:
        return ("rejected", exc.batch_code, exc.detail)
    parsed = reader.parsed
    return (rows, parsed.header, parsed.match.context["titles"], parsed.delimiter,
            parsed.match.decimal, dict(parsed.skipped))


def by_columns(path: Path, contract: contracts.Contract, chunk_rows: int = 3) -> tuple:
    try:
        with table.Table(path, contract) as t:
            parsed = t.open()
            rows = []
            previous = 0
            for chunk in t.chunks(chunk_rows):
                assert chunk.previous == previous
                previous = chunk.last
                for record in chunk.cells.iter_rows(named=True):
                    n = record["row"]
                    cells = chunk.odd.get(n) or [record[f"c{i}"] for i in range(len(parsed.header))]
                    rows.append((n, cells))
            assert t.last == (rows[-1][0] if rows else 0)
    except parse.BatchRejected as exc:
        return ("rejected", exc.batch_code, exc.detail)
    return (rows, parsed.header, parsed.match.context["titles"], parsed.delimiter,
            parsed.match.decimal, dict(parsed.skipped))


def contract_of(path: Path) -> contracts.Contract:
    if path.parent.name == "reproduced":
        return ad_metrics.for_platform("tiktok" if "tiktok" in path.name else "google")
    return ad_metrics.for_platform(path.parent.name)


@pytest.mark.parametrize("path", sorted(DATA.glob("*/*.csv")), ids=lambda p: p.name)
def test_real_exports_read_alike(path):
    assert by_columns(path, contract_of(path)) == per_row(path, contract_of(path))


# ── files hypothesis writes ─────────────────────────────────────────────────────────────────
META = ad_metrics.for_platform("meta")
GOOGLE = ad_metrics.for_platform("google")
CELL = st.one_of(st.sampled_from(["", " ", "--", "Total", "Total: Account", "Total of 3",
                                  "Spring", "Zoë", "12.50", "1,234.56", "2024-01-15",
                                  "a\nb", 'say "hi"', "x,y", "\t", "\u2003", "\x1c"]),
                 st.text(max_size=6))
ROW = st.lists(CELL, min_size=0, max_size=7)


def render(contract: contracts.Contract, header: list[str], titles: list[str],
           rows: list[list[str]], delimiter: str, ending: str, encoding: str) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator=ending)
    for title in titles:
        writer.writerow([title])
    writer.writerow(header)
    writer.writerows(rows)
    text = out.getvalue()
    if encoding == "utf-16":
        return codecs.BOM_UTF16_LE + text.encode("utf-16-le")
    if encoding == "utf-8-sig":
        return codecs.BOM_UTF8 + text.encode()
    return text.encode(encoding, "replace")


@pytest.mark.parametrize("contract", [META, GOOGLE, contracts.JUDGMENTS],
                         ids=["meta", "google", "judgments"])
def test_any_file_reads_alike(tmp_path, contract):
    header = [col.headers[0] if col.headers else col.name for col in contract.columns][:6]
    if contract is contracts.JUDGMENTS:
        header = [col.headers[0] for col in contract.columns if col.required]

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(st.lists(ROW, max_size=25), st.sampled_from([",", ";", "\t"]),
           st.sampled_from(["\n", "\r\n", "\r"]), st.sampled_from(["utf-8", "utf-8-sig",
                                                                  "utf-16", "cp1252"]),
           st.lists(st.sampled_from(["Campaign report", "January 1, 2024 - January 31, 2024",
                                     ""]), max_size=2), st.integers(1, 4))
    def alike(rows, delimiter, ending, encoding, titles, chunk_rows):
        path = tmp_path / "f.csv"
        path.write_bytes(render(contract, header, titles, rows, delimiter, ending, encoding))
        assert by_columns(path, contract, chunk_rows) == per_row(path, contract)

    alike()


@pytest.mark.parametrize("data", [
    b"File #,Plaintiff,Defendant,Amount,Entry Date\nA1,P,D,5,01/15/2024\nA2,\"P,D,5,01/1\n",
    b"File #,Plaintiff,Defendant,Amount,Entry Date\n" + b"A1,P,D,5,01/15/2024\n" * 3
    + b'A2,"' + b"p" * (table.BLOCK_BYTES + 10) + b'",D,5,01/15/2024\n',
], ids=["open-quote", "record-longer-than-a-block"])
def test_files_pyarrow_cannot_read_alike_are_read_by_the_per_row_reader(tmp_path, data):
    path = tmp_path / "j.csv"
    path.write_bytes(data)
    got = by_columns(path, contracts.JUDGMENTS)
    assert got == per_row(path, contracts.JUDGMENTS)


def test_text_after_a_closing_quote_is_joined_to_the_cell(tmp_path):
    # The one difference from the csv module's strict mode, which refused the whole file
    # (docs/decisions/0271): pyarrow keeps `"P"x` as the cell `Px`.
    path = tmp_path / "j.csv"
    path.write_bytes(b'File #,Plaintiff,Defendant,Amount,Entry Date\nA1,"P"x,D,5,01/15/2024\n')
    assert by_columns(path, contracts.JUDGMENTS)[0] == [(1, ["A1", "Px", "D", "5", "01/15/2024"])]
    assert per_row(path, contracts.JUDGMENTS)[1] == "BATCH_MALFORMED_CSV"
