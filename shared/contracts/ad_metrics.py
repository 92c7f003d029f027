"""The `ad_metrics` contract: one day of one campaign / ad set / ad of an ad platform, read from
that platform's own daily export (staging-promotion-runtime.md, issue 13, docs/decisions/0145).

One field set, three readings: ``for_platform("meta" | "google" | "tiktok")`` is the contract
with that platform's column names, title lines, total rows and empty markers; the base
contract (``contracts.get("ad_metrics")``) reads the canonical field names, e.g. JSON lines a
script wrote. Every value the worker gets is normalised: ids as text, the day as a date, spend
and conversions as Decimal, impressions and clicks as int, the currency as an ISO code, from a
currency column or the header's unit (`Amount spent (USD)`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from shared import errors
from shared.contracts import normalise as n
from shared.contracts.model import (
    Column,
    Contract,
    NaturalKey,
    RowRule,
    Rule,
    Severity,
    Target,
    with_headers,
)

CRITICAL, WARNING = Severity.CRITICAL, Severity.WARNING
PLATFORMS = ("meta", "google", "tiktok")
NAME_LIMIT = 500
ID_LIMIT = 100
# NUMERIC(14,2)-sized: no day of one ad costs a trillion in any currency.
MAX_SPEND = Decimal("1000000000000")
MAX_COUNT = 2**63 - 1
# Ad platforms began daily reporting well after this; an older day is a misread date.
EARLIEST = date(2000, 1, 1)


class UnknownPlatform(errors.InvalidRequest):
    """The platform is not one the ad_metrics contract reads: meta, google or tiktok."""

    code = "unknown_platform"


def _too_long(limit: int) -> Callable[[str], bool]:
    return lambda value: len(value) > limit


def _id(field: str, label: str, *, required: bool = False) -> Column:
    upper = field.upper()
    return Column(
        field, (field,), f"The platform's id of the {label}, as text (digits kept exactly).",
        required=required, normalise=n.external_id,
        missing=Rule(f"AD_METRIC_{upper}_MISSING", CRITICAL,
                     f"The {label} id is required.") if required else None,
        invalid=Rule(f"AD_METRIC_{upper}_INVALID", CRITICAL,
                     f"The {label} id was rewritten as a number in scientific notation (e.g. "
                     "by a spreadsheet) and its digits are lost; export it again as text."),
        checks=(Rule(f"AD_METRIC_{upper}_TOO_LONG", CRITICAL,
                     f"The {label} id is longer than {ID_LIMIT} characters.",
                     broken=_too_long(ID_LIMIT)),))


def _name(field: str, label: str) -> Column:
    return Column(
        field, (field,), f"The {label}'s name as the platform shows it (spaces collapsed).",
        normalise=n.name,
        checks=(Rule(f"AD_METRIC_{field.upper()}_TOO_LONG", WARNING,
                     f"The {label} name is longer than {NAME_LIMIT} characters and was "
                     f"truncated to {NAME_LIMIT}.",
                     broken=_too_long(NAME_LIMIT), repair=lambda v: v[:NAME_LIMIT]),))


def _count(field: str, label: str) -> Column:
    upper = field.upper()
    return Column(
        field, (field,), f"{label}: a whole number, 0 or more; thousands separators allowed; "
        "empty is 0.", normalise=n.count, default=0,
        invalid=Rule(f"AD_METRIC_{upper}_INVALID", CRITICAL,
                     f"{label} must be a whole number such as 12,345."),
        checks=(Rule(f"AD_METRIC_{upper}_NEGATIVE", CRITICAL, f"{label} cannot be negative.",
                     broken=lambda v: v < 0),
                Rule(f"AD_METRIC_{upper}_OUT_OF_RANGE", CRITICAL,
                     f"{label} is larger than any count can be.",
                     broken=lambda v: v > MAX_COUNT)))


_DATE_INVALID = Rule("AD_METRIC_METRIC_DATE_INVALID", CRITICAL,
                     "The day is required, as YYYY-MM-DD, MM/DD/YYYY or e.g. Jan 15, 2024.")

COLUMNS = (
    _id("campaign_external_id", "campaign", required=True),
    _name("campaign_name", "campaign"),
    _id("ad_set_external_id", "ad set (ad group)"),
    _name("ad_set_name", "ad set (ad group)"),
    _id("ad_external_id", "ad"),
    _name("ad_name", "ad"),
    Column("metric_date", ("metric_date",), "The day the metrics are for (the account's time "
           "zone, as the platform reports it).", required=True, normalise=n.report_date,
           missing=_DATE_INVALID, invalid=_DATE_INVALID,
           checks=(
               # The account's day can be ahead of UTC by up to 14 hours: today+1 is allowed.
               Rule("AD_METRIC_METRIC_DATE_FUTURE", CRITICAL,
                    "The day is in the future; an export reports days that have begun.",
                    broken=lambda v: v > n.today() + timedelta(days=1)),
               Rule("AD_METRIC_METRIC_DATE_TOO_OLD", CRITICAL,
                    "The day is before 2000-01-01 (a misread date).",
                    broken=lambda v: v < EARLIEST))),
    Column("spend", ("spend",), "Amount spent in the account's currency, rounded half up to "
           "cents; currency signs and either thousands convention allowed; empty is 0.",
           normalise=n.money, unit_field="currency", default=Decimal("0.00"),
           invalid=Rule("AD_METRIC_SPEND_INVALID", CRITICAL,
                        "Spend must be a number such as 1,234.56."),
           checks=(Rule("AD_METRIC_SPEND_NEGATIVE", CRITICAL, "Spend cannot be negative.",
                        broken=lambda v: v < 0),
                   Rule("AD_METRIC_SPEND_OUT_OF_RANGE", CRITICAL,
                        "Spend must be below 1,000,000,000,000, the most a day can hold.",
                        broken=lambda v: v >= MAX_SPEND))),
    _count("impressions", "Impressions"),
    _count("clicks", "Clicks"),
    Column("conversions", ("conversions",), "Conversions (Meta: results) as the platform "
           "counts them; may be fractional (Google's data-driven attribution); empty is 0.",
           normalise=n.decimal_number, default=Decimal(0),
           invalid=Rule("AD_METRIC_CONVERSIONS_INVALID", CRITICAL,
                        "Conversions must be a number such as 12 or 3.5."),
           checks=(Rule("AD_METRIC_CONVERSIONS_NEGATIVE", CRITICAL,
                        "Conversions cannot be negative.", broken=lambda v: v < 0),
                   Rule("AD_METRIC_CONVERSIONS_OUT_OF_RANGE", CRITICAL,
                        "Conversions is larger than any count can be.",
                        broken=lambda v: v >= MAX_SPEND))),
    Column("currency", ("currency",), "ISO 4217 code of the spend, from this column or the "
           "spend header's unit, e.g. `Amount spent (USD)`; empty when the export names none.",
           normalise=n.currency,
           invalid=Rule("AD_METRIC_CURRENCY_INVALID", CRITICAL,
                        "Currency must be a three-letter ISO 4217 code such as USD.")),
    # Meta writes the report's range beside each row; with the Day breakdown it is the day.
    Column("reporting_starts", ("reporting_starts",), "First day of the report's range "
           "(Meta); checked against the day, not stored.", normalise=n.report_date,
           invalid=Rule("AD_METRIC_REPORTING_STARTS_INVALID", WARNING,
                        "Reporting starts is not a date; it was ignored.")),
    Column("reporting_ends", ("reporting_ends",), "Last day of the report's range (Meta); "
           "checked against the day, not stored.", normalise=n.report_date,
           invalid=Rule("AD_METRIC_REPORTING_ENDS_INVALID", WARNING,
                        "Reporting ends is not a date; it was ignored.")),
)

def _outside_range(v: Mapping[str, Any]) -> bool:
    return not v["reporting_starts"] <= v["metric_date"] <= v["reporting_ends"]


ROW_RULES = (
    RowRule(Rule("AD_METRIC_METRIC_DATE_OUTSIDE_REPORTING_RANGE", CRITICAL,
                 "The day lies outside the row's reporting range; export with the Day "
                 "breakdown so each row is one day."),
            ("metric_date", "reporting_starts", "reporting_ends"), _outside_range),
    RowRule(Rule("AD_METRIC_CLICKS_EXCEED_IMPRESSIONS", WARNING,
                 "Clicks exceed impressions; allowed (clicks (all) counts every click), but "
                 "worth a look."),
            ("clicks", "impressions"), lambda v: v["clicks"] > v["impressions"]),
    RowRule(Rule("AD_METRIC_AD_SET_EXTERNAL_ID_MISSING", WARNING,
                 "The row names an ad but not its ad set; the ad is stored without one."),
            ("ad_external_id",), lambda v: v.get("ad_set_external_id") is None),
)


def _key_part(value: Any) -> str:
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, date) else str(value)


AD_METRICS = Contract(
    name="ad_metrics", version="1.0.0", entity="AD_METRIC",
    description="Daily ad-platform metrics: one row per day and campaign (and ad set, and ad, "
    "as the export breaks them down). Upload with platform=meta, google or tiktok: each reads "
    "that platform's own export, and every platform's canonical field names too.",
    columns=COLUMNS,
    key=NaturalKey(("metric_date", "campaign_external_id", "ad_set_external_id",
                    "ad_external_id"),
                   "day (YYYY-MM-DD) | campaign id | ad set id | ad id, an absent id empty",
                   part=_key_part),
    targets=(Target("campaigns", ("client_id", "platform", "external_id")),
             Target("ad_sets", ("client_id", "platform", "external_id")),
             Target("ads", ("client_id", "platform", "external_id")),
             Target("daily_metrics", ("client_id", "platform", "metric_date", "campaign_id",
                                      "ad_set_id", "ad_id"))),
    duplicate=Rule("AD_METRIC_DUPLICATE", WARNING, "The same day, campaign, ad set and ad "
                   "already appeared earlier in this file; the row is counted as a duplicate "
                   "and not promoted."),
    row_rules=ROW_RULES,
    promotion_order=2,
    examples=(
        {"campaign_external_id": "120210000000000001", "campaign_name": "Spring sale",
         "ad_set_external_id": "120210000000000101", "ad_set_name": "US 25-44",
         "ad_external_id": "120210000000001001", "ad_name": "Video 15s",
         "metric_date": "2024-03-01", "spend": "1,234.56", "impressions": "104,220",
         "clicks": "1,873", "conversions": "42", "currency": "USD"},
    ),
)


# ── each platform's export ────────────────────────────────────────────────────────────────
# Header names as each platform's report download writes them (docs/decisions/0145 lists the
# sources). The canonical names stay accepted too, so a script's JSON lines read everywhere.
def _with_canonical(headers: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return {f: (*h, f) for f, h in headers.items()}


META = with_headers(
    AD_METRICS, name="ad_metrics", variant="meta",
    description="Meta Ads Manager export (Reports → Export table data, CSV), with the Day "
    "breakdown: one row per day and ad. The spend header carries the currency: Amount spent "
    "(USD).",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign name",),
        "ad_set_external_id": ("Ad set ID",),
        "ad_set_name": ("Ad set name",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name",),
        "metric_date": ("Day",),
        "spend": ("Amount spent (USD)", "Amount spent"),
        "impressions": ("Impressions",),
        "clicks": ("Clicks (all)",),
        "conversions": ("Results",),
        "currency": ("Currency",),
        "reporting_starts": ("Reporting starts",),
        "reporting_ends": ("Reporting ends",),
    }),
    summary_prefixes=("total",),
    examples=({**AD_METRICS.examples[0], "reporting_starts": "2024-03-01",
               "reporting_ends": "2024-03-01", "currency": ""},),
)

GOOGLE = with_headers(
    AD_METRICS, name="ad_metrics", variant="google",
    description="Google Ads report download (CSV) segmented by Day: title lines above the "
    "header, `--` for an empty cell, `Total: …` rows at the end (all skipped). Ad group rows; "
    "Google's ad groups are the ad sets.",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign",),
        "ad_set_external_id": ("Ad group ID",),
        "ad_set_name": ("Ad group",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name",),
        "metric_date": ("Day", "Date"),
        "spend": ("Cost",),
        "impressions": ("Impr.", "Impressions"),
        "clicks": ("Clicks",),
        "conversions": ("Conversions",),
        "currency": ("Currency code", "Currency"),
    }),
    without=("reporting_starts", "reporting_ends"),
    preamble_lines=5, summary_prefixes=("total",), empty_markers=frozenset({"--"}),
    examples=({**AD_METRICS.examples[0], "campaign_external_id": "20123456789",
               "ad_set_external_id": "150123456789", "ad_external_id": "",
               "ad_name": "", "metric_date": "2024-03-01"},),
)

TIKTOK = with_headers(
    AD_METRICS, name="ad_metrics", variant="tiktok",
    description="TikTok Ads Manager custom report export (CSV or XLSX saved as CSV) by Day: "
    "one row per day and ad; `Total of …` rows skipped.",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign name",),
        "ad_set_external_id": ("Ad group ID",),
        "ad_set_name": ("Ad group name",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name",),
        "metric_date": ("Date", "By Day", "Day"),
        "spend": ("Cost", "Total cost"),
        "impressions": ("Impressions",),
        "clicks": ("Clicks (destination)", "Clicks"),
        "conversions": ("Conversions",),
        "currency": ("Currency",),
    }),
    without=("reporting_starts", "reporting_ends"),
    preamble_lines=2, summary_prefixes=("total",), empty_markers=frozenset({"-", "--"}),
    examples=({**AD_METRICS.examples[0], "campaign_external_id": "1790000000000001",
               "ad_set_external_id": "1790000000000101", "ad_external_id": "1790000000001001",
               "metric_date": "2024-03-01 00:00:00"},),
)

VARIANTS: dict[str, Contract] = {"meta": META, "google": GOOGLE, "tiktok": TIKTOK}


def for_platform(platform: str) -> Contract:
    """The contract reading ``platform``'s export; UnknownPlatform (400) for any other name."""
    contract = VARIANTS.get(platform)
    if contract is None:
        raise UnknownPlatform(f"There is no platform named {platform[:64]!r}; send one of: "
                              f"{', '.join(PLATFORMS)}.")
    return contract
