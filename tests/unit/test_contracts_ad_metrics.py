"""The ad_metrics contract: each platform's export as people download it (title lines, total
rows, `--`, currency in the header), read through the worker's parser; the normalisers; every
row rule's code (docs/decisions/0145)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from shared import contracts, errors
from shared.contracts import ad_metrics as am
from shared.contracts import normalise as n
from worker.records import parse

CANONICAL = ("campaign_external_id", "campaign_name", "ad_set_external_id", "ad_set_name",
             "ad_external_id", "ad_name", "metric_date", "spend", "impressions", "clicks",
             "conversions", "currency")


def read(tmp_path: Path, platform: str, text: str | bytes, file_format: str = "csv",
         ) -> tuple[parse.Reader, list[contracts.RowResult]]:
    """The file through parse.Reader and validate_row, as the worker reads it."""
    path = tmp_path / f"export.{file_format}"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    contract = am.for_platform(platform)
    results = []
    with parse.Reader(path, contract, file_format) as reader:
        for number, cells, _raw in reader.rows():
            assert reader.parsed is not None
            results.append(contracts.validate_row(contract, cells, reader.parsed.match, number))
    return reader, results


def csv_text(rows: Sequence[Sequence[Any]]) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue()


def codes_of(result: contracts.RowResult) -> tuple[set[str], set[str]]:
    return {i.code for i in result.errors}, {i.code for i in result.warnings}


# ── realistic exports, one per platform ───────────────────────────────────────────────────
META_HEADER = ["Campaign name", "Campaign ID", "Ad set name", "Ad set ID", "Ad name", "Ad ID",
               "Day", "Amount spent (EUR)", "Impressions", "Reach", "Clicks (all)",
               "CTR (all)", "Results", "Result indicator", "Reporting starts",
               "Reporting ends"]


def meta_export(days: int = 3, ads: int = 4) -> str:
    rows: list[list[Any]] = [META_HEADER]
    for d in range(days):
        day = (date(2024, 3, 1) + timedelta(days=d)).isoformat()
        for a in range(ads):
            rows.append([f"Spring sale {a % 2}", f"12021000000000000{a % 2}",
                         f"Adults {a}", f"1202100000000010{a}", f"Video {a}",
                         f"12021000000000100{a}", day, f"{1000 + a + d * 10:,.2f}",
                         f"{20000 + a:,}", "15000", f"{300 + a}", "1.52%", str(a),
                         "actions:offsite_conversion.fb_pixel_purchase", day, day])
    return csv_text(rows)


def test_meta_export_reads_every_row_with_the_currency_of_its_spend_header(tmp_path):
    reader, results = read(tmp_path, "meta", meta_export())
    assert len(results) == 12 and all(r.valid and not r.warnings for r in results)
    first = results[0].values
    assert {k: first[k] for k in CANONICAL} == {
        "campaign_external_id": "120210000000000000", "campaign_name": "Spring sale 0",
        "ad_set_external_id": "12021000000000100", "ad_set_name": "Adults 0",
        "ad_external_id": "120210000000001000", "ad_name": "Video 0",
        "metric_date": date(2024, 3, 1), "spend": Decimal("1000.00"), "impressions": 20000,
        # A purchase result counts as a conversion (docs/decisions/0174).
        "clicks": 300, "conversions": Decimal(0), "currency": "EUR"}
    assert first["result_indicator"] == "actions:offsite_conversion.fb_pixel_purchase"
    assert results[-1].values["spend"] == Decimal("1023.00")
    assert results[-1].values["metric_date"] == date(2024, 3, 3)
    assert reader.parsed is not None
    # Columns outside the contract are ignored with a warning, never a failure.
    assert set(reader.parsed.match.extra) == {"Reach", "CTR (all)"}
    assert contracts.natural_key(am.META, first) == "\x1f".join([
        "2024-03-01", "i:120210000000000000", "i:12021000000000100",
        "i:120210000000001000"]) + "\x1e"


def test_meta_row_outside_its_reporting_range_is_refused(tmp_path):
    text = csv_text([META_HEADER, ["C", "1", "S", "2", "A", "3", "2024-03-05", "1", "1", "1",
                                   "1", "1%", "0", "", "2024-03-01", "2024-03-04"]])
    _reader, [result] = read(tmp_path, "meta", text)
    assert codes_of(result)[0] == {"AD_METRIC_METRIC_DATE_OUTSIDE_REPORTING_RANGE"}


def test_meta_currency_column_wins_over_the_header_unit(tmp_path):
    text = csv_text([["Campaign ID", "Day", "Amount spent (USD)", "Currency"],
                     ["1", "2024-03-01", "$5.00", "cad"], ["2", "2024-03-01", "$6.00", ""]])
    _reader, results = read(tmp_path, "meta", text)
    assert [r.values["currency"] for r in results] == ["CAD", "USD"]


def google_export() -> str:
    """A Google Ads UI download: two title lines, `--` cells, `Total:` rows at the end."""
    rows: list[list[Any]] = [
        ["Campaign report"],
        ["March 1, 2024 - March 3, 2024"],
        ["Day", "Campaign", "Campaign ID", "Ad group", "Ad group ID", "Currency code",
         "Cost", "Impr.", "Interactions", "Clicks", "Conversions", "Cost / conv."],
        ["2024-03-01", "Brand - Search", "20123456789", "Exact", "150123456789", "USD",
         "1,234.56", "10,250", "--", "812", "12.50", "98.76"],
        ["2024-03-02", "Brand - Search", "20123456789", "Exact", "150123456789", "USD",
         "0.00", "0", "--", "0", "0.00", "--"],
        ["2024-03-03", "Brand - Search", "20123456789", "Exact", "150123456789", "USD",
         "--", "--", "--", "--", "--", "--"],
        ["Total: Account", "--", "--", "--", "--", "USD", "1,234.56", "10,250", "--", "812",
         "12.50", "98.76"],
        ["Total: Search", "--", "--", "--", "--", "USD", "1,234.56", "10,250", "--", "812",
         "12.50", "98.76"],
    ]
    return csv_text(rows)


def test_google_export_skips_title_lines_and_totals_and_reads_dashes_as_zero(tmp_path):
    reader, results = read(tmp_path, "google", google_export())
    assert len(results) == 3 and all(r.valid for r in results)
    assert reader.parsed is not None and reader.parsed.header[0] == "Day"
    first = results[0].values
    assert (first["campaign_external_id"], first["ad_set_external_id"],
            first["ad_external_id"]) == ("20123456789", "150123456789", None)
    assert (first["spend"], first["impressions"], first["clicks"], first["conversions"],
            first["currency"]) == (Decimal("1234.56"), 10250, 812, Decimal("12.50"), "USD")
    # A day without delivery: every metric `--`, read as 0.
    assert {k: results[2].values[k] for k in ("spend", "impressions", "clicks",
                                               "conversions")} == {
        "spend": Decimal("0.00"), "impressions": 0, "clicks": 0, "conversions": Decimal(0)}


def test_google_excel_csv_utf16_tab_separated(tmp_path):
    text = google_export().replace(",", "\t").replace('"1\t234.56"', "1234.56") \
        .replace('"10\t250"', "10250")
    _reader, results = read(tmp_path, "google", text.encode("utf-16"))
    assert len(results) == 3
    assert results[0].values["spend"] == Decimal("1234.56")
    assert results[0].values["impressions"] == 10250


def test_google_header_too_far_down_fails_as_missing_column(tmp_path):
    text = csv_text([["title"]] * 6 + [["Day", "Campaign ID", "Cost"], ["2024-03-01", "1", "1"]])
    with pytest.raises(parse.BatchRejected) as rejected:
        read(tmp_path, "google", text)
    assert rejected.value.batch_code == "BATCH_MISSING_COLUMN"


def tiktok_export() -> str:
    rows: list[list[Any]] = [
        ["Campaign name", "Campaign ID", "Ad group name", "Ad group ID", "Ad name", "Ad ID",
         "Date", "Cost", "Impressions", "Clicks (destination)", "CTR (destination)",
         "Conversions", "Currency"],
        ["Total of 2 results", "-", "-", "-", "-", "-", "-", "30.00", "3000", "30", "1.00%",
         "3", "USD"],
        ["Launch", "1790000000000001", "18-24", "1790000000000101", "Hook A",
         "1790000000001001", "2024-03-01 00:00:00", "10.00", "1000", "10", "1.00%", "1",
         "USD"],
        ["Launch", "1790000000000001", "18-24", "1790000000000101", "Hook B",
         "1790000000001002", "2024-03-01 00:00:00", "20.00", "2000", "20", "1.00%", "2",
         "USD"],
    ]
    return csv_text(rows)


def test_tiktok_export_skips_its_total_row(tmp_path):
    _reader, results = read(tmp_path, "tiktok", tiktok_export())
    assert [r.values["ad_external_id"] for r in results] == ["1790000000001001",
                                                              "1790000000001002"]
    assert all(r.valid for r in results)
    assert results[1].values["metric_date"] == date(2024, 3, 1)
    assert results[1].values["spend"] == Decimal("20.00")
    assert [r.row for r in results] == [1, 2]


def test_json_lines_with_platform_names_and_canonical_names(tmp_path):
    lines = [{"Campaign ID": 120210000000000001, "Day": "2024-03-01",
              "Amount spent (GBP)": "£12.30", "Impressions": 100, "Clicks (all)": 3,
              "Results": 1.5},
             {"campaign_external_id": "120210000000000002", "metric_date": "2024-03-02",
              "spend": 4, "currency": "usd"}]
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    _reader, results = read(tmp_path, "meta", text, "jsonl")
    first, second = (r.values for r in results)
    # Results without an indicator or objective are no conversions (docs/decisions/0174).
    assert (first["campaign_external_id"], first["spend"], first["currency"],
            first["results"], first["conversions"]) == ("120210000000000001", Decimal("12.30"),
                                                        "GBP", Decimal("1.5"), None)
    # A metric the row does not have is no value, not 0.
    assert (second["spend"], second["currency"], second["impressions"]) == \
        (Decimal("4.00"), "USD", None)


def test_a_judgments_file_is_still_read_from_its_first_line(tmp_path):
    """Title lines and totals are the exports': the records contracts keep their header rule."""
    path = tmp_path / "j.csv"
    path.write_text("File #,Plaintiff,Defendant,Amount,Entry Date\n"
                    "Total,A,B,1,01/15/2024\n", encoding="utf-8")
    with parse.Reader(path, contracts.JUDGMENTS, "csv") as reader:
        rows = list(reader.rows())
    assert [r[1][0] for r in rows] == ["Total"]


