"""A records contract is data: columns, rules, key and targets (docs/decisions/0080).

In the spirit of frictionless Table Schema and pandera: each column declares the header names
it accepts, how its text becomes a value, and the rules that guard it, each rule with an error
code, a severity and one sentence. Problems are collected as ``Issue`` records per row, never
raised, so the worker can validate a whole file and count before it writes anything.

The worker calls ``match_header`` once per file and ``validate_row`` once per row, in a
streaming loop: both avoid building anything per row beyond the values dict and the issue
lists, and every pattern is compiled once, at import.
"""

from __future__ import annotations

import csv
import functools
import io
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from shared.contracts import codes
from shared.contracts.rules import Issue, RowRule, Rule, Severity

# What a normaliser returns when the text cannot become a value of its type.
INVALID: Any = type("Invalid", (), {"__repr__": lambda self: "INVALID"})()
# What a number's normaliser returns when the text reads as two different numbers under the
# file's (unknown) decimal convention: `1,234` is 1234 or 1.234 (docs/decisions/0172).
AMBIGUOUS: Any = type("Ambiguous", (), {"__repr__": lambda self: "AMBIGUOUS"})()


class UnreadableRow(dict):  # type: ignore[type-arg]
    """A row the file holds but that cannot be read as one (a JSON line that is no object)."""


# What a reader yields for such a row: validate_row gives it the ROW_UNREADABLE error.
UNREADABLE = UnreadableRow()


def meaningful(text: str) -> bool:
    """Whether a cell holds anything but whitespace, control and format characters (a
    zero-width space or a byte-order mark alone is nothing)."""
    return any(not ch.isspace() and unicodedata.category(ch) not in ("Cc", "Cf")
               for ch in text)


def unstorable(text: str) -> bool:
    """Whether text holds a character Postgres cannot store in text or JSON: NUL, or a lone
    surrogate (only a JSON file can carry one)."""
    return "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text)


@dataclass(frozen=True, slots=True)
class Column:
    """One field: its canonical name, the headers that name it, and how it is read."""

    name: str
    headers: tuple[str, ...]
    description: str
    required: bool = False
    # Text (trimmed, never empty) → value, or INVALID. None keeps the trimmed text. A number's
    # normaliser also takes the file's decimal separator (``number``).
    normalise: Callable[..., Any] | None = None
    missing: Rule | None = None   # an empty required cell (or a normalised value that is empty)
    invalid: Rule | None = None   # the normaliser answered INVALID
    checks: tuple[Rule, ...] = ()  # run in order on the normalised value
    # Extra values computed from this one, e.g. ``case_number_normalized``.
    derived: tuple[tuple[str, Callable[[Any], Any]], ...] = ()
    # Whether the value is personal data (names, e-mails, phones): never logged.
    personal: bool = False
    # A header naming this column may end in a unit, `Amount spent (USD)`: the field named
    # here (e.g. ``currency``) takes that unit in every row that has no value of its own.
    unit_field: str | None = None
    # The value of an empty cell when the field is not required (e.g. 0 for a metric); a
    # column the file does not have at all is None whatever its default.
    default: Any = None
    # A number: ``normalise(text, decimal)`` takes the file's decimal separator (`.`, `,` or
    # None: unknown), and a value that reads two ways under an unknown one is ``ambiguous``.
    number: bool = False
    ambiguous: Rule | None = None
    # A breakdown of an ad report (Age, Gender, Placement…): rows that differ only in it are
    # slices of one fact, summed (shared/contracts/ad_metrics.py).
    breakdown: bool = False
    # The type of the values (shared/contracts/columnar.py: text, date, money, decimal, count):
    # the stage's column and the worker's column-wise reading follow it.
    kind: str = "text"
    # ``normalise`` over a whole column (shared/contracts/columnar.py): trimmed printable ASCII
    # cells → (values, states), a state PYTHON where only ``normalise`` can judge the cell.
    # None: ``normalise`` reads every cell, once per distinct text (courts, e-mails, phones).
    read_column: Callable[..., Any] | None = None
    # ``derived`` over a whole column of printable ASCII values, by name.
    derived_columns: tuple[tuple[str, Callable[[Any], Any]], ...] = ()

    def rules(self) -> tuple[Rule, ...]:
        seen: dict[str, Rule] = {}
        for rule in (self.missing, self.invalid, self.ambiguous, *self.checks):
            if rule is not None:
                seen.setdefault(rule.code, rule)
        return tuple(seen.values())


