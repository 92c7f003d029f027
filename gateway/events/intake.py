"""Checking one event of a POST /v1/events batch: each bad event is refused on its own, with a
code, and never takes the rest of the batch with it (DESIGN.md "Event ledger")."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import orjson

# Bounds the ledger's CHECK constraints also hold (migrations/0018_event_ledger.sql).
MAX_SOURCE_SYSTEM = 100
MAX_SOURCE_EVENT_ID = 200
MAX_TYPE = 100
MAX_SEQUENCE = 2**63 - 1
FIELDS = {"source_system", "source_event_id", "source_sequence", "source_emitted_at", "type",
          "payload"}
# A JSON number with more digits than this is refused (number_too_large), per event. Far beyond
# any value a contract takes, and far below the 4,300 digits past which Python refuses to turn
# text into an int: a stored payload the worker could not read back would stall its apply.
MAX_NUMBER_DIGITS = 1000
# How far ahead of this gateway's clock a source_emitted_at may be (EVENTS_MAX_FUTURE_SKEW_S).
DEFAULT_FUTURE_SKEW_S = 86400.0
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A real U+0000 in canonical JSON text: "\u0000" after an even number of backslashes (an odd
# number makes it the six characters of text "\u0000", which jsonb takes).
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)
NUL_DETAIL = ("payload holds a NUL character (U+0000), which cannot be stored; remove it or "
              "encode it.")


class TooLarge:
    """Stands in for a number the body parser would not turn into a Python value (see
    ``loads``), so the event that holds it is refused alone with number_too_large."""

    __slots__ = ("digits",)

    def __init__(self, digits: int) -> None:
        self.digits = digits


def _int(text: str) -> int | TooLarge:
    digits = len(text) - text.startswith("-")
    return TooLarge(digits) if digits > MAX_NUMBER_DIGITS else int(text)


class DuplicateKeys:
    """Stands in for a JSON object that names a key twice ({"a": 1, "a": 2}): a parser keeps
    one of them silently, so the event that holds it is refused (duplicate_key) instead."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key


class Underflow:
    """Stands in for a number too small for a float that is not zero (1e-400 reads as 0.0):
    its event is refused (number_underflow) rather than stored as a silent 0."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _object(pairs: list[tuple[str, Any]]) -> dict | DuplicateKeys:
    value = dict(pairs)
    if len(value) == len(pairs):
        return value
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            return DuplicateKeys(key)
        seen.add(key)
    raise AssertionError("a dict shorter than its pairs repeats a key")


def _float(text: str) -> float | TooLarge | Underflow:
    value = float(text)  # a float never fails: too large becomes inf, too small 0.0
    if not math.isfinite(value):
        return TooLarge(len(text))
    if value == 0.0 and any(c in "123456789" for c in text.partition("e")[0].partition("E")[0]):
        return Underflow(text[:40])
    return value


class NotANumber:
    """Stands in for NaN or Infinity, which Python's parser takes and JSON does not."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def loads(body: bytes) -> Any:
    """The request body as JSON, strictly: an object that names a key twice, a number too large
    to keep and a non-zero number too small for a float each become a marker in place of the
    value, so only the event that holds it is refused (docs/decisions/0191, 0285, 0287).

    orjson reads the body when three byte counts and searches say it reads it as the strict
    parser would (``_plain``); else, or when orjson refuses the body (NaN, a lone surrogate,
    UTF-16, an integer beyond 64 bits as a float, broken JSON), the strict parser reads it.
    What the strict parser refuses (broken JSON) is the whole body's 400."""
    if _plain(body):
        try:
            value = orjson.loads(body)
            # A key named twice is kept once: the parsed value then holds fewer colons than
            # the body (each key has one, and nothing else of the value is lost or escaped).
            if body.count(b":") == orjson.dumps(value).count(b":"):
                return value
        except (orjson.JSONDecodeError, orjson.JSONEncodeError):  # e.g. nested past 254
            pass
    return strict_loads(body)


def strict_loads(body: bytes) -> Any:
    """Python's own parser with three hooks (ADR 0285): every key, every digit, every marker."""
    return json.loads(body, object_pairs_hook=_object, parse_int=_int, parse_float=_float,
                      parse_constant=NotANumber)


# Every digit as "0" and "E" as "e", so one substring search finds a run of digits of any kind
# and one an exponent of either case.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")


def _plain(body: bytes) -> bool:
    """Whether orjson reads ``body`` exactly as ``strict_loads`` does, when it reads it at all:
    no run of 19 digits (orjson turns an integer beyond 64 bits into a float, and a float of
    300 leading zeros could underflow), no exponent of -100 or below (1e-400 reads as 0.0 in
    both; only the strict parser says so), and no colon written as an escape (which would
    spoil the count of colons that finds a key named twice). Digits or "e-1000" in strings only
    send the body the strict way."""
    digits = body.translate(_DIGITS_AS_ZERO)
    return (b"0000000000000000000" not in digits and b"e-000" not in digits
            and b"\\u003" not in body)


