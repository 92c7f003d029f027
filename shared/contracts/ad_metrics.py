"""The `ad_metrics` contract: one day (or one reported period) of one campaign / ad set / ad of
an ad platform, read from that platform's own export as a person downloads it (staging-promotion-
runtime.md, issues 13 and 20, docs/decisions/0145, 0173–0175).

One field set, three readings: ``for_platform("meta" | "google" | "tiktok")`` is the contract
with that platform's column names, title lines, total rows and empty markers; the base
contract (``contracts.get("ad_metrics")``) reads the canonical field names, e.g. JSON lines a
script wrote. Every value the worker gets is normalised: ids as text, the day as a date, spend,
conversions and results as Decimal, impressions and clicks as int, the currency as an ISO code,
from a currency column or the header's unit (`Amount spent (USD)`).

Real exports often carry names, not ids: a campaign, ad set or ad is then known by its name
path (folded names of it and its parents, hashed: ``*_path``), and an id seen later for the same
path attaches to the same entity (worker/records/ad_metrics.sql). A report without a Day column
is a period (Meta's `Reporting starts`/`Reporting ends`, Google's title line), never a day.
Rows that differ only in a breakdown (Age, Gender, Placement…) are slices of one fact: summed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from shared import errors
from shared.contracts import codes
from shared.contracts import columnar as c
from shared.contracts import normalise as n
from shared.contracts.judgments import too_long
from shared.contracts.model import (
    Column,
    Contract,
    HeaderMatch,
    Issue,
    NaturalKey,
    RowRule,
    Rule,
    Severity,
    Target,
    header_key,
    with_headers,
)

CRITICAL, WARNING = Severity.CRITICAL, Severity.WARNING
PLATFORMS = ("meta", "google", "tiktok")
NAME_LIMIT = 500
ID_LIMIT = 100
INDICATOR_LIMIT = 200
# No day of one ad costs ten billion in any currency; a sum of slices stays far below
# NUMERIC(18,4) (worker/records/ad_metrics.sql refuses a sum that would not).
MAX_SPEND = Decimal("10000000000")
MAX_COUNT = 2**53
# Ad platforms began daily reporting well after this; an older day is a misread date.
EARLIEST = date(2000, 1, 1)
# Separators of the natural key's parts; no name, id or breakdown value holds them (names are
# folded and hashed, ids and breakdowns are kept only without control characters).
PART, BREAKDOWN = "\x1f", "\x1e"


class UnknownPlatform(errors.InvalidRequest):
    """The platform is not one the ad_metrics contract reads: meta, google or tiktok."""

    code = "unknown_platform"


def _plain_id(text: str) -> Any:
    value = n.external_id(text)
    if value is n.INVALID or not value:
        return value
    return n.INVALID if any(ord(ch) < 32 for ch in value) else value


def _id(field: str, label: str) -> Column:
    upper = field.upper()
    return Column(
        field, (field,), f"The platform's id of the {label}, as text (digits kept exactly); "
        "optional: without it the name path identifies it.", normalise=_plain_id,
        read_column=c.external_id,
        invalid=Rule(f"AD_METRIC_{upper}_INVALID", CRITICAL,
                     f"The {label} id was rewritten as a number in scientific notation (e.g. "
                     "by a spreadsheet) or holds control characters, and its digits are lost; "
                     "export it again as text."),
        checks=(too_long(f"AD_METRIC_{upper}_TOO_LONG", CRITICAL,
                         f"The {label} id is longer than {ID_LIMIT} characters.", ID_LIMIT,
                         truncate=False),))


def _name(field: str, label: str) -> Column:
    return Column(
        field, (field,), f"The {label}'s name as the platform shows it (spaces collapsed).",
        normalise=n.name, read_column=c.name,
        checks=(too_long(f"AD_METRIC_{field.upper()}_TOO_LONG", WARNING,
                         f"The {label} name is longer than {NAME_LIMIT} characters and was "
                         f"truncated to {NAME_LIMIT}.", NAME_LIMIT, truncate=True),))


def _ambiguous(field: str, label: str) -> Rule:
    return Rule(f"AD_METRIC_{field.upper()}_AMBIGUOUS", CRITICAL,
                f"{label} reads as two different numbers (1,234 is 1234 or 1.234) and the file "
                "does not say which; upload it with decimal_separator=. or decimal_separator=, .")


def _count(field: str, label: str) -> Column:
    upper = field.upper()
    return Column(
        field, (field,), f"{label}: a whole number, 0 or more; thousands separators allowed; "
        "an empty cell is 0, a column the export lacks is no value (NULL).", normalise=n.count,
        number=True, default=0, ambiguous=_ambiguous(field, label), kind=c.COUNT,
        read_column=c.count,
        invalid=Rule(f"AD_METRIC_{upper}_INVALID", CRITICAL,
                     f"{label} must be a whole number such as 12,345."),
        checks=(Rule(f"AD_METRIC_{upper}_NEGATIVE", CRITICAL, f"{label} cannot be negative.",
                     broken=lambda v: v < 0),
                Rule(f"AD_METRIC_{upper}_OUT_OF_RANGE", CRITICAL,
                     f"{label} is larger than any count can be.",
                     broken=lambda v: v > MAX_COUNT)))


def _measure(field: str, label: str, description: str) -> Column:
    upper = field.upper()
    return Column(
        field, (field,), description, normalise=n.decimal_number, number=True,
        default=Decimal(0), ambiguous=_ambiguous(field, label), kind=c.DECIMAL,
        read_column=c.decimal_number,
        invalid=Rule(f"AD_METRIC_{upper}_INVALID", CRITICAL,
                     f"{label} must be a number such as 12 or 3.5."),
        checks=(Rule(f"AD_METRIC_{upper}_NEGATIVE", CRITICAL, f"{label} cannot be negative.",
                     broken=lambda v: v < 0),
                Rule(f"AD_METRIC_{upper}_OUT_OF_RANGE", CRITICAL,
                     f"{label} is larger than any count can be.",
                     broken=lambda v: v >= MAX_SPEND)))


def _breakdown(field: str, label: str) -> Column:
    return Column(field, (field,), f"{label}: a breakdown; rows differing only in breakdowns "
                  "are slices of one fact and are summed.", normalise=_breakdown_value,
                  breakdown=True, read_column=lambda cells: c.breakdown(cells, NAME_LIMIT),
                  invalid=Rule(f"AD_METRIC_{field.upper()}_INVALID", CRITICAL,
                               f"{label} holds control characters or is longer than "
                               f"{NAME_LIMIT} characters."))


def _breakdown_value(text: str) -> Any:
    value = n.name(text)
    if len(value) > NAME_LIMIT or any(ord(ch) < 32 for ch in value):
        return n.INVALID
    return value


def _report_day(text: str) -> Any:
    return n.report_date(text)


_DATE_INVALID = Rule("AD_METRIC_METRIC_DATE_INVALID", CRITICAL,
                     "The day must be a date such as 2024-01-15, 01/15/2024 or Jan 15, 2024.")

COLUMNS = (
    _id("campaign_external_id", "campaign"),
    _name("campaign_name", "campaign"),
    _id("ad_set_external_id", "ad set (ad group)"),
    _name("ad_set_name", "ad set (ad group)"),
    _id("ad_external_id", "ad"),
    _name("ad_name", "ad"),
    Column("metric_date", ("metric_date",), "The day the metrics are for (the account's time "
           "zone, as the platform reports it). Without a Day column, the report's range "
           "(Meta's Reporting starts/ends, Google's title line) makes the row a period.",
           normalise=_report_day, invalid=_DATE_INVALID, kind=c.DATE, read_column=c.report_date,
           checks=(
               # The account's day can be ahead of UTC by up to 14 hours: today+1 is allowed.
               Rule("AD_METRIC_METRIC_DATE_FUTURE", CRITICAL,
                    "The day is in the future; an export reports days that have begun.",
                    broken=lambda v: v > n.today() + timedelta(days=1)),
               Rule("AD_METRIC_METRIC_DATE_TOO_OLD", CRITICAL,
                    "The day is before 2000-01-01 (a misread date).",
                    broken=lambda v: v < EARLIEST))),
    # Required as a column (header_check); an empty cell is 0, as a day without delivery.
    Column("spend", ("spend",), "Amount spent in the account's currency, rounded half up to "
           "cents; currency signs and the file's thousands convention allowed; the column is "
           "required, an empty cell is 0.",
           normalise=n.money, unit_field="currency", default=Decimal("0.00"),
           number=True, ambiguous=_ambiguous("spend", "Spend"), kind=c.MONEY,
           read_column=c.money,
           invalid=Rule("AD_METRIC_SPEND_INVALID", CRITICAL,
                        "Spend must be a number such as 1,234.56."),
           checks=(Rule("AD_METRIC_SPEND_NEGATIVE", CRITICAL, "Spend cannot be negative.",
                        broken=lambda v: v < 0),
                   Rule("AD_METRIC_SPEND_OUT_OF_RANGE", CRITICAL,
                        "Spend must be below 10,000,000,000 for one row.",
                        broken=lambda v: v >= MAX_SPEND))),
    _count("impressions", "Impressions"),
    _count("clicks", "Clicks"),
    _measure("conversions", "Conversions", "Conversions as the platform counts them; may be "
             "fractional (Google's data-driven attribution). Meta has no such column: its "
             "results count as conversions only for a conversion objective."),
    _measure("results", "Results", "Meta's Results: the count of the ad's optimisation event, "
             "whatever it is (see result_indicator)."),
    Column("result_indicator", ("result_indicator",), "What Results counts (Meta's Result "
           "indicator or Result type, e.g. actions:offsite_conversion.fb_pixel_purchase).",
           normalise=n.name, read_column=c.name,
           checks=(too_long("AD_METRIC_RESULT_INDICATOR_TOO_LONG", WARNING,
                            f"The result indicator is longer than {INDICATOR_LIMIT} characters "
                            "and was truncated.", INDICATOR_LIMIT, truncate=True),)),
    Column("currency", ("currency",), "ISO 4217 code of the spend, from this column or the "
           "spend header's unit, e.g. `Amount spent (USD)`; empty when the export names none.",
           normalise=n.currency, read_column=c.currency,
           invalid=Rule("AD_METRIC_CURRENCY_INVALID", CRITICAL,
                        "Currency must be a three-letter ISO 4217 code such as USD.")),
    # Meta writes the report's range beside each row; with the Day breakdown it is the day.
    Column("reporting_starts", ("reporting_starts",), "First day of the report's range "
           "(Meta): the period of a row without a day.", normalise=_report_day, kind=c.DATE,
           read_column=c.report_date,
           invalid=Rule("AD_METRIC_REPORTING_STARTS_INVALID", CRITICAL,
                        "Reporting starts is not a date.")),
    Column("reporting_ends", ("reporting_ends",), "Last day of the report's range (Meta).",
           normalise=_report_day, kind=c.DATE, read_column=c.report_date,
           invalid=Rule("AD_METRIC_REPORTING_ENDS_INVALID", CRITICAL,
                        "Reporting ends is not a date.")),
    _breakdown("age", "Age"),
    _breakdown("gender", "Gender"),
    _breakdown("country", "Country"),
    _breakdown("region", "Region"),
    _breakdown("placement", "Placement"),
    _breakdown("publisher_platform", "Platform (Facebook, Instagram…)"),
    _breakdown("device", "Device"),
    _breakdown("network", "Network"),
    _breakdown("objective", "Objective (it also decides whether results are conversions)"),
)


def _outside_range(v: Mapping[str, Any]) -> bool:
    return not v["reporting_starts"] <= v["metric_date"] <= v["reporting_ends"]


ROW_RULES = (
    RowRule(Rule("AD_METRIC_METRIC_DATE_OUTSIDE_REPORTING_RANGE", CRITICAL,
                 "The day lies outside the row's reporting range; export with the Day "
                 "breakdown so each row is one day."),
            ("metric_date", "reporting_starts", "reporting_ends"), _outside_range,
            lambda v: (v["metric_date"] < v["reporting_starts"])
            | (v["metric_date"] > v["reporting_ends"])),
    RowRule(Rule("AD_METRIC_REPORTING_RANGE_INVALID", CRITICAL,
                 "Reporting starts is after Reporting ends."),
            ("reporting_starts", "reporting_ends"),
            lambda v: v["reporting_starts"] > v["reporting_ends"]),
    RowRule(Rule("AD_METRIC_CLICKS_EXCEED_IMPRESSIONS", WARNING,
                 "Clicks exceed impressions; allowed (clicks (all) counts every click), but "
                 "worth a look."),
            ("clicks", "impressions"), lambda v: v["clicks"] > v["impressions"]),
    RowRule(Rule("AD_METRIC_AD_SET_EXTERNAL_ID_MISSING", WARNING,
                 "The row names an ad by id but not its ad set; the ad is stored without one."),
            ("ad_external_id",), lambda v: v.get("ad_set_external_id") is None
            and v.get("ad_set_name") is None,
            lambda v: v["ad_set_external_id"].is_null() & v["ad_set_name"].is_null()),
)


# ── what a whole row says (Contract.derive) ───────────────────────────────────────────────
DAY_MISSING = Rule("AD_METRIC_DAY_MISSING", CRITICAL,
                   "The row has neither a day nor a reporting range, so the days its figures "
                   "belong to are unknown.")
PERIOD_TOO_OLD = Rule("AD_METRIC_PERIOD_INVALID", CRITICAL,
                      "The reporting range starts before 2000-01-01 or ends in the future.")
UNNAMED = Rule("AD_METRIC_UNNAMED_SUMMED", WARNING,
               "The row names no entity at the export's own level (e.g. a Google ad without a "
               "name or id); its figures were added to its parent's (ad group, campaign) with "
               "the other unnamed rows of that parent.")
DERIVED_RULES = ((None, DAY_MISSING), (None, PERIOD_TOO_OLD), (None, UNNAMED))
# Objectives whose results are conversions (Meta's API names and Ads Manager's words), and
# the words of a result indicator or type that name a conversion event when no objective is
# given. Anything else (reach, link clicks, profile visits, messaging conversations…) is a
# result, kept with its indicator, but no conversion (docs/decisions/0174).
CONVERSION_OBJECTIVES = frozenset({
    "OUTCOME_SALES", "OUTCOME_LEADS", "OUTCOME_APP_PROMOTION", "CONVERSIONS",
    "LEAD_GENERATION", "APP_INSTALLS", "PRODUCT_CATALOG_SALES", "SALES", "LEADS",
    "APP PROMOTION"})
CONVERSION_WORDS = ("PURCHASE", "LEAD", "ADD TO CART", "ADDS TO CART", "ADD_TO_CART",
                    "CHECKOUT", "PAYMENT INFO", "ADD_PAYMENT_INFO", "REGISTRATION",
                    "SUBSCRI", "APP INSTALL", "APP_INSTALL", "MOBILE_APP_INSTALL",
                    "FORM_SUBMIT", "SUBMIT APPLICATION", "START TRIAL", "START_TRIAL",
                    "OFFSITE_CONVERSION", "CONVERSION")
LEVELS = (("campaign", "campaign_external_id", "campaign_name"),
          ("ad_set", "ad_set_external_id", "ad_set_name"),
          ("ad", "ad_external_id", "ad_name"))
BREAKDOWNS = tuple(c.name for c in COLUMNS if c.breakdown)
DIMENSIONS = tuple(f for _, i, nm in LEVELS for f in (i, nm)) + BREAKDOWNS


def is_conversion(indicator: str | None, objective: str | None) -> bool:
    """Whether a row's results are conversions: by its objective when it names one, else by
    what its result indicator counts."""
    if objective:
        return n.fold(objective).replace("-", " ") in CONVERSION_OBJECTIVES \
            or n.fold(objective).replace(" ", "_") in CONVERSION_OBJECTIVES
    if not indicator or n.fold(indicator) == "MIXED":
        return False
    folded = n.fold(indicator)
    return any(word in folded for word in CONVERSION_WORDS)


def _token(values: Mapping[str, Any], id_field: str, name_field: str) -> str:
    """A parent's part of a name path: its folded name, so the path is the same whether the
    export has ids or not; `#id` only for a parent the row names by id alone."""
    if values.get(name_field):
        return n.fold(values[name_field])
    return "#" + values[id_field] if values.get(id_field) else ""


def _paths(values: dict[str, Any]) -> None:
    """Each level's name path (its and its parents' folded names, a parent named only by id
    as `#id`), hashed; None for a level the row does not name by name. The same names give
    the same path with ids or without, so ids seen later attach (docs/decisions/0173)."""
    tokens: list[str] = []
    for level, id_field, name_field in LEVELS:
        named = values.get(name_field)
        own = n.fold(named) if named else ""
        path = PART.join([*tokens, own])
        values[f"{level}_path"] = hashlib.sha256(path.encode()).hexdigest() if own else None
        tokens.append(_token(values, id_field, name_field))


def _grain(values: dict[str, Any], context: Mapping[str, Any]) -> list[tuple[Rule, str | None]]:
    starts, ends = values.get("reporting_starts"), values.get("reporting_ends")
    day = values.get("metric_date")
    period = context.get("period")
    if day is None and starts is not None and ends is not None and starts == ends:
        day = values["metric_date"] = starts
    if day is not None:
        values.update(grain="day", period_start=None, period_end=None)
        return []
    if starts is not None and ends is not None:
        first, last = starts, ends
    elif isinstance(period, tuple):
        first, last = period
        if first == last:
            values.update(metric_date=first, grain="day", period_start=None, period_end=None)
            return []
    elif period == n.ALL_TIME:
        values.update(grain="all_time", period_start=None, period_end=None)
        return []
    else:
        return [(DAY_MISSING, "metric_date")]
    if first < EARLIEST or last > n.today() + timedelta(days=1):
        return [(PERIOD_TOO_OLD, "reporting_starts")]
    values.update(grain="period", period_start=first, period_end=last)
    return []


def derive(values: dict[str, Any], context: Mapping[str, Any],
           row: int = 1) -> list[tuple[Rule, str | None]]:
    """The day or period, name paths, breakdown and conversions of a valid row."""
    issues = _grain(values, context)
    _paths(values)
    slices = [f"{b}={values[b]}" for b in BREAKDOWNS if values.get(b)]
    if _unnamed(values, context.get("fields")):
        # Nothing tells this row from its unnamed siblings: each is a slice of the parent.
        slices.append(f"row={row}")
        issues.append((UNNAMED, None))
    values["breakdown"] = PART.join(slices) if slices else None
    if values.get("conversions") is None and values.get("results") is not None \
            and is_conversion(values.get("result_indicator"), values.get("objective")):
        values["conversions"] = values["results"]
    return issues


def _unnamed(values: Mapping[str, Any], fields: frozenset[str] | None) -> bool:
    """Whether the row names a parent but not the entity of the export's deepest level (a
    Google ad report's responsive search ads: `Ad name` is `--`, and no Ad ID column)."""
    if not fields:
        return False
    levels = [(i, nm) for _, i, nm in LEVELS if i in fields or nm in fields]
    if len(levels) < 2:
        return False
    deepest, parents = levels[-1], levels[:-1]
    if values.get(deepest[0]) or values.get(deepest[1]):
        return False
    return any(values.get(i) or values.get(nm) for i, nm in parents)


