"""Row-level issues in the log (import-runs-state-machine.md §5.1 "Row-level error"), bounded.

The first ``limit`` issues of a batch are logged one line each; after that, one line per
staged chunk counts the rest by code, so a 1,000,000-row file with every row wrong writes at
most ``limit`` + 100 lines. A line carries the batch, row number, column and code — never the
cell's value or the issue's message (a message may quote the value: names, e-mails and phones
stay out of logs, DESIGN.md "Personal data"); the full issue is in import_row_errors.
"""

from __future__ import annotations

import logging
from collections import Counter
from uuid import UUID

from worker.records.stage import Staged

log = logging.getLogger(__name__)
# Enough to see the pattern of a bad file; the batch's errors API has the rest.
ROW_LOG_LIMIT = 100


class RowIssueLog:
    def __init__(self, batch_id: UUID, limit: int = ROW_LOG_LIMIT) -> None:
        self.batch_id = str(batch_id)
        self.limit = limit
        self.logged = 0

    def chunk(self, chunk: Staged) -> None:
        """Log a chunk's issues once the chunk has committed."""
        rest: Counter[str] = Counter()
        for row, field, code, severity, _message, _raw in chunk.issues:
            if self.logged >= self.limit:
                rest[code] += 1
                continue
            self.logged += 1
            log.warning("row issue", extra={
                "batch_id": self.batch_id, "row_number": row, "field": field, "code": code,
                "error_type": code, "severity": severity})
        if rest:
            log.warning("row issues past the per-batch log limit, counted by code", extra={
                "batch_id": self.batch_id, "first_row": chunk.previous + 1,
                "last_row": chunk.last, "counts": dict(rest), "limit": self.limit})
