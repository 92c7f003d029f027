"""A sync's end lets its heartbeat finish the beat under way instead of cancelling it mid-query
(psycopg answers a cancelled query with a server-side cancel and up to 5 + 5 s of waiting, on
the connection that holds the source's lock), and still cancels a beat that hangs."""
import asyncio

import pytest

from gateway.sources import syncs


def test_a_beat_under_way_finishes_and_is_not_cancelled():
    async def scenario() -> list[str]:
        seen: list[str] = []
        done = asyncio.Event()

        async def beat() -> None:
            try:
                await asyncio.sleep(0.05)  # a heartbeat query under way
                seen.append("finished")
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        task = asyncio.create_task(beat())
        await asyncio.sleep(0)  # the beat has started
        await syncs.SyncManager._stop_beating(task, done)
        assert done.is_set()
        return seen

    assert asyncio.run(scenario()) == ["finished"]


def test_a_hung_beat_is_cancelled_after_the_bound(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(syncs, "BEAT_STOP_S", 0.05)

    async def scenario() -> bool:
        task = asyncio.create_task(asyncio.sleep(3600))  # the database stopped answering
        await asyncio.sleep(0)
        await syncs.SyncManager._stop_beating(task, asyncio.Event())
        return task.cancelled()

    assert asyncio.run(scenario())
