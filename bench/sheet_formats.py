"""Spreadsheet extraction rows/s with cells shown in their number formats (ADR 0296).

    python bench/sheet_formats.py                # 100,000 rows x 8 columns, XLSX and XLS
    python bench/sheet_formats.py --rows 20000

Writes a workbook whose numeric columns carry real formats (`#,##0.00`, `0.00%`, `0.00E+00`,
`d-mmm-yy`, `h:mm AM/PM`, `"$"#,##0.00_);[Red]("$"#,##0.00)`) beside text and General
columns, and times the product's reader (worker/pipeline/formats/sheets.read_workbook) against
the baseline: the same reader with stored values only, as before ADR 0296 (calamine's values,
no styles read). An XLS has at most 65,536 rows. Prints the load beside each figure.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from worker.pipeline.formats import cellformats, common, sheets  # noqa: E402

FORMATS = ["#,##0.00", "0.00%", "0.00E+00", "d-mmm-yy", "h:mm AM/PM",
           '"$"#,##0.00_);[Red]\\("$"#,##0.00\\)']


def write_xlsx(path: Path, rows: int) -> None:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path), {"constant_memory": True})
    sheet = book.add_worksheet("data")
    styles = [book.add_format({"num_format": f}) for f in FORMATS]
    sheet.write_row(0, 0, ["id", "name", *FORMATS])
    base = datetime.datetime(2007, 5, 17, 6, 15)
    for r in range(1, rows + 1):
        sheet.write_number(r, 0, r)
        sheet.write_string(r, 1, f"item {r}")
        values = [r * 1.37, r / 997, r * 12345.6789, base + datetime.timedelta(days=r % 9000),
                  base + datetime.timedelta(minutes=r), -r * 0.99 if r % 2 else r * 0.99]
        for c, (value, style) in enumerate(zip(values, styles, strict=True), start=2):
            if isinstance(value, datetime.datetime):
                sheet.write_datetime(r, c, value, style)
            else:
                sheet.write_number(r, c, value, style)
    book.close()


def write_xls(source: Path, path: Path) -> bool:
    """The XLSX saved as XLS by LibreOffice, when it is installed."""
    import shutil
    import subprocess

    office = shutil.which("soffice") or shutil.which("libreoffice")
    if office is None:
        return False
    subprocess.run([office, "--headless", "--convert-to", "xls", "--outdir", str(path.parent),
                    str(source)], check=True, capture_output=True, timeout=600)
    return path.exists()


def timed(path: Path, kind: str, rows: int, formatted: bool) -> tuple[float, str]:
    limits = common.Limits()
    start = time.perf_counter()
    if formatted:
        doc = sheets.read_workbook(path, kind, limits)
    else:
        with mock.patch.object(cellformats, "open_formats", return_value=None):
            doc = sheets.read_workbook(path, kind, limits)
    elapsed = time.perf_counter() - start
    return rows / elapsed, doc.blocks[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        xlsx = Path(tmp) / "formats.xlsx"
        write_xlsx(xlsx, args.rows)
        cases = [("xlsx", xlsx, args.rows)]
        xls = Path(tmp) / "formats.xls"
        if args.rows <= 65_000 and write_xls(xlsx, xls):
            cases.append(("xls", xls, args.rows))
        for kind, path, rows in cases:
            for label, formatted in (("stored values (baseline)", False),
                                     ("formatted (product)", True)):
                load = os.getloadavg()[0]
                speed, text = timed(path, kind, rows, formatted)
                sample = text.split("\n")[-1][:80]
                print(f"{kind:5} {label:26} {speed:10,.0f} rows/s  load {load:.2f}  "
                      f"last row: {sample}")


if __name__ == "__main__":
    main()
