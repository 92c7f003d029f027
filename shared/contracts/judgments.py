"""The `judgments` contract: records-data-contract.md "CSV Schema: Judgments", its validation
matrix and Appendix A, with DESIGN.md's settlements (docs/decisions/0081)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal

from shared.contracts import columnar as c
from shared.contracts import normalise as n
from shared.contracts.model import (
    Column,
    Contract,
    NaturalKey,
    RowRule,
    Rule,
    Severity,
    Target,
)

CRITICAL, WARNING = Severity.CRITICAL, Severity.WARNING
BILLION = Decimal("1000000000")
# NUMERIC(12,2) holds at most 9,999,999,999.99: a larger amount cannot be stored at all.
STORABLE = Decimal("10000000000")
EARLIEST = date(1900, 1, 1)


def _too_long(limit: int) -> Callable[[str], bool]:
    return lambda value: len(value) > limit


def _truncate(limit: int) -> Callable[[str], str]:
    return lambda value: value[:limit]


def too_long(code: str, severity: Severity, message: str, limit: int, *,
             truncate: bool) -> Rule:
    """A text longer than ``limit`` characters (code points, as Python and polars count):
    refused, or (``truncate``) kept cut to ``limit``."""
    return Rule(code, severity, message, broken=_too_long(limit),
                repair=_truncate(limit) if truncate else None,
                broken_column=lambda values: values.str.len_chars() > limit,
                repair_column=(lambda values: values.str.slice(0, limit)) if truncate else None)


def case_number_text(text: str) -> str:
    """The case number as given (trimmed); empty when it holds no letter or digit to key on."""
    return text if n.case_number_key(text) else ""


def letters_outside_key(text: str) -> bool:
    """Whether the case number has letters the key drops (not A–Z once folded: `Café-12`
    keys as CAF12), so two numbers differing only there are one judgment."""
    return any(ch.isalpha() and not ("A" <= ch <= "Z") for ch in n.fold(text))


def case_number_checks(entity: str) -> tuple[Rule, ...]:
    """A case number's checks, shared with the plaintiffs contract (its link to a judgment)."""
    return (
        too_long(f"{entity}_CASE_NUMBER_TOO_LONG", CRITICAL,
                 "Case number is longer than 100 characters.", 100, truncate=False),
        # Column-wise, only ASCII values are judged: one script, letters A–Z once folded.
        Rule(f"{entity}_CASE_NUMBER_MIXED_SCRIPT", CRITICAL,
             "Case number mixes letters of two scripts (e.g. a Cyrillic С among Latin letters), "
             "so it looks like another case number; retype it in one script.",
             broken=n.mixed_script, broken_column=c.never),
        Rule(f"{entity}_CASE_NUMBER_LETTERS_IGNORED", WARNING,
             "Case number has letters outside A–Z (after folding); they are not part of its "
             "key, so numbers differing only in them are the same judgment.",
             broken=letters_outside_key, broken_column=c.never),
    )


def _name(field: str, header: str, label: str, code: str) -> Column:
    return Column(
        field, (header,), f"{label} name; stored as given (spaces collapsed).", required=True,
        normalise=n.name, personal=True, read_column=c.name,
        missing=Rule(f"JUDGMENT_{code}_MISSING", CRITICAL, f"{label} name is required."),
        checks=(too_long(f"JUDGMENT_{code}_TOO_LONG", WARNING,
                         f"{label} name is longer than 500 characters and was truncated to 500.",
                         500, truncate=True),),
        derived=((f"{field}_normalized", n.name_key),),
        derived_columns=((f"{field}_normalized", c.name_key),))


def _location(field: str, header: str, label: str, limit: int) -> Column:
    return Column(
        field, (header,), f"{label} name; title case, abbreviations expanded.",
        normalise=n.location,
        checks=(too_long(f"JUDGMENT_{field.upper()}_TOO_LONG", WARNING,
                         f"{label} name is longer than {limit} characters and was truncated.",
                         limit, truncate=True),))


_AMOUNT_INVALID = Rule("JUDGMENT_AMOUNT_INVALID", CRITICAL,
                       "Amount is required and must be a number such as $12,500.00.")
_DATE_INVALID = Rule("JUDGMENT_FILED_DATE_INVALID", CRITICAL,
                     "Entry date is required, as MM/DD/YYYY, YYYY-MM-DD or DD-MMM-YYYY.")

