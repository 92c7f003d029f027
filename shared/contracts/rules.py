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


@dataclass(frozen=True, slots=True)
class RowRule:
    """A rule over several fields of one row (e.g. plaintiff = defendant)."""

    rule: Rule
    fields: tuple[str, ...]
    broken: Callable[[Mapping[str, Any]], bool]


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
