"""The ordering rule of ledger apply (docs/decisions/0140) and its backoff (0139)."""

from __future__ import annotations

from datetime import UTC, datetime

from worker.ledger import applier, apply

T1, T2 = datetime(2024, 1, 1, tzinfo=UTC), datetime(2024, 1, 2, tzinfo=UTC)


def ev(ledger_id, seq=None, at=None, source="jbi"):
    return {"ledger_id": ledger_id, "source_sequence": seq, "source_emitted_at": at,
            "source_system": source}


def test_sequence_decides_first_within_one_source():
    assert apply.is_older(ev(9, seq=1, at=T2), ev(1, seq=2, at=T1))
    assert not apply.is_older(ev(1, seq=3), ev(9, seq=2))


def test_sequences_of_two_sources_do_not_compare():
    assert apply.is_older(ev(9, seq=5, at=T1, source="a"), ev(1, seq=1, at=T2, source="b"))


def test_emitted_time_then_arrival():
    assert apply.is_older(ev(9, at=T1), ev(1, at=T2))
    assert apply.is_older(ev(1, seq=2), ev(2, at=T1))  # nothing in common: arrival order
    assert not apply.is_older(ev(3, seq=2, at=T1), ev(2, seq=2, at=T1))


def test_full_jitter_stays_under_the_cap():
    delays = [applier.backoff_s(n, 1.0, 5.0) for n in range(1, 30) for _ in range(20)]
    assert all(0 <= d <= 5.0 for d in delays) and max(delays) > 2


def test_the_next_claim_starts_after_the_last_tenant_served_round_the_circle():
    from uuid import UUID

    from worker.ledger.applier import last_served

    a, b, c, d = (UUID(int=n) for n in (1, 2, 3, 4))
    assert last_served(None, {c, a, b}) == c
    # a claim that began after b served c and d, then wrapped round to a
    assert last_served(b, {a, c, d}) == a
    assert last_served(b, {c, d}) == d
    assert last_served(d, {a, b}) == b
