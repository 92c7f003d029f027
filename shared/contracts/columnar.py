"""The contracts' readings over a whole column (issue 31, docs/decisions/0271).

Each normaliser of shared/contracts/normalise.py has a column form here: a polars expression of
a column of cells → (value, state). It reads the cells it can judge exactly the way the
normaliser does, and says PYTHON for any other cell, which the worker then reads with the
normaliser itself (worker/records/columns.py), once per distinct text. The worker only hands
these forms cells of printable ASCII, trimmed and non-empty (``SIMPLE``): NFKC, Unicode case
folding and Unicode whitespace are the identity there, so a regular expression over ASCII says
what the Python code says. Everything else (accents, full-width digits, control characters) is
Python's to judge.

polars is imported when a form is called, not when the contracts are: the gateway publishes the
contracts and never validates a file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from shared.contracts import normalise as n

# What a column form says of each cell, beside its value.
OK, INVALID, AMBIGUOUS, PYTHON = 0, 1, 2, 3
# The cells the column forms read: printable ASCII (a space, letters, digits, punctuation).
SIMPLE = r"^[ -~]*$"
# Value types of a column's values (the stage's columns follow them).
TEXT, DATE, MONEY, DECIMAL, COUNT = "text", "date", "money", "decimal", "count"
# Whole digits a number's form reads, by kind (int64 holds them in cents, or in units of
# 10^-DECIMAL_PLACES); a longer number is Python's to read (it is out of every range anyway).
INT_DIGITS = {MONEY: 15, COUNT: 15, DECIMAL: 9}
# Decimal places kept of a measure (conversions, results): the tables keep 4.
DECIMAL_PLACES = 9
# A column read once per distinct cell is read cell by cell where more than this share of its
# cells are distinct (10,000 distinct amounts: the join back cost 4-10 ms more than it saved).
DISTINCT_SHARE = 0.5

Expr = Any  # a polars expression (polars is not imported at module load)
Reading = tuple[Expr, Expr]  # (value, state)
ColumnForm = Callable[..., Reading]


def _pl() -> Any:
    import polars

    return polars


def dtype(kind: str) -> Any:
    """The polars type of a column's values."""
    pl = _pl()
    return {TEXT: pl.String, DATE: pl.Date, MONEY: pl.Decimal(38, 2),
            DECIMAL: pl.Decimal(38, DECIMAL_PLACES), COUNT: pl.Int64}[kind]


def _state(pl: Any, ok: Expr, otherwise: int = INVALID) -> Expr:
    return pl.when(ok).then(pl.lit(OK)).otherwise(pl.lit(otherwise))


# ── text ──────────────────────────────────────────────────────────────────────────────────
def text(cells: Expr) -> Reading:
    """No normaliser: the trimmed text."""
    return cells, _pl().lit(OK)


def name(cells: Expr) -> Reading:
    """``n.name``: runs of spaces collapsed (the only whitespace printable ASCII has)."""
    return cells.str.replace_all(" {2,}", " "), _pl().lit(OK)


def fold(values: Expr) -> Expr:
    """``n.fold`` of ASCII: upper case (NFKC and case folding change nothing)."""
    return values.str.to_uppercase().str.strip_chars(" ")


def case_key(values: Expr) -> Expr:
    """``n.case_number_key`` of ASCII: upper case, then only A–Z and 0–9."""
    return values.str.to_uppercase().str.replace_all("[^A-Z0-9]", "")


def case_number_text(cells: Expr) -> Reading:
    """The case number as given, empty when its key is (it then counts as missing)."""
    pl = _pl()
    return pl.when(case_key(cells) == "").then(pl.lit("")).otherwise(cells), pl.lit(OK)


# `n.name_key`'s legal-entity pattern in one pass: `L.L.C.` → LLC keeps its letters only.
_ENTITY = r"\b(?:(L)\.?(L)\.?(C)|(INC|CORP|LTD|CO))\b\.?"


def name_key(values: Expr) -> Expr:
    """``n.name_key`` of ASCII names: folded, entity indicators unified, punctuation but
    hyphens made spaces, spaces collapsed, trailing legal suffixes removed (unless that leaves
    nothing)."""
    pl = _pl()
    upper = fold(values)
    unified = upper.str.replace_all(_ENTITY, "$1$2$3$4")
    bare = unified.str.replace_all(r"[^A-Za-z0-9_\s-]", " ").str.replace_all(r"\s+", " ") \
        .str.strip_chars(" ")
    without = bare.str.replace(r"(?:\s+(?:LLC|INC|CORP|LTD|CO))+$", "")
    return pl.when(without == "").then(bare).otherwise(without)