@dataclass(slots=True)
class Event:
    """A checked event, ready for the writer. (Not frozen: a frozen dataclass's __init__ sets
    each field through object.__setattr__, measurable per event on the intake path.)"""

    tenant_id: UUID
    source_system: str
    source_event_id: str
    source_sequence: int | None
    source_emitted_at: datetime | None
    type: str
    payload_json: str       # canonical JSON: sorted keys, no spaces
    payload_sha256: str

    @property
    def key(self) -> tuple[UUID, str, str]:
        return (self.tenant_id, self.source_system, self.source_event_id)


class Refused(Exception):
    def __init__(self, code: str, detail: str) -> None:
        self.code, self.detail = code, detail
        super().__init__(detail)


def check(raw: Any, tenant_id: UUID, max_payload_bytes: int, *,
          max_future_skew_s: float = DEFAULT_FUTURE_SKEW_S, now: datetime | None = None) -> Event:
    """The event, or Refused with the first thing wrong with it."""
    if isinstance(raw, DuplicateKeys):
        raise Refused("duplicate_key", f"The event names {_shown(raw.key)} more than once; "
                      "send each field once.")
    if not isinstance(raw, dict):
        raise Refused("invalid_event", "Each event must be a JSON object.")
    if not raw.keys() <= FIELDS:
        unknown = raw.keys() - FIELDS
        raise Refused("unknown_field", f"Unknown field {min(unknown)!r}; an event has "
                      "source_system, source_event_id, source_sequence, source_emitted_at, "
                      "type and payload.")
    payload = raw.get("payload")
    if isinstance(payload, _MARKERS):
        _scan([payload])
    if not isinstance(payload, dict):
        raise Refused("invalid_payload", "payload must be a JSON object (one row of its type).")
    payload_json, data = _canonical(payload)
    _fits(data, max_payload_bytes)
    return Event(
        tenant_id=tenant_id,
        source_system=_text(raw, "source_system", MAX_SOURCE_SYSTEM),
        source_event_id=_text(raw, "source_event_id", MAX_SOURCE_EVENT_ID),
        source_sequence=sequence(raw.get("source_sequence")),
        source_emitted_at=emitted_at(raw.get("source_emitted_at"), now=now,
                                      skew_s=max_future_skew_s),
        type=_text(raw, "type", MAX_TYPE),
        payload_json=payload_json,
        payload_sha256=hashlib.sha256(data).hexdigest(),
    )


_MARKERS = (DuplicateKeys, Underflow, TooLarge, NotANumber)


def canonical(payload: dict, max_bytes: int) -> str:
    """The payload as stored (sorted keys, no spaces), or Refused: also how an operator's edit
    is checked (gateway/events/replay.py)."""
    text, data = _canonical_exact(payload)  # an operator's edit: rare, and may hold NaN
    _fits(data, max_bytes)
    return text


def _fits(data: bytes, max_bytes: int) -> None:
    if len(data) > max_bytes:
        raise Refused("payload_too_large",
                      f"payload is larger than {max_bytes // 1024} KiB; split it.")


def _canonical(payload: dict) -> tuple[str, bytes]:
    """(canonical JSON, its UTF-8) or Refused. Per event on the intake path: orjson writes it
    (about a sixth of the stdlib encoder's cost per event, ADR 0285), byte for byte what the
    stdlib writes, which is the canonical form payload hashes were always taken of, except for
    floats below 1e-4 (orjson writes 0.00001 and 1e-7, Python 1e-05 and 1e-07): a payload
    whose text may hold one, an integer beyond 64 bits or a marker is written by the stdlib."""
    try:
        data = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError included
        return _canonical_exact(payload)
    if (b"e-" in data or b".0000" in data) and _SMALL_FLOAT.search(data):
        return _canonical_exact(payload)
    text = data.decode()
    if "\\u0000" in text and _NUL.search(text):
        raise Refused("payload_has_nul", NUL_DETAIL)
    return text, data


# Where orjson's text of a float may differ from Python's: an exponent or 4 leading zeros.
_SMALL_FLOAT = re.compile(rb"[0-9]e-|[0-9]\.0000")


def _canonical_exact(payload: dict) -> tuple[str, bytes]:
    """The canonical form as Python's encoder writes it, or Refused with what is wrong."""
    try:
        text = _ENCODER.encode(payload)
        data = text.encode()  # a lone surrogate ("\ud800") cannot be stored
    except TypeError as exc:
        _scan(payload)  # a marker: say which refusal
        raise Refused("invalid_payload", "payload holds a value that is not JSON.") from exc
    except (ValueError, UnicodeError) as exc:
        raise Refused("invalid_payload", "payload holds a value that cannot be stored "
                      "(broken Unicode or a number out of range).") from exc
    if "\\u0000" in text and _NUL.search(text):
        raise Refused("payload_has_nul", NUL_DETAIL)
    return text, data