@dataclass(frozen=True, slots=True)
class NaturalKey:
    """The fields that identify a record, and the text form they are compared in."""

    fields: tuple[str, ...]
    description: str
    # Value of one key field → its normalised text; parts joined with ``separator``.
    part: Callable[[Any], str]
    separator: str = "|"
    # The whole key from the row's values, when it is more than its parts joined.
    compose: Callable[[Mapping[str, Any]], str] | None = None
    # ``part`` over a whole column of printable ASCII values (None: ``part`` per value), and
    # ``compose`` over a frame of valid rows (polars DataFrame → expression).
    part_column: Callable[[Any], Any] | None = None
    compose_columns: Callable[[Any], Any] | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """A table the promotion writes, and the key it upserts on (after ``tenant_id``)."""

    table: str
    upsert_key: tuple[str, ...]


@dataclass(frozen=True)
class Contract:
    name: str
    version: str
    entity: str          # the ``<ENTITY>`` of the codes, e.g. JUDGMENT
    description: str
    columns: tuple[Column, ...]
    key: NaturalKey
    # Written in this order, each table in one promotion transaction.
    targets: tuple[Target, ...]
    # A natural key seen again within one file: counted as duplicate, kept as a warning.
    duplicate: Rule
    row_rules: tuple[RowRule, ...] = ()
    # Rules only promotion can check, against the tenant's stored records (e.g. a plaintiff's
    # case number that names no judgment): (field, rule), published with the row rules.
    promotion_rules: tuple[tuple[str | None, Rule], ...] = ()
    # Among contracts: lower promotes first (plaintiffs link to judgments already promoted).
    promotion_order: int = 0
    # Example rows (field → text as a file would carry it); the first is the example row.
    examples: tuple[Mapping[str, str], ...] = ()
    # One export of a family of contracts (e.g. an ad platform's), None for the family itself.
    variant: str | None = None
    # Exports a person downloads: up to this many title lines may precede the header, and a
    # row whose first cell starts with one of ``summary_prefixes`` (`Total: Account`) while
    # its first required field is empty is a total, not a record (worker/records/parse.py).
    preamble_lines: int = 0
    summary_prefixes: tuple[str, ...] = ()
    # Cell texts that mean "no value" in this export (Google Ads writes `--`).
    empty_markers: frozenset[str] = frozenset()
    # An export a person downloads (ad reports): a row with one cell and nothing else is a
    # note under the table, and a row whose dimensions are all empty is the export's summary
    # row; both are skipped and counted, never invalid rows (worker/records/parse.py).
    furniture: bool = False
    # Values computed from the whole validated row (ad metrics: name paths, the day or the
    # period, conversions from results), and the issues that only the whole row shows.
    # Called with the values, the file's context (HeaderMatch.context) and the row's number.
    derive: Callable[[dict[str, Any], Mapping[str, Any], int],
                     list[tuple[Rule, str | None]]] | None = None
    # A header that cannot be imported as is (an ad report without a day or a period): the
    # batch-level issue saying how to export it, or None (HeaderMatch → Issue | None).
    header_check: Callable[[Any, Any], Any] | None = None
    # Rules ``derive`` may raise, published with the row rules.
    derived_rules: tuple[tuple[str | None, Rule], ...] = ()
    # ``derive`` over a frame of the rows without errors (worker/records/columns.py): the frame
    # with the derived columns, and each issue as (rule, field, a boolean column of the rows).
    derive_columns: Callable[[Any, Mapping[str, Any]], tuple[Any, list[tuple[Rule, str | None,
                                                                       Any]]]] | None = None
    # Header key → column position in ``columns``; built once, see ``header_key``.
    _by_header: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_header: dict[str, int] = {}
        for position, column in enumerate(self.columns):
            for header in (column.name, *column.headers):
                key = header_key(header)
                if by_header.setdefault(key, position) != position:
                    raise ValueError(f"{self.name}: header {header!r} names two columns")
        object.__setattr__(self, "_by_header", by_header)

    def lookup(self, header: str) -> tuple[int, str | None] | None:
        """The column position a header names, and the unit its suffix carries (`Amount
        spent (USD)` → spend, "USD") when only the header without the suffix names a column
        that takes a unit; None when no column accepts the header."""
        key = header_key(header)
        unit = _UNIT_SUFFIX.fullmatch(key)
        position = self._by_header.get(key)
        if position is None and unit is not None:
            position = self._by_header.get(unit[1])
        if position is None:
            return None
        if unit is not None and self.columns[position].unit_field is not None:
            return position, unit[2].upper()
        return position, None

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def rules(self) -> tuple[tuple[str | None, Rule], ...]:
        """Every row rule as (field, rule), field None for a rule over the whole row; the
        promotion rules last."""
        out: list[tuple[str | None, Rule]] = [(c.name, r) for c in self.columns for r in c.rules()]
        out += [(None, r.rule) for r in self.row_rules]
        out += self.derived_rules
        out += [(None, r) for r in hygiene_rules(self.entity)]
        out.append((None, self.duplicate))
        out += self.promotion_rules
        return tuple(out)

    def hygiene(self) -> dict[str, Rule]:
        """The rules every row of this contract is checked against, whatever its fields."""
        return {r.code.removeprefix(self.entity + "_"): r for r in hygiene_rules(self.entity)}


