"""Applying the event ledger (DESIGN.md "Event ledger"): claim pending events, apply each
through its records contract, mark it processed or dead_letter (docs/decisions/0139-0141)."""
