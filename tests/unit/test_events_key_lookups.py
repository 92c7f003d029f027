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


# ── the cache of live keys (ADR 0440) ─────────────────────────────────────────────────────
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _cached(live: dict[str, uuid.UUID], cache_s: float = 60.0) -> tuple[keys.Lookups, FakePool, Clock]:
    pool, clock = FakePool(live), Clock()
    lookups = keys.Lookups(pool, cache_s=cache_s, clock=clock)  # type: ignore[arg-type]
    lookups._hear(True)  # as listen_forever does once its LISTEN is in place
    return lookups, pool, clock


def test_a_live_key_answers_from_memory_until_it_expires():
    async def scenario() -> tuple[FakePool, list[keys.KeyCaller]]:
        key = keys.generate()
        lookups, pool, clock = _cached({keys.digest(key): uuid.uuid4()})
        found = [await lookups.caller(key) for _ in range(5)]
        clock.now += 61  # then looked up again (and last_used_at touched, once a minute)
        found.append(await lookups.caller(key))
        return pool, found

    pool, found = asyncio.run(scenario())
    assert len(pool.statements) == 2
    assert len(set(found)) == 1


def test_nothing_is_cached_while_revocations_are_not_heard():
    async def scenario() -> FakePool:
        key = keys.generate()
        lookups, pool, _ = _cached({keys.digest(key): uuid.uuid4()})
        lookups._hear(False)  # the listener lost its connection
        for _ in range(3):
            await lookups.caller(key)
        return pool

    assert len(asyncio.run(scenario()).statements) == 3


def test_a_heard_revocation_refuses_the_key_at_once_and_only_that_key():
    async def scenario() -> tuple[BaseException | None, keys.KeyCaller, FakePool]:
        revoked, kept = _keys(2)
        tenant = uuid.uuid4()
        lookups, pool, _ = _cached({keys.digest(revoked): tenant, keys.digest(kept): tenant})
        gone = await lookups.caller(revoked)
        await lookups.caller(kept)
        del pool.live[keys.digest(revoked)]
        lookups.revoked(gone.key_id)  # the announcement of migrations/0200
        refused: BaseException | None = None
        try:
            await lookups.caller(revoked)
        except errors.Unauthorized as exc:
            refused = exc
        return refused, await lookups.caller(kept), pool

    refused, kept, pool = asyncio.run(scenario())
    assert isinstance(refused, errors.Unauthorized)
    assert kept.key_id
    # The revoked key was looked up again; the other one still answered from memory.
    assert [len(s) for s in pool.statements] == [1, 1, 1]


def test_a_revocation_heard_while_a_statement_runs_keeps_its_answer_out_of_the_cache():
    """The statement read the key as live before the revocation committed; its answer must not
    be cached after the revocation's announcement was handled, or it would live on."""

    async def scenario() -> tuple[BaseException | None, FakePool]:
        key = keys.generate()
        lookups, pool, _ = _cached({keys.digest(key): uuid.uuid4()})
        pool.release.clear()
        first = asyncio.create_task(lookups.caller(key))
        while not pool.statements:
            await asyncio.sleep(0)
        # The statement's snapshot saw the key live; then it was revoked and announced.
        snapshot_rows = dict(pool.live)
        del pool.live[keys.digest(key)]
        lookups.revoked(uuid.uuid5(uuid.NAMESPACE_OID, keys.digest(key)))
        pool.live.update(snapshot_rows)  # the running statement still answers from its snapshot
        pool.release.set()
        await first  # answered live: it arrived before the revocation
        del pool.live[keys.digest(key)]
        try:
            await lookups.caller(key)
        except errors.Unauthorized as exc:
            return exc, pool
        return None, pool

    refused, pool = asyncio.run(scenario())
    assert isinstance(refused, errors.Unauthorized)
    assert len(pool.statements) == 2


def test_a_cached_key_acts_only_for_its_own_tenant():
    async def scenario() -> list[tuple[uuid.UUID, uuid.UUID]]:
        presented = _keys(6)
        tenants = {keys.digest(k): uuid.uuid4() for k in presented}
        lookups, _, _ = _cached(tenants)
        await asyncio.gather(*(lookups.caller(k) for k in presented))  # all cached now
        # Interleaved, from memory: each key still answers its own tenant, and a key that
        # differs from a cached one in one character is not taken for it.
        found = [(tenants[keys.digest(k)], (await lookups.caller(k)).tenant_id)
                 for k in presented * 3]
        near = presented[0][:-1] + ("A" if presented[0][-1] != "A" else "B")
        with pytest.raises(errors.Unauthorized):
            await lookups.caller(near)
        return found

    assert all(want == got for want, got in asyncio.run(scenario()))


def test_an_unreadable_announcement_forgets_every_key():
    async def scenario() -> FakePool:
        key = keys.generate()
        lookups, pool, _ = _cached({keys.digest(key): uuid.uuid4()})
        await lookups.caller(key)
        lookups.revoked(keys._key_id("not a uuid"))
        await lookups.caller(key)
        return pool

    assert len(asyncio.run(scenario()).statements) == 2