def with_headers(contract: Contract, *, name: str, headers: Mapping[str, tuple[str, ...]],
                 description: str | None = None, without: tuple[str, ...] = (),
                 **changes: Any) -> Contract:
    """The same contract reading another export's column names, e.g. one ad platform's: each
    field named in ``headers`` accepts those headers instead of its own; the optional fields
    in ``without`` are not part of that export. ``changes`` set other fields of the contract
    (``variant``, ``examples``, ``preamble_lines`` …)."""
    unknown = (set(headers) | set(without)) - {c.name for c in contract.columns}
    if unknown:
        raise ValueError(f"{contract.name}: no such fields {sorted(unknown)}")
    columns = tuple(replace(c, headers=headers.get(c.name, c.headers)) for c in contract.columns
                    if c.name not in without or c.required)
    return replace(contract, name=name, columns=columns,
                   description=description or contract.description, **changes)


_SPACE = re.compile(r"\s+")
# A header key ending in a three-letter unit: `amountspent(usd)`.
_UNIT_SUFFIX = re.compile(r"(.+)\(([a-z]{3})\)")


def header_key(header: str) -> str:
    """Headers match case- and whitespace-insensitively: `File #` = ` file# ` = `FILE  #`."""
    return _SPACE.sub("", header.replace("\ufeff", "")).casefold()


@functools.cache
def hygiene_rules(entity: str) -> tuple[Rule, ...]:
    """Rules of every contract, coded with its entity: what no value that passes validation may
    carry into the database, and what a file's layout can get wrong in one row."""
    return (
        Rule(f"{entity}_TEXT_UNSTORABLE", Severity.CRITICAL,
             "The value holds a NUL character (or a broken surrogate), which cannot be stored; "
             "remove it and export again."),
        Rule(f"{entity}_COLUMN_CONFLICT", Severity.CRITICAL,
             "A column that appears twice in the header holds two different values in this "
             "row, so which one is meant cannot be told."),
        Rule(f"{entity}_ROW_UNREADABLE", Severity.CRITICAL,
             "The line is not a JSON object, so it holds no fields; fix or remove it."),
        Rule(f"{entity}_ROW_TOO_WIDE", Severity.WARNING,
             "The row has more cells than the header has columns; the extra cells were "
             "ignored."),
    )


