"""Record contracts both the gateway and the worker read (docs/decisions/0080).

``from shared import contracts`` then ``contracts.get("judgments")``,
``contracts.match_header(...)``, ``contracts.validate_row(...)``, ``contracts.codes.*``.
``ad_metrics`` reads one ad platform's export: ``contracts.ad_metrics.for_platform("meta")``.
"""

from __future__ import annotations

from shared import errors
from shared.contracts import ad_metrics, codes
from shared.contracts.ad_metrics import AD_METRICS
from shared.contracts.judgments import JUDGMENTS
from shared.contracts.model import (
    AMBIGUOUS,
    INVALID,
    UNREADABLE,
    Cell,
    Column,
    Contract,
    HeaderMatch,
    Issue,
    NaturalKey,
    RowResult,
    RowRule,
    Rule,
    Severity,
    Target,
    describe,
    duplicate_issue,
    header_issues,
    header_key,
    hygiene_rules,
    match_header,
    meaningful,
    natural_key,
    read_cell,
    sample_csv,
    unstorable,
    validate_row,
    with_headers,
)
from shared.contracts.plaintiffs import PLAINTIFFS

__all__ = [
    "AD_METRICS", "AMBIGUOUS", "CONTRACTS", "Cell", "read_cell", "INVALID", "UNREADABLE", "hygiene_rules",
    "meaningful", "unstorable", "JUDGMENTS", "PLAINTIFFS", "Column", "Contract", "HeaderMatch",
    "Issue", "NaturalKey", "RowResult", "RowRule", "Rule", "Severity", "Target",
    "UnknownContract", "ad_metrics", "codes", "describe", "duplicate_issue", "get", "header_issues",
    "header_key", "match_header", "natural_key", "publish", "sample_csv", "validate_row", "with_headers",
]

# Every published contract by name, in promotion order.
CONTRACTS: dict[str, Contract] = {c.name: c for c in sorted(
    (JUDGMENTS, PLAINTIFFS, AD_METRICS), key=lambda c: c.promotion_order)}


class UnknownContract(errors.NotFound):
    """No contract has that name; GET /v1/contracts lists them."""

    code = "unknown_contract"


# Contracts read from several exports (ad platforms): name → variant → its contract.
VARIANTS: dict[str, dict[str, Contract]] = {"ad_metrics": ad_metrics.VARIANTS}


def publish(contract: Contract) -> dict[str, object]:
    """``describe`` of the contract, with each variant's own description under ``variants``
    (every platform's header mapping, rules, codes and example)."""
    view: dict[str, object] = describe(contract)
    if contract.name in VARIANTS:
        view["variants"] = {name: describe(v) for name, v in VARIANTS[contract.name].items()}
    return view


def get(name: str) -> Contract:
    """The contract called ``name``, or UnknownContract (404 on a path; an upload form that
    names one answers 400 with the same code)."""
    contract = CONTRACTS.get(name)
    if contract is None:
        raise UnknownContract(f"No contract is called {name[:100]!r}; GET /v1/contracts lists "
                              f"them: {', '.join(CONTRACTS)}.")
    return contract