# ── every platform's published mapping ────────────────────────────────────────────────────
@pytest.mark.parametrize(("platform", "headers"), [
    ("meta", {"campaign_external_id": "Campaign ID", "campaign_name": "Campaign name",
              "ad_set_external_id": "Ad set ID", "ad_set_name": "Ad set name",
              "ad_external_id": "Ad ID", "ad_name": "Ad name", "metric_date": "Day",
              "spend": "Amount spent (USD)", "impressions": "Impressions",
              "clicks": "Link clicks", "results": "Results",
              "result_indicator": "Result indicator"}),
    ("google", {"campaign_external_id": "Campaign ID", "campaign_name": "Campaign",
                "ad_set_external_id": "Ad group ID", "ad_set_name": "Ad group",
                "metric_date": "Day", "spend": "Cost", "impressions": "Impr.",
                "clicks": "Clicks", "conversions": "Conversions",
                "currency": "Currency code"}),
    ("tiktok", {"campaign_external_id": "Campaign ID", "campaign_name": "Campaign name",
                "ad_set_external_id": "Ad group ID", "ad_set_name": "Ad group name",
                "ad_external_id": "Ad ID", "ad_name": "Ad name", "metric_date": "Date",
                "spend": "Cost", "impressions": "Impressions", "clicks": "Clicks",
                "conversions": "Conversions", "currency": "Currency"}),
])
def test_platform_headers_name_the_canonical_fields(platform, headers):
    contract = am.for_platform(platform)
    match = contracts.match_header(contract, list(headers.values()))
    assert match.ok and not match.extra
    assert {f: list(headers)[p] for f, p in match.index.items()} == \
        {f: f for f in headers}


