"""Excel number format codes, rendered as Excel shows a cell (en-US), so a sheet is indexed
with the words its reader sees: "1,599.99", "2.50%", "1.98E+08", "17-May-07", not the stored
1599.99, 0.025, 198356388.0 and 2007-05-17.

`formatter(code)` compiles a code once (cached) into a function of the cell's value; that
function returns None for what it does not render (conditions such as `[<100]`, a negative
date), and the caller then keeps the stored value, so a code it cannot read loses nothing.
Covered: General, digit placeholders `0 # ?` with literals between them, grouping and
thousands scaling `,`, `%`, scientific `E+`, fractions `# ?/?`, sections `pos;neg;zero;text`,
quoted and escaped literals, `_x` and `*x`, colours, `[$-409]` locale tags and `[$€-407]`
currency tags, dates and times (`y m d h s`, `AM/PM`, `A/P`, elapsed `[h]`, fractional
seconds). Why our own and not a library: ADR 0296.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import functools
import math
import re
from collections.abc import Callable

Formatter = Callable[[object], "str | None"]

# ECMA-376 §18.8.30's built-in formats as Excel shows them in en-US (ids 5-8, 41-44: "$").
BUILTIN = {
    0: "General", 1: "0", 2: "0.00", 3: "#,##0", 4: "#,##0.00",
    5: '"$"#,##0_);\\("$"#,##0\\)', 6: '"$"#,##0_);[Red]\\("$"#,##0\\)',
    7: '"$"#,##0.00_);\\("$"#,##0.00\\)', 8: '"$"#,##0.00_);[Red]\\("$"#,##0.00\\)',
    9: "0%", 10: "0.00%", 11: "0.00E+00", 12: "# ?/?", 13: "# ??/??", 14: "m/d/yyyy",
    15: "d-mmm-yy", 16: "d-mmm", 17: "mmm-yy", 18: "h:mm AM/PM", 19: "h:mm:ss AM/PM",
    20: "h:mm", 21: "h:mm:ss", 22: "m/d/yyyy h:mm", 37: "#,##0_);(#,##0)",
    38: "#,##0_);[Red](#,##0)", 39: "#,##0.00_);(#,##0.00)", 40: "#,##0.00_);[Red](#,##0.00)",
    41: '_(* #,##0_);_(* \\(#,##0\\);_(* "-"_);_(@_)',
    42: '_("$"* #,##0_);_("$"* \\(#,##0\\);_("$"* "-"_);_(@_)',
    43: '_(* #,##0.00_);_(* \\(#,##0.00\\);_(* "-"??_);_(@_)',
    44: '_("$"* #,##0.00_);_("$"* \\(#,##0.00\\);_("$"* "-"??_);_(@_)',
    45: "mm:ss", 46: "[h]:mm:ss", 47: "mm:ss.0", 48: "##0.0E+0", 49: "@",
}

_TOKEN = re.compile(r"""
    "(?P<quoted>[^"]*)"? | \\(?P<escaped>.) | _(?P<space>.) | \*(?P<fill>.)
  | \[(?P<bracket>[^\]]*)\] | (?P<ampm>AM/PM|am/pm|A/P|a/p) | (?P<general>General)
  | (?P<exp>[Ee][+-]) | (?P<date>[yY]+|[mM]+|[dD]+|[hH]+|[sS]+|e+|g+) | (?P<digit>[0#?])
  | (?P<point>\.) | (?P<comma>,) | (?P<pct>%) | (?P<at>@) | (?P<slash>/) | (?P<semi>;)
  | (?P<other>.)
""", re.X | re.S)
_CONDITION = re.compile(r"^(<=|>=|<>|<|>|=)\s*-?[\d.]+$")
_ELAPSED = re.compile(r"^(h+|m+|s+)$", re.I)
_EPOCH = datetime.datetime(1899, 12, 30)
_EPOCH_1904 = datetime.datetime(1904, 1, 1)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_WIDE = decimal.Context(prec=400, rounding=decimal.ROUND_HALF_UP)
_END_SERIAL = 2958466  # 10000-01-01: Excel shows no date from there on


def general(value: float) -> str:
    """Excel's General for a number: an integer in all its digits (as stored, even past
    Excel's 15), else 15 significant digits, so 0.1 + 0.2 shows 0.3."""
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = f"{value:.15g}"
    if "e" in text:
        mantissa, _, exponent = text.partition("e")
        return f"{mantissa}E{exponent[0]}{exponent[1:].zfill(2)}"
    return text


@functools.lru_cache(maxsize=1024)
def formatter(code: str, date1904: bool = False) -> Formatter | None:
    """The function that renders a value under ``code``; None for General or text alone."""
    if code.strip() in ("", "General", "@"):
        return None
    sections = _sections(code)
    if any(t[0] == "bracket" and _CONDITION.match(t[1]) for s in sections for t in s):
        return _keep  # conditional sections: keep the stored value
    # A fourth section, or a last one that only places text (`...;@`), is for text cells.
    numeric = sections[:3]
    if len(sections) > 1 and len(sections) != 4 and _kind(sections[-1]) == "text":
        numeric = sections[:-1]
    renderers = [_renderer(s, date1904) for s in numeric]
    return functools.partial(_render, renderers, _EPOCH_1904 if date1904 else _EPOCH)


def _keep(value: object) -> None:
    return None


def _render(renderers: list[Callable[[float, bool], str | None]], epoch: datetime.datetime,
            value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(
            value, (int, float, datetime.date, datetime.time, datetime.timedelta)):
        return None
    number = _serial(value, epoch)
    if number is None or not math.isfinite(number):
        return None
    if number < 0 and len(renderers) > 1:
        text = renderers[1](-number, False)
    elif number == 0 and len(renderers) > 2:
        text = renderers[2](0.0, False)
    else:
        text = renderers[0](abs(number), number < 0)
    return None if text is None else text.strip()


def _serial(value: object, epoch: datetime.datetime) -> float | None:
    """A cell's value as Excel stores it: a number, dates as days since the workbook's epoch
    (1899-12-30, or 1904-01-01 in a 1904 workbook; calamine hands dates already converted)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime.datetime):
        return (value - epoch).total_seconds() / 86400
    if isinstance(value, datetime.date):
        return float((value - epoch.date()).days)
    if isinstance(value, datetime.time):
        return (value.hour * 3600 + value.minute * 60 + value.second
                + value.microsecond / 1e6) / 86400
    if isinstance(value, datetime.timedelta):
        return value.total_seconds() / 86400
    return None


def _sections(code: str) -> list[list[tuple[str, str]]]:
    sections: list[list[tuple[str, str]]] = [[]]
    for match in _TOKEN.finditer(code):
        kind = match.lastgroup or "other"
        if kind == "semi":
            sections.append([])
        else:
            sections[-1].append((kind, match.group(kind) or ""))
    return sections


def _kind(section: list[tuple[str, str]]) -> str:
    kinds = {kind for kind, _ in section}
    if "date" in kinds or "ampm" in kinds or any(
            kind == "bracket" and _ELAPSED.match(text) for kind, text in section):
        return "date"
    if "digit" in kinds:
        return "number"
    if "general" in kinds:
        return "general"
    if "at" in kinds:
        return "text"
    return "literal"


def _renderer(section: list[tuple[str, str]], date1904: bool):
    kind = _kind(section)
    if kind == "date":
        return functools.partial(_date, _date_tokens(section), date1904)
    if kind == "number":
        if any(k == "slash" for k, _ in section):
            return functools.partial(_fraction, section)
        plan = _NumberPlan.of(section)
        return _plain_number(plan) or functools.partial(_number, plan)
    return functools.partial(_literal, section)


def _literal_text(kind: str, text: str) -> str:
    if kind in ("quoted", "escaped", "other", "slash", "point", "comma", "pct"):
        return text
    if kind == "space":
        return " "
    if kind == "bracket" and text.startswith("$"):  # [$€-407]: the currency symbol
        return text[1:].split("-", 1)[0]
    return ""  # fills, colours, locale tags, stray date/number letters


def _literal(section, number: float, negative: bool) -> str:
    """A section without digit placeholders: its literals, General's digits where it says
    General, and a lone `@` (a text format holding a number) shows the number as General."""
    if _kind(section) == "text":
        section = [("general", "")]
    text = "".join(general(number) if kind == "general" else _literal_text(kind, t)
                   for kind, t in section)
    return ("-" if negative and any(k == "general" for k, _ in section) else "") + text


class _NumberPlan:
    """Where a number section's digits go: integer and fraction placeholders, scaling."""

    __slots__ = ("section", "integer", "fraction", "group", "scale", "percent", "exponent")

    def __init__(self, section, integer, fraction, group, scale, percent, exponent):
        self.section, self.integer, self.fraction = section, integer, fraction
        self.group, self.scale, self.percent, self.exponent = group, scale, percent, exponent

    @classmethod
    def of(cls, section: list[tuple[str, str]]) -> _NumberPlan:
        integer: list[str] = []
        fraction: list[str] = []
        exponent: list[str] = []
        part, group, scale, percent = integer, False, 0, 0
        kept: list[tuple[str, str]] = []
        for index, (kind, text) in enumerate(section):
            if kind == "digit":
                part.append(text)
            elif kind == "point" and part is integer:
                part = fraction
            elif kind == "exp":
                part = exponent
            elif kind == "pct":
                percent += 1
            elif kind == "comma":
                role = _comma(section, index, part is integer)
                if role == "group":
                    group = True
                    continue  # grouping is applied to the whole integer part
                if role == "scale":
                    scale += 1
                    continue
            kept.append((kind, text))
        return cls(kept, integer, fraction, group, scale, percent, exponent)


def _comma(section: list[tuple[str, str]], index: int, in_integer: bool) -> str:
    """A comma between integer digits groups thousands; one after the last digit divides by
    a thousand (`0.0,,"M"`); anywhere else it is a literal comma."""
    before = next((k for k, _ in reversed(section[:index]) if k != "comma"), "")
    after = next((k for k, _ in section[index + 1:] if k != "comma"), "")
    if before == "digit" and after == "digit" and in_integer:
        return "group"
    if before == "digit" and not any(k == "digit" for k, _ in section[index + 1:]):
        return "scale"
    if before == "digit" and after == "point" and in_integer:
        return "scale"
    return "literal"


def _number(plan: _NumberPlan, number: float, negative: bool) -> str | None:
    number = number * 100 ** plan.percent / 1000 ** plan.scale
    power, digits = _scientific(plan, number) if plan.exponent else (0, _rounded(
        number, len(plan.fraction)))
    if digits is None:
        return None
    whole, _, decimals = digits.partition(".")
    whole = whole.lstrip("0")
    integer = _place_integer(whole, plan.integer, plan.group)
    fraction = _place_fraction(decimals, plan.fraction)
    out, i, f = [], 0, 0
    for kind, text in plan.section:
        if kind == "digit" and i < len(integer):
            out.append(integer[i])
            i += 1
        elif kind == "digit" and f < len(fraction):
            out.append(fraction[f])
            f += 1
        elif kind == "digit":
            continue
        elif kind == "point":
            out.append(".")
        elif kind == "exp":
            sign = "-" if power < 0 else ("+" if text[1] == "+" else "")
            out.append("E" + sign + str(abs(power)).zfill(len(plan.exponent)))
            f = len(fraction)
            i = len(integer)
        else:
            out.append(_literal_text(kind, text))
    text = "".join(out)
    return ("-" + text) if negative and any(c.isdigit() and c != "0" for c in text) else text


def _scientific(plan: _NumberPlan, number: float) -> tuple[int, str | None]:
    """The power of ten and the rounded mantissa; `##0.0E+0` keeps powers a multiple of 3."""
    if not number:
        return 0, _rounded(0.0, len(plan.fraction))
    width = max(len(plan.integer), 1)
    step = width if "#" in plan.integer and width > 1 else 1
    power = math.floor(math.log10(number))
    power = power - power % step if step > 1 else power - (width - 1)
    digits = _rounded(number / 10 ** power, len(plan.fraction))
    if digits is not None and len(digits.partition(".")[0].lstrip("0")) > width:
        power += step  # 9.999 rounds up to 10.00: one more power of ten
        digits = _rounded(number / 10 ** power, len(plan.fraction))
    return power, digits


def _plain_number(plan: _NumberPlan):
    """The common codes (`0.00`, `#,##0`, `0.00%`, `"$"#,##0.00_)`) as one Decimal format:
    literals only around the digits, one `0` ending the integer part, `0`s after the point.
    Three times faster than placing digit by digit, on every formatted cell of a sheet."""
    kinds = [kind for kind, _ in plan.section]
    digits = [i for i, kind in enumerate(kinds) if kind in ("digit", "point")]
    if plan.exponent or not digits or "".join(plan.integer).lstrip("#") != "0" \
            or set(plan.fraction) - {"0"} or any(k != "digit" and k != "point" for k in
                                               kinds[digits[0]:digits[-1] + 1]):
        return None
    prefix = "".join(_literal_text(k, t) for k, t in plan.section[:digits[0]])
    suffix = "".join(_literal_text(k, t) for k, t in plan.section[digits[-1] + 1:])
    places = decimal.Decimal(1).scaleb(-len(plan.fraction))
    spec = ",f" if plan.group else "f"
    scale = 100 ** plan.percent / 1000 ** plan.scale
    if kinds[digits[-1]] == "point":  # `0.`: the point stays
        suffix = "." + suffix

    def render(number: float, negative: bool) -> str | None:
        try:
            exact = decimal.Decimal(f"{number * scale:.15g}").quantize(places, context=_WIDE)
        except decimal.InvalidOperation:
            return None
        text = prefix + format(exact, spec) + suffix
        return "-" + text if negative and exact else text

    return render


def _rounded(number: float, places: int) -> str | None:
    """Excel's rounding: 15 significant digits first, then half away from zero."""
    try:
        exact = decimal.Decimal(f"{number:.15g}")
        return format(exact.quantize(decimal.Decimal(1).scaleb(-places), context=_WIDE), "f")
    except decimal.InvalidOperation:
        return None


def _place_integer(whole: str, placeholders: list[str], group: bool) -> list[str]:
    """The text each integer placeholder shows, right-aligned; the first takes any excess."""
    count = len(placeholders)
    if count == 0:
        return []
    pads = {"0": "0", "?": " ", "#": ""}
    shown = [whole[:max(len(whole) - count + 1, 0)]] + list(whole[-count + 1:] if count > 1
                                                          else "")
    if len(whole) < count:
        shown = [pads[p] for p in placeholders[: count - len(whole)]] + list(whole)
    if group:  # thousands separators through the zero padding too: 0,0000000 → 01,234,567
        text = "".join(shown)
        digits = text.lstrip(" ")
        groups = [digits[max(i - 3, 0):i] for i in range(len(digits), 0, -3)]
        return [text[:len(text) - len(digits)] + ",".join(reversed(groups))] + [""] * (count - 1)
    return shown


def _place_fraction(decimals: str, placeholders: list[str]) -> list[str]:
    shown = list(decimals)
    for index in range(len(placeholders) - 1, -1, -1):
        if shown[index] != "0" or placeholders[index] == "0":
            break
        shown[index] = " " if placeholders[index] == "?" else ""
    return shown


def _fraction(section: list[tuple[str, str]], number: float, negative: bool) -> str | None:
    """`# ?/?`: a whole part and the nearest fraction with as many denominator digits."""
    slash = next(i for i, (kind, _) in enumerate(section) if kind == "slash")
    before = [i for i, (kind, _) in enumerate(section[:slash]) if kind == "digit"]
    after = section[slash + 1:]
    fixed = "".join(t for k, t in after if k == "other" and t.isdigit())
    width = sum(1 for k, _ in after if k == "digit")
    mixed = len(before) > 0 and any(section[i - 1][0] != "digit" for i in before[1:]) \
        or (len(before) > 1 and section[before[-1] - 1][0] != "digit")
    whole = int(number) if mixed else 0
    rest = fractions.Fraction(number - whole)
    limit = int(fixed) if fixed else 10 ** max(width, 1) - 1
    part = rest.limit_denominator(limit) if not fixed else fractions.Fraction(
        round(rest * limit), limit)
    if part == 1:
        whole, part = whole + 1, fractions.Fraction(0)
    sign = "-" if negative else ""
    if not mixed:
        return f"{sign}{part.numerator + whole * part.denominator}/{part.denominator}"
    if part == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole or ''} {part.numerator}/{part.denominator}".replace("- ", "-")


def _date_tokens(section: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Date tokens with each `m` resolved: minutes after an hour or before seconds."""
    tokens: list[tuple[str, str]] = []
    last = ""
    for index, (kind, text) in enumerate(section):
        if kind == "bracket" and _ELAPSED.match(text):
            tokens.append(("elapsed", text.lower()))
            last = text[0].lower()
            continue
        if kind == "date":
            letter = text[0].lower()
            if letter == "m" and len(text) <= 2:
                following = next((t[0].lower() for k, t in section[index + 1:]
                                  if k == "date"), "")
                if last == "h" or following == "s":
                    letter = "n"  # minute
            tokens.append(("date", letter * len(text)))
            last = letter
            continue
        if kind == "digit" and tokens and tokens[-1][0] in ("date", "subsec") \
                and text == "0" and (tokens[-1][1].startswith("s") or tokens[-1][0] == "subsec"):
            tokens.append(("subsec", "0"))
            continue
        if kind == "point" and index + 1 < len(section) and section[index + 1] == ("digit", "0"):
            tokens.append(("subsec", "."))
            continue
        tokens.append((kind, text))
    return tokens


def _date(tokens: list[tuple[str, str]], date1904: bool, number: float,
          negative: bool) -> str | None:
    if negative or number >= _END_SERIAL:
        return None
    places = sum(1 for kind, text in tokens if kind == "subsec" and text == "0")
    seconds = round(number * 86400 * 10 ** places) / 10 ** places
    moment = (_EPOCH_1904 if date1904 else _EPOCH) + datetime.timedelta(seconds=seconds)
    twelve = any(kind == "ampm" for kind, _ in tokens)
    fraction = f"{seconds % 1:.{places}f}"[2:] if places else ""
    out = []
    for kind, text in tokens:
        if kind == "date":
            out.append(_date_part(text, moment, twelve))
        elif kind == "elapsed":
            unit = {"h": 3600, "m": 60, "s": 1}[text[0]]
            out.append(str(int(seconds // unit)).zfill(len(text)))
        elif kind == "ampm":
            pm = moment.hour >= 12
            # Excel shows AM/PM in capitals however the code spells it; A/P keeps its case.
            out.append(("PM" if pm else "AM") if len(text) > 3 else text[2 if pm else 0])
        elif kind == "subsec":
            out.append("." if text == "." else fraction[:1])
            fraction = fraction[1:] if text == "0" else fraction
        else:
            out.append(_literal_text(kind, text))
    return "".join(out)


def _date_part(token: str, moment: datetime.datetime, twelve: bool) -> str:
    letter, width = token[0], len(token)
    if letter in "eb":  # the era's year: without a calendar, the Gregorian year
        return str(moment.year)
    if letter == "g":  # the era's name: none without a locale
        return ""
    if letter == "y":
        return str(moment.year % 100).zfill(2) if width <= 2 else str(moment.year)
    if letter == "m":
        if width >= 5:
            return _MONTHS[moment.month - 1][0]
        if width >= 3:
            return _MONTHS[moment.month - 1] if width == 4 else _MONTHS[moment.month - 1][:3]
        return str(moment.month).zfill(width)
    if letter == "d":
        if width >= 3:
            return _DAYS[moment.weekday()] if width >= 4 else _DAYS[moment.weekday()][:3]
        return str(moment.day).zfill(width)
    if letter == "h":
        hour = (moment.hour % 12 or 12) if twelve else moment.hour
        return str(hour).zfill(min(width, 2))
    if letter == "n":
        return str(moment.minute).zfill(min(width, 2))
    return str(moment.second).zfill(min(width, 2))  # s
