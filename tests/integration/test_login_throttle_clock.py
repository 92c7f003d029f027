"""The sign-in throttle's wait never exceeds the lock-out it reports (migrations/0106).

CI once got Retry-After 9 for an 8 s lock-out: an attempt whose transaction began before another
attempt set the lock measured the lock over its own, earlier, start time. Here one transaction
begins, time passes, another attempt locks the key, and then the first attempt asks.
"""

from __future__ import annotations

from shared import db

KEY = "account:clock-test"


def attempt(conn: db.Conn) -> float:
    # No attempt is allowed (limit 0): the first locks the key for 8 s, the rest are told to wait.
    row = conn.execute("SELECT login_attempt(%s, 0, 60, 8, 60) AS wait_s", (KEY,)).fetchone()
    assert row is not None
    return float(row["wait_s"])


def test_a_wait_read_by_an_older_transaction_is_not_longer_than_the_lockout(database_url, conn):
    with db.connect(database_url) as older:
        # Given a transaction that began, and then half a second in which nothing else happened
        # (the gap is made, not waited for: the bug is "wait = lock end - start of transaction")
        older.execute("SELECT pg_sleep(0.5)")
        # When another attempt locks the key for 8 s
        assert attempt(conn) == 8
        # Then the older transaction is told to wait at most what is left of those 8 s
        wait = attempt(older)
        older.rollback()
    assert 7 < wait <= 8, wait