def test_sample_of_each_platform_validates():
    for platform in am.PLATFORMS:
        contract = am.for_platform(platform)
        rows = list(csv.reader(io.StringIO(contracts.sample_csv(contract))))
        match = replace(contracts.match_header(contract, rows[0]), decimal=".")
        result = contracts.validate_row(contract, rows[1], match)
        assert result.valid and not result.warnings, platform
        assert result.values["currency"] == "USD"


def test_unknown_platform_is_a_400_with_a_code():
    with pytest.raises(am.UnknownPlatform) as refused:
        am.for_platform("bing")
    assert refused.value.code == "unknown_platform"
    assert isinstance(refused.value, errors.InvalidRequest)  # gateway/errors.py: 400
    assert contracts.get("ad_metrics") is am.AD_METRICS


# ── normalisers ───────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("text", "value"), [
    # Each reads one way only, so under an unknown convention too (docs/decisions/0172).
    ("$1,234.56", Decimal("1234.56")), ("1.234,56 €", Decimal("1234.56")),
    ("1 234,56", Decimal("1234.56")), ("1\u00a0234,56", Decimal("1234.56")),
    ("1'234.50", Decimal("1234.50")), ("USD 12", Decimal(12)), ("US$5", Decimal(5)),
    ("12,5", Decimal("12.5")), ("12.5%", Decimal("0.125")), ("０.５", Decimal("0.5")),
    ("(12.00)", Decimal("-12.00")), ("-$100", Decimal(-100)), (".5", Decimal("0.5")),
    ("0.005", Decimal("0.005")), ("0,123", Decimal("0.123")),
])
def test_decimal_number(text, value):
    assert n.decimal_number(text) == value