def _level_key(values: Mapping[str, Any], level: str, id_field: str) -> str:
    if values.get(id_field):
        return "i:" + values[id_field]
    path = values.get(f"{level}_path")
    return "p:" + path if path else ""


def compose_key(values: Mapping[str, Any]) -> str:
    """The row's fact (its day or period, then each level by id or name path), then its
    breakdown: rows with one fact and different breakdowns are slices; with the same one,
    a repeat (worker/records/ad_promote.py)."""
    grain = values.get("grain")
    if grain == "day" or (grain is None and values.get("metric_date")):
        when = values["metric_date"].isoformat()
    elif grain == "period":
        when = f"{values['period_start'].isoformat()}..{values['period_end'].isoformat()}"
    else:
        when = "all"
    fact = PART.join([when, *(_level_key(values, lv, i) for lv, i, _ in LEVELS)])
    return fact + BREAKDOWN + (values.get("breakdown") or "")


# ── the same over whole columns (worker/records/columns.py, docs/decisions/0271) ──────────
def _path_hash(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()


def derive_columns(frame: Any, context: Mapping[str, Any]) -> tuple[Any, list[tuple[Rule, str | None, Any]]]:
    """``derive`` over a frame of rows without errors (typed columns of every field, and
    ``row``): the frame with the day or period, name paths, breakdown and conversions, and
    the issues as (rule, field, boolean column)."""
    import polars as pl

    # A platform's export lacks some fields (Google has no Objective): they are NULL.
    frame = frame.with_columns(pl.lit(None, c.dtype(column.kind)).alias(column.name)
                               for column in COLUMNS if column.name not in frame.columns)
    frame, issues = _grain_columns(pl, frame, context)
    frame = _path_columns(pl, frame)
    unnamed = _unnamed_column(pl, context.get("fields"))
    parts = [pl.when(pl.col(b).is_not_null() & (pl.col(b) != ""))
             .then(pl.concat_str([pl.lit(f"{b}="), pl.col(b)])) for b in BREAKDOWNS]
    parts.append(pl.when(unnamed).then(pl.concat_str([pl.lit("row="),
                                                      pl.col("row").cast(pl.String)])))
    breakdown = pl.concat_str(parts, separator=PART, ignore_nulls=True)
    frame = frame.with_columns(
        pl.when(breakdown == "").then(None).otherwise(breakdown).alias("breakdown"),
        unnamed.alias("_unnamed"))
    issues.append((UNNAMED, None, frame["_unnamed"]))
    converting = c.map_rows(frame, ("result_indicator", "objective"), is_conversion,
                            pl.Boolean)
    frame = frame.with_columns(
        pl.when(pl.col("conversions").is_null() & pl.col("results").is_not_null()
                & converting).then(pl.col("results")).otherwise(pl.col("conversions"))
        .alias("conversions")).drop("_unnamed")
    return frame, issues


def _grain_columns(pl: Any, frame: Any, context: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    """``_grain`` over columns: grain, metric_date, period_start and period_end."""
    starts, ends, day = pl.col("reporting_starts"), pl.col("reporting_ends"), pl.col("metric_date")
    both = starts.is_not_null() & ends.is_not_null()
    day = pl.when(day.is_null() & both & (starts == ends)).then(starts).otherwise(day)
    period = context.get("period")
    first, last = starts, ends
    grain = pl.when(day.is_not_null()).then(pl.lit("day"))
    if isinstance(period, tuple) and period[0] == period[1]:
        # a one-day title range makes the row that day
        grain = grain.when(both).then(pl.lit("period")).otherwise(pl.lit("day"))
        day = pl.when(day.is_null() & ~both).then(pl.lit(period[0])).otherwise(day)
    elif isinstance(period, tuple):
        first = pl.when(both).then(starts).otherwise(pl.lit(period[0]))
        last = pl.when(both).then(ends).otherwise(pl.lit(period[1]))
        grain = grain.otherwise(pl.lit("period"))
    elif period == n.ALL_TIME:
        grain = grain.when(both).then(pl.lit("period")).otherwise(pl.lit("all_time"))
    else:
        grain = grain.when(both).then(pl.lit("period"))
    frame = frame.with_columns(grain.alias("grain"), day.alias("metric_date"),
                               first.alias("_first"), last.alias("_last"))
    is_period = pl.col("grain") == "period"
    too_old = is_period & ((pl.col("_first") < EARLIEST)
                           | (pl.col("_last") > n.today() + timedelta(days=1)))
    frame = frame.with_columns(pl.col("grain").is_null().alias("_day_missing"),
                               too_old.fill_null(False).alias("_too_old"))
    frame = frame.with_columns(
        pl.when(is_period).then(pl.col("_first")).alias("period_start"),
        pl.when(is_period).then(pl.col("_last")).alias("period_end"))
    issues = [(DAY_MISSING, "metric_date", frame["_day_missing"]),
              (PERIOD_TOO_OLD, "reporting_starts", frame["_too_old"])]
    return frame.drop("_first", "_last", "_day_missing", "_too_old"), issues


def _path_columns(pl: Any, frame: Any) -> Any:
    """``_paths`` over columns: each level's name path hashed, once per distinct path."""
    tokens: list[Any] = []
    for level, id_field, name_field in LEVELS:
        folded = c.per_value(frame[name_field], c.fold, n.fold, pl.String)
        frame = frame.with_columns(folded.fill_null("").alias("_own"))
        own = pl.col("_own")
        text = pl.concat_str([*tokens, own], separator=PART)
        frame = frame.with_columns(pl.when(own != "").then(text).alias("_path"))
        hashed = c.python_map(frame["_path"], _path_hash, pl.String)
        frame = frame.with_columns(hashed.alias(f"{level}_path"), pl.when(own != "").then(own)
                                   .otherwise(pl.when(pl.col(id_field).is_not_null())
                                              .then(pl.concat_str([pl.lit("#"),
                                                                   pl.col(id_field)]))
                                              .otherwise(pl.lit(""))).alias(f"_token_{level}"))
        tokens.append(pl.col(f"_token_{level}"))
    return frame.drop("_own", "_path", *(f"_token_{level}" for level, _, _ in LEVELS))


def _unnamed_column(pl: Any, fields: frozenset[str] | None) -> Any:
    """``_unnamed`` over columns (the file's levels are the same for every row)."""
    levels = [(i, nm) for _, i, nm in LEVELS if fields and (i in fields or nm in fields)]
    if len(levels) < 2:
        return pl.lit(False)
    (deep_id, deep_name), parents = levels[-1], levels[:-1]
    named = pl.lit(False)
    for i, nm in parents:
        named = named | pl.col(i).is_not_null() | pl.col(nm).is_not_null()
    return pl.col(deep_id).is_null() & pl.col(deep_name).is_null() & named


def compose_columns(frame: Any) -> Any:
    """``compose_key`` over a frame of valid rows."""
    import polars as pl

    when = pl.when(pl.col("grain") == "day").then(pl.col("metric_date").dt.strftime("%Y-%m-%d")) \
        .when(pl.col("grain") == "period").then(pl.concat_str([
            pl.col("period_start").dt.strftime("%Y-%m-%d"), pl.lit(".."),
            pl.col("period_end").dt.strftime("%Y-%m-%d")])).otherwise(pl.lit("all"))
    levels = [pl.when(pl.col(i).is_not_null()).then(pl.concat_str([pl.lit("i:"), pl.col(i)]))
              .when(pl.col(f"{level}_path").is_not_null())
              .then(pl.concat_str([pl.lit("p:"), pl.col(f"{level}_path")]))
              .otherwise(pl.lit("")) for level, i, _ in LEVELS]
    fact = pl.concat_str([when, *levels], separator=PART)
    return pl.concat_str([fact, pl.lit(BREAKDOWN), pl.col("breakdown").fill_null("")])


def fact_key(natural_key: str) -> str:
    return natural_key.partition(BREAKDOWN)[0]


# ── what a whole file says (Contract.header_check) ────────────────────────────────────────
NO_REPORT_DATE = "BATCH_NO_REPORT_DATE"
# How to export each platform's report with a Day column, step by step in its UI.
DAY_STEPS = {
    None: "Export it with a Day column (or a Reporting starts / Reporting ends pair).",
    "meta": "In Meta Ads Manager: open the campaigns, ad sets or ads table, click Breakdown → "
            "By time → Day, then Reports → Export table data → .csv; or keep the Reporting "
            "starts and Reporting ends columns, and the rows are stored as that period.",
    "google": "In Google Ads: open the report (Campaigns, Ad groups or Ads), click Segment → "
              "Time → Day, then Download → CSV; or keep the title lines above the header, "
              "whose date range makes the rows a period.",
    "tiktok": "In TikTok Ads Manager: Reporting → Custom reports → Create, add the time "
              "dimension Day (By Day) beside Campaign, Ad group or Ad, then Export → CSV.",
}


# Columns of a report whose rows lie below the ad (Google's keyword and search-terms reports):
# several rows per ad group and day that are not slices of it (a search-terms report leaves
# out what Google hides as "Other search terms"), so their sum is not the ad group's figures
# and would overwrite them. Refused once, with the report to download instead.
BELOW_ADS = frozenset({"keyword", "searchkeyword", "searchterm", "searchquery"})
BELOW_ADS_STEPS = {
    "google": "In Google Ads: open Campaigns → Ad groups (or Ads), click Segment → Time → Day, "
              "then Download → CSV, and upload that report instead.",
}


def header_check(contract: Contract, match: HeaderMatch) -> Issue | None:
    """A keyword or search-terms report, a file without a spend column, or one whose rows can
    name no day and no period: the batch fails once, with the platform's steps to export a
    report that imports (never a guessed day, never one error per row)."""
    below = [h for h in match.extra if header_key(h) in BELOW_ADS]
    if below:
        rule = codes.REPORT_UNSUPPORTED
        steps = BELOW_ADS_STEPS.get(contract.variant or "", BELOW_ADS_STEPS["google"])
        return Issue(None, None, rule.code, rule.severity,
                     f"This is a keyword or search-terms report (its {below[0][:40]!r} column): "
                     "its rows are keywords or search terms under each ad group, which this "
                     "import does not store, and their sums are not the ad groups' figures. "
                     + steps)
    index = match.index
    if "spend" not in index:
        rule = codes.MISSING_COLUMN
        spend = contract.column("spend").headers
        return Issue(None, "spend", rule.code, rule.severity,
                     f"Required column {spend[0]!r} (the amount spent) was not found in the "
                     "header.")
    if "metric_date" in index or ("reporting_starts" in index and "reporting_ends" in index):
        return None
    if match.context.get("period") is not None:
        return None
    rule = codes.NO_REPORT_DATE
    return Issue(None, "metric_date", rule.code, rule.severity,
                 "The report has no Day column and names no date range, so the days its "
                 f"figures belong to are unknown. {DAY_STEPS[contract.variant]}")


def entity_keys(match: HeaderMatch) -> str | None:
    """How the file identifies its campaigns, ad sets and ads: ids, names, or both (some levels
    by id, some by name only); None when it names none (account-level rows)."""
    by_id = by_name = False
    for _, id_field, name_field in LEVELS:
        if id_field in match.index:
            by_id = True
        elif name_field in match.index:
            by_name = True
    if by_id and by_name:
        return "ids_and_names"
    return "ids" if by_id else "names" if by_name else None


# Checked at promotion against the tenant's stored dimensions (worker/records/ad_promote.py,
# docs/decisions/0149): spec §6.1 "FK not found" keeps the fact with a NULL reference.
AD_SET_NOT_FOUND = Rule("AD_METRIC_AD_SET_NOT_FOUND", WARNING,
                        "The row names an ad set by id only (no name), and no ad set with that "
                        "id exists for this client and platform; the metrics are kept without "
                        "it.")
AD_NOT_FOUND = Rule("AD_METRIC_AD_NOT_FOUND", WARNING,
                    "The row names an ad by id only (no name), and no ad with that id exists "
                    "for this client and platform; the metrics are kept without it.")
NAME_AMBIGUOUS = Rule("AD_METRIC_NAME_AMBIGUOUS", CRITICAL,
                      "The row names a campaign, ad set or ad by name only, and several stored "
                      "ones with ids have that name; export with the ID columns so the row "
                      "says which.")
REPEATED = Rule("AD_METRIC_REPEATED_ROW", CRITICAL,
                "Another row of the file has the same day (or period), campaign, ad set, ad and "
                "breakdown, so the two cannot be told apart and neither was imported; export "
                "with the ID columns (Meta: Campaign ID, Ad set ID, Ad ID) or the breakdown "
                "that separates them.")
TOTAL_OUT_OF_RANGE = Rule("AD_METRIC_TOTAL_OUT_OF_RANGE", CRITICAL,
                          "The sum of this fact's slices is larger than a fact can hold.")
PROMOTION_RULES = (("ad_set_external_id", AD_SET_NOT_FOUND), ("ad_external_id", AD_NOT_FOUND),
                   (None, NAME_AMBIGUOUS), (None, REPEATED), (None, TOTAL_OUT_OF_RANGE))


def _key_part(value: Any) -> str:
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, date) else str(value)


AD_METRICS = Contract(
    name="ad_metrics", version="2.0.0", entity="AD_METRIC",
    description="Ad-platform metrics: one row per day (or per reported period) and campaign, "
    "ad set or ad, as the export breaks them down; ids optional (names identify entities "
    "then). Upload with platform=meta, google or tiktok: each reads that platform's own "
    "export, and every platform's canonical field names too.",
    columns=COLUMNS,
    key=NaturalKey(("metric_date", "campaign_external_id", "ad_set_external_id",
                    "ad_external_id"),
                   "day or period | campaign | ad set | ad (each by id, else by name path) | "
                   "breakdown", part=_key_part, compose=compose_key,
                   compose_columns=compose_columns),
    targets=(Target("campaigns", ("client_id", "platform", "external_id | path_key")),
             Target("ad_sets", ("client_id", "platform", "external_id | path_key")),
             Target("ads", ("client_id", "platform", "external_id | path_key")),
             Target("daily_metrics", ("client_id", "platform", "metric_date", "campaign_id",
                                      "ad_set_id", "ad_id")),
             Target("period_metrics", ("client_id", "platform", "period_start", "period_end",
                                       "campaign_id", "ad_set_id", "ad_id"))),
    duplicate=Rule("AD_METRIC_DUPLICATE", WARNING, "The same day, campaign, ad set, ad and "
                   "breakdown already appeared earlier in this file."),
    row_rules=ROW_RULES,
    promotion_rules=PROMOTION_RULES,
    promotion_order=2,
    derive=derive,
    derive_columns=derive_columns,
    derived_rules=DERIVED_RULES,
    header_check=header_check,
    examples=(
        {"campaign_external_id": "120210000000000001", "campaign_name": "Spring sale",
         "ad_set_external_id": "120210000000000101", "ad_set_name": "US 25-44",
         "ad_external_id": "120210000000001001", "ad_name": "Video 15s",
         # Numbers that read one way only (104,220 alone could be 104.22 in a comma-decimal
         # file: docs/decisions/0172), so the sample reads without a convention.
         "metric_date": "2024-03-01", "spend": "1,234.56", "impressions": "104220",
         "clicks": "1873", "conversions": "42", "currency": "USD"},
    ),
)


# ── each platform's export ────────────────────────────────────────────────────────────────
# Header names as each platform's report download writes them (docs/decisions/0145 lists the
# sources). The canonical names stay accepted too, so a script's JSON lines read everywhere.
def _with_canonical(headers: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    return {f: (*h, f) for f, h in headers.items()}


META = with_headers(
    AD_METRICS, name="ad_metrics", variant="meta",
    description="Meta Ads Manager export (Reports → Export table data, CSV), as downloaded: "
    "with the Day breakdown each row is a day; without it each row is the period of its "
    "Reporting starts / Reporting ends. Ids optional (names identify campaigns, ad sets and "
    "ads). The summary row Meta writes first (names empty) is skipped. The spend header "
    "carries the currency: Amount spent (USD). Results count as conversions only for a "
    "conversion objective.",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign name",),
        "ad_set_external_id": ("Ad set ID",),
        "ad_set_name": ("Ad set name",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name", "Ads"),
        "metric_date": ("Day",),
        "spend": ("Amount spent (USD)", "Amount spent"),
        "impressions": ("Impressions",),
        # Link clicks when the export has them; Clicks (all) counts likes and expands too.
        "clicks": ("Link clicks", "Clicks (all)"),
        "results": ("Results",),
        "result_indicator": ("Result indicator", "Result type"),
        "currency": ("Currency",),
        "reporting_starts": ("Reporting starts",),
        "reporting_ends": ("Reporting ends",),
        "age": ("Age",),
        "gender": ("Gender",),
        "country": ("Country",),
        "region": ("Region",),
        "placement": ("Placement",),
        "publisher_platform": ("Platform",),
        "device": ("Impression device", "Device platform"),
        "objective": ("Objective",),
    }),
    without=("network",),
    summary_prefixes=("total",), furniture=True,
    examples=({**AD_METRICS.examples[0], "reporting_starts": "2024-03-01",
               "reporting_ends": "2024-03-01", "currency": "", "conversions": "",
               "results": "42", "result_indicator": "actions:offsite_conversion.fb_pixel_purchase"},),
)

GOOGLE = with_headers(
    AD_METRICS, name="ad_metrics", variant="google",
    description="Google Ads report download as downloaded (Excel CSV: UTF-16 with a BOM, tab "
    "separated; or CSV): title lines above the header (the second names the date range), "
    "`--` for an empty cell, `Total: …` rows at the end (all skipped). Segmented by Day, each "
    "row is a day; otherwise the title's range makes each row that period (`All time` too). "
    "Campaign, ad group (the ad sets) or ad rows; ids optional.",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign",),
        "ad_set_external_id": ("Ad group ID",),
        "ad_set_name": ("Ad group",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name", "Ad"),
        "metric_date": ("Day", "Date"),
        "spend": ("Cost",),
        "impressions": ("Impr.", "Impressions"),
        "clicks": ("Clicks",),
        "conversions": ("Conversions", "Conv."),
        "currency": ("Currency code", "Currency"),
        "age": ("Age",),
        "gender": ("Gender",),
        "country": ("Country/Territory", "Country/Territory (Matched)"),
        "region": ("Region", "Region (Matched)"),
        "device": ("Device",),
        "network": ("Network", "Network (with search partners)"),
    }),
    without=("reporting_starts", "reporting_ends", "results", "result_indicator", "placement",
             "publisher_platform", "objective"),
    preamble_lines=5, summary_prefixes=("total",), empty_markers=frozenset({"--"}),
    furniture=True,
    examples=({**AD_METRICS.examples[0], "campaign_external_id": "20123456789",
               "ad_set_external_id": "150123456789", "ad_external_id": "",
               "ad_name": "", "metric_date": "2024-03-01"},),
)

