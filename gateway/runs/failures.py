"""Whether retrying a failed run can help, decided by its error code: the one table.

A failure is either the file's (a corrupt PDF fails the same way every time: fix the file) or
passing (a database or queue outage, workers that kept dying: retry once it is over). The API
carries the answer as ``retryable`` and ``advice`` on every failed run, and the run page makes
Retry the main action only when it is retryable (docs/decisions/0101).
"""

from __future__ import annotations

from typing import Any

FIX_THE_FILE = ("The file itself is the problem: retrying it fails the same way. Fix or "
                "re-export it, then upload it again.")
OUTAGE = "This was a passing outage (database, queue or storage); retry the run."

# code → (retryable, advice). Codes are shared/errors.py's, the parsers' (worker/pipeline/
# parsers.py), the crash guard's and the outbox's (migrations/0011 stores them on the run).
TABLE: dict[str, tuple[bool, str]] = {
    # the file's fault
    "bad_document": (False, FIX_THE_FILE),
    "extraction_error": (False, FIX_THE_FILE),
    "encrypted_document": (False, "The file is password-protected: remove the password, then "
                                  "upload it again; retrying the same file fails the same way."),
    "no_text": (False, "The file has no text layer (a scan?): upload a version with text; "
                       "retrying the same file fails the same way."),
    "parser_crashed": (False, FIX_THE_FILE),
    "parser_timeout": (False, FIX_THE_FILE),
    "parser_out_of_memory": (False, FIX_THE_FILE),
    "unsupported_type": (False, "This type of file is not supported; convert it to a supported "
                                "type and upload it again."),
    "empty_file": (False, "The file is empty; upload the file with its content."),
    "upload_outside_store": (False, "The job names a file outside the upload store; upload the "
                                    "file again."),
    "queue_rejected": (False, "The queue refused this job; upload the file again, and report "
                              "it if it keeps happening."),
    "source_object_deleted": (False, "The object was deleted from its bucket (or its source "
                                     "was deleted) before this run finished; there is nothing "
                                     "to retry. Put the object back and sync again."),
    # a records import's file as a whole (shared/contracts/codes.py): fix the file
    "BATCH_MISSING_COLUMN": (False, "A required column is missing from the file's header; add "
                                    "it (see GET /v1/contracts/{name}), then upload it again."),
    "BATCH_DUPLICATE_COLUMN": (False, "Two columns of the file name the same field; remove one, "
                                      "then upload it again."),
    "BATCH_EMPTY_FILE": (False, "The file has no data rows; upload the file with its rows."),
    "BATCH_MALFORMED_CSV": (False, "The file is not well-formed CSV at the line named above; "
                                   "fix or re-export it, then upload it again."),
    "BATCH_DELIMITER_UNKNOWN": (False, "The file's delimiter cannot be told from its header; "
                                       "save it as CSV with commas, semicolons, tabs or pipes "
                                       "and a header row, then upload it again."),
    "BATCH_NO_REPORT_DATE": (False, "The report has no Day column and names no date range; "
                                    "export it by day as the batch's error says, then upload "
                                    "it again."),
    "BATCH_NO_VALID_ROWS": (False, "No row of the file is valid; fix the rows listed in the "
                                   "batch's errors and upload the file again."),
    "BATCH_ERROR_BUDGET_EXCEEDED": (False, "Too many rows are invalid for the batch's error "
                                           "budget: fix the rows listed in the batch's errors "
                                           "and upload the file again (or raise "
                                           "error_threshold_percent, or use force_partial)."),
    # passing: retrying helps once it is over
    "database_unavailable": (True, OUTAGE),
    "service_unavailable": (True, OUTAGE),
    "transient_error": (True, OUTAGE),
    "never_picked_up": (True, "No worker picked the job up (workers stopped or the queue "
                              "unreachable); retry the run once they are back."),
    "run_abandoned": (True, "The workers processing it kept stopping before they finished; "
                            "retry the run once they are healthy."),
    "unexpected_error": (True, "Something unexpected went wrong in the worker; retry the run, "
                               "and report it if it fails again."),
}
# A failure without a code (recorded before codes were stored) or with one not listed here:
# retrying is cheap and the run's error text says more.
UNKNOWN = (True, "Retry the run; if it fails the same way again, read the error above.")


def judge(code: str | None) -> tuple[bool, str]:
    return TABLE.get(code or "", UNKNOWN)


def annotate(run: dict[str, Any]) -> dict[str, Any]:
    """``retryable`` and ``advice`` for a failed run; both null for any other status."""
    if run.get("status") != "failed":
        return {"retryable": None, "advice": None}
    retryable, advice = judge(run.get("error_code"))
    return {"retryable": retryable, "advice": advice}
