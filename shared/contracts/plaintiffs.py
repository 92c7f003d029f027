"""The `plaintiffs` contract: records-data-contract.md "CSV Schema: Plaintiffs", with the rules
its notes imply (e-mail, phone, state, ZIP, status) and DESIGN.md's key (docs/decisions/0081).

A value that cannot be read is critical where it is part of the key (ZIP) or a business state
(status); a contact detail that cannot be read (e-mail, phone, state) is a warning and is
stored as NULL, so one typo in a phone number does not lose the plaintiff."""

from __future__ import annotations

from shared.contracts import columnar as c
from shared.contracts import normalise as n
from shared.contracts.judgments import case_number_checks, case_number_text, too_long
from shared.contracts.model import Column, Contract, NaturalKey, Rule, Severity, Target

CRITICAL, WARNING = Severity.CRITICAL, Severity.WARNING
TEXT_LIMIT = 500


def _truncated(code: str, label: str) -> Rule:
    return too_long(code, WARNING, f"{label} is longer than {TEXT_LIMIT} characters and was "
                    f"truncated to {TEXT_LIMIT}.", TEXT_LIMIT, truncate=True)

COLUMNS = (
    Column("case_number", ("File #",), "Case number of the judgment this plaintiff belongs to.",
           required=True, normalise=case_number_text, read_column=c.case_number_text,
           missing=Rule("PLAINTIFF_CASE_NUMBER_MISSING", CRITICAL,
                        "Case number is required and must contain a letter or digit."),
           checks=case_number_checks("PLAINTIFF"),
           derived=(("case_number_normalized", n.case_number_key),),
           derived_columns=(("case_number_normalized", c.case_key),)),
    Column("name", ("Plaintiff",), "Legal name; stored as given (spaces collapsed).",
           required=True, normalise=n.name, personal=True, read_column=c.name,
           missing=Rule("PLAINTIFF_NAME_MISSING", CRITICAL, "Plaintiff name is required."),
           checks=(too_long("PLAINTIFF_NAME_TOO_LONG", WARNING,
                            "Plaintiff name is longer than 500 characters and was truncated "
                            "to 500.", 500, truncate=True),),
           derived=(("name_normalized", n.name_key),),
           derived_columns=(("name_normalized", c.name_key),)),
    Column("address_line1", ("Address",), "Street address.", normalise=n.name, personal=True,
           read_column=c.name,
           checks=(_truncated("PLAINTIFF_ADDRESS_LINE1_TOO_LONG", "Address"),)),
    Column("city", ("City",), "City name.", normalise=n.name, read_column=c.name,
           checks=(_truncated("PLAINTIFF_CITY_TOO_LONG", "City"),)),
    Column("state", ("State",), "2-letter USPS state code, upper case.", normalise=n.state,
           read_column=c.usps_state,
           invalid=Rule("PLAINTIFF_STATE_INVALID", WARNING,
                        "State is not a 2-letter US state code; it was left empty.")),
    Column("zip", ("ZIP",), "5-digit ZIP or ZIP+4 (12345-6789); leading zeros kept.",
           normalise=n.zip_code, read_column=c.zip_code,
           invalid=Rule("PLAINTIFF_ZIP_INVALID", CRITICAL,
                        "ZIP must be 5 digits or ZIP+4 (12345-6789).")),
    Column("phone", ("Phone",), "Phone number, stored as E.164 (+12125551234).",
           normalise=n.phone, personal=True,
           invalid=Rule("PLAINTIFF_PHONE_INVALID", WARNING,
                        "Phone is not a valid phone number; it was left empty.")),
    Column("email", ("Email",), "E-mail address, validated and lower-cased.",
           normalise=n.email, personal=True,
           invalid=Rule("PLAINTIFF_EMAIL_INVALID", WARNING,
                        "Email is not a valid e-mail address; it was left empty.")),
    Column("contact_name", ("Contact Person",), "Primary contact.", normalise=n.name,
           personal=True, read_column=c.name, checks=(_truncated("PLAINTIFF_CONTACT_NAME_TOO_LONG", "Contact"),)),
    Column("status", ("Status",), "One of " + ", ".join(n.PLAINTIFF_STATUSES)
           + " (vendor words such as Open or Settled are mapped); empty means active.",
           normalise=n.status,
           invalid=Rule("PLAINTIFF_STATUS_INVALID", CRITICAL,
                        "Status is not one of " + ", ".join(n.PLAINTIFF_STATUSES) + ".")),
)

# Checked at promotion, against the tenant's judgments (docs/decisions/0096): the worker writes
# it for a staged row whose normalised case number matches none.
CASE_NUMBER_NOT_FOUND = Rule(
    "PLAINTIFF_CASE_NUMBER_NOT_FOUND", WARNING,
    "No judgment of this tenant has the case number; the plaintiff was kept without a link.")

# A row the database refuses at promotion (docs/decisions/0186), as judgments.NOT_STORED.
NOT_STORED = Rule("PLAINTIFF_NOT_STORED", CRITICAL,
                  "The database refused the row (a value breaks a rule of the plaintiffs "
                  "table); it was not promoted.")

PLAINTIFFS = Contract(
    name="plaintiffs", version="1.0.0", entity="PLAINTIFF",
    description="Plaintiffs from a vendor export, each linked to a judgment by case number.",
    columns=COLUMNS,
    key=NaturalKey(("name", "address_line1", "zip"),
                   "name | address line 1 | ZIP, each trimmed and folded (NFKC, full case "
                   "folding, upper case: Café Ünited = CAFÉ ÜNITED)",
                   part=lambda v: n.fold(v) if v else "", part_column=c.fold),
    # The plaintiff first, then its link to the judgment with the same normalised case number.
    targets=(Target("plaintiffs", ("dedupe_key",)),
             Target("plaintiff_judgments", ("plaintiff_id", "judgment_id"))),
    duplicate=Rule("PLAINTIFF_DUPLICATE", WARNING, "The same plaintiff (name, address, ZIP) "
                   "already appeared earlier in this file; the row is counted as a duplicate."),
    promotion_rules=(("case_number", CASE_NUMBER_NOT_FOUND), (None, NOT_STORED)),
    promotion_order=2,
    examples=(
        {"case_number": "2024-CV-12345", "name": "Acme Collections LLC",
         "address_line1": "123 Main St", "city": "New York", "state": "NY", "zip": "10001",
         "phone": "(212) 555-1234", "email": "billing@acme.com", "contact_name": "Jane Smith",
         "status": "Active"},
        {"case_number": "2024-CV-67890", "name": "Smith & Associates, Inc.",
         "address_line1": "9 Elm Ave", "city": "Brooklyn", "state": "ny",
         "zip": "11201-1234", "phone": "718-555-0100", "email": "Ops@Smith.example",
         "contact_name": "", "status": "Open"},
    ),
)
