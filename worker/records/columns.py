"""Validate a chunk of a records file column by column (issue 31, docs/decisions/0271).

The rows of a chunk arrive as columns of cells (worker/records/table.py). Each contract column
is read by its column form (shared/contracts/columnar.py) over every printable ASCII cell at
once; a cell the form cannot judge (accents, full-width digits, control characters, a number
written with a currency code) is read by the contract's own per-cell code
(``contracts.read_cell``), once per distinct text. Each rule is then a boolean column over the
values: checks, repairs, rules over several fields, the derived values of ad metrics. The
issues come out in ``validate_row``'s order (per row: errors, then warnings, each in the order
the rules run), with the same codes, fields and messages, so a row reads the same whichever
way it went; tests/unit/test_records_columns.py holds the two to each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import polars as pl

from shared import contracts
from shared.contracts import columnar as c

# Issue order within a row: hygiene rules, then each column's (SLOT apart), then the rules over
# several fields, then what the whole row derives.
SLOT = 100
SEVERITY_RANK = {contracts.Severity.CRITICAL.value: 0, contracts.Severity.WARNING.value: 1}
ISSUE_SCHEMA = {"row": pl.Int64, "slot": pl.Int64, "field": pl.String, "code": pl.String,
                "severity": pl.String, "message": pl.String}


@dataclass(frozen=True)
class Validated:
    """A chunk validated: ``values`` holds its valid rows (``row``, ``natural_key``, each
    field's value and the derived ones), ``issues`` every issue in file order, ``rows`` how
    many rows the chunk had."""

    rows: int
    values: pl.DataFrame
    issues: pl.DataFrame


class _Issues:
    """Issues as they are found: boolean columns over the chunk's rows, or rows and rules."""

    def __init__(self, rows: pl.Series) -> None:
        self.rows = rows
        self.frames: list[pl.DataFrame] = []

    def add(self, mask: pl.Series, rule: contracts.Rule, field: str | None, slot: int,
            rows: pl.Series | None = None) -> None:
        hit = (rows if rows is not None else self.rows).filter(mask.fill_null(False))
        if hit.len():
            self.frames.append(pl.DataFrame({"row": hit}).with_columns(
                pl.lit(slot, pl.Int64).alias("slot"), pl.lit(field, pl.String).alias("field"),
                pl.lit(rule.code).alias("code"), pl.lit(rule.severity.value).alias("severity"),
                pl.lit(rule.message).alias("message")))

    def add_rows(self, frame: pl.DataFrame) -> None:
        if frame.height:
            self.frames.append(frame.select(list(ISSUE_SCHEMA)).cast(ISSUE_SCHEMA))  # type: ignore[arg-type]

    def frame(self) -> pl.DataFrame:
        if not self.frames:
            return pl.DataFrame(schema=ISSUE_SCHEMA)
        issues = pl.concat(self.frames, how="vertical")
        rank = pl.col("severity").replace_strict(SEVERITY_RANK, return_dtype=pl.Int64)
        return issues.sort(["row", rank, "slot"], maintain_order=True)

    def critical_rows(self) -> pl.Series:
        critical = [f.filter(pl.col("severity") == "critical")["row"] for f in self.frames]
        if not critical:
            return pl.Series("row", [], dtype=pl.Int64)
        return pl.concat(critical).unique()


def validate(cells: pl.DataFrame, contract: contracts.Contract,
             match: contracts.HeaderMatch) -> Validated:
    """``cells``: ``row`` (the row numbers), ``c0``… (each header column's cells, "" where a
    short row has none) and ``too_wide`` (cells past the header that are not blank)."""
    rows = cells["row"]
    issues = _Issues(rows)
    hygiene = contract.hygiene()
    issues.add(cells["too_wide"], hygiene["ROW_TOO_WIDE"], None, 0)
    for k, (name, position) in enumerate(match.repeats):
        issues.add(_conflicts(cells, match.index[name], position),
                   hygiene["COLUMN_CONFLICT"], name, 1 + k)
    values: dict[str, pl.Series] = {"row": rows}
    for i, column in enumerate(contract.columns):
        value = _column(cells, contract, column, match, match.positions[i], issues,
                        SLOT * (i + 1))
        values[column.name] = value
        vectors = dict(column.derived_columns)
        for name, derive in column.derived:
            values[name] = _derived(value, vectors.get(name), derive)
    frame = pl.DataFrame(values)
    base = SLOT * (len(contract.columns) + 1)
    fields = _Fields({name: pl.col(name) for name in frame.columns})
    for j, row_rule in enumerate(contract.row_rules):
        if any(f not in frame.columns for f in row_rule.fields):
            continue  # a field this export does not have is never given
        given = pl.all_horizontal([pl.col(f).is_not_null() for f in row_rule.fields])
        broken = frame.select((given & row_rule.broken_over(fields)).alias("x"))["x"]
        issues.add(broken, row_rule.rule, None, base + j)
    frame = frame.filter(~pl.col("row").is_in(issues.critical_rows().implode()))
    if contract.derive_columns is not None:
        frame, derived = contract.derive_columns(frame, match.context)
        for k, (rule, field, mask) in enumerate(derived):
            issues.add(mask, rule, field, base + SLOT + k, rows=frame["row"])
        frame = frame.filter(~pl.col("row").is_in(issues.critical_rows().implode()))
    frame = frame.with_columns(_natural_key(frame, contract).alias("natural_key"))
    return Validated(cells.height, frame, issues.frame())


class _Fields(dict):  # type: ignore[type-arg]
    """Each field's column for a rule over several; a field the export lacks is NULL."""

    def __missing__(self, name: str) -> pl.Expr:
        return pl.lit(None)


# ── one column ───────────────────────────────────────────────────────────────────────────────
def _column(cells: pl.DataFrame, contract: contracts.Contract, column: contracts.Column,
            match: contracts.HeaderMatch, position: int, issues: _Issues,
            slot: int) -> pl.Series:
    """The column's values (null where it has none or broke a critical rule); its issues
    added from ``slot`` on."""
    given = position >= 0 or column.name in match.implied
    dtype = c.dtype(column.kind)
    if not given:
        # A column the file lacks: every cell is empty and none is judged (a Meta export
        # lacks 13 of the contract's 24 columns; read as empty cells, they took 80 ms a chunk).
        if column.required and column.missing is not None:
            issues.add(_repeat(True, cells.height, pl.Boolean), column.missing, column.name,
                       slot)
        return _repeat(None, cells.height, dtype).alias(column.name)
    raw = cells[f"c{position}"] if position >= 0 else _repeat("", cells.height, pl.String)
    if column.name in match.implied:
        raw = _implied(raw, match.implied[column.name])
    frame = pl.DataFrame({"raw": raw}).with_columns(
        pl.col("raw").str.contains(c.SIMPLE).alias("simple"),
        pl.col("raw").str.strip_chars(" ").alias("text"))
    if contract.empty_markers:
        frame = frame.with_columns(pl.when(pl.col("text").is_in(sorted(contract.empty_markers)))
                                   .then(pl.lit("")).otherwise(pl.col("text")).alias("text"))
    frame = frame.with_columns((pl.col("text") == "").alias("empty"))
    if column.read_column is None:
        read = pl.lit(None, dtype), pl.lit(c.PYTHON)
    elif column.number:
        read = column.read_column(pl.col("text"), match.decimal)
    else:
        read = column.read_column(pl.col("text"))
    frame = frame.with_columns(read[0].cast(dtype).alias("value"), read[1].alias("state"))
    simple, empty, state = frame["simple"], frame["empty"], frame["state"]
    python = ~simple | (~empty & (state == c.PYTHON))
    # An empty cell: missing when required; the column's default when the file has it.
    blank = simple & empty
    if column.required and column.missing is not None:
        issues.add(blank, column.missing, column.name, slot)
    judged = simple & ~empty
    for kind, rule in ((c.INVALID, column.invalid),
                       (c.AMBIGUOUS, column.ambiguous or column.invalid)):
        if rule is not None:
            issues.add(judged & (state == kind), rule, column.name, slot)
    alive = judged & (state == c.OK)
    value = frame["value"]
    # Text that reads as nothing (a case number of punctuation only): as good as missing.
    nothing = alive & (value.is_null() | (value == "") if column.kind == c.TEXT
                       else value.is_null())
    if column.missing is not None:
        issues.add(nothing, column.missing, column.name, slot)
    alive = alive & ~nothing
    value = value.zip_with(alive, _repeat(None, len(value), dtype))
    for k, rule in enumerate(column.checks):
        if rule.broken is None:
            continue
        hit = pl.select(rule.broken_over(pl.lit(value))).to_series().fill_null(False) & alive
        issues.add(hit, rule, column.name, slot + 1 + k)
        if rule.severity is contracts.Severity.CRITICAL:
            value = value.set(hit, None)
            alive = alive & ~hit
        elif rule.repair is not None:
            repaired = pl.select(rule.repaired_over(pl.lit(value))).to_series()
            value = value.zip_with(~hit, repaired.cast(dtype))
    if column.default is not None and given:
        defaults = _repeat(column.default, len(value), dtype)
        value = value.zip_with(~blank, defaults)
    if python.any():
        value = _python_cells(frame["raw"], python, contract, column, given, match.decimal,
                              dtype, value, issues, slot)
    return value.alias(column.name)


def _repeat(value: Any, count: int, dtype: Any) -> pl.Series:
    """``value`` ``count`` times, made once and repeated natively: a list of 10,000 Python
    Decimals (a measure's default 0) took 14 ms a column to convert."""
    return pl.Series([value], dtype=dtype).new_from_index(0, count)


def _python_cells(raw: pl.Series, python: pl.Series, contract: contracts.Contract,
                  column: contracts.Column, given: bool, decimal: str | None,
                  dtype: Any, value: pl.Series, issues: _Issues, slot: int) -> pl.Series:
    """The cells only the contract's per-cell code can read, once per distinct text."""
    texts = raw.filter(python).unique().to_list()
    read = {text: contracts.read_cell(contract, column, text, given, decimal) for text in texts}
    mapped = raw.set(~python, None)
    values = mapped.replace_strict({t: _typed(cell.value, column.kind) for t, cell in read.items()},
                                   default=None, return_dtype=dtype)
    value = value.zip_with(~python, values)
    found = [(text, k, rule) for text, cell in read.items() for k, rule in enumerate(cell.rules)]
    if found:
        rules = pl.DataFrame({
            "raw": [f[0] for f in found], "slot": [slot + f[1] for f in found],
            "field": [column.name] * len(found), "code": [f[2].code for f in found],
            "severity": [f[2].severity.value for f in found],
            "message": [f[2].message for f in found]})
        hits = pl.DataFrame({"row": issues.rows, "raw": mapped}).filter(
            pl.col("raw").is_not_null()).join(rules, on="raw", maintain_order="left")
        issues.add_rows(hits)
    return value


def _typed(value: Any, kind: str) -> Any:
    """A per-cell value as its column holds it (a measure kept to DECIMAL_PLACES places)."""
    if value is None or kind != c.DECIMAL:
        return value
    return Decimal(value).quantize(Decimal(1).scaleb(-c.DECIMAL_PLACES), rounding=ROUND_HALF_UP)


def _implied(raw: pl.Series, unit: str) -> pl.Series:
    """The header's unit where a row has no value of its own (`t if t and t.strip() else
    unit`)."""
    simple = raw.str.contains(c.SIMPLE)
    blank = pl.select(pl.when(pl.lit(simple)).then(pl.lit(raw).str.strip_chars(" ") == "")
                      ).to_series()
    if not bool(simple.all()):
        others = c.python_map(raw.set(simple, None), lambda t: not t.strip(), pl.Boolean)
        blank = blank.fill_null(others)
    return raw.set(blank.fill_null(False), unit)


def _conflicts(cells: pl.DataFrame, first: int, position: int) -> pl.Series:
    """Rows where a repeated column's cell is not its first one's (trimmed as Python trims)."""
    a, b = cells[f"c{first}"], cells[f"c{position}"]
    simple = a.str.contains(c.SIMPLE) & b.str.contains(c.SIMPLE)
    differ = pl.select(pl.lit(a).str.strip_chars(" ") != pl.lit(b).str.strip_chars(" ")
                       ).to_series()
    if bool(simple.all()):
        return differ
    pairs = pl.DataFrame({"a": a, "b": b})
    python = c.map_rows(pairs, ("a", "b"), lambda x, y: x.strip() != y.strip(), pl.Boolean)
    return differ.zip_with(simple, python)


def _derived(value: pl.Series, vector: Any, derive: Any) -> pl.Series:
    """A value derived from each value (a key, a folded name): its column form over ASCII
    values, the per-value function over the others; None where the value is None."""
    if value.dtype != pl.String:
        return c.python_map(value, derive, pl.String)
    return c.per_value(value, vector, derive, pl.String)


def _natural_key(frame: pl.DataFrame, contract: contracts.Contract) -> pl.Expr | pl.Series:
    key = contract.key
    if key.compose_columns is not None:
        return key.compose_columns(frame)
    parts: Sequence[pl.Series] = [
        c.per_value(frame[f], key.part_column, key.part, pl.String).fill_null("")
        if frame[f].dtype == pl.String else
        c.python_map(frame[f], key.part, pl.String).fill_null("")
        for f in key.fields]
    if len(parts) == 1:
        return parts[0]
    return pl.select(pl.concat_str([pl.lit(p) for p in parts], separator=key.separator)
                     ).to_series()


# ── rows validated one at a time (JSON lines) ───────────────────────────────────────────────
def frame_of(contract: contracts.Contract, rows: Sequence[contracts.RowResult]) -> pl.DataFrame:
    """Valid rows ``validate_row`` read, as the frame ``validate`` gives: ``row``,
    ``natural_key`` and each value in its column's type (what the stage takes)."""
    kinds = {col.name: col.kind for col in contract.columns}
    names = list(dict.fromkeys(name for r in rows for name in r.values))
    data: dict[str, pl.Series] = {
        "row": pl.Series([r.row for r in rows], dtype=pl.Int64),
        "natural_key": pl.Series([contracts.natural_key(contract, r.values) for r in rows],
                                 dtype=pl.String)}
    for name in names:
        kind = kinds.get(name, c.DATE if name.startswith("period_") else c.TEXT)
        values = [_typed(r.values.get(name), kind) for r in rows]
        if kind in (c.MONEY, c.DECIMAL):
            data[name] = pl.Series([None if v is None else str(v) for v in values],
                                   dtype=pl.String).cast(c.dtype(kind))
        else:
            data[name] = pl.Series(values, dtype=c.dtype(kind))
    return pl.DataFrame(data)


def issues_of(rows: Sequence[contracts.RowResult]) -> pl.DataFrame:
    """The rows' issues, errors then warnings, as ``validate`` gives them."""
    found = [(r.row, k, i.field, i.code, i.severity.value, i.message)
             for r in rows for k, i in enumerate(r.errors + r.warnings)]
    return pl.DataFrame(found, schema=ISSUE_SCHEMA, orient="row")