def external_id(cells: Expr) -> Reading:
    """``n.external_id`` then ``_plain_id`` (ASCII has no control character): a leading
    apostrophe dropped, scientific notation INVALID, a trailing `.0` after digits dropped."""
    pl = _pl()
    bare = cells.str.strip_prefix("'").str.strip_chars(" ")
    scientific = bare.str.contains(r"^[+-]?[0-9]+(?:[.,][0-9]+)?[eE][+-]?[0-9]+$")
    value = pl.when(bare.str.contains(r"^[0-9]+\.0$")) \
        .then(bare.str.strip_suffix(".0")).otherwise(bare)
    return value, _state(pl, ~scientific)


def breakdown(cells: Expr, limit: int) -> Reading:
    """A breakdown's value: ``n.name``, INVALID past ``limit`` characters."""
    pl = _pl()
    value, _ = name(cells)
    return value, _state(pl, value.str.len_chars() <= limit)


def currency(cells: Expr) -> Reading:
    pl = _pl()
    code = cells.str.to_uppercase()
    return code, _state(pl, code.str.contains(r"^[A-Z]{3}$"))


def usps_state(cells: Expr) -> Reading:
    pl = _pl()
    code = cells.str.to_uppercase()
    return code, _state(pl, code.is_in(sorted(n.US_STATES)))


def zip_code(cells: Expr) -> Reading:
    pl = _pl()
    parts = cells.str.extract_groups(r"^([0-9]{5})(?:[- ]?([0-9]{4}))?$")
    five, four = parts.struct.field("1"), parts.struct.field("2")
    value = pl.when(four.is_not_null()).then(pl.concat_str([five, pl.lit("-"), four])) \
        .otherwise(five)
    return value, _state(pl, five.is_not_null())


# ── numbers (docs/decisions/0172) ─────────────────────────────────────────────────────────
def _reading(frame: Any, sep: str, prefix: str) -> Any:
    """``n._read`` under one separator, over ``frame``'s ``body`` (digits and separators,
    starting with a digit): adds ``<prefix>reads``, ``<prefix>integer`` (digits) and
    ``<prefix>fraction``."""
    pl = _pl()
    group = "," if sep == "." else "."
    es, eg = re.escape(sep), re.escape(group)
    frame = frame.with_columns(pl.col("body").str.extract_groups(
        rf"^(?:([1-9][0-9]{{0,2}}(?:{eg}[0-9]{{3}})+)(?:{es}([0-9]+))?|([0-9]+)(?:{es}([0-9]*))?)$"
    ).alias("parts"))
    parts = pl.col("parts")
    grouped, grouped_frac = parts.struct.field("1"), parts.struct.field("2")
    plain, plain_frac = parts.struct.field("3"), parts.struct.field("4")
    return frame.with_columns(
        (grouped.is_not_null() | plain.is_not_null()).alias(f"{prefix}reads"),
        grouped.str.replace_all(group, "", literal=True).fill_null(plain)
        .alias(f"{prefix}integer"),
        grouped_frac.fill_null(plain_frac).fill_null("").alias(f"{prefix}fraction"),
    ).drop("parts")


def _canonical(integer: Expr, fraction: Expr) -> Expr:
    pl = _pl()
    whole = integer.str.strip_chars_start("0")
    return pl.concat_str([pl.when(whole == "").then(pl.lit("0")).otherwise(whole), pl.lit("."),
                          fraction.str.strip_chars_end("0")])