# ── what the worker calls ────────────────────────────────────────────────────────────────────
@dataclass(frozen=True, slots=True)
class HeaderMatch:
    """Where each field sits in a file's header row, and how the file's cells read."""

    index: Mapping[str, int]            # canonical field → column position
    extra: tuple[str, ...]              # headers no field accepts: ignored, with a warning
    missing: tuple[str, ...]            # required fields without a column: the batch fails
    duplicated: tuple[str, ...]         # kept for the published code; no longer fails a batch
    width: int                          # how many columns the header has
    # Position of each of the contract's columns, in contract order; -1 when absent.
    positions: tuple[int, ...] = ()
    # Field → text the header itself supplies (a unit suffix), used where a row has none.
    implied: Mapping[str, str] = field(default_factory=dict)
    # The same header again (`Currency code` twice): (field, position) of each repeat, whose
    # cell must equal the first one's in every row.
    repeats: tuple[tuple[str, int], ...] = ()
    # Headers naming a field a preferred header of the file already gives (`Clicks (all)`
    # beside `Link clicks`): (header, the header used instead).
    ignored: tuple[tuple[str, str], ...] = ()
    # The file's decimal separator: `.`, `,` or None (unknown: only unambiguous values read).
    decimal: str | None = None
    # What the file says around its rows, for ``Contract.derive`` (an export's title period).
    context: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether rows can be read: every required column present."""
        return not self.missing


@dataclass(slots=True)
class RowResult:
    row: int
    values: dict[str, Any]
    errors: list[Issue]
    warnings: list[Issue]

    @property
    def valid(self) -> bool:
        return not self.errors


def match_header(contract: Contract, header_names: Sequence[str]) -> HeaderMatch:
    """Each field's column: of several headers naming one field, the one the contract lists
    first wins (`Link clicks` over `Clicks (all)`); the same header twice is a repeat."""
    chosen: dict[str, tuple[int, int, str]] = {}  # field → (preference, position, header key)
    others: list[tuple[str, int, int, str, str]] = []
    extra: list[str] = []
    implied: dict[str, str] = {}
    for position, header in enumerate(header_names):
        found = contract.lookup(header)
        if found is None:
            extra.append(header)
            continue
        column = contract.columns[found[0]]
        key = header_key(header)
        rank = _preference(column, key)
        current = chosen.get(column.name)
        if current is None or rank < current[0]:
            if current is not None:
                others.append((column.name, *current, header_names[current[1]]))
            chosen[column.name] = (rank, position, key)
            if found[1] is not None and column.unit_field is not None:
                implied[column.unit_field] = found[1]
        else:
            others.append((column.name, rank, position, key, header))
    repeats, ignored = [], []
    for name, _rank, position, key, header in others:
        if key == chosen[name][2]:
            repeats.append((name, position))
        else:
            ignored.append((header, header_names[chosen[name][1]]))
    index = {name: position for name, (_, position, _) in chosen.items()}
    missing = tuple(c.name for c in contract.columns if c.required and c.name not in index)
    positions = tuple(index.get(c.name, -1) for c in contract.columns)
    return HeaderMatch(index, tuple(extra), missing, (), len(header_names), positions, implied,
                       tuple(repeats), tuple(ignored))


def _preference(column: Column, key: str) -> int:
    names = [header_key(h) for h in (*column.headers, column.name)]
    unit = _UNIT_SUFFIX.fullmatch(key)
    for rank, name in enumerate(names):
        if key == name or (unit is not None and unit[1] == name):
            return rank
    return len(names)


# The first unknown headers a warning names; the rest are counted.
NAMED_EXTRA = 5


def header_issues(contract: Contract, match: HeaderMatch) -> list[Issue]:
    """The batch-level issues of a header: missing columns fail the batch; unknown and
    outranked columns are one warning each kind, however many there are."""
    issues = [Issue(None, f, codes.MISSING_COLUMN.code, codes.MISSING_COLUMN.severity,
                    f"Required column {_headers_of(contract, f)} was not found in the header.")
              for f in match.missing]
    if match.extra:
        named = ", ".join(repr(h[:80]) for h in match.extra[:NAMED_EXTRA])
        more = len(match.extra) - NAMED_EXTRA
        tail = f" and {more:,} more" if more > 0 else ""
        issues.append(Issue(None, None, codes.EXTRA_COLUMN.code, codes.EXTRA_COLUMN.severity,
                            f"{len(match.extra):,} column(s) are not part of the {contract.name} "
                            f"contract and were ignored: {named}{tail}."))
    for header, used in match.ignored:
        issues.append(Issue(None, None, codes.EXTRA_COLUMN.code, codes.EXTRA_COLUMN.severity,
                            f"Column {header[:80]!r} was ignored: {used[:80]!r} gives the same "
                            "field and is preferred."))
    return issues


def _headers_of(contract: Contract, name: str) -> str:
    column = contract.column(name)
    return repr(column.headers[0] if column.headers else column.name)


def validate_row(contract: Contract, raw: Sequence[str] | Mapping[str, Any],
                 match: HeaderMatch | None = None, row_number: int = 1) -> RowResult:
    """Normalise and check one row. ``raw`` is a CSV row (with ``match`` from its header) or a
    JSON object keyed by column names or canonical field names (``match`` then only gives the
    file's decimal separator and context). Never raises for any text in any cell."""
    errors: list[Issue] = []
    warnings: list[Issue] = []
    hygiene = contract.hygiene()
    if raw is UNREADABLE:
        _add(hygiene["ROW_UNREADABLE"], row_number, None, errors, warnings)
        return RowResult(row_number, {}, errors, warnings)
    decimal = match.decimal if match is not None else None
    numbers: set[str] = set()
    if isinstance(raw, Mapping):
        cells, numbers = _cells_of_mapping(contract, raw)
        texts = [cells.get(c.name, "") for c in contract.columns]
        present = [c.name in cells for c in contract.columns]
        # JSON is a machine's format: its numbers have a decimal point unless the upload said.
        decimal = decimal or "."
    else:
        if match is None:
            raise TypeError("a CSV row needs the HeaderMatch of its file")
        width = len(raw)  # a short row's missing cells read as empty
        texts = [raw[p] if 0 <= p < width else "" for p in match.positions]
        present = [p >= 0 or c.name in match.implied
                   for c, p in zip(contract.columns, match.positions, strict=True)]
        if match.implied:
            texts = [t if t and t.strip() else match.implied.get(c.name, t)
                     for c, t in zip(contract.columns, texts, strict=True)]
        if width > match.width and any(c.strip() for c in raw[match.width:]):
            _add(hygiene["ROW_TOO_WIDE"], row_number, None, errors, warnings)
        for name, position in match.repeats:
            first = match.index[name]
            if (raw[first].strip() if first < width else "") != \
                    (raw[position].strip() if position < width else ""):
                _add(hygiene["COLUMN_CONFLICT"], row_number, name, errors, warnings)
    values: dict[str, Any] = {}
    for column, text, given in zip(contract.columns, texts, present, strict=True):
        cell = read_cell(contract, column, text, given,
                         "." if column.name in numbers else decimal)
        for rule in cell.rules:
            _add(rule, row_number, column.name, errors, warnings)
        values[column.name] = cell.value
        for name, derive in column.derived:
            values[name] = derive(cell.value) if cell.value is not None else None
    for row_rule in contract.row_rules:
        if all(values.get(f) is not None for f in row_rule.fields) and row_rule.broken(values):
            _add(row_rule.rule, row_number, None, errors, warnings)
    if contract.derive is not None and not errors:
        context = match.context if match is not None else {}
        for rule, field_name in contract.derive(values, context, row_number):
            _add(rule, row_number, field_name, errors, warnings)
    return RowResult(row_number, values, errors, warnings)


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell read: its value (None when it holds none, or broke a critical rule) and the
    rules it broke, in the order they were found."""

    value: Any
    rules: tuple[Rule, ...] = ()


def read_cell(contract: Contract, column: Column, text: str | None, given: bool,
              decimal: str | None) -> Cell:
    """One cell of ``column`` read as ``validate_row`` reads it: trimmed, normalised and
    checked. ``given``: the file has the column (an empty cell of one it lacks is NULL, never
    its default). The worker reads the cells its column forms cannot judge with this."""
    text = text.strip() if text else ""
    empty = contract.empty_markers
    if (empty and text in empty) or (text and not meaningful(text)):
        text = ""
    if text and unstorable(text):
        return Cell(None, (contract.hygiene()["TEXT_UNSTORABLE"],))
    if not text:
        missing = (column.missing,) if column.required and column.missing is not None else ()
        # An empty cell of a column the file has is its default (a metric's 0); a column the
        # file does not have is no value at all (NULL, never 0).
        return Cell(column.default if given else None, missing)
    value = _normalised(column, text, decimal)
    if value is INVALID or value is AMBIGUOUS:
        rule = column.ambiguous if value is AMBIGUOUS and column.ambiguous else column.invalid
        assert rule is not None, f"{column.name}: no rule for {value!r}"
        return Cell(None, (rule,))
    if value is None or value == "":
        # Text that normalises to nothing (a case number of punctuation only): as good as
        # missing when the field is required, NULL when it is optional.
        return Cell(None, (column.missing,) if column.missing is not None else ())
    broken: list[Rule] = []
    for rule in column.checks:
        if rule.broken is not None and rule.broken(value):
            broken.append(rule)
            if rule.severity is Severity.CRITICAL:
                # The value is not kept (the raw row is), and further checks would only add
                # noise.
                return Cell(None, tuple(broken))
            if rule.repair is not None:
                value = rule.repair(value)
    return Cell(value, tuple(broken))


def _normalised(column: Column, text: str, decimal: str | None) -> Any:
    if column.normalise is None:
        return text
    if column.number:
        return column.normalise(text, decimal)
    return column.normalise(text)


def _add(rule: Rule, row: int, name: str | None, errors: list[Issue],
         warnings: list[Issue]) -> bool:
    issue = Issue(row, name, rule.code, rule.severity, rule.message)
    if rule.severity is Severity.CRITICAL:
        errors.append(issue)
        return True
    warnings.append(issue)
    return False


def _cells_of_mapping(contract: Contract, raw: Mapping[str, Any]) -> tuple[dict[str, str],
                                                                             set[str]]:
    """Each field's text from a JSON object, and the fields given as JSON numbers (read with
    a decimal point whatever the file's convention)."""
    cells: dict[str, str] = {}
    numbers: set[str] = set()
    implied: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str):
            continue
        found = contract.lookup(key)
        if found is None:
            continue  # unknown keys are ignored, as extra CSV columns are
        column = contract.columns[found[0]]
        if column.name not in cells:
            if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
                numbers.add(column.name)
            cells[column.name] = "" if value is None else value if isinstance(value, str) \
                else str(value)
            if found[1] is not None and column.unit_field is not None:
                implied[column.unit_field] = found[1]
    for name, unit in implied.items():  # a key's unit where the object has no value of its own
        if not cells.get(name, "").strip():
            cells[name] = unit
    return cells, numbers