def _scan(payload: Any) -> None:
    """Refuse what jsonb cannot hold or the worker could not read back: a NUL character in a
    key or string (the six characters ``\\u0000`` as text are fine), a huge number. A loop,
    not recursion: the depth is the body parser's to bound."""
    stack: list[Any] = [payload]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and "\x00" in value:
            raise Refused("payload_has_nul", NUL_DETAIL)
        elif isinstance(value, TooLarge):
            raise Refused("number_too_large", "payload holds a number too large to keep "
                          f"(more than {MAX_NUMBER_DIGITS} digits, or beyond a float's range); "
                          "send it as text.")
        elif isinstance(value, DuplicateKeys):
            raise Refused("duplicate_key", f"payload holds an object that names "
                          f"{_shown(value.key)} more than once; send each key once.")
        elif isinstance(value, NotANumber):
            raise Refused("invalid_payload", f"payload holds {value.text}, which JSON does not "
                          "allow; send a number, or null.")
        elif isinstance(value, Underflow):
            raise Refused("number_underflow", "payload holds a number too small to keep "
                          f"({value.text}: a float would read it as 0); send it as text, or "
                          "send 0.")


def _shown(key: str) -> str:
    """A repeated key for the answer: quoted, and cut short if long."""
    return repr(key if len(key) <= 40 else key[:40] + "…")


def _text(raw: dict, name: str, limit: int) -> str:
    value = raw.get(name)
    # The common case in one expression: short printable ASCII, not blank.
    if (type(value) is str and 0 < len(value) <= limit and value.isascii()
            and value.isprintable() and not value.isspace()):
        return value
    if value is not None and not isinstance(value, str):
        raise Refused(f"invalid_{name}", f"{name} must be a string, not {_kind(value)}.")
    if value is None or not value.strip():
        raise Refused(f"missing_{name}", f"{name} is required: a non-empty string.")
    if len(value) > limit:
        raise Refused(f"invalid_{name}", f"{name} must be at most {limit} characters.")
    if not value.isprintable():  # NUL and other control characters included
        raise Refused(f"invalid_{name}", f"{name} may hold printable characters only.")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeError as exc:
            raise Refused(f"invalid_{name}", f"{name} holds broken Unicode.") from exc
    return value


def _kind(value: Any) -> str:
    if isinstance(value, TooLarge | Underflow | NotANumber):
        return "a number"
    return {bool: "true/false", int: "a number", float: "a number", list: "a list",
            dict: "an object"}.get(type(value), "another type")


def sequence(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, TooLarge):
        raise Refused("number_too_large", "source_sequence must be a whole number from 0 to "
                      f"2^63-1; this one has {value.digits} digits.")
    # bool is an int in Python but not a sequence number; 1.0 from a sloppy encoder is fine.
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEQUENCE:
        raise Refused("invalid_source_sequence",
                      "source_sequence must be a whole number from 0 to 2^63-1, or absent.")
    return value


def emitted_at(value: Any, *, now: datetime | None = None,
               skew_s: float = DEFAULT_FUTURE_SKEW_S) -> datetime | None:
    """An aware time, in UTC. Refused: no offset, a UTC value outside what Postgres and Python
    both hold (year 1 to 9999: ``0001-01-01T00:00:00+14:00`` is in year 0), or later than
    this gateway's clock plus the allowed skew. Far-past times are taken: "newest
    wins" then treats the event as older than any of its entity's events with a later time
    (docs/decisions/0140, 0191)."""
    if value is None:
        return None
    try:
        if not isinstance(value, str) or len(value) > 40:
            raise ValueError(value)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise Refused("invalid_source_emitted_at", "source_emitted_at must be an ISO 8601 "
                      "time with its offset, e.g. 2024-05-01T12:00:00Z.") from exc
    if parsed.tzinfo is None:
        raise Refused("invalid_source_emitted_at",
                      "source_emitted_at needs an offset (Z or +hh:mm): a time without one is "
                      "ambiguous.")
    try:
        utc = parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)
    except OverflowError as exc:
        raise Refused("source_emitted_at_out_of_range", "source_emitted_at must lie between "
                      "0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z in UTC.") from exc
    if utc > (now or datetime.now(UTC)) + timedelta(seconds=skew_s):
        raise Refused("source_emitted_at_in_future", "source_emitted_at is later than this "
                      "server's clock allows (EVENTS_MAX_FUTURE_SKEW_S); check the source's "
                      "clock.")
    return utc


def micros(value: datetime | None) -> int | None:
    """A time as whole microseconds since 1970 (negative before): how the writer compares a
    resend's time with the stored one, exactly."""
    return None if value is None else (value - EPOCH) // timedelta(microseconds=1)
