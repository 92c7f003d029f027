"""worker/records/prefetch.py: items in order, one made ahead, errors where they are reached."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.records.prefetch import Prefetch


def test_items_come_in_order_and_the_producer_runs_one_ahead() -> None:
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(5):
            made.append(i)
            yield i

    with Prefetch(items()) as ready:
        it = iter(ready)
        assert next(it) == 0
        assert list(it) == [1, 2, 3, 4]
    assert made == [0, 1, 2, 3, 4]


def test_an_error_is_raised_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 1
        raise ValueError("the file is malformed")

    got = []
    with pytest.raises(ValueError, match="malformed"), Prefetch(items()) as ready:
        for item in ready:
            got.append(item)
    assert got == [1]


def test_close_stops_a_producer_the_consumer_left() -> None:
    made: list[int] = []

    def items() -> Iterator[int]:
        for i in range(1000):
            made.append(i)
            yield i

    with Prefetch(items()) as ready:
        assert next(iter(ready)) == 0
    # Stopped after at most one item waiting and one being made, not the whole iterator.
    assert len(made) <= 4
