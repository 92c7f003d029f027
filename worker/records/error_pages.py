"""Once a batch has written row errors, the errors listing finds a page by number through an
index-only walk of them (gateway/imports/batches.sql `page_errors`, docs/decisions/0335).

An index-only scan skips the heap only on pages the visibility map marks all-visible, and only
VACUUM marks them. Autovacuum comes after inserts of 20 % of the table: on a table that
already holds millions of errors, a new batch's 100,000 could wait for days, and until then
every page of its errors walks the heap of every error before it. So the worker that wrote the
errors vacuums the table once the batch is final: it reads only the pages not yet
all-visible (this batch's and any other recent writer's), removes nothing (nothing was
deleted), samples the table for its statistics, and is skipped when another vacuum holds it.
Under synchronous_commit=off the last chunks' commits may not be flushed yet, and Postgres does
not mark rows of unflushed commits visible to all: their pages wait for the next vacuum.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from shared import db

log = logging.getLogger(__name__)

WROTE_ERRORS = """SELECT EXISTS (SELECT 1 FROM import_row_errors
                               WHERE tenant_id = %(tenant_id)s AND batch_id = %(batch_id)s) AS wrote"""
# ANALYZE too: with no statistics of batch_id, a batch's errors are estimated at 0.5 % of the
# table, and its page is planned as a bitmap scan and a sort of all of them, not the walk.
VACUUM = "VACUUM (ANALYZE, SKIP_LOCKED) import_row_errors"


def make_visible(conn: db.Conn, keys: dict[str, Any]) -> float | None:
    """Vacuum import_row_errors if the batch (``keys``: tenant_id, batch_id) wrote any; the
    seconds it took, None when it wrote none. Best effort: the batch is already final, so a
    failure here is logged, never raised. ``conn`` is in autocommit (VACUUM cannot run in a
    transaction)."""
    started = time.monotonic()
    try:
        wrote = conn.execute(WROTE_ERRORS, keys).fetchone()
        if not (wrote and wrote["wrote"]):
            return None
        conn.execute(VACUUM)
    except psycopg.Error as exc:
        log.warning("could not vacuum the row errors; deep error pages read the heap until "
                    "autovacuum does", extra={"error": type(exc).__name__})
    return time.monotonic() - started

