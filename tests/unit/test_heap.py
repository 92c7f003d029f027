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
    # Lists, not object(): only containers are tracked, so only they cost the collector a walk.
    survivors = [[i] for i in range(100)]
    frozen = heap.freeze_startup_objects()
    assert frozen >= 100
    # The collector's generations no longer hold them. (Not gc.get_freeze_count() == frozen: a
    # frozen object freed by its reference count leaves the count, as the log call may do.)
    walked = {id(o) for o in gc.get_objects()}
    assert not any(id(s) in walked for s in survivors)
    later = [0]
    assert id(later) in {id(o) for o in gc.get_objects()}


def test_garbage_made_after_the_freeze_is_still_collected(unfrozen) -> None:
    heap.freeze_startup_objects()
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: only the collector can free it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None
