"""The column-wise validation held to the per-row one (tests/unit/test_records_columns.py):
the same rows through ``worker.records.columns.validate`` and through ``contracts.validate_row``
must give the same issues (row, field, code, severity, message, in order), the same valid rows,
the same values and the same natural keys."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import polars as pl

from shared import contracts
from worker.records import columns


def cells_frame(rows: Sequence[Sequence[str]], width: int) -> pl.DataFrame:
    """Rows of cells as the table reader hands them over: one String column per header
    column ("" past a short row's end), the row numbers, and the too-wide flag."""
    data: dict[str, Any] = {"row": list(range(1, len(rows) + 1))}
    for i in range(width):
        data[f"c{i}"] = [r[i] if i < len(r) else "" for r in rows]
    data["too_wide"] = [len(r) > width and any(x.strip() for x in r[width:]) for r in rows]
    return pl.DataFrame(data, schema={"row": pl.Int64, **{f"c{i}": pl.String
                                                        for i in range(width)},
                                      "too_wide": pl.Boolean})


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return a is not None and b is not None and Decimal(a) == Decimal(b)
    return a == b


def differences(contract: contracts.Contract, match: contracts.HeaderMatch,
                rows: Sequence[Sequence[str]]) -> list[str]:
    """What the two validations say differently of ``rows``: [] when they agree."""
    got = columns.validate(cells_frame(rows, match.width), contract, match)
    issues: dict[int, list[tuple[Any, ...]]] = {}
    for issue in got.issues.iter_rows(named=True):
        issues.setdefault(issue["row"], []).append(
            (issue["field"], issue["code"], issue["severity"], issue["message"]))
    values = {v["row"]: v for v in got.values.iter_rows(named=True)}
    out = []
    for number, cells in enumerate(rows, start=1):
        want = contracts.validate_row(contract, list(cells), match, number)
        expected = [(i.field, i.code, i.severity.value, i.message)
                    for i in want.errors + want.warnings]
        if issues.get(number, []) != expected:
            out.append(f"row {number} {list(cells)!r}: issues {issues.get(number, [])} != "
                       f"{expected}")
            continue
        if want.valid != (number in values):
            out.append(f"row {number} {list(cells)!r}: valid {number in values} != "
                       f"{want.valid}")
            continue
        if not want.valid:
            continue
        row = values[number]
        for name, value in want.values.items():
            if not _same(row.get(name), value) and not (value is None and row.get(name) is None):
                out.append(f"row {number} {list(cells)!r}: {name} {row.get(name)!r} != "
                           f"{value!r}")
        key = contracts.natural_key(contract, want.values)
        if row["natural_key"] != key:
            out.append(f"row {number} {list(cells)!r}: key {row['natural_key']!r} != {key!r}")
    return out
