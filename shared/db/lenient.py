"""Reading rows whose stored values this process cannot turn into Python ones.

Postgres holds values Python does not: a timestamptz in year 0 or 10000 (``datetime`` stops at
years 1 and 9999), ``infinity``, a jsonb number of 5,000 digits (Python refuses to turn more
than 4,300 digits into an int). psycopg's loaders raise on such a value, and the whole fetch
fails with them: one row then stops every statement that reads it, and every row read with it
(docs/decisions/0193).

``register(conn)`` swaps the loaders of those types on one connection for ones that return an
``Unreadable`` marker instead of raising, so the caller sees the row, can tell which column is
unreadable, and can set that row aside with a reason while the others carry on.
"""

from __future__ import annotations

from typing import Any

from psycopg import abc, postgres
from psycopg.abc import AdaptContext, Buffer
from psycopg.adapt import Loader
from psycopg.pq import Format

# The types whose loaders can refuse a value Postgres stored without complaint.
TYPES = ("timestamptz", "timestamp", "date", "jsonb", "json")


class Unreadable:
    """A stored value that could not be loaded: its type, why (the exception's class, never
    its message, which may quote the value), and the raw text for people who may see it."""

    __slots__ = ("type_name", "reason", "text")

    def __init__(self, type_name: str, reason: str, text: str) -> None:
        self.type_name, self.reason, self.text = type_name, reason, text

    def __repr__(self) -> str:  # no value: this may reach a log line
        return f"<unreadable {self.type_name}: {self.reason}>"

    def __str__(self) -> str:
        return self.text


def register(context: AdaptContext) -> None:
    """Make the loaders of TYPES on ``context`` (a connection or cursor) lenient."""
    adapters = context.adapters
    for name in TYPES:
        oid = postgres.types[name].oid
        for fmt in (Format.TEXT, Format.BINARY):
            base = adapters.get_loader(oid, fmt)
            if base is not None and not getattr(base, "lenient", False):
                adapters.register_loader(oid, _lenient(base, name, fmt))


def unreadable(row: dict[str, Any]) -> dict[str, Unreadable]:
    """The row's unreadable columns, by name."""
    return {k: v for k, v in row.items() if isinstance(v, Unreadable)}


def _lenient(base: type[abc.Loader], name: str, fmt: Format) -> type[Loader]:
    # psycopg's C loaders cannot be subclassed: wrap an instance instead.
    class Lenient(Loader):
        lenient = True
        format = fmt

        def __init__(self, oid: int, context: AdaptContext | None = None) -> None:
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data: Buffer) -> Any:
            try:
                return self._base.load(data)
            except Exception as exc:  # noqa: BLE001 - any refusal becomes the marker
                raw = bytes(data)
                text = raw.decode("utf-8", "replace") if fmt == Format.TEXT else raw.hex()
                return Unreadable(name, type(exc).__name__, text)

    Lenient.__name__ = f"Lenient{base.__name__}"
    return Lenient
