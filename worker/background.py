"""A loop that works a table from a thread of `ingest worker`, beside the SQS consumer.

The ledger applier (worker/ledger/applier.py) and the webhook dispatcher
(worker/webhooks/dispatcher.py) both claim due rows, work them and settle them, on a connection
of their own in autocommit (each ``transaction()`` block is one transaction). What they share
lives here: the connection, opened again after a failure; the loop that steps until stopped and
waits POLL seconds when a step found nothing; a database outage that costs a log line and a
fresh connection, never the thread.
"""

from __future__ import annotations

import logging
import threading

from shared import db

log = logging.getLogger(__name__)


class TableLoop:
    name = "table-loop"  # the thread's name, and the log line of a failed step

    def __init__(self, database_url: str, poll_s: float) -> None:
        self.database_url = database_url
        self.poll_s = poll_s
        self.stopping = threading.Event()
        self._conn: db.Conn | None = None

    def step(self) -> bool:
        """One claim and its rows; True when it claimed any (then the loop steps again at once)."""
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()

    def run_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                busy = self.step()
            except Exception:  # noqa: BLE001 - a database outage must not end the loop
                log.exception("%s step failed; retrying shortly", self.name)
                self._drop()
                busy = False
            if not busy:
                self.stopping.wait(self.poll_s)

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.run_forever, name=self.name, daemon=True)
        thread.start()
        return thread

    def conn(self) -> db.Conn:
        if self._conn is None or self._conn.closed:
            self._conn = db.connect(self.database_url, autocommit=True, connect_timeout=5)
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self._drop()
