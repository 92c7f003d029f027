"""Batch-level codes: problems of a whole file, not of one row (records-data-contract.md
"Edge Cases" and Appendix A). Row codes live beside the field they guard, in each contract."""

from __future__ import annotations

from shared.contracts.model import Rule, Severity

MISSING_COLUMN = Rule("BATCH_MISSING_COLUMN", Severity.CRITICAL,
                      "A required column was not found in the header; the batch fails.")
EMPTY_FILE = Rule("BATCH_EMPTY_FILE", Severity.CRITICAL,
                  "The file contains no data rows; the batch fails.")
MALFORMED_CSV = Rule("BATCH_MALFORMED_CSV", Severity.CRITICAL,
                     "The file is not well-formed CSV at the given line; the batch fails.")
DUPLICATE_COLUMN = Rule("BATCH_DUPLICATE_COLUMN", Severity.CRITICAL,
                        "Two columns name the same field, so its value is ambiguous; the "
                        "batch fails.")
ENCODING_WARNING = Rule("BATCH_ENCODING_WARNING", Severity.WARNING,
                        "The file is not UTF-8; it was decoded with a fallback encoding.")
EXTRA_COLUMN = Rule("BATCH_EXTRA_COLUMN", Severity.WARNING,
                    "A column is not part of the contract and was ignored.")

BATCH_RULES = (MISSING_COLUMN, EMPTY_FILE, MALFORMED_CSV, DUPLICATE_COLUMN, ENCODING_WARNING,
               EXTRA_COLUMN)

# The codes as plain strings, for the worker's SQL and the API's filters.
BATCH_MISSING_COLUMN = MISSING_COLUMN.code
BATCH_EMPTY_FILE = EMPTY_FILE.code
BATCH_MALFORMED_CSV = MALFORMED_CSV.code
BATCH_DUPLICATE_COLUMN = DUPLICATE_COLUMN.code
BATCH_ENCODING_WARNING = ENCODING_WARNING.code
BATCH_EXTRA_COLUMN = EXTRA_COLUMN.code
# More rows invalid than the batch's error budget allows: the batch fails before promotion.
BATCH_ERROR_BUDGET_EXCEEDED = "BATCH_ERROR_BUDGET_EXCEEDED"
# A natural key repeated within one file: a warning, and the row counts as duplicate.
JUDGMENT_DUPLICATE = "JUDGMENT_DUPLICATE"
PLAINTIFF_DUPLICATE = "PLAINTIFF_DUPLICATE"
# Found at promotion (shared/contracts/plaintiffs.py CASE_NUMBER_NOT_FOUND holds its message).
PLAINTIFF_CASE_NUMBER_NOT_FOUND = "PLAINTIFF_CASE_NUMBER_NOT_FOUND"