def natural_key(contract: Contract, values: Mapping[str, Any]) -> str:
    """The record's identity in its normalised text form (e.g. `2024CV12345`)."""
    key = contract.key
    if key.compose is not None:
        return key.compose(values)
    return key.separator.join(key.part(values.get(f)) for f in key.fields)


def duplicate_issue(contract: Contract, row_number: int) -> Issue:
    """The warning of a row whose natural key an earlier row of the same file already had."""
    rule = contract.duplicate
    return Issue(row_number, None, rule.code, rule.severity, rule.message)


# ── what the API publishes ────────────────────────────────────────────────────────────────
def describe(contract: Contract) -> dict[str, Any]:
    """The contract as the API publishes it: plain JSON values only."""
    header = [c.headers[0] if c.headers else c.name for c in contract.columns]
    example = contract.examples[0] if contract.examples else {}
    variant = {} if contract.variant is None else {
        "variant": contract.variant,
        # How the export is laid out around its rows (worker/records/parse.py).
        "layout": {"title_lines_before_header": contract.preamble_lines,
                   "total_rows_start_with": list(contract.summary_prefixes),
                   "empty_cell_markers": sorted(contract.empty_markers)}}
    return {
        "name": contract.name,
        **variant,
        "version": contract.version,
        "description": contract.description,
        "columns": [{"name": c.name, "headers": list(c.headers or (c.name,)),
                     "required": c.required, "description": c.description,
                     **({"header_unit_sets": c.unit_field} if c.unit_field else {})}
                    for c in contract.columns],
        "rules": [_rule_view(rule, name) for name, rule in contract.rules()],
        "batch_rules": [_rule_view(rule, None) for rule in codes.BATCH_RULES],
        "natural_key": {"fields": list(contract.key.fields),
                        "normalised": contract.key.description},
        "targets": [{"table": t.table, "upsert_key": list(t.upsert_key)}
                    for t in contract.targets],
        "promotion_order": contract.promotion_order,
        "example_row": {h: example.get(c.name, "") for h, c in zip(header, contract.columns,
                                                                    strict=True)},
        "sample_csv": sample_csv(contract),
    }


def _rule_view(rule: Rule, name: str | None) -> dict[str, Any]:
    return {"code": rule.code, "severity": rule.severity.value, "message": rule.message,
            "field": name}


def sample_csv(contract: Contract) -> str:
    """A small file in the contract's first header names, one line per example row."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c.headers[0] if c.headers else c.name for c in contract.columns])
    for example in contract.examples:
        writer.writerow([example.get(c.name, "") for c in contract.columns])
    return out.getvalue()