def number(cells: Any, decimal: str | None, kind: str) -> Any:
    """``n.read_number`` of the plain forms (`12`, `-1,234.5`, `$12,500.00`, `1.234,56`) of a
    Series of cells: a frame of ``negative``, ``integer`` (digits), ``fraction`` (digits) and
    ``state``. Any other form (a currency code, a percent sign, brackets, spaces between
    digits) is PYTHON's. Built a step at a time, each step's columns kept: as one expression,
    every use of a part re-ran the regular expressions under it (a count column read 10,000
    cells in 60 ms, against 5 ms so)."""
    pl = _pl()
    parts = pl.col("cells").str.extract_groups(r"^([+-]?)\$?([0-9][0-9.,]*)$")
    frame = pl.DataFrame({"cells": cells}).select(
        parts.struct.field("1").alias("sign"), parts.struct.field("2").alias("body"))
    body = pl.col("body")
    if decimal is not None:
        frame = _reading(frame, decimal, "")
        state = pl.when(body.is_null()).then(pl.lit(PYTHON)) \
            .otherwise(_state(pl, pl.col("reads")))
        integer, fraction = pl.col("integer"), pl.col("fraction")
    else:
        frame = _reading(_reading(frame, ".", "dot_"), ",", "comma_")
        dot, comma = pl.col("dot_reads"), pl.col("comma_reads")
        differ = _canonical(pl.col("dot_integer"), pl.col("dot_fraction")) \
            != _canonical(pl.col("comma_integer"), pl.col("comma_fraction"))
        integer = pl.when(dot).then(pl.col("dot_integer")).otherwise(pl.col("comma_integer"))
        fraction = pl.when(dot).then(pl.col("dot_fraction")).otherwise(pl.col("comma_fraction"))
        state = pl.when(body.is_null()).then(pl.lit(PYTHON)) \
            .when(dot & comma & differ).then(pl.lit(AMBIGUOUS)) \
            .otherwise(_state(pl, dot | comma))
    frame = frame.select((pl.col("sign") == "-").alias("negative"), integer.alias("integer"),
                         fraction.alias("fraction"), state.alias("state"))
    too_long = pl.col("integer").str.strip_chars_start("0").str.len_chars() > INT_DIGITS[kind]
    return frame.with_columns(pl.when((pl.col("state") == OK) & too_long).then(pl.lit(PYTHON))
                              .otherwise(pl.col("state")).alias("state"))


def _by_frame(cells: Expr, read: Callable[[Any], Any], value_dtype: Any,
              distinct: bool = False) -> Reading:
    """A reading computed a step at a time over the column's Series (``read``: Series →
    frame of ``value`` and ``state``), as the (value, state) expressions a column form gives;
    ``distinct``: over each distinct cell once, then given back to every row, where the
    column repeats itself (an export's days, clicks, results; 10,000 cells of a Meta export's
    spend, ~100 distinct: 19 → 6 ms)."""
    pl = _pl()
    struct = pl.Struct({"value": value_dtype, "state": pl.Int32})

    def typed(series: Any) -> Any:
        return read(series).select(pl.col("value").cast(value_dtype),
                                   pl.col("state").cast(pl.Int32))

    def whole(series: Any) -> Any:
        texts = series.unique(maintain_order=True) if distinct else series
        if len(texts) > len(series) * DISTINCT_SHARE:  # the join would cost more than it saves
            return typed(series).to_struct("r")
        found = typed(texts).with_columns(texts.alias("cells"))
        return pl.DataFrame({"cells": series}).join(
            found, on="cells", how="left", nulls_equal=True, maintain_order="left"
        ).select("value", "state").to_struct("r")

    parsed = cells.map_batches(whole, return_dtype=struct)
    return parsed.struct.field("value"), parsed.struct.field("state")


def _signed_decimal(pl: Any, negative: Expr, magnitude: Expr, places: int) -> Expr:
    """An int64 magnitude in units of 10^-places, with its sign, as Decimal(38, places)."""
    text = magnitude.cast(pl.String).str.zfill(places + 1)
    digits = pl.concat_str([pl.when(negative).then(pl.lit("-")).otherwise(pl.lit("")),
                            text.str.slice(0, text.str.len_chars() - places), pl.lit("."),
                            text.str.slice(-places)])
    return digits.cast(pl.Decimal(38, places))


def _int(pl: Any, digits: Expr) -> Expr:
    return pl.when(digits == "").then(pl.lit(0, pl.Int64)) \
        .otherwise(digits.cast(pl.Int64, strict=False))


def money(cells: Expr, decimal: str | None) -> Reading:
    """``n.money``/``n.amount``: the number rounded half up to cents (away from zero)."""
    pl = _pl()

    def read(series: Any) -> Any:
        frame = number(series, decimal, MONEY)
        padded = pl.concat_str([pl.col("fraction"), pl.lit("000")])
        cents = _int(pl, pl.col("integer")) * 100 \
            + padded.str.slice(0, 2).cast(pl.Int64, strict=False) \
            + (padded.str.slice(2, 1).cast(pl.Int64, strict=False) >= 5).cast(pl.Int64)
        frame = frame.with_columns(cents.alias("cents"))
        return frame.select(pl.when(pl.col("state") == OK).then(
            _signed_decimal(pl, pl.col("negative"), pl.col("cents"), 2)).alias("value"),
            pl.col("state"))

    return _by_frame(cells, read, dtype(MONEY), distinct=True)