@pytest.mark.parametrize(("text", "dot", "comma"), [
    ("1,234", Decimal(1234), Decimal("1.234")), ("1.234", Decimal("1.234"), Decimal(1234)),
    ("12.345", Decimal("12.345"), Decimal(12345)),
])
def test_a_value_that_reads_two_ways_is_ambiguous_until_the_file_says(text, dot, comma):
    assert n.decimal_number(text) is contracts.AMBIGUOUS and n.convention(text) is None
    assert (n.decimal_number(text, "."), n.decimal_number(text, ",")) == (dot, comma)


def test_the_chosen_convention_never_reads_a_value_as_something_else():
    # `1.234,56` is 1234.56 under `,` and no number under `.`: never 1.23.
    assert n.decimal_number("1.234,56", ",") == Decimal("1234.56")
    assert n.decimal_number("1.234,56", ".") is contracts.INVALID
    for text in ("1,2,3", " 12 34 ", "1,23,4"):
        assert n.decimal_number(text, ".") is contracts.INVALID
        assert n.decimal_number(text, ",") is contracts.INVALID


@pytest.mark.parametrize("text", ["1.2.3", "NaN", "Infinity", "12abc34", "1e400", "-", "$",
                                  "1,23,4", " 12 34 "])
def test_decimal_number_refuses(text):
    assert n.decimal_number(text) is contracts.INVALID


def test_money_rounds_half_up_and_counts_are_whole():
    assert n.money("12.345", ".") == Decimal("12.35")
    assert n.count("12,345", ".") == 12345 and n.count("12.0", ".") == 12
    assert n.count("12.5", ".") is contracts.INVALID and n.count("5%") is contracts.INVALID


@pytest.mark.parametrize("text", ["2024-03-01", "2024-03-01 00:00:00", "2024-03-01T00:00:00Z",
                                  "2024/03/01", "03/01/2024", "Mar 1, 2024", "March 1, 2024",
                                  "Friday, March 1, 2024", "1 Mar 2024", "01-Mar-2024"])
def test_report_dates(text):
    assert n.report_date(text) == date(2024, 3, 1)


@pytest.mark.parametrize("text", ["2024-02-30", "13/01/2024", "Mrz 1, 2024", "yesterday",
                                  "20240301"])
def test_report_dates_refused(text):
    assert n.report_date(text) is contracts.INVALID


@pytest.mark.parametrize(("title", "period"), [
    ("January 1, 2024 - January 31, 2024", (date(2024, 1, 1), date(2024, 1, 31))),
    ("27 January 2026 - 23 February 2026", (date(2026, 1, 27), date(2026, 2, 23))),
    # AdWords (issue 31): the range in brackets after the report's name, the dash unspaced
    ("Ad report (Oct 25, 2016-Oct 31, 2016)", (date(2016, 10, 25), date(2016, 10, 31))),
    ('"Campaign report (Nov 1, 2013-Nov 30, 2013)"', (date(2013, 11, 1), date(2013, 11, 30))),
    ("All time", n.ALL_TIME),
    ("Campaign report", None), ("Ad report (Oct 31, 2016-Oct 25, 2016)", None),
    ("Report (draft)", None)])
def test_report_periods_from_title_lines(title, period):
    assert n.report_period(title) == period


def test_external_ids():
    assert n.external_id("'120210000000000001") == "120210000000000001"
    assert n.external_id("123.0") == "123"
    assert n.external_id("1.20201E+17") is contracts.INVALID


