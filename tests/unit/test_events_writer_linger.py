"""The event writer's linger (ADR 0340): while another group's commit is in flight a task
waits a little for more requests; it stops waiting once the group is full or no commit is in
flight any more, and a task stopped while waiting answers its requests instead of dropping them.
In-process: _take needs the queue, not the database."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from gateway.events import writer as event_writer
from shared import errors

LONG = 60.0  # a linger no test waits out: each one ends it by its own condition


def _writer(group_max: int = 1000, linger_s: float = LONG) -> event_writer.Writer:
    return event_writer.Writer(None, queue_size=5000, group_max=group_max, retry_budget=8,  # type: ignore[arg-type]
                               registry=CollectorRegistry(), linger_s=linger_s)


def _request(w: event_writer.Writer, n: int) -> asyncio.Future:
    return w.submit([object()] * n)  # type: ignore[list-item]


async def _take(w: event_writer.Writer) -> asyncio.Task:
    first = await w.queue.get()
    task = asyncio.create_task(w._take(first))
    await asyncio.sleep(0)  # the task runs to its first wait (or returns)
    return task


def test_with_no_commit_in_flight_the_group_goes_at_once():
    async def scenario() -> int:
        w = _writer()
        _request(w, 100)
        task = await _take(w)
        assert task.done()
        return len(task.result())

    assert asyncio.run(scenario()) == 100


def test_while_a_commit_is_in_flight_later_requests_join_the_group():
    async def scenario() -> tuple[int, int]:
        w = _writer()
        w.committing = 1  # another task's group is being committed
        _request(w, 100)
        task = await _take(w)
        assert not task.done()  # lingering
        _request(w, 100)
        _request(w, 100)
        await asyncio.sleep(0)
        assert not task.done()  # not full, the other commit still in flight
        w.committing = 0  # that commit ends (as _run does): waiting now only adds latency
        w._wake.set()
        group = await asyncio.wait_for(task, 5)
        return len(group), w.queued

    assert asyncio.run(scenario()) == (300, 0)


def test_a_full_group_stops_the_linger():
    async def scenario() -> int:
        w = _writer(group_max=200)
        w.committing = 1
        _request(w, 100)
        task = await _take(w)
        _request(w, 100)
        return len(await asyncio.wait_for(task, 5))

    assert asyncio.run(scenario()) == 200


def test_the_linger_ends_by_its_deadline():
    async def scenario() -> int:
        w = _writer(linger_s=0.01)
        w.committing = 1  # stays in flight throughout
        _request(w, 100)
        task = await _take(w)
        return len(await asyncio.wait_for(task, 5))

    assert asyncio.run(scenario()) == 100


def test_a_task_stopped_while_lingering_answers_its_requests():
    async def scenario() -> tuple[BaseException | None, int]:
        w = _writer()
        w.committing = 1
        future = _request(w, 100)
        task = await _take(w)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return future.exception(), w.queued

    error, queued = asyncio.run(scenario())
    assert isinstance(error, errors.ServiceUnavailable)
    assert queued == 0


def test_one_task_gathers_at_a_time_so_arrivals_are_not_split_between_lingering_tasks():
    async def scenario() -> tuple[int, bool]:
        w = _writer()
        w.committing = 1
        first, second = (asyncio.create_task(w._next_group()) for _ in range(2))
        for _ in range(3):
            _request(w, 100)
            await asyncio.sleep(0)  # each arrival gets its chance to wake a task
        w.committing = 0
        w._wake.set()
        group = await asyncio.wait_for(first, 5)
        idle = not second.done()  # still waiting for a request of its own
        second.cancel()
        return len(group), idle

    assert asyncio.run(scenario()) == (300, True)
