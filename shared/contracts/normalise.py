"""Normalisers: trimmed, non-empty text → a value, or ``INVALID`` (never an exception).

The rules are records-data-contract.md "Normalization Rules"; where its code snippets or
examples disagree with its rules, the rules win (DESIGN.md "Records imports";
docs/decisions/0081 lists each case). Patterns are compiled once: these run per cell.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import email_validator
import phonenumbers

from shared.contracts.model import AMBIGUOUS, INVALID

_SPACES = re.compile(r"\s+")


# ── Unicode (docs/decisions/0171) ─────────────────────────────────────────────────────────
def fold(text: str) -> str:
    """A text as compared and keyed: NFKC, full case folding, then upper case, trimmed
    (`ß` → SS, `ﬃ` → FFI, `ı` → I, `ＣＶ１` → CV1). The SQL twin is migrations/0030's
    ``records_fold``; both sides key with the same definition."""
    return unicodedata.normalize("NFKC", text).casefold().upper().strip()


def scripts(text: str) -> set[str]:
    """The scripts of the letters in text (`LATIN`, `CYRILLIC`, …), after NFKC (a full-width
    `Ａ` is Latin)."""
    found = set()
    for ch in unicodedata.normalize("NFKC", text):
        if ch.isalpha():
            found.add(unicodedata.name(ch, "UNKNOWN").split(" ", 1)[0])
    return found


def mixed_script(text: str) -> bool:
    """Letters of more than one script in one identifier, e.g. a Cyrillic `С` among Latin
    letters: a look-alike, never two valid spellings of one case number."""
    return len(scripts(text)) > 1


# ── names ─────────────────────────────────────────────────────────────────────────────────
def name(text: str) -> str:
    """A name as displayed: trimmed, runs of whitespace collapsed, case kept."""
    return " ".join(text.split())


# Legal entity indicators, written any way, as one token: `L.L.C.` → LLC, `Inc.` → INC.
_ENTITY = re.compile(r"\b(L\.?L\.?C|INC|CORP|LTD|CO)\b\.?")
_NOT_WORD = re.compile(r"[^\w\s-]")
_SUFFIX = re.compile(r"(?:\s+(?:LLC|INC|CORP|LTD|CO))+$")


def name_key(display: str) -> str:
    """A name for comparison and duplicate detection: folded (NFKC, full case folding, upper
    case: `Café Ünited` = `CAFÉ ÜNITED`), entity indicators unified, punctuation but hyphens
    removed, spaces collapsed, and trailing legal suffixes (LLC, INC, CORP, LTD, CO) removed,
    so `Acme Collections, L.L.C.` = `ACME COLLECTIONS`."""
    upper = fold(display)
    # Only dots distinguish `L.L.C.` from `LLC`: most names have none and skip the pattern.
    unified = _ENTITY.sub(lambda m: m.group(1).replace(".", ""), upper) if "." in upper \
        else upper
    bare = _SPACES.sub(" ", _NOT_WORD.sub(" ", unified)).strip()
    without = _SUFFIX.sub("", bare)
    return without or bare  # a name that is only a suffix (`Inc.`) keeps it


# ── numbers (docs/decisions/0172) ─────────────────────────────────────────────────────────
# A number's convention is a property of the file, not a per-cell guess: `.` (1,234.56) or `,`
# (1.234,56), named by the upload or detected from values that read one way only. A value that
# reads two ways under an unknown convention is AMBIGUOUS, one that reads no way INVALID.
DECIMAL_SEPARATORS = (".", ",")
CENT = Decimal("0.01")
# Currency signs and codes an export writes beside a number (`$1,234.50`, `1.234,50 €`,
# `USD 12`); the currency itself comes from a column or the header, never from the cell.
_SIGN = r"[$€£¥₹₩₺₽₪₱฿₫]"
_MONEY = re.compile(rf"([+-]?)\s*(?:[A-Z]{{1,2}}\$|[A-Z]{{3}}|{_SIGN})?\s*(.*?)\s*"
                    rf"(?:[A-Z]{{3}}|{_SIGN})?", re.IGNORECASE)
# Thousands separators written as spaces (NFKC makes no-break spaces plain) or apostrophes,
# each followed by exactly three digits: `1 234`, `1'234`; ` 12 34 ` is no number.
_GROUP_SPACE = re.compile(r"(?<=[0-9])[ '’](?=[0-9]{3}(?:[^0-9]|$))")
_READINGS = {
    sep: (re.compile(rf"[+-]?(?:[0-9]+(?:{re.escape(sep)}[0-9]*)?|{re.escape(sep)}[0-9]+)"),
          re.compile(rf"[+-]?[1-9][0-9]{{0,2}}(?:{re.escape(group)}[0-9]{{3}})+"
                     rf"(?:{re.escape(sep)}[0-9]+)?"), group)
    for sep, group in ((".", ","), (",", "."))}
_SCIENTIFIC = re.compile(r"[+-]?[0-9]+(?:[.,][0-9]+)?[eE][+-]?[0-9]+")


def _bare(text: str) -> tuple[str, bool]:
    """The digits, separators and sign of a number as written, and whether it was a percent."""
    text = unicodedata.normalize("NFKC", text).strip()
    m = _MONEY.fullmatch(text)
    bare = _GROUP_SPACE.sub("", m[1] + m[2]) if m else text
    percent = bare.endswith("%")
    if percent:
        bare = bare[:-1].rstrip()
    if bare.startswith("(") and bare.endswith(")"):  # accounting negative: (12.00)
        bare = "-" + bare[1:-1]
    return bare, percent


def _read(bare: str, sep: str) -> Decimal | None:
    plain, grouped, group = _READINGS[sep]
    if plain.fullmatch(bare):
        return Decimal(bare.replace(sep, ".") if sep == "," else bare)
    if grouped.fullmatch(bare):
        return Decimal(bare.replace(group, "").replace(sep, "."))
    return None


def read_number(text: str, decimal: str | None = None) -> Decimal:
    """A number as an export writes it: `$1,234.56`, `1.234,56 €`, `1 234,56`, `(12.00)`, `12 %`
    (÷ 100). ``decimal`` is the file's convention (`.` or `,`); None reads a value only if it
    reads one way: `12,5` → 12.5, `1,234.5` → 1234.5, but `1,234` (1234 or 1.234) is
    AMBIGUOUS. Anything else (`1,2,3`, ` 12 34 `, `NaN`, `1e400`) is INVALID."""
    bare, percent = _bare(text)
    if decimal is not None:
        value = _read(bare, decimal)
    else:
        dot, comma = _read(bare, "."), _read(bare, ",")
        if dot is not None and comma is not None and dot != comma:
            return AMBIGUOUS
        value = dot if dot is not None else comma
    if value is None:
        return INVALID
    return value / 100 if percent else value


def convention(text: str) -> str | None:
    """The decimal separator a value proves (it reads under that one only), or None."""
    bare, _ = _bare(text)
    dot, comma = _read(bare, ".") is not None, _read(bare, ",") is not None
    if dot != comma:
        return "." if dot else ","
    return None


def _cents(value: Any) -> Any:
    if value is INVALID or value is AMBIGUOUS:
        return value
    # Far beyond any column (the range rule refuses it): quantize would overflow the context.
    return value.quantize(CENT, rounding=ROUND_HALF_UP) if value.adjusted() < 20 else value


def amount(text: str, decimal: str | None = None) -> Decimal:
    """A judgment amount: `$12,500.00` → 12500.00; `USD 999.99` → 999.99; `1234.567` →
    1234.57 (half up). A sign stays (the negative rule judges it)."""
    return _cents(read_number(text, decimal))


# ── case numbers ──────────────────────────────────────────────────────────────────────────
_NOT_KEY = re.compile(r"[^A-Z0-9]")


def case_number_key(text: str) -> str:
    """The normalised case number, the judgments' key: folded (``fold``), then only A–Z and
    0–9, leading zeros kept. `CV-12345` = `cv 12345` = `CV#12345` = `ＣＶ１２３４５`; `00123` ≠
    `123`. The SQL twin is migrations/0030's ``records_case_key`` (the generated column)."""
    return _NOT_KEY.sub("", fold(text))