def decimal_number(cells: Expr, decimal: str | None) -> Reading:
    """``n.decimal_number``: the number as written (up to DECIMAL_PLACES places; more are
    Python's to read)."""
    pl = _pl()

    def read(series: Any) -> Any:
        frame = number(series, decimal, DECIMAL)
        fraction = pl.col("fraction")
        frame = frame.with_columns(
            pl.when((pl.col("state") == OK) & (fraction.str.len_chars() > DECIMAL_PLACES))
            .then(pl.lit(PYTHON)).otherwise(pl.col("state")).alias("state"),
            (_int(pl, pl.col("integer")) * 10 ** DECIMAL_PLACES + pl.concat_str(
                [fraction, pl.lit("0" * DECIMAL_PLACES)]).str.slice(0, DECIMAL_PLACES)
             .cast(pl.Int64, strict=False)).alias("scaled"))
        return frame.select(pl.when(pl.col("state") == OK).then(_signed_decimal(
            pl, pl.col("negative"), pl.col("scaled"), DECIMAL_PLACES)).alias("value"),
            pl.col("state"))

    return _by_frame(cells, read, dtype(DECIMAL), distinct=True)


def count(cells: Expr, decimal: str | None) -> Reading:
    """``n.count``: a whole number (`12,345`, `12.0`); a fraction is INVALID."""
    pl = _pl()

    def read(series: Any) -> Any:
        frame = number(series, decimal, COUNT)
        whole = pl.col("fraction").str.contains("^0*$")
        frame = frame.with_columns(
            pl.when((pl.col("state") == OK) & ~whole).then(pl.lit(INVALID))
            .otherwise(pl.col("state")).alias("state"),
            _int(pl, pl.col("integer")).alias("magnitude"))
        magnitude = pl.col("magnitude")
        return frame.select(pl.when(pl.col("state") == OK).then(
            pl.when(pl.col("negative")).then(-magnitude).otherwise(magnitude)).alias("value"),
            pl.col("state"))

    return _by_frame(cells, read, dtype(COUNT), distinct=True)


# ── dates ─────────────────────────────────────────────────────────────────────────────────
_MONTH_NUMBERS = {m: f"{i:02d}" for m, i in n._MONTHS.items()}


def _ymd(pl: Any, year: Expr, month: Expr, day: Expr) -> tuple[Expr, Expr]:
    """(date, whether it is one): year 0 and 30 February are not."""
    iso = pl.concat_str([year, pl.lit("-"), month.str.zfill(2), pl.lit("-"), day.str.zfill(2)])
    value = pl.when(year.cast(pl.Int64, strict=False) >= 1) \
        .then(iso.str.to_date("%Y-%m-%d", strict=False))
    return value, value.is_not_null()


def _first(pl: Any, readings: list[tuple[Expr, Expr, Expr]]) -> tuple[Expr, Expr, Expr]:
    """Of several patterns, the first that matches decides: (date, state). ``readings`` are
    (matched, date, is a date); also whether any matched (what matched none is the caller's)."""
    value, valid, matched = pl.lit(None, pl.Date), pl.lit(False), pl.lit(False)
    for hit, day, ok in reversed(readings):
        value = pl.when(hit).then(day).otherwise(value)
        valid = pl.when(hit).then(ok).otherwise(valid)
        matched = matched | hit
    return value, pl.when(valid).then(pl.lit(OK)).otherwise(pl.lit(INVALID)), matched


def filed_date(cells: Expr) -> Reading:
    """``n.filed_date``: MM/DD/YYYY, YYYY-MM-DD or DD-MMM-YYYY; nothing else is a date."""
    pl = _pl()
    mdy = cells.str.extract_groups(r"^([0-9]{1,2})/([0-9]{1,2})/([0-9]{4})$")
    iso = cells.str.extract_groups(r"^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})$")
    dmy = cells.str.extract_groups(r"^([0-9]{1,2})-([A-Za-z]{3})-([0-9]{4})$")
    readings = []
    for parts, (y, m, d) in ((mdy, ("3", "1", "2")), (iso, ("1", "2", "3"))):
        day, ok = _ymd(pl, parts.struct.field(y), parts.struct.field(m), parts.struct.field(d))
        readings.append((parts.struct.field("1").is_not_null(), day, ok))
    month = dmy.struct.field("2").str.to_uppercase().replace_strict(
        _MONTH_NUMBERS, default=None, return_dtype=pl.String)
    day, ok = _ymd(pl, dmy.struct.field("3"), month, dmy.struct.field("1"))
    readings.append((dmy.struct.field("1").is_not_null(), day, ok & month.is_not_null()))
    value, state, _ = _first(pl, readings)
    return value, state


