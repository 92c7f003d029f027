"""Batch-level codes: problems of a whole file, not of one row (records-data-contract.md
"Edge Cases" and Appendix A). Row codes live beside the field they guard, in each contract."""

from __future__ import annotations

from shared.contracts.rules import Rule, Severity

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
                        "The file has no byte-order mark and is not UTF-8; it was decoded "
                        "with a fallback encoding (cp1252, else latin-1).")
EXTRA_COLUMN = Rule("BATCH_EXTRA_COLUMN", Severity.WARNING,
                    "A column is not part of the contract and was ignored.")
# Real files (issue 20, docs/decisions/0170–0172).
DELIMITER_UNKNOWN = Rule("BATCH_DELIMITER_UNKNOWN", Severity.CRITICAL,
                         "The file's delimiter (comma, semicolon, tab or pipe) cannot be told "
                         "from its header; the batch fails.")
ROWS_SKIPPED = Rule("BATCH_ROWS_SKIPPED", Severity.WARNING,
                    "Rows of the export's layout (title, total and summary rows, notes) were "
                    "skipped, not imported; none is an invalid row.")
NO_REPORT_DATE = Rule("BATCH_NO_REPORT_DATE", Severity.CRITICAL,
                      "The report has no Day column and names no date range; the batch fails "
                      "with the steps to export it by day.")
REPORT_UNSUPPORTED = Rule("BATCH_REPORT_UNSUPPORTED", Severity.CRITICAL,
                          "The export lists rows below the levels the contract stores (a "
                          "keyword or search-terms report); the batch fails once, with the "
                          "steps to download a report it can import.")
NO_VALID_ROWS = Rule("BATCH_NO_VALID_ROWS", Severity.CRITICAL,
                     "No row of the file is valid, so nothing can be promoted; the batch "
                     "fails even with force_partial or a 100 % error budget.")

BATCH_RULES = (MISSING_COLUMN, EMPTY_FILE, MALFORMED_CSV, DUPLICATE_COLUMN, ENCODING_WARNING,
               EXTRA_COLUMN, DELIMITER_UNKNOWN, ROWS_SKIPPED, NO_REPORT_DATE, REPORT_UNSUPPORTED,
               NO_VALID_ROWS)

# The codes as plain strings, for the worker's SQL and the API's filters.
BATCH_MISSING_COLUMN = MISSING_COLUMN.code
BATCH_EMPTY_FILE = EMPTY_FILE.code
BATCH_MALFORMED_CSV = MALFORMED_CSV.code
BATCH_DUPLICATE_COLUMN = DUPLICATE_COLUMN.code
BATCH_ENCODING_WARNING = ENCODING_WARNING.code
BATCH_EXTRA_COLUMN = EXTRA_COLUMN.code
BATCH_DELIMITER_UNKNOWN = DELIMITER_UNKNOWN.code
BATCH_ROWS_SKIPPED = ROWS_SKIPPED.code
BATCH_NO_REPORT_DATE = NO_REPORT_DATE.code
BATCH_NO_VALID_ROWS = NO_VALID_ROWS.code
BATCH_REPORT_UNSUPPORTED = REPORT_UNSUPPORTED.code
# More rows invalid than the batch's error budget allows: the batch fails before promotion.
BATCH_ERROR_BUDGET_EXCEEDED = "BATCH_ERROR_BUDGET_EXCEEDED"
# A natural key repeated within one file: a warning, and the row counts as duplicate.
JUDGMENT_DUPLICATE = "JUDGMENT_DUPLICATE"
PLAINTIFF_DUPLICATE = "PLAINTIFF_DUPLICATE"
# Found at promotion (shared/contracts/plaintiffs.py CASE_NUMBER_NOT_FOUND holds its message).
PLAINTIFF_CASE_NUMBER_NOT_FOUND = "PLAINTIFF_CASE_NUMBER_NOT_FOUND"
