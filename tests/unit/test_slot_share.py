"""A tenant's import never takes a worker's last free slot while the tenant runs another
import on that worker (worker/share.py, docs/decisions/0261)."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

from worker.share import SlotShare

ACME, GLOBEX = uuid.uuid4(), uuid.uuid4()


def start(share: SlotShare, stack: ExitStack, tenant: uuid.UUID | None) -> bool:
    """One more job in hand: an import of ``tenant``, or a document (None)."""
    stack.enter_context(share.job())
    return True if tenant is None else stack.enter_context(share.import_of(tenant))


def test_the_last_slot_is_left_to_a_tenant_without_an_import_here():
    share = SlotShare(3)
    with ExitStack() as held:
        assert start(share, held, ACME) and start(share, held, ACME)
        with ExitStack() as third:
            assert not start(share, third, ACME)
        with ExitStack() as third:
            assert start(share, third, GLOBEX)


def test_a_document_may_take_the_last_slot_and_a_first_import_is_never_held_back():
    share = SlotShare(3)
    with ExitStack() as held:
        assert start(share, held, ACME) and start(share, held, None) and start(share, held, None)
    with ExitStack() as held:
        assert start(share, held, None) and start(share, held, None)
        assert start(share, held, ACME)


def test_a_slot_counts_again_once_its_import_ends():
    share = SlotShare(2)
    with ExitStack() as first:
        assert start(share, first, ACME)
        with ExitStack() as second:
            assert not start(share, second, ACME)
    with ExitStack() as held:
        assert start(share, held, ACME)
        with ExitStack() as again:
            assert not start(share, again, ACME)  # a refused import was never counted
    assert share._imports == {} and share._jobs == 0


def test_a_worker_of_one_slot_runs_every_import():
    share = SlotShare(1)
    with ExitStack() as held:
        assert start(share, held, ACME)
