"""Database access shared by every room: named SQL queries, connection pools, error translation.

Queries live in ``queries.sql`` files next to the code that owns the tables, as named blocks::

    -- name: insert_document
    -- Get-or-create a document by identity; is_new tells whether this call created it.
    INSERT INTO documents ...

Nothing above this package imports psycopg errors: ``translate`` turns driver errors into the
app's own exceptions at the boundary.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from shared import errors

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def load_queries(path: Path) -> dict[str, str]:
    """Parse a .sql file of ``-- name: x`` blocks into {name: sql}."""
    text = path.read_text()
    parts = _NAME.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"{path}: query {name!r} is defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


# Every connection returns rows as dicts; these aliases let the type checker know it too.
Conn = psycopg.Connection[DictRow]
AsyncConn = psycopg.AsyncConnection[DictRow]
Pool = ConnectionPool[Conn]
AsyncPool = AsyncConnectionPool[AsyncConn]


def connect(url: str, **kwargs: Any) -> Conn:
    return psycopg.Connection[DictRow].connect(url, row_factory=dict_row, **kwargs)


# Pools check a connection before lending it, so after a database restart callers get fresh
# connections instead of each finding a dead one (docs/operations.md, Postgres restart).
def sync_pool(url: str, *, min_size: int = 1, max_size: int = 10, name: str = "ingest",
              configure: Callable[[Conn], None] | None = None, timeout_s: float = 30.0) -> Pool:
    return ConnectionPool(
        url, min_size=min_size, max_size=max_size, name=name, open=False,
        connection_class=Conn, kwargs={"row_factory": dict_row}, configure=configure,
        timeout=timeout_s, check=ConnectionPool.check_connection,
    )


def async_pool(url: str, *, min_size: int = 1, max_size: int = 10,
               name: str = "ingest", timeout_s: float = 30.0,
               configure: Callable[[AsyncConn], Awaitable[None]] | None = None,
               check: bool = True) -> AsyncPool:
    """``check=False``: no round trip per loan, for a caller that retries a transaction a dead
    connection broke (the event writer, ADR 0287); the pool still drops a broken one."""
    return _TranslatingAsyncPool(
        url, min_size=min_size, max_size=max_size, name=name, open=False,
        connection_class=AsyncConn, kwargs={"row_factory": dict_row}, configure=configure,
        timeout=timeout_s, check=AsyncConnectionPool.check_connection if check else None,
    )


class _TranslatingAsyncPool(AsyncConnectionPool[AsyncConn]):
    """The gateway's pool: a connection that cannot be had within the pool's timeout, or that
    breaks because the server went away, raises DatabaseUnavailable as it leaves the ``async
    with`` block, which the gateway answers with 503 database_unavailable in seconds. Code that
    handles driver errors inside the block (a sync's lock connection) still sees them."""

    @asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[AsyncConn]:
        try:
            async with super().connection(timeout) as conn:
                yield conn
        except (PoolTimeout, *UNAVAILABLE) as exc:
            raise errors.DatabaseUnavailable() from exc


async def read_alone(conn: AsyncConn, query: str, params: dict[str, Any]) -> list[DictRow]:
    """The rows of one read-only statement, sent alone in autocommit: one round trip, where the
    pool's connection would wrap it in BEGIN and COMMIT, two more (the gateway's check of every
    request's session, ADR 0318; the batched API key lookups, ADR 0342). ``conn`` must be idle,
    as the pool lends it."""
    await conn.set_autocommit(True)
    try:
        return await (await conn.execute(query, params)).fetchall()
    finally:
        # As the pool's own check does: a connection broken meanwhile refuses this, and the
        # pool discards it; a working one always takes it back (no transaction is open).
        with suppress(psycopg.Error):
            await conn.set_autocommit(False)


# Driver errors that mean "the database is unreachable or restarting": worth a retry.
UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, pg_errors.AdminShutdown)
# Errors a retry of the same transaction may cure.
RETRYABLE = (*UNAVAILABLE, pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
# SQLSTATE class 22 (a NUL byte in text, a number out of range): the value came from a request,
# so the gateway answers 400 (gateway/errors.py) wherever a query did not translate it itself.
BAD_VALUE = psycopg.DataError


def is_unavailable(exc: BaseException) -> bool:
    return isinstance(exc, UNAVAILABLE)


def is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, RETRYABLE)


@contextmanager
def translate() -> Iterator[None]:
    """Turn driver errors into the app's own at the database boundary."""
    try:
        yield
    except pg_errors.UniqueViolation as exc:
        raise errors.Conflict(f"that already exists ({exc.diag.constraint_name}).") from exc
    except (PoolTimeout, *UNAVAILABLE) as exc:
        raise errors.DatabaseUnavailable() from exc
