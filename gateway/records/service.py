"""Records read-back: a tenant's judgments and plaintiffs, searched, filtered and paged, and the
plaintiffs' duplicate candidates (issue 12 item 5). The API routes and the web pages both read
through here, so they can never disagree.

Search speaks the contract's normalisation (shared/contracts/normalise.py): `CV-12345`,
`cv 12345` and `CV#12345` are one case number. E-mail, phone and contact person are personal
data, shown only to the tenant's admins (docs/decisions/0123); duplicate pairs are scored as
docs/decisions/0121 says.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from uuid import UUID

from gateway import paging
from shared import db, errors
from shared.contracts import normalise

Q = db.load_queries(Path(__file__).with_name("records.sql"))
STATUSES = normalise.PLAINTIFF_STATUSES
# records-data-contract.md "Duplicate Detection Query": more than 80 % name similarity.
MIN_SIMILARITY = 0.8
MAX_SEARCH = 200
# What only a tenant's admins see of a plaintiff (DESIGN.md "Personal data").
CONTACT_FIELDS = ("email", "phone", "contact_name")
_STATE = re.compile(r"[A-Z]{2}")
# What the API declares an amount filter to be (ADR 0200): dollars and cents, 0 or more.
AMOUNT_PATTERN = r"^[0-9]{1,15}(\.[0-9]{1,6})?$"
# The statuses as a type the API declares (an enum in /schema), from the one tuple.
if TYPE_CHECKING:
    Status = str
else:
    Status = Literal[STATUSES]


class InvalidFilter(errors.InvalidRequest):
    """A filter of this listing is not valid; fix it (the detail says which) and try again."""

    code = "invalid_filter"


@dataclass(frozen=True)
class JudgmentFilters:
    q: str | None = None
    case_number: str | None = None
    county: str | None = None
    court: str | None = None
    filed_from: date | None = None
    filed_to: date | None = None
    amount_min: Decimal | None = None
    amount_max: Decimal | None = None
    batch_id: UUID | None = None

    def check(self) -> JudgmentFilters:
        """Amounts of 0 or more. A range the wrong way round, or a case number with nothing
        to key on, is what /schema allows: it matches nothing (ADR 0200)."""
        for amount in (self.amount_min, self.amount_max):
            if amount is not None and not (amount.is_finite() and amount >= 0):
                raise InvalidFilter("amount_min and amount_max are dollar amounts of 0 or more.")
        return self

    def params(self) -> dict[str, Any]:
        return {**_search(self.q),
                "case_number": normalise.case_number_key(self.case_number)
                if self.case_number else None,
                "county": self.county, "court": self.court, "filed_from": self.filed_from,
                "filed_to": self.filed_to, "amount_min": self.amount_min,
                "amount_max": self.amount_max, "batch_id": self.batch_id}


@dataclass(frozen=True)
class PlaintiffFilters:
    q: str | None = None
    case_number: str | None = None
    status: str | None = None
    state: str | None = None
    batch_id: UUID | None = None

    def check(self) -> PlaintiffFilters:
        # A case number with nothing to key on matches nothing, as /schema allows (ADR 0200).
        if self.status is not None and self.status not in STATUSES:
            raise InvalidFilter(f"status must be one of {', '.join(STATUSES)}.")
        if self.state is not None and not _STATE.fullmatch(self.state):
            raise InvalidFilter("state must be a 2-letter code such as NY.")
        return self

    def params(self) -> dict[str, Any]:
        return {"q_name": _search(self.q)["q_name"],
                "case_number": normalise.case_number_key(self.case_number)
                if self.case_number else None,
                "status": self.status, "state": self.state, "batch_id": self.batch_id}


def _search(q: str | None) -> dict[str, str | None]:
    """LIKE patterns for a search text: its case-number key (A–Z0–9, so nothing to escape)
    and its name form (spaces collapsed, LIKE's wildcards escaped). A text of no letter or
    digit cannot match a case number and matches names only."""
    text = normalise.name(q or "")
    if not text:
        return {"q_key": None, "q_name": None}
    key = normalise.case_number_key(text)
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    # '' never matches a normalised case number (0009 refuses an empty one).
    return {"q_key": f"%{key}%" if key else "", "q_name": f"%{escaped}%"}


def amount(value: str | None) -> Decimal | None:
    """An amount filter as the API declares it (AMOUNT_PATTERN): a Decimal, None when empty."""
    if value is None or not value.strip():
        return None
    try:
        return Decimal(value.strip())
    except ArithmeticError:
        raise InvalidFilter("amount_min and amount_max are dollar amounts of 0 or more.") from None


def clean_text(value: str | None, limit: int = MAX_SEARCH) -> str | None:
    """A free-text parameter: trimmed, empty = absent, too long refused."""
    text = (value or "").strip()
    if len(text) > limit:
        raise InvalidFilter(f"A search or filter text is at most {limit} characters.")
    return text or None


# ── reads ───────────────────────────────────────────────────────────────────────────────────
async def judgments(pool: db.AsyncPool, *, tenant_id: UUID, filters: JudgmentFilters,
                    window: paging.Window) -> dict[str, Any]:
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["list_judgments"], {
            "tenant_id": tenant_id, **filters.params(), **window.params()})).fetchall()
    return window.result(rows, judgment, key=("created_at", "id"))


async def plaintiffs(pool: db.AsyncPool, *, tenant_id: UUID, filters: PlaintiffFilters,
                     window: paging.Window, with_contacts: bool) -> dict[str, Any]:
    async with pool.connection() as conn:
        rows = await (await conn.execute(Q["list_plaintiffs"], {
            "tenant_id": tenant_id, **filters.params(), **window.params()})).fetchall()
    return window.result(rows, lambda r: plaintiff(r, with_contacts), key=("created_at", "id"))


async def duplicates(pool: db.AsyncPool, *, tenant_id: UUID,
                     window: paging.Window) -> dict[str, Any]:
    async with pool.connection() as conn, conn.transaction():
        # SET LOCAL semantics: the threshold ends with this transaction, not with the pooled
        # connection's session.
        await conn.execute(Q["similarity_threshold"], {"threshold": str(MIN_SIMILARITY)})
        rows = await (await conn.execute(Q["duplicate_pairs"], {
            "tenant_id": tenant_id, "min_similarity": MIN_SIMILARITY,
            **window.params()})).fetchall()
    return window.result(rows, pair)


# ── views ───────────────────────────────────────────────────────────────────────────────────
def judgment(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": str(row["id"]), "case_number": row["case_number"],
        "case_number_normalized": row["case_number_normalized"],
        "plaintiff_name": row["plaintiff_name"], "defendant_name": row["defendant_name"],
        # A string, as the batch API's amounts: no binary float rounding of cents.
        "amount": f"{row['amount']:.2f}", "filed_date": row["filed_date"].isoformat(),
        "court": row["court"], "county": row["county"], "source": row["source"],
        "source_reference": row["source_reference"],
        "batch_id": str(row["batch_id"]) if row["batch_id"] else None,
        "created_at": _iso(row["created_at"]), "updated_at": _iso(row["updated_at"]),
    }


def plaintiff(row: dict[str, Any], with_contacts: bool) -> dict[str, Any]:
    """Everyone in the tenant sees who and where; only admins see how to reach them. For
    others the contact keys are left out (not null: null would claim there is none)."""
    out = {
        "id": str(row["id"]), "name": row["name"], "address_line1": row["address_line1"],
        "address_line2": row["address_line2"], "city": row["city"], "state": row["state"],
        "zip": row["zip"], "status": row["status"], "source": row["source"],
        "source_reference": row["source_reference"],
        "batch_id": str(row["batch_id"]) if row["batch_id"] else None,
        "case_numbers": list(row["case_numbers"] or []),
        "created_at": _iso(row["created_at"]), "updated_at": _iso(row["updated_at"]),
    }
    if with_contacts:
        out.update({k: row[k] for k in CONTACT_FIELDS})
    return out


def pair(row: dict[str, Any]) -> dict[str, Any]:
    """A candidate pair: both plaintiffs (no contact details: the match flags say enough), the
    name similarity and distance, which signals matched, and the confidence."""
    def side(p: str) -> dict[str, Any]:
        return {"id": str(row[f"{p}_id"]), "name": row[f"{p}_name"],
                "address_line1": row[f"{p}_address"], "city": row[f"{p}_city"],
                "state": row[f"{p}_state"], "zip": row[f"{p}_zip"]}

    return {
        "a": side("a"), "b": side("b"),
        "name_similarity": round(float(row["name_similarity"]), 3),
        "name_distance": row["name_distance"],
        "address_match": row["address_match"], "zip_match": row["zip_match"],
        "phone_match": row["phone_match"], "email_match": row["email_match"],
        "confidence": float(row["confidence"]),
    }


def _iso(at: datetime | None) -> str | None:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z") if at else None


# ── the web pages' forms ────────────────────────────────────────────────────────────────────
# A form sends every field, empty ones as "": empty means absent; anything else must parse.
def _form(params: Mapping[str, str], name: str, parse: Callable[[str], Any]) -> Any:
    text = clean_text(params.get(name))
    if text is None:
        return None
    try:
        return parse(text)
    except (ValueError, ArithmeticError):
        raise InvalidFilter(f"{name} could not be read; correct it and search again.") from None


def judgment_form(params: Mapping[str, str]) -> JudgmentFilters:
    return JudgmentFilters(
        clean_text(params.get("q")), clean_text(params.get("case_number")),
        clean_text(params.get("county")), clean_text(params.get("court")),
        _form(params, "filed_from", date.fromisoformat), _form(params, "filed_to", date.fromisoformat),
        _form(params, "amount_min", Decimal), _form(params, "amount_max", Decimal),
        _form(params, "batch_id", UUID)).check()


def plaintiff_form(params: Mapping[str, str]) -> PlaintiffFilters:
    return PlaintiffFilters(
        clean_text(params.get("q")), clean_text(params.get("case_number")),
        clean_text(params.get("status")), _form(params, "state", str.upper),
        _form(params, "batch_id", UUID)).check()
