"""Real ad-platform exports, kept as downloaded (tests/data/ad_exports/README.md names each one's
repository, path and commit), import with sums that match the file (issue 20).

Each file goes through the worker's own handler and records pipeline against the real Postgres
(tests/support/records_inproc.py). The expected totals are computed here, by hand, from the
file's bytes, without the product's parser: decode by the byte-order mark, split with the csv
module, skip the export's total and summary rows, add up the cells.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest

from tests.support.records_inproc import Importer

DATA = Path(__file__).parents[1] / "data" / "ad_exports"
# Meta's result types that count a conversion event, and its conversion objectives (by hand,
# from Ads Manager's words; the product has its own list in shared/contracts/ad_metrics.py).
META_CONVERSION_OBJECTIVES = {"OUTCOME_SALES", "OUTCOME_LEADS", "OUTCOME_APP_PROMOTION"}
META_CONVERSION_RESULTS = ("purchase", "adds to cart", "add to cart", "lead", "checkout",
                           "registration", "app install", "form_submit", "payment info")
META_NAMES = ("Campaign name", "Campaign ID", "Ad set name", "Ad set ID", "Ad name", "Ads",
              "Ad ID", "Age", "Gender", "Region", "Country", "Placement", "Platform",
              "Objective")


@dataclass
class Totals:
    rows: int
    spend: Decimal
    impressions: int | None
    clicks: int | None
    conversions: Decimal | None


def _text(path: Path) -> str:
    raw = path.read_bytes()
    if raw.startswith(codecs.BOM_UTF16_LE) or raw.startswith(codecs.BOM_UTF16_BE):
        return raw.decode("utf-16")
    return raw.decode("utf-8-sig")


def _number(cell: str) -> Decimal:
    cell = cell.strip().replace('"', "").replace(",", "")
    return Decimal(0) if cell in ("", "--") else Decimal(cell)


def _rows(path: Path, spend_header: str) -> tuple[list[str], list[list[str]]]:
    text = _text(path)
    first_lines = text.splitlines()[:6]
    delimiter = "\t" if any("\t" in line for line in first_lines) else ","
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    at = next(i for i, r in enumerate(rows) if any(c.startswith(spend_header) for c in r))
    return rows[at], [r for r in rows[at + 1:] if len([c for c in r if c.strip()]) > 1]


def google_totals(path: Path) -> Totals:
    header, rows = _rows(path, "Cost")
    col = {name: i for i, name in reversed(list(enumerate(header)))}
    records = [r for r in rows if not r[0].startswith("Total:")]
    return Totals(len(records), sum((_number(r[col["Cost"]]) for r in records), Decimal(0)),
                  int(sum(_number(r[col["Impr."]]) for r in records)),
                  int(sum(_number(r[col["Clicks"]]) for r in records)) if "Clicks" in col
                  else None,
                  sum((_number(r[col["Conversions"]]) for r in records), Decimal(0)))


def meta_records(path: Path) -> tuple[dict[str, int], list[list[str]]]:
    header, rows = _rows(path, "Amount spent")
    col = {name: i for i, name in enumerate(header)}
    names = [col[n] for n in META_NAMES if n in col]
    # Meta's summary row: every name and breakdown cell empty.
    return col, [r for r in rows if not names or any(r[i].strip() for i in names)]


def meta_conversion(row: list[str], col: dict[str, int]) -> bool:
    if "Objective" in col:
        return row[col["Objective"]] in META_CONVERSION_OBJECTIVES
    kind = row[col["Result type"]].lower() if "Result type" in col else ""
    return any(word in kind for word in META_CONVERSION_RESULTS)


def meta_totals(path: Path, leave_out: set[int] = frozenset()) -> Totals:  # type: ignore[assignment]
    col, records = meta_records(path)
    records = [r for i, r in enumerate(records) if i not in leave_out]
    spend = next(c for c in col if c.startswith("Amount spent"))
    clicks = "Link clicks" if "Link clicks" in col else "Clicks (all)" if "Clicks (all)" in col \
        else None
    conversions = sum((_number(r[col["Results"]]) for r in records
                       if "Results" in col and meta_conversion(r, col)), Decimal(0))
    return Totals(len(records), sum((_number(r[col[spend]]) for r in records), Decimal(0)),
                  int(sum(_number(r[col["Impressions"]]) for r in records)),
                  int(sum(_number(r[col[clicks]]) for r in records)) if clicks else None,
                  conversions)


def stored(conn, tenant_id) -> Totals:
    row = conn.execute(
        "SELECT count(*) AS n, COALESCE(sum(spend), 0) AS spend, sum(impressions) AS impressions,"
        " sum(clicks) AS clicks, COALESCE(sum(conversions), 0) AS conversions FROM ("
        " SELECT spend, impressions, clicks, conversions FROM daily_metrics WHERE tenant_id = %(t)s"
        " UNION ALL SELECT spend, impressions, clicks, conversions FROM period_metrics"
        " WHERE tenant_id = %(t)s) f", {"t": tenant_id}).fetchone()
    return Totals(row["n"], row["spend"], row["impressions"], row["clicks"], row["conversions"])


def codes(conn, batch_id) -> Counter[str]:
    return Counter({r["code"]: r["n"] for r in conn.execute(
        "SELECT code, count(*) AS n FROM import_row_errors WHERE batch_id = %s GROUP BY code",
        (batch_id,))})


@pytest.fixture
def importer(database_url, conn, tmp_path) -> Importer:
    return Importer(database_url, conn, tmp_path)


# (file, encoding read, delimiter, grain, (period start, end), how entities are keyed)
GOOGLE = [
    ("campaign-report-gbp-utf16.csv", "UTF-16LE with BOM", "tab", "period",
     ("2026-01-27", "2026-02-23"), "names"),
    ("campaign-report-gbp.csv", "UTF-8", "comma", "period", ("2026-01-27", "2026-02-23"),
     "names"),
    ("campaign-report-all-time-usd.csv", "UTF-8", "comma", "all_time", (None, None), "names"),
    ("campaign-report-all-time-one-campaign.csv", "UTF-8", "comma", "all_time", (None, None),
     "names"),
    ("campaign-report-inr.csv", "UTF-8", "comma", "period", ("2025-07-08", "2025-07-31"),
     "names"),
    ("campaign-report-eur-greek.csv", "UTF-8", "comma", "period", ("2026-03-27", "2026-04-23"),
     "names"),
    ("ad-group-report-all-time-utf16.csv", "UTF-16LE with BOM", "tab", "all_time", (None, None),
     "names"),
    ("ad-report-usd.csv", "UTF-8", "comma", "period", ("2026-01-20", "2026-01-21"), "names"),
]


@pytest.mark.parametrize(("name", "encoding", "delimiter", "grain", "period", "keys"), GOOGLE)
def test_google_export_imports_as_downloaded_with_the_files_sums(
        importer, conn, tenants, name, encoding, delimiter, grain, period, keys):
    # Given a Google Ads report exactly as downloaded (title lines, `--`, Total rows)
    path = DATA / "google" / name
    expected = google_totals(path)
    tenant = tenants.user(f"g-{name}").tenant_id

    # When it is imported
    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="google", name=name)

    # Then every row landed, with the file's own sums, and the batch says how it was read
    assert (batch["status"], batch["rows_invalid"]) == ("completed", 0), batch["rejection_reason"]
    got = stored(conn, tenant)
    assert (got.spend, got.impressions, got.conversions) == (
        expected.spend, expected.impressions, expected.conversions)
    assert got.clicks == expected.clicks  # None: the report has no Clicks column
    assert (batch["file_encoding"], batch["file_delimiter"], batch["decimal_separator_read"]) == (
        encoding, delimiter, ".")
    assert (batch["report_grain"], batch["entity_keys"]) == (grain, keys)
    assert tuple(d.isoformat() if d else None for d in (
        batch["report_period_start"], batch["report_period_end"])) == period
    # the Total rows were skipped with their reason, never invalid rows
    assert batch["rows_total"] == expected.rows
    assert batch["skipped_reasons"]["total row"] >= 1


def test_google_ad_report_sums_unnamed_ads_into_their_ad_group(importer, conn, tenants):
    path = DATA / "google" / "ad-report-usd.csv"
    tenant = tenants.user("g-ads").tenant_id
    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="google")
    # Responsive search ads have no name (`--`) and the report no Ad ID: each ad group's ads
    # are summed into that ad group's period, with a warning per row.
    assert codes(conn, batch["batch_id"])["AD_METRIC_UNNAMED_SUMMED"] == batch["rows_total"]
    facts = conn.execute("SELECT count(*) AS n, count(ad_id) AS ads FROM period_metrics "
                         "WHERE tenant_id = %s", (tenant,)).fetchone()
    header, rows = _rows(path, "Cost")
    campaign, group = header.index("Campaign"), header.index("Ad group")
    groups = {(r[campaign], r[group]) for r in rows if not r[0].startswith("Total:")}
    assert (facts["n"], facts["ads"]) == (len(groups), 0)


def test_a_column_repeated_with_the_same_value_is_read_once(importer, conn, tenants):
    # Google's ad group report writes `Currency code` twice.
    path = DATA / "google" / "ad-group-report-all-time-utf16.csv"
    header, _ = _rows(path, "Cost")
    assert header.count("Currency code") == 2
    tenant = tenants.user("g-adgroups").tenant_id
    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="google")
    assert batch["status"] == "completed" and "AD_METRIC_COLUMN_CONFLICT" not in codes(
        conn, batch["batch_id"])
    assert {r["currency"] for r in conn.execute(
        "SELECT currency FROM period_metrics WHERE tenant_id = %s", (tenant,))} == {"USD"}


# (file, grain, how entities are keyed)
META = [
    ("campaigns-period-idr.csv", "period", "names"),
    ("campaigns-daily-idr.csv", "day", "names"),
    ("campaigns-daily-by-age-gender-idr.csv", "day", "names"),
    ("ads-daily-ad-ids-idr.csv", "day", "ids_and_names"),
    ("account-daily-idr.csv", "day", None),
    ("account-by-placement-period-idr.csv", "period", None),
]


@pytest.mark.parametrize(("name", "grain", "keys"), META)
def test_meta_export_imports_as_downloaded_with_the_files_sums(importer, conn, tenants, name,
                                                               grain, keys):
    # Given a Meta Ads Manager export as downloaded (BOM, summary row, no ids or some)
    path = DATA / "meta" / name
    expected = meta_totals(path)
    tenant = tenants.user(f"m-{name}").tenant_id

    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="meta", name=name)

    assert (batch["status"], batch["rows_invalid"]) == ("completed", 0), batch["rejection_reason"]
    got = stored(conn, tenant)
    assert (got.spend, got.impressions, got.clicks, got.conversions) == (
        expected.spend, expected.impressions, expected.clicks, expected.conversions)
    assert (batch["file_encoding"], batch["file_delimiter"]) == ("UTF-8 with BOM", "comma")
    assert (batch["report_grain"], batch["entity_keys"]) == (grain, keys)
    assert batch["rows_total"] == expected.rows


def test_meta_breakdown_rows_are_slices_summed_into_one_fact(importer, conn, tenants):
    # Age × gender rows of one campaign and day are one fact's slices.
    path = DATA / "meta" / "campaigns-daily-by-age-gender-idr.csv"
    col, rows = meta_records(path)
    facts = {(r[col["Campaign name"]], r[col["Day"]]) for r in rows}
    tenant = tenants.user("m-slices").tenant_id
    importer.run(tenant, path.read_bytes(), "ad_metrics", platform="meta")
    assert stored(conn, tenant).rows == len(facts) < len(rows)


def test_meta_rows_that_repeat_a_key_are_errors_and_nothing_else_is_lost(importer, conn,
                                                                        tenants):
    # This export lists Ads × Age × Gender per campaign without the ad set: a few rows repeat
    # their whole key (two ad sets with the same ads). They cannot be told apart, so each is an
    # error (never the first one's spend for both); every other row's figures are stored.
    path = DATA / "meta" / "ads-by-age-gender-period-idr.csv"
    col, rows = meta_records(path)
    key = Counter((r[col["Campaign name"]], r[col["Ads"]], r[col["Age"]], r[col["Gender"]],
                   r[col["Objective"]]) for r in rows)
    repeated = {i for i, r in enumerate(rows) if key[(r[col["Campaign name"]], r[col["Ads"]],
                                                      r[col["Age"]], r[col["Gender"]],
                                                      r[col["Objective"]])] > 1}
    assert repeated
    expected = meta_totals(path, leave_out=repeated)
    tenant = tenants.user("m-repeats").tenant_id

    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="meta")

    assert (batch["status"], batch["rows_invalid"]) == ("completed", len(repeated))
    assert codes(conn, batch["batch_id"])["AD_METRIC_REPEATED_ROW"] == len(repeated)
    got = stored(conn, tenant)
    assert (got.spend, got.impressions, got.clicks, got.conversions) == (
        expected.spend, expected.impressions, expected.clicks, expected.conversions)
    # and the file's total is what was stored plus what the errors hold
    everything = meta_totals(path)
    held = meta_totals(path, leave_out=set(range(len(rows))) - repeated)
    assert got.spend + held.spend == everything.spend


def test_meta_export_without_data_fails_saying_so(importer, conn, tenants):
    path = DATA / "meta" / "campaigns-no-data.csv"
    tenant = tenants.user("m-empty").tenant_id
    batch = importer.run(tenant, path.read_bytes(), "ad_metrics", platform="meta")
    assert (batch["status"], batch["run_error_code"]) == ("failed", "BATCH_EMPTY_FILE")
    assert batch["rejection_reason"] == "The file contains no data rows, only 1 note."


# ── entities: names first, ids later ──────────────────────────────────────────────────────
def test_ids_seen_later_attach_to_the_entities_the_names_made(importer, conn, tenants):
    from tests.support import ad_exports

    facts = ad_exports.grid(2, 3, 6, 2)
    tenant = tenants.user("names-then-ids").tenant_id
    # Given a names-only Meta export (its default columns), imported
    first = importer.run(tenant, ad_exports.meta_download(facts), "ad_metrics", platform="meta")
    assert (first["status"], first["entity_keys"]) == ("completed", "names")
    counts = {t: conn.execute(f"SELECT count(*) AS n, count(external_id) AS ids FROM {t} "
                              "WHERE tenant_id = %s", (tenant,)).fetchone()
              for t in ("campaigns", "ad_sets", "ads")}
    assert {t: (c["n"], c["ids"]) for t, c in counts.items()} == {
        "campaigns": (2, 0), "ad_sets": (3, 0), "ads": (6, 0)}

    # When the same figures come again with the ID columns
    second = importer.run(tenant, ad_exports.meta_download(facts, ids=True), "ad_metrics",
                          platform="meta")

    # Then the ids attached to the same campaigns, ad sets and ads, and no fact doubled
    assert (second["status"], second["entity_keys"]) == ("completed", "ids")
    after = {t: conn.execute(f"SELECT count(*) AS n, count(external_id) AS ids FROM {t} "
                             "WHERE tenant_id = %s", (tenant,)).fetchone()
             for t in ("campaigns", "ad_sets", "ads")}
    assert {t: (c["n"], c["ids"]) for t, c in after.items()} == {
        "campaigns": (2, 2), "ad_sets": (3, 3), "ads": (6, 6)}
    assert (second["rows_inserted"], second["rows_unchanged"]) == (0, len(facts))
    assert stored(conn, tenant).rows == len(facts)
    # and a names-only export after that still finds them
    third = importer.run(tenant, ad_exports.meta_download(facts) + b"\n", "ad_metrics",
                         platform="meta")
    assert (third["status"], third["rows_inserted"]) == ("completed", 0)


def test_google_download_from_the_generator_reads_like_the_real_ones(importer, conn, tenants):
    # The generator (tests/support/ad_exports.py) writes what the real files hold: UTF-16,
    # tabs, title lines with the range, `Currency code` twice, a Total row.
    from tests.support import ad_exports

    facts = ad_exports.grid(2, 4, 4, 3)
    tenant = tenants.user("generated-google").tenant_id
    batch = importer.run(tenant, ad_exports.google_download(facts), "ad_metrics",
                         platform="google")
    assert (batch["status"], batch["file_encoding"], batch["report_grain"]) == (
        "completed", "UTF-16LE with BOM", "day")
    assert stored(conn, tenant).spend == sum(Decimal(f.spend) for f in facts)


# ── issue 31: real files found wrong from outside ──────────────────────────────────────────
REPRODUCED = DATA / "reproduced"


@pytest.mark.parametrize("name", ["search-keyword-report-cad-utf16.csv",
                                  "search-terms-report-cad-utf16.csv"])
def test_a_google_keyword_or_search_terms_report_is_refused_once_with_googles_steps(
        importer, conn, tenants, name):
    # Given a Google keyword or search-terms report as downloaded (rows below the ad groups)
    tenant = tenants.user(f"g-below-{name[:12]}").tenant_id

    # When it is imported
    batch = importer.run(tenant, (DATA / "google" / name).read_bytes(), "ad_metrics",
                         platform="google", name=name)

    # Then the file is refused once, at batch level, with steps that fit Google (no row
    # errors, no Meta advice), and nothing was stored
    assert (batch["status"], batch["run_error_code"]) == ("failed", "BATCH_REPORT_UNSUPPORTED")
    assert "Segment → Time → Day" in batch["rejection_reason"]
    assert "Meta" not in batch["rejection_reason"]
    assert codes(conn, batch["batch_id"]) == Counter({"BATCH_REPORT_UNSUPPORTED": 1})
    assert stored(conn, tenant).rows == 0


def test_a_device_segmented_google_report_skips_each_segments_totals(importer, conn, tenants):
    # Given a campaign report segmented by Device: `Computers,Total: Display` rows follow
    # each segment (the segment's value first, the total's name after it)
    tenant = tenants.user("g-device").tenant_id
    batch = importer.run(tenant, (REPRODUCED / "google-campaigns-by-device.csv").read_bytes(),
                         "ad_metrics", platform="google")

    # Then every total row was skipped (none is an invalid row), and the devices of each
    # campaign are slices of its period, summed
    assert (batch["status"], batch["rows_invalid"], batch["rows_total"]) == ("completed", 0, 6)
    assert batch["skipped_reasons"] == {"total row": 7}
    got = stored(conn, tenant)
    assert (got.rows, got.spend, got.impressions, got.clicks, got.conversions) == (
        2, Decimal("301.60"), 49_220, 343, Decimal("13.50"))


def test_a_plain_total_row_is_skipped_as_the_exports_total(importer, conn, tenants):
    # Given a TikTok export whose total row is `Total,,26.45,…` (three data rows: one total
    # row invalid would be 25 % of them, past the default budget)
    tenant = tenants.user("t-total").tenant_id
    batch = importer.run(tenant, (REPRODUCED / "tiktok-campaigns-by-day.csv").read_bytes(),
                         "ad_metrics", platform="tiktok")
    assert (batch["status"], batch["rows_total"], batch["rows_invalid"]) == ("completed", 3, 0)
    assert batch["skipped_reasons"] == {"total row": 1}
    got = stored(conn, tenant)
    assert (got.rows, got.spend, got.impressions) == (3, Decimal("26.45"), 4075)


def test_an_adwords_title_names_the_reports_range(importer, conn, tenants):
    # Given a 2016 AdWords ad report: `Ad report (Oct 25, 2016-Oct 31, 2016)` above the
    # header, no Day column, `Total - …` rows and a plain `Total` row at the end
    tenant = tenants.user("g-adwords").tenant_id
    batch = importer.run(tenant, (REPRODUCED / "adwords-2016-ad-report.csv").read_bytes(),
                         "ad_metrics", platform="google")

    # Then the rows are that week's period, and the totals were skipped
    assert (batch["status"], batch["rows_total"], batch["rows_invalid"]) == ("completed", 5, 0)
    assert (batch["report_grain"], batch["report_period_start"].isoformat(),
            batch["report_period_end"].isoformat()) == ("period", "2016-10-25", "2016-10-31")
    assert batch["skipped_reasons"] == {"total row": 4}
    got = stored(conn, tenant)
    assert (got.rows, got.spend, got.clicks, got.impressions) == (5, Decimal("29.42"), 69, 9497)