COLUMNS = (
    Column("case_number", ("File #",), "Case identifier, displayed as given; its normalised "
           "form (A–Z and 0–9 only) is the key.", required=True, normalise=case_number_text,
           read_column=c.case_number_text,
           missing=Rule("JUDGMENT_CASE_NUMBER_MISSING", CRITICAL,
                        "Case number is required and must contain a letter or digit."),
           checks=case_number_checks("JUDGMENT"),
           derived=(("case_number_normalized", n.case_number_key),),
           derived_columns=(("case_number_normalized", c.case_key),)),
    _name("plaintiff_name", "Plaintiff", "Plaintiff", "PLAINTIFF"),
    _name("defendant_name", "Defendant", "Defendant", "DEFENDANT"),
    Column("amount", ("Amount",), "Judgment amount in USD, rounded to cents; the file's "
           "decimal separator (`.` or `,`) is detected or named by the upload.", required=True,
           normalise=n.amount, missing=_AMOUNT_INVALID, invalid=_AMOUNT_INVALID, number=True,
           kind=c.MONEY, read_column=c.money,
           ambiguous=Rule("JUDGMENT_AMOUNT_AMBIGUOUS", CRITICAL,
                          "Amount reads as two different numbers (1,234 is 1234 or 1.234) and "
                          "the file does not say which; upload it with decimal_separator=. or "
                          "decimal_separator=, ."),
           checks=(
               Rule("JUDGMENT_AMOUNT_NEGATIVE", CRITICAL, "Amount must be $0 or more.",
                    broken=lambda v: v < 0),
               Rule("JUDGMENT_AMOUNT_OUT_OF_RANGE", CRITICAL,
                    "Amount must be below $10,000,000,000.00, the most the record can hold.",
                    broken=lambda v: v >= STORABLE),
               Rule("JUDGMENT_AMOUNT_TOO_LARGE", WARNING,
                    "Amount is $1,000,000,000 or more (possible data error).",
                    broken=lambda v: v >= BILLION),
           )),
    Column("filed_date", ("Entry Date",), "Date the judgment was entered.", required=True,
           normalise=n.filed_date, missing=_DATE_INVALID, invalid=_DATE_INVALID,
           kind=c.DATE, read_column=c.filed_date,
           checks=(
               Rule("JUDGMENT_FILED_DATE_FUTURE", CRITICAL,
                    "Entry date cannot be in the future.", broken=lambda v: v > n.today()),
               Rule("JUDGMENT_FILED_DATE_TOO_OLD", WARNING,
                    "Entry date is before 1900 (possible data error).",
                    broken=lambda v: v < EARLIEST),
           )),
    _location("court", "Court", "Court", 200),
    _location("county", "County", "County", 100),
)

# Checked at promotion (docs/decisions/0186): a row the database refuses although the rules
# above passed it (a value breaks a check of the judgments table) is not promoted, and the
# rest of the batch is, as the error budget allows.
NOT_STORED = Rule("JUDGMENT_NOT_STORED", CRITICAL,
                  "The database refused the row (a value breaks a rule of the judgments "
                  "table); it was not promoted.")

JUDGMENTS = Contract(
    name="judgments", version="1.0.0", entity="JUDGMENT",
    description="Judgments from a Simplicity (or JBI, or manual) export: one row per case.",
    columns=COLUMNS,
    key=NaturalKey(("case_number",), "case number upper-cased, only A–Z and 0–9 kept "
                   "(CV-12345 = cv 12345), leading zeros kept",
                   part=lambda v: n.case_number_key(v) if v else "", part_column=c.case_key),
    targets=(Target("judgments", ("case_number_normalized",)),),
    duplicate=Rule("JUDGMENT_DUPLICATE", WARNING, "The case number already appeared earlier "
                   "in this file; the row is counted as a duplicate and not promoted."),
    row_rules=(RowRule(
        Rule("JUDGMENT_DEFENDANT_SAME_AS_PLAINTIFF", WARNING,
             "Plaintiff and defendant are the same name; allowed, but worth a look."),
        ("plaintiff_name_normalized", "defendant_name_normalized"),
        lambda v: v["plaintiff_name_normalized"] == v["defendant_name_normalized"]),),
    promotion_rules=((None, NOT_STORED),),
    promotion_order=1,
    examples=(
        {"case_number": "2024-CV-12345", "plaintiff_name": "Acme Collections LLC",
         "defendant_name": "John Q. Public", "amount": "$12,500.00", "filed_date": "01/15/2024",
         "court": "New York Supreme Court", "county": "New York"},
        {"case_number": "2024-CV-67890", "plaintiff_name": "Smith & Associates, Inc.",
         "defendant_name": "Jane Doe", "amount": "1000", "filed_date": "2024-02-01",
         "court": "SUP. CT.", "county": "KINGS CO."},
        {"case_number": "00123", "plaintiff_name": "Acme Collections LLC",
         "defendant_name": "Richard Roe", "amount": "USD 999.99", "filed_date": "15-JAN-2024",
         "court": "", "county": ""},
    ),
)