TIKTOK = with_headers(
    AD_METRICS, name="ad_metrics", variant="tiktok",
    description="TikTok Ads Manager custom report export (CSV, or XLSX saved as CSV) by Day "
    "(`By Day`): one row per day and campaign, ad group or ad; `Total of …` rows skipped; "
    "`-` for an empty cell. Ids optional.",
    headers=_with_canonical({
        "campaign_external_id": ("Campaign ID",),
        "campaign_name": ("Campaign name",),
        "ad_set_external_id": ("Ad group ID",),
        "ad_set_name": ("Ad group name",),
        "ad_external_id": ("Ad ID",),
        "ad_name": ("Ad name",),
        "metric_date": ("By Day", "Date", "Day"),
        "spend": ("Cost", "Total cost"),
        "impressions": ("Impressions",),
        "clicks": ("Clicks (destination)", "Clicks (all)", "Clicks"),
        "conversions": ("Conversions",),
        "results": ("Results", "Result"),
        "currency": ("Currency",),
        "age": ("Age",),
        "gender": ("Gender",),
        "country": ("Country/Region", "Country"),
        "region": ("Subregion", "Region"),
        "placement": ("Placements Types", "Placement"),
        "publisher_platform": ("Platform", "OS"),
    }),
    without=("reporting_starts", "reporting_ends", "result_indicator", "device", "network",
             "objective"),
    preamble_lines=2, summary_prefixes=("total",), empty_markers=frozenset({"-", "--"}),
    furniture=True,
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
