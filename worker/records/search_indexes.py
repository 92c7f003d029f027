"""Once an import has committed, the trigram indexes that records search and duplicate detection
read take its rows into their main structure at once (docs/decisions/0334).

A GIN index first appends new rows to a pending list (fastupdate), which every search through
the index reads whole; Postgres merges it only past 4 MB or when autovacuum comes by. Left to
that, 3,000 plaintiffs kept 241 pending pages, and the duplicates page, one trigram lookup per
plaintiff, took 18.8 s instead of 0.25 s. The merge is the same work either way; done here, it
is done once, in bulk, by the worker that wrote the rows, and never on a reader's time.
"""

from __future__ import annotations

import logging

import psycopg

from shared import db

log = logging.getLogger(__name__)

# Every trigram index of the tables records imports write (migrations/0015_records_readback.sql).
TRIGRAM_INDEXES = ("idx_plaintiffs_name_trgm", "idx_judgments_case_number_trgm",
                   "idx_judgments_plaintiff_name_trgm", "idx_judgments_defendant_name_trgm")
MERGE = "SELECT gin_clean_pending_list(%s::regclass) AS pages"


def merge_pending(conn: db.Conn) -> int:
    """Merge each index's pending list; the pages it took off them (0 where none was left).
    Best effort: the import is already committed, so a failure here is logged, never raised."""
    pages = 0
    try:
        for index in TRIGRAM_INDEXES:
            row = conn.execute(MERGE, (index,)).fetchone()
            pages += row["pages"] if row else 0
    except psycopg.Error as exc:
        log.warning("could not merge the trigram indexes' pending rows; searches read them "
                    "until autovacuum does", extra={"error": type(exc).__name__})
    return pages
