"""worker/records/prefetch.py: items in order, one made ahead, errors where they are reached."""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Iterator

import pytest

from tests.support.stack import wait_until
from worker.records.prefetch import Prefetch, release_freed


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
    # Stopped after the one item made beside the consumer's, not the whole iterator.
    assert len(made) <= 2


class _Item:
    """A chunk stand-in whose liveness is seen through weak references."""


def test_an_item_is_started_only_once_the_consumer_took_the_one_before() -> None:
    """At most two items alive when the thread starts one (ADR 0470): the consumer's is let
    go as it takes the next, and none waits behind a full queue while another is made."""
    alive: list[weakref.ref[_Item]] = []
    seen: list[int] = []

    def items() -> Iterator[_Item]:
        for _ in range(40):
            seen.append(sum(ref() is not None for ref in alive))
            item = _Item()
            alive.append(weakref.ref(item))
            yield item
            del item

    with Prefetch(items()) as ready:
        for i, _item in enumerate(ready):
            # The consumer is slower than the thread: the next item is made and waiting.
            wait_until(lambda i=i: len(alive) >= min(i + 2, 40) and ready._queue.full()
                       or len(alive) == 40, timeout=5, interval=0.001)
    assert len(seen) == 40
    assert max(seen) <= 1, seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_memory_a_thread_freed_goes_back_to_the_system() -> None:
    """What the prefetch thread made and the writer freed stays in that thread's arena until
    release_freed (ADR 0470): here 25 MiB freed in holes between blocks still held."""
    import psutil

    blocks: list[bytearray] = []
    thread = threading.Thread(target=lambda: blocks.extend(
        bytearray(b"x" * (64 * 1024 - 64)) for _ in range(800)))
    thread.start()
    thread.join()
    del blocks[::2]  # holes: nothing at the heap's top to give back by itself
    held = psutil.Process().memory_info().rss

    assert release_freed()

    assert held - psutil.Process().memory_info().rss > 15 * 2**20