# ── counties and courts ───────────────────────────────────────────────────────────────────
# Longest first, so `Sup. Ct.` becomes `Supreme Court`, not `Sup. Court`.
_EXPANSIONS = (
    (re.compile(r"\bSup\.\s*Ct\.", re.IGNORECASE), "Supreme Court"),
    (re.compile(r"\bDist\.\s*Ct\.", re.IGNORECASE), "District Court"),
    (re.compile(r"\bCt\.", re.IGNORECASE), "Court"),
    (re.compile(r"\bCo\.", re.IGNORECASE), "County"),
)


# A file names few courts and counties, over and over: remembering them makes this free.
@functools.lru_cache(maxsize=4096)
def location(text: str) -> str:
    """A county or court: trimmed, spaces collapsed, title case, abbreviations expanded
    (`NEW YORK CO.` → `New York County`, `SUP. CT.` → `Supreme Court`)."""
    expanded = " ".join(text.split())
    if "." in expanded:  # every abbreviation ends in a dot
        for pattern, replacement in _EXPANSIONS:
            expanded = pattern.sub(replacement, expanded)
    # Title case word by word: str.title() would write `O'Brien's` as `O'Brien'S`.
    return " ".join(w[:1].upper() + w[1:].lower() for w in expanded.split(" "))


