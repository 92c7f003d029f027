"""Excel number formats rendered as Excel shows them (worker/pipeline/formats/numfmt.py,
ADR 0296): Apache POI's tables of format codes with the text Excel shows, the codes found in
real public workbooks, and properties over any value and any code text."""

from __future__ import annotations

import datetime
import decimal
import pathlib
import re
import zipfile

import pytest
import python_calamine
from hypothesis import given
from hypothesis import strategies as st

from worker.pipeline.formats import numfmt

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures" / "documents"
B = numfmt.BUILTIN


def render(code: str, value: object) -> str | None:
    render = numfmt.formatter(code)
    return render(value) if render else None


def _poi_cases() -> list[tuple[str, object, str]]:
    """(code, value, what Excel shows) from POI's sheets, less its torture tests of fraction
    codes with literals inside the fraction (`|#\\:#=/=?|`), which no real sheet carries."""
    cases = []
    for name in ("poi-NumberFormatTests.xlsx", "poi-DateFormatTests.xlsx"):
        book = python_calamine.CalamineWorkbook.from_path(str(FIXTURES / name))
        for shown, code, value, category in book.get_sheet_by_name("Tests").to_python()[1:]:
            if code and value != "" and "Fraction" not in category:
                cases.append((code, value, str(shown)))
    return cases


POI = _poi_cases()


def test_pois_tables_render_as_excel_shows_them():
    assert len(POI) > 150
    wrong = [(code, value, shown, render(code, value)) for code, value, shown in POI
             if " ".join((render(code, value) or numfmt.general(float(value))).split())
             != " ".join(shown.split())]
    assert wrong == []


# Codes from real public workbooks (tika's testEXCEL-formats and test-columnar, calamine's and
# POI's test files), with the text LibreOffice Calc or Excel shows for the stored value.
REAL = [
    (B[4], 1599.99, "1,599.99"), (B[4], -1599.99, "-1,599.99"),
    (B[8], 1599.99, "$1,599.99"), (B[8], -1599.99, "($1,599.99)"),
    (B[11], 198356388.0, "1.98E+08"), (B[11], -198356388.0, "-1.98E+08"),
    (B[9], 0.025, "3%"), (B[10], 0.025, "2.50%"), (B[10], 0.6666666666666666, "66.67%"),
    (B[12], 2.5, "2 1/2"), (B[13], 0.3125, "5/16"), (B[20], datetime.datetime(1992, 12, 28, 18, 15), "18:15"),
    (B[18], datetime.datetime(1992, 12, 28, 6, 15, 0, 687000), "6:15 AM"),
    (B[18], datetime.datetime(1992, 12, 28, 18, 15, 0, 703000), "6:15 PM"),
    (B[14], datetime.datetime(2009, 10, 3), "10/3/2009"),
    (B[15], datetime.date(2007, 5, 17), "17-May-07"),
    (B[22], datetime.datetime(2008, 1, 19, 4, 35), "1/19/2008 4:35"),
    ('0\\ "dollars and"\\ .00\\ "cents"', 19.99, "19 dollars and .99 cents"),
    ('"At"\\ h:mm\\ AM/PM\\ "on"\\ dddd\\ mmmm\\ d","\\ yyyy',
     datetime.datetime(2007, 5, 17, 4, 20), "At 4:20 AM on Thursday May 17, 2007"),
    ("[$-409]dd\\-mm\\-yyyy;@", datetime.date(1960, 1, 1), "01-01-1960"),
    ("ddmmmyy\\ hh:mm:ss", datetime.datetime(1960, 1, 1, 0, 0, 1), "01Jan60 00:00:01"),
    ("h:mm:ss;@", datetime.time(0, 0, 1), "0:00:01"),
    ("[hh]:mm:ss", datetime.timedelta(days=10, seconds=54610), "255:10:10"),
    ('[$-409]mmmm" "d", "yyyy', datetime.date(2021, 1, 1), "January 1, 2021"),
    ('[$-411]ggge"年"m"月"d"日";@', datetime.date(2021, 1, 1), "2021年1月1日"),
    (B[43], 0.0, "-"), (B[43], 1234.5, "1,234.50"), (B[43], -1234.5, "(1,234.50)"),
    ('0.0,,"M"', 12345678, "12.3M"), ("000\\-00\\-0000", 123456789, "123-45-6789"),
    (B[48], 12345, "12.3E+3"), (B[46], 1.5, "36:00:00"), ("0.00E+00", 9.999e5, "1.00E+06"),
    ("#,##0.00 [$€-407]", 5, "5.00 €"), ("yyyy-mm-dd", 40000.0, "2009-07-06"),
    ("0.00", 0.125, "0.13"), ("0.00", 1.005, "1.01"),  # half away from zero, as Excel
]


