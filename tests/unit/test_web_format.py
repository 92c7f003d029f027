"""Pure pieces of the web UI: safe redirects, CSRF tokens, and how figures are written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gateway.web import format, pages, session


@pytest.mark.parametrize(("target", "expected"), [
    ("/runs?status=failed", "/runs?status=failed"), ("/documents/1", "/documents/1"),
    (None, "/upload"), ("", "/upload"), ("runs", "/upload"), ("//evil.example", "/upload"),
    ("/\\evil.example", "/upload"), ("https://evil.example/", "/upload"),
])
def test_sign_in_only_returns_to_paths_of_this_site(target, expected):
    assert pages.safe_next(target) == expected


def test_the_csrf_token_is_bound_to_the_session_and_the_secret():
    token = session.csrf_token("jwt-a", "s" * 40)
    assert token == session.csrf_token("jwt-a", "s" * 40) and len(token) == 64
    assert token != session.csrf_token("jwt-b", "s" * 40)
    assert token != session.csrf_token("jwt-a", "t" * 40)
    assert session.csrf_matches(token, "jwt-a", "s" * 40)
    assert not session.csrf_matches(None, "jwt-a", "s" * 40)
    assert not session.csrf_matches(token, "jwt-b", "s" * 40)


@pytest.mark.parametrize(("seconds", "text"), [
    (None, "—"), (0.25, "250 ms"), (4.24, "4.2 s"), (192, "3 min 12 s"), (7500, "2 h 5 min")])
def test_durations_read_naturally(seconds, text):
    assert format.duration(seconds) == text


def test_sizes_and_depths():
    assert format.size(512) == "512 bytes" and format.size(50 * 1024 * 1024) == "50.0 MB"
    assert format.depth(None) == "—" and format.depth(3) == "3"
    assert format.depth({"visible": 2, "in_flight": 1}) == "3 (1 in flight)"


def test_run_timings_follow_the_spec():
    created = datetime(2026, 1, 1, tzinfo=UTC)
    run = {"created_at": created, "started_at": created + timedelta(seconds=2),
           "finished_at": created + timedelta(seconds=7)}
    assert format.run_timings(run) == {"queue_wait_s": 2.0, "processing_s": 5.0}
    assert format.run_timings({**run, "started_at": None, "finished_at": None}) == {
        "queue_wait_s": None, "processing_s": None}


def test_stats_are_listed_in_pipeline_order_in_words():
    stats = {"stages": {"index_ms": 3, "read_ms": 1, "embed_ms": 2}, "tokens_total": 12500,
             "zeta_count": 1, "chunks_created": 2, "duration_ms": 1500, "warm_up_ms": 40}
    assert format.stats_entries(stats) == [
        ("Chunks", "2"), ("Tokens", "12,500"), ("Total time", "1.5 s"),
        ("Time per stage", "Read the file 1 ms, Compute embeddings 2 ms, Index for search 3 ms"),
        ("Warm up", "40 ms"), ("Zeta count", "1")]


def test_a_records_runs_stats_read_as_words():
    stats = {"rows_total": 100000, "rows_invalid": 2000, "parse_ms": 2100, "db_ms": 830}
    assert dict(format.stats_entries(stats)) == {
        "Rows": "100,000", "Invalid rows": "2,000", "Parsing": "2.1 s", "Database writes": "830 ms"}