# ── dates ─────────────────────────────────────────────────────────────────────────────────
_MDY = re.compile(r"(\d{1,2})/(\d{1,2})/(\d{4})")
_ISO = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})")
_DMONY = re.compile(r"(\d{1,2})-([A-Za-z]{3})-(\d{4})")
_MONTHS = {m: i for i, m in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), 1)}


def filed_date(text: str) -> date:
    """`MM/DD/YYYY`, `YYYY-MM-DD` or `DD-MMM-YYYY` (`15-JAN-2024`) → a date; else INVALID.
    Full-width digits read as digits (NFKC)."""
    text = unicodedata.normalize("NFKC", text)
    try:
        if m := _MDY.fullmatch(text):
            return date(int(m[3]), int(m[1]), int(m[2]))
        if m := _ISO.fullmatch(text):
            return date(int(m[1]), int(m[2]), int(m[3]))
        if (m := _DMONY.fullmatch(text)) and (month := _MONTHS.get(m[2].upper())):
            return date(int(m[3]), month, int(m[1]))
    except ValueError:  # 02/30/2024, month 13, year 0
        pass
    return INVALID


def today() -> date:
    """Today in UTC: US courts are behind UTC, so no judgment entered today is 'future'."""
    return datetime.now(UTC).date()


# ── plaintiffs' contact details ───────────────────────────────────────────────────────────
def email(text: str) -> str:
    """Validated (syntax only, no DNS) and lower-cased; INVALID when it is not an address."""
    try:
        checked = email_validator.validate_email(text, check_deliverability=False)
    except email_validator.EmailNotValidError:
        return INVALID
    return checked.normalized.lower()


def phone(text: str) -> str:
    """E.164 (`(212) 555-1234` → `+12125551234`), US unless the number says otherwise."""
    try:
        number = phonenumbers.parse(text, "US")
    except phonenumbers.NumberParseException:
        return INVALID
    if not phonenumbers.is_valid_number(number):
        return INVALID
    return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)


# USPS codes: the states, DC, the territories and the military post offices.
_USPS = """AL AK AZ AR CA CO CT DE FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH
    NJ NM NY NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY DC
    AS GU MP PR VI UM FM MH PW AA AE AP"""
US_STATES = frozenset(_USPS.split())


def state(text: str) -> str:
    code = text.upper()
    return code if code in US_STATES else INVALID


_ZIP = re.compile(r"([0-9]{5})(?:[- ]?([0-9]{4}))?")


def zip_code(text: str) -> str:
    """5 digits, or ZIP+4 written `12345-6789` (also `123456789`); leading zeros kept."""
    m = _ZIP.fullmatch(unicodedata.normalize("NFKC", text))
    if m is None:
        return INVALID
    return f"{m[1]}-{m[2]}" if m[2] else m[1]


PLAINTIFF_STATUSES = ("active", "inactive", "pending", "closed")
_STATUS_WORDS = {
    "active": "active", "open": "active", "current": "active",
    "inactive": "inactive", "on hold": "inactive", "hold": "inactive", "paused": "inactive",
    "dormant": "inactive",
    "pending": "pending", "new": "pending",
    "closed": "closed", "settled": "closed", "satisfied": "closed", "dismissed": "closed",
    "withdrawn": "closed",
}


def status(text: str) -> str:
    """A vendor's status word → one of PLAINTIFF_STATUSES (`Active`, `OPEN` → active)."""
    return _STATUS_WORDS.get(_SPACES.sub(" ", text).lower(), INVALID)


# ── ad-platform exports (shared/contracts/ad_metrics.py) ──────────────────────────────────
# Currency signs and codes an export writes beside a number (`$1,234.50`, `1.234,50 €`,
# `USD 12`); the currency itself comes from a column or the header, never from the cell.
def decimal_number(text: str, decimal: str | None = None) -> Decimal:
    """A measure such as conversions: ``read_number``, fractions allowed."""
    return read_number(text, decimal)


def money(text: str, decimal: str | None = None) -> Decimal:
    """An amount spent: ``read_number`` rounded half up to cents (`12.345` → 12.35)."""
    return _cents(read_number(text, decimal))


def count(text: str, decimal: str | None = None) -> int:
    """A whole count (`12,345` → 12345, `1 234` → 1234, `12.0` → 12); a fraction or a
    percentage is INVALID."""
    if text.strip().endswith("%"):
        return INVALID
    value = read_number(text, decimal)
    if value is INVALID or value is AMBIGUOUS:
        return value
    if value != value.to_integral_value():
        return INVALID
    return int(value)