@pytest.mark.parametrize(("code", "value", "shown"), REAL)
def test_real_codes(code, value, shown):
    assert render(code, value) == shown


def test_general_and_text_codes_leave_the_value_to_the_caller():
    assert numfmt.formatter("General") is None and numfmt.formatter("@") is None
    assert numfmt.general(0.1 + 0.2) == "0.3" and numfmt.general(1234567890123451.0) == \
        "1234567890123451"


def test_what_it_cannot_render_keeps_the_stored_value():
    assert render("[<100]0;0.00", 5) is None  # conditional sections
    assert render("d-mmm-yy", -3.0) is None  # no negative dates in Excel
    assert render("#,##0.00", "text") is None and render("0.00", True) is None


def test_a_1904_workbook_counts_days_from_1904():
    assert numfmt.formatter("yyyy-mm-dd", True)(42735.0) == "2021-01-01"
    # calamine hands dates already converted: the epoch must not be added twice
    assert numfmt.formatter("yyyy-mm-dd", True)(datetime.date(2021, 1, 1)) == "2021-01-01"


# ── properties ───────────────────────────────────────────────────────────────────────────
_CODE_PARTS = st.sampled_from(["0", "#", "?", ".", ",", "%", "E+", "E-", "/", ";", "@", "\\",
                               '"', "_", "*", "[", "]", "$", "-", "y", "m", "d", "h", "s",
                               "AM/PM", "A/P", "General", "[h]", "[Red]", "[<10]", " ", "e",
                               "g", "00", "é"])
_VALUES = (st.floats(allow_nan=True, allow_infinity=True)
           | st.integers(min_value=-10**30, max_value=10**30)
           | st.datetimes(min_value=datetime.datetime(1900, 3, 1))
           | st.times() | st.timedeltas(min_value=datetime.timedelta(0)) | st.text(max_size=5))


@given(st.lists(_CODE_PARTS, max_size=14).map("".join) | st.text(max_size=20), _VALUES)
def test_any_code_and_any_value_render_or_decline_never_raise(code, value):
    render = numfmt.formatter(code)
    shown = render(value) if render else None
    assert shown is None or isinstance(shown, str)


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_grouped_two_places_reads_back_as_the_value_rounded_half_away(value):
    shown = render("#,##0.00", value)
    expected = decimal.Decimal(f"{value:.15g}").quantize(decimal.Decimal("0.01"),
                                                        rounding=decimal.ROUND_HALF_UP)
    assert re.fullmatch(r"-?\d{1,3}(,\d{3})*\.\d\d", shown)
    assert decimal.Decimal(shown.replace(",", "")) == expected or expected == 0


@given(st.floats(min_value=1e-200, max_value=1e200))
def test_scientific_reads_back_within_its_precision(value):
    shown = render("0.00E+00", value)
    assert re.fullmatch(r"\d\.\d\dE[+-]\d{2,}", shown)
    assert abs(float(shown) - value) <= 0.005 * 10 ** int(shown.split("E")[1]) * 1.0001


@given(st.datetimes(min_value=datetime.datetime(1900, 3, 1),
                    max_value=datetime.datetime(9999, 12, 31, 23, 59, 59)))
def test_an_iso_date_code_shows_the_date_to_the_second(moment):
    rounded = (moment + datetime.timedelta(microseconds=500_000)).replace(microsecond=0)
    shown = render("yyyy-mm-dd hh:mm:ss", moment)
    if rounded.year <= 9999:
        assert shown == rounded.strftime("%Y-%m-%d %H:%M:%S")


def test_cell_styles_are_found_in_any_attribute_order_and_prefix(tmp_path):
    from worker.pipeline.formats import cellformats

    path = tmp_path / "sheet.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("s.xml", '<x:worksheet xmlns:x="m"><x:sheetData>'
                         '<x:row r="2"><x:c t="n" s="1" r="B2"><x:v>1</x:v></x:c>'
                         '<x:c r="C2"><x:v>2</x:v></x:c></x:row><x:row r="5">'
                         '<x:col s="1"/><x:c r="AA5" s="0"/><x:c r="AB5" s="1"/></x:row>'
                         '</x:sheetData></x:worksheet>')
    styles = [None, numfmt.formatter("0.00")]
    with zipfile.ZipFile(path) as archive:
        rows = list(cellformats._xlsx_rows(archive, "s.xml", styles))
    assert rows == [(1, {1: styles[1]}), (4, {27: styles[1]})]