def report_date(cells: Expr) -> Reading:
    """``n.report_date`` of its numeric forms (`2024-01-15`, with a time as TikTok writes
    it, `2024/01/15`, `01/15/2024`); a month or weekday written in words is PYTHON's. Read
    once per distinct cell (an export names few days), each pattern's parts kept."""
    pl = _pl()

    def read(series: Any) -> Any:
        frame = pl.DataFrame({"cells": series}).with_columns(
            pl.col("cells").str.extract_groups(
                r"^([0-9]{4})-([0-9]{1,2})-([0-9]{1,2})(?:[ T][0-9]{1,2}:[0-9]{2}"
                r"(?::[0-9]{2}(?:\.[0-9]+)?)?(?:Z|[+-][0-9]{2}:?[0-9]{2})?)?$").alias("iso"),
            pl.col("cells").str.extract_groups(r"^([0-9]{4})/([0-9]{1,2})/([0-9]{1,2})$")
            .alias("slashed"),
            pl.col("cells").str.extract_groups(r"^([0-9]{1,2})/([0-9]{1,2})/([0-9]{4})$")
            .alias("mdy"))
        readings = []
        for name, (y, m, d) in (("iso", ("1", "2", "3")), ("slashed", ("1", "2", "3")),
                                ("mdy", ("3", "1", "2"))):
            parts = pl.col(name)
            day, ok = _ymd(pl, parts.struct.field(y), parts.struct.field(m),
                           parts.struct.field(d))
            readings.append((parts.struct.field("1").is_not_null(), day, ok))
        value, state, matched = _first(pl, readings)
        return frame.select(value.alias("value"),
                            pl.when(matched).then(state).otherwise(pl.lit(PYTHON)).alias("state"))

    return _by_frame(cells, read, pl.Date, distinct=True)


def never(values: Expr) -> Expr:
    """A check no printable ASCII value can break (a script mix, a letter outside A–Z)."""
    return values.is_null() & values.is_not_null()


# ── values only Python can judge, once per distinct value ───────────────────────────────────
def python_map(series: Any, function: Callable[[Any], Any], return_dtype: Any) -> Any:
    """``function`` of each value of an eager Series, called once per distinct non-null value
    (a file names few courts, days and campaigns, over and over)."""
    pl = _pl()
    distinct = series.drop_nulls().unique().to_list()
    if not distinct:
        return pl.Series(series.name, [None] * len(series), dtype=return_dtype)
    mapping = {value: function(value) for value in distinct}
    return series.replace_strict(mapping, default=None, return_dtype=return_dtype)


def per_value(series: Any, vector: Callable[[Expr], Expr] | None,
              function: Callable[[Any], Any], return_dtype: Any) -> Any:
    """``function`` of each value of a String Series: ``vector`` (its column form) for the
    printable ASCII ones, ``function`` once per distinct value for the others."""
    pl = _pl()
    if vector is None:
        return python_map(series, function, return_dtype)
    simple = series.str.contains(SIMPLE)
    frame = pl.DataFrame({"v": series, "simple": simple})
    fast = frame.select(pl.when(pl.col("simple")).then(vector(pl.col("v"))).alias("v"))["v"]
    if bool(simple.fill_null(True).all()):
        return fast.cast(return_dtype).alias(series.name)
    slow = python_map(series.set(simple.fill_null(True), None), function, return_dtype)
    return fast.cast(return_dtype).fill_null(slow).alias(series.name)


def map_rows(frame: Any, columns: tuple[str, ...], function: Callable[..., Any],
             return_dtype: Any) -> Any:
    """``function(*values)`` of each row's ``columns``, called once per distinct combination:
    a Series in the frame's row order."""
    pl = _pl()
    distinct = frame.select(columns).unique()
    results = pl.Series("_mapped", [function(*row) for row in distinct.iter_rows()],
                        dtype=return_dtype)
    mapped = frame.select(columns).join(distinct.with_columns(results), on=list(columns),
                                        how="left", nulls_equal=True, maintain_order="left")
    return mapped["_mapped"]