def external_id(text: str) -> str:
    """A platform's id of a campaign, ad set or ad, as text (`120201234567890123`). A number a
    spreadsheet rewrote (`1.20201E+17`) lost its digits: INVALID. A leading apostrophe (how a
    spreadsheet keeps digits as text) is dropped; JSON's `123.0` is read as 123."""
    bare = text.removeprefix("'").strip()
    if _SCIENTIFIC.fullmatch(bare):
        return INVALID
    if bare.endswith(".0") and bare[:-2].isdigit():
        bare = bare[:-2]
    return bare


_WEEKDAY = re.compile(r"^(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*,?\s+", re.IGNORECASE)
_ISO_TIME = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?"
                       r"(?:Z|[+-]\d{2}:?\d{2})?)?")
_SLASHED_ISO = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})")
_MON_D_Y = re.compile(r"([A-Za-z]{3,9})\.?\s+(\d{1,2}),?\s+(\d{4})")
_D_MON_Y = re.compile(r"(\d{1,2})[\s-]([A-Za-z]{3,9})\.?[\s-](\d{4})")


def _month(word: str) -> int | None:
    upper = word[:3].upper()
    month = _MONTHS.get(upper)
    # `Sept`, `June`: the first three letters decide, but the word must be that month's.
    full = ("JANUARY", "FEBRUARY", "MARCH", "APRIL", "MAY", "JUNE", "JULY", "AUGUST",
            "SEPTEMBER", "OCTOBER", "NOVEMBER", "DECEMBER")
    if month is None or not full[month - 1].startswith(word.upper()):
        return None
    return month


def report_date(text: str) -> date:
    """A report day as the exports write it: `2024-01-15` (also with a time, as TikTok's
    `2024-01-15 00:00:00`), `2024/01/15`, `01/15/2024`, `Jan 15, 2024`, `Monday, January
    15, 2024`, `15 Jan 2024`, `15-Jan-2024` → a date; else INVALID."""
    text = _WEEKDAY.sub("", unicodedata.normalize("NFKC", text))
    try:
        if m := _ISO_TIME.fullmatch(text):
            return date(int(m[1]), int(m[2]), int(m[3]))
        if m := _SLASHED_ISO.fullmatch(text):
            return date(int(m[1]), int(m[2]), int(m[3]))
        if m := _MDY.fullmatch(text):
            return date(int(m[3]), int(m[1]), int(m[2]))
        if (m := _MON_D_Y.fullmatch(text)) and (month := _month(m[1])):
            return date(int(m[3]), month, int(m[2]))
        if (m := _D_MON_Y.fullmatch(text)) and (month := _month(m[2])):
            return date(int(m[3]), month, int(m[1]))
    except ValueError:  # 2024-02-30, month 13, year 0
        pass
    return INVALID


_CURRENCY_CODE = re.compile(r"[A-Z]{3}")


def currency(text: str) -> str:
    """An ISO 4217 code, upper case (`usd` → USD); anything else is INVALID."""
    code = text.upper()
    return code if _CURRENCY_CODE.fullmatch(code) else INVALID


_RANGE = re.compile(r"(.+?)\s+[-–—]\s+(.+)")
# AdWords wrote the range in brackets after the report's name, the dash unspaced:
# `Ad report (Oct 25, 2016-Oct 31, 2016)`; the first day ends with its year.
_BRACKETED = re.compile(r"[^()]*\((.+)\)")
_RANGE_UNSPACED = re.compile(r"(.+?[0-9]{4})\s*[-–—]\s*([^-–—\s].+)")
ALL_TIME = "all_time"


def report_period(text: str) -> tuple[date, date] | str | None:
    """A report's title line naming its range, as Google Ads writes it above the header:
    `January 1, 2024 - January 31, 2024`, `27 January 2026 - 23 February 2026`, AdWords'
    `Ad report (Oct 25, 2016-Oct 31, 2016)` → (first day, last day); `All time` → ALL_TIME;
    anything else None (it names no range)."""
    text = " ".join(unicodedata.normalize("NFKC", text).split()).strip('"')
    if text.casefold() in ("all time", "lifetime"):
        return ALL_TIME
    candidates = [text]
    if m := _BRACKETED.fullmatch(text):
        candidates.append(m[1].strip())
    for candidate in candidates:
        for pattern in (_RANGE, _RANGE_UNSPACED):
            if (m := pattern.fullmatch(candidate)) is None:
                continue
            first, last = report_date(m[1]), report_date(m[2])
            if first is not INVALID and last is not INVALID and first <= last:
                return first, last
    return None
