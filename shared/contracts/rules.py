"""What a contract's checks are made of: a rule (code, severity, one sentence), a rule over a
row, and the issue a broken rule records. The contracts' batch codes (codes.py) and the model
(model.py) both build on these, so neither imports the other to get them."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class Severity(enum.StrEnum):
    CRITICAL = "critical"  # the row is invalid and counts against the error budget
    WARNING = "warning"    # the row is kept; the warning is recorded beside it


@dataclass(frozen=True, slots=True)
class Rule:
    """One check: ``code`` is ``<ENTITY>_<FIELD>_<REASON>``; ``message`` is one sentence."""

    code: str
    severity: Severity
    message: str
    # For a check rule: True when the normalised value breaks the rule.
    broken: Callable[[Any], bool] | None = None
    # For a warning that still keeps the value: what to keep (e.g. the text truncated).
    repair: Callable[[Any], Any] | None = None
    # The same over a whole column of values (polars expressions), for the worker's column-wise
    # validation (worker/records/columns.py). Without them, ``broken`` and ``repair`` are
    # called with the column's expression: a comparison (`v < 0`) is both forms at once.
    broken_column: Callable[[Any], Any] | None = None
    repair_column: Callable[[Any], Any] | None = None

    def broken_over(self, values: Any) -> Any:
        """Where the rule is broken, over a column of values."""
        check = self.broken_column or self.broken
        assert check is not None, f"{self.code} checks nothing"
        return check(values)

    def repaired_over(self, values: Any) -> Any:
        """What is kept of a column of values that broke the rule."""
        repair = self.repair_column or self.repair
        assert repair is not None, f"{self.code} repairs nothing"
        return repair(values)


@dataclass(frozen=True, slots=True)
class RowRule:
    """A rule over several fields of one row (e.g. plaintiff = defendant)."""

    rule: Rule
    fields: tuple[str, ...]
    broken: Callable[[Mapping[str, Any]], bool]
    # Over whole columns (field → polars expression); without it ``broken`` is called so.
    broken_columns: Callable[[Mapping[str, Any]], Any] | None = None

    def broken_over(self, columns: Mapping[str, Any]) -> Any:
        return (self.broken_columns or self.broken)(columns)


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem: a structured record, stored as a row error or a warning."""

    row: int | None     # the data row's number (1 = first row after the header); None: batch
    field: str | None   # the canonical field, None for the row or the batch
    code: str
    severity: Severity
    message: str

    def as_dict(self) -> dict[str, Any]:
        return {"row": self.row, "field": self.field, "code": self.code,
                "severity": self.severity.value, "message": self.message}
