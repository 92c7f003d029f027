"""Applying the event ledger (DESIGN.md "Event ledger"): claim pending events, apply each
through its records contract, mark it processed or dead_letter (docs/decisions/0139-0141)."""


class Rejected(Exception):
    """The event can never apply as it is (unknown type, invalid payload, a client that is not
    the tenant's): dead-letter it now, with this sentence as its error."""