# ── every rule's code ─────────────────────────────────────────────────────────────────────
BASE = am.AD_METRICS
GOOD = {"campaign_external_id": "1", "metric_date": "2024-03-01", "spend": "1.00",
        "impressions": "10", "clicks": "1", "conversions": "0", "currency": "USD"}


def check(**changes: str) -> contracts.RowResult:
    return contracts.validate_row(BASE, {**GOOD, **changes})


@pytest.mark.parametrize(("changes", "code"), [
    ({"campaign_external_id": "1.2E+17"}, "AD_METRIC_CAMPAIGN_EXTERNAL_ID_INVALID"),
    ({"campaign_external_id": "9" * 101}, "AD_METRIC_CAMPAIGN_EXTERNAL_ID_TOO_LONG"),
    ({"ad_set_external_id": "1.2E+17"}, "AD_METRIC_AD_SET_EXTERNAL_ID_INVALID"),
    ({"ad_external_id": "1.2E+17"}, "AD_METRIC_AD_EXTERNAL_ID_INVALID"),
    ({"metric_date": ""}, "AD_METRIC_DAY_MISSING"),
    ({"metric_date": "2024-13-01"}, "AD_METRIC_METRIC_DATE_INVALID"),
    ({"metric_date": "", "reporting_starts": "2024-03-05", "reporting_ends": "2024-03-01"},
     "AD_METRIC_REPORTING_RANGE_INVALID"),
    ({"spend": "1\x00"}, "AD_METRIC_TEXT_UNSTORABLE"),
    ({"metric_date": (date.today() + timedelta(days=3)).isoformat()},
     "AD_METRIC_METRIC_DATE_FUTURE"),
    ({"metric_date": "1999-12-31"}, "AD_METRIC_METRIC_DATE_TOO_OLD"),
    ({"spend": "abc"}, "AD_METRIC_SPEND_INVALID"),
    ({"spend": "-1"}, "AD_METRIC_SPEND_NEGATIVE"),
    ({"spend": "1000000000000"}, "AD_METRIC_SPEND_OUT_OF_RANGE"),
    ({"impressions": "1.5"}, "AD_METRIC_IMPRESSIONS_INVALID"),
    ({"impressions": "-1"}, "AD_METRIC_IMPRESSIONS_NEGATIVE"),
    ({"impressions": "99999999999999999999"}, "AD_METRIC_IMPRESSIONS_OUT_OF_RANGE"),
    ({"clicks": "x"}, "AD_METRIC_CLICKS_INVALID"),
    ({"clicks": "-2"}, "AD_METRIC_CLICKS_NEGATIVE"),
    ({"conversions": "x"}, "AD_METRIC_CONVERSIONS_INVALID"),
    ({"conversions": "-1"}, "AD_METRIC_CONVERSIONS_NEGATIVE"),
    ({"currency": "dollars"}, "AD_METRIC_CURRENCY_INVALID"),
])
def test_critical_rules(changes, code):
    result = check(**changes)
    assert not result.valid and code in codes_of(result)[0]


@pytest.mark.parametrize(("changes", "code"), [
    ({"campaign_name": "x" * 501}, "AD_METRIC_CAMPAIGN_NAME_TOO_LONG"),
    ({"ad_set_name": "x" * 501}, "AD_METRIC_AD_SET_NAME_TOO_LONG"),
    ({"ad_name": "x" * 501}, "AD_METRIC_AD_NAME_TOO_LONG"),
    ({"clicks": "11"}, "AD_METRIC_CLICKS_EXCEED_IMPRESSIONS"),
    ({"ad_external_id": "5"}, "AD_METRIC_AD_SET_EXTERNAL_ID_MISSING"),
])
def test_warning_rules(changes, code):
    result = check(**changes)
    assert result.valid and code in codes_of(result)[1]


def test_every_published_code_is_tested_or_a_batch_code():
    """Each AD_METRIC_ code the contract publishes follows <ENTITY>_<FIELD>_<REASON>."""
    published = {rule.code for contract in am.VARIANTS.values() for _f, rule in contract.rules()}
    assert all(code.startswith("AD_METRIC_") for code in published)
    assert "AD_METRIC_DUPLICATE" in published
    assert "AD_METRIC_METRIC_DATE_OUTSIDE_REPORTING_RANGE" in published
