"""Freezing start-up objects (ADR 0163) must shorten full passes without keeping garbage."""

from __future__ import annotations

import gc
import weakref

import pytest

from shared import heap


@pytest.fixture()
def unfrozen():
    yield
    gc.unfreeze()


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def test_start_up_objects_leave_the_collectors_walk(unfrozen) -> None:
    survivor = [object() for _ in range(100)]  # noqa: F841 - alive at the freeze
    frozen = heap.freeze_startup_objects()
    assert frozen >= 100
    assert gc.get_freeze_count() == frozen


def test_garbage_made_after_the_freeze_is_still_collected(unfrozen) -> None:
    heap.freeze_startup_objects()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector can free it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
