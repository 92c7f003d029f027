"""LISTEN on a connection of its own: a process that follows a NOTIFY channel holds exactly one
connection for it, outside every pool (a pooled connection would be lent out mid-LISTEN)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import sql

from shared import db, errors


@asynccontextmanager
async def listening(url: str, channel: str, *, check_s: float = 30.0,
                    application_name: str = "ingest-listen") -> AsyncIterator[AsyncIterator[str]]:
    """The channel's payloads, in commit order, for as long as the block runs. A connection
    that breaks raises DatabaseUnavailable from the iterator; a quiet one is checked every
    ``check_s`` (a round trip), so a silently dropped connection is noticed too. The connection
    carries ``application_name``, so operators find it in pg_stat_activity."""
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True,
                                                     application_name=application_name)
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    except db.UNAVAILABLE as exc:
        raise errors.DatabaseUnavailable() from exc
    try:
        yield _payloads(conn, check_s)
    finally:
        await conn.close()


async def _payloads(conn: psycopg.AsyncConnection, check_s: float) -> AsyncIterator[str]:
    try:
        while True:
            async for notify in conn.notifies(timeout=check_s):
                yield notify.payload
            await conn.execute("SELECT 1")
    except db.UNAVAILABLE as exc:
        raise errors.DatabaseUnavailable() from exc
