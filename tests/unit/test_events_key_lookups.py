"""API key lookups batched across requests (gateway/events/keys.Lookups, issue 32): the requests
waiting at one moment share one statement, a request that arrives while a statement runs waits
for the next one (so a key revoked before it arrived is refused, ADR 0136), and unknown keys are
401. In-process: a fake pool answers from a dict of live keys."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import uuid
from typing import Any

import pytest

from gateway.events import keys
from shared import errors


class FakePool:
    """Answers key_callers from ``live`` (hash → tenant), one statement at a time, each held
    until the test releases it."""

    def __init__(self, live: dict[str, uuid.UUID]) -> None:
        self.live = live
        self.statements: list[list[str]] = []
        self.release = asyncio.Event()
        self.release.set()
        self.autocommit = False
        self.autocommit_at_statement: list[bool] = []

    async def set_autocommit(self, on: bool) -> None:
        self.autocommit = on

    @contextlib.asynccontextmanager
    async def connection(self) -> Any:
        yield self

    async def execute(self, query: str, params: dict) -> Any:
        assert query == keys.Q["key_callers"]
        self.statements.append(list(params["key_hashes"]))
        self.autocommit_at_statement.append(self.autocommit)
        await self.release.wait()
        # Read the live keys only once released: as a statement's snapshot would be taken.
        rows = [{"key_id": uuid.uuid5(uuid.NAMESPACE_OID, h), "tenant_id": self.live[h],
                 "key_hash": h} for h in params["key_hashes"] if h in self.live]

        class Cursor:
            async def fetchall(self) -> list[dict]:
                return rows

        return Cursor()


def _keys(n: int) -> list[str]:
    return [keys.generate() for _ in range(n)]


def test_requests_waiting_together_share_one_statement():
    async def scenario() -> tuple[list[str], FakePool]:
        presented = _keys(3)
        tenant = uuid.uuid4()
        pool = FakePool({keys.digest(k): tenant for k in presented})
        lookups = keys.Lookups(pool)  # type: ignore[arg-type]
        # 16 requests of three producers arrive in the same moment.
        found = await asyncio.gather(*(lookups.caller(presented[i % 3]) for i in range(16)))
        assert {c.tenant_id for c in found} == {tenant}
        return presented, pool

    presented, pool = asyncio.run(scenario())
    assert len(pool.statements) == 1
    # Sent alone in autocommit (db.read_alone), and the connection goes back as it came.
    assert pool.autocommit_at_statement == [True] and not pool.autocommit
    assert sorted(pool.statements[0]) == sorted(keys.digest(k) for k in presented)


def test_a_request_that_arrives_during_a_statement_waits_for_the_next_one():
    async def scenario() -> tuple[FakePool, BaseException | None]:
        first, second = _keys(2)
        tenant = uuid.uuid4()
        pool = FakePool({keys.digest(first): tenant, keys.digest(second): tenant})
        lookups = keys.Lookups(pool)  # type: ignore[arg-type]
        pool.release.clear()
        early = asyncio.create_task(lookups.caller(first))
        while not pool.statements:  # the first statement is running
            await asyncio.sleep(0)
        # The second key is revoked, then its request arrives while the first statement runs:
        # it must not be answered by a statement that began before it came.
        del pool.live[keys.digest(second)]
        late = asyncio.create_task(lookups.caller(second))
        await asyncio.sleep(0)
        pool.release.set()
        assert (await early).tenant_id == tenant
        try:
            await late
        except errors.Unauthorized as exc:
            return pool, exc
        return pool, None

    pool, refused = asyncio.run(scenario())
    assert isinstance(refused, errors.Unauthorized)
    assert [len(s) for s in pool.statements] == [1, 1]


def test_unknown_and_malformed_keys_are_401_without_failing_the_others():
    async def scenario() -> tuple[Any, ...]:
        good, unknown = _keys(2)
        tenant = uuid.uuid4()
        lookups = keys.Lookups(FakePool({keys.digest(good): tenant}))  # type: ignore[arg-type]
        return await asyncio.gather(lookups.caller(good), lookups.caller(unknown),
                                    lookups.caller("not-a-key"), return_exceptions=True)

    ok, unknown, malformed = asyncio.run(scenario())
    assert isinstance(ok, keys.KeyCaller)
    assert isinstance(unknown, errors.Unauthorized)
    assert isinstance(malformed, errors.Unauthorized)


def test_a_failed_statement_fails_each_waiting_request_and_the_next_one_runs():
    class Broken(FakePool):
        async def execute(self, query: str, params: dict) -> Any:
            self.statements.append(list(params["key_hashes"]))
            if len(self.statements) == 1:
                raise errors.DatabaseUnavailable()
            return await super().execute(query, params)

    async def scenario() -> tuple[list[Any], keys.KeyCaller]:
        presented = _keys(2)
        tenant = uuid.uuid4()
        lookups = keys.Lookups(Broken({keys.digest(k): tenant for k in presented}))  # type: ignore[arg-type]
        failed = await asyncio.gather(*(lookups.caller(k) for k in presented),
                                      return_exceptions=True)
        return failed, await lookups.caller(presented[0])

    failed, later = asyncio.run(scenario())
    assert all(isinstance(f, errors.DatabaseUnavailable) for f in failed)
    assert later.key_id


@pytest.mark.parametrize("n", [1, 40])
def test_every_request_gets_its_own_keys_tenant(n):
    async def scenario() -> list[tuple[uuid.UUID, uuid.UUID]]:
        presented = _keys(n)
        tenants = {keys.digest(k): uuid.uuid4() for k in presented}
        lookups = keys.Lookups(FakePool(tenants))  # type: ignore[arg-type]
        found = await asyncio.gather(*(lookups.caller(k) for k in presented))
        return [(tenants[keys.digest(k)], c.tenant_id) for k, c in zip(presented, found, strict=True)]

    assert all(want == got for want, got in asyncio.run(scenario()))


def test_a_request_that_left_leaves_no_unread_exception_behind():
    """A request whose coroutine is closed while it waits (no cancel reaches its future) and
    whose statement then fails: the failure must not be set on a future nobody reads, which
    asyncio logs as "Future exception was never retrieved"."""

    class Broken(FakePool):
        async def execute(self, query: str, params: dict) -> Any:
            self.statements.append(list(params["key_hashes"]))
            await self.release.wait()
            raise errors.DatabaseUnavailable()

    unread: list[dict] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unread.append(ctx))
        pool = Broken({})
        pool.release.clear()
        lookups = keys.Lookups(pool)  # type: ignore[arg-type]
        request = lookups.caller(keys.generate())
        request.send(None)  # the request now waits on its future
        while not pool.statements:
            await asyncio.sleep(0)
        request.close()  # it leaves, as a destroyed task's coroutine does
        pool.release.set()
        assert lookups._task is not None
        await lookups._task
        gc.collect()

    asyncio.run(scenario())
    gc.collect()
    assert not [ctx["message"] for ctx in unread]
