"""Ad-metrics imports end to end (issue 13): each platform's own export goes in through the real
gateway (`POST /v1/imports` with `platform`), its outbox relay and moto SQS; real `ingest worker`
processes stage it and promote it into campaigns → ad sets → ads → daily metrics in real
Postgres, and write one IngestionCompleteEvent. Faults are held at the worker's test-only pause
point (WORKER_PAUSE_AT_STAGE = parse | promote) and hit with SIGKILL."""

from __future__ import annotations

import signal
from dataclasses import replace
from datetime import date
from decimal import Decimal

import pytest

from tests.e2e.test_records_worker import _held_worker, batch, drain, errors, published
from tests.support import ad_exports, browser, records, stack
from tests.support.ad_exports import Fact
from tests.support.stack import wait_until

TABLES = ("campaigns", "ad_sets", "ads", "daily_metrics")


def submit(gateway, user, data: bytes, platform: str = "meta", status: int = 202,
           **fields: str) -> str:
    with gateway.client(user.token) as client:
        response = records.upload(client, f"{platform}-export.csv", data, contract="ad_metrics",
                                  platform=platform, **fields)
    assert response.status_code == status, response.text
    return response.json()["batch_id"]


def counts(conn, tenant_id) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t} WHERE tenant_id = %s",
                            (tenant_id,)).fetchone()["n"] for t in TABLES}


def events(conn, batch_id: str) -> list[dict]:
    return [r["payload"] for r in conn.execute(
        "SELECT payload FROM event_outbox WHERE batch_id = %s", (batch_id,))]


def batch_api(gateway, user, batch_id: str):
    with gateway.client(user.token) as client:
        return client.get(f"/intake/batches/{batch_id}")


# ── each platform's export ──────────────────────────────────────────────────────────────────
@pytest.mark.parametrize(("platform", "shape", "expected"), [
    ("meta", (2, 4, 8, 3), {"campaigns": 2, "ad_sets": 4, "ads": 8, "daily_metrics": 24}),
    # Google Ads' ad-group report: ad groups are the ad sets, there are no ads
    ("google", (2, 4, 4, 3), {"campaigns": 2, "ad_sets": 4, "ads": 0, "daily_metrics": 12}),
    ("tiktok", (2, 4, 8, 3), {"campaigns": 2, "ad_sets": 4, "ads": 8, "daily_metrics": 24}),
])
def test_platform_export_lands_in_the_four_tables_once(gateway, tenants, conn, stack_env,
                                                       out_dir, platform, shape, expected):
    # Given a realistic daily export of the platform, with its own headers
    user = tenants.user()
    facts = ad_exports.grid(*shape)
    data = ad_exports.EXPORTS[platform](facts)

    # When it is imported
    batch_id = submit(gateway, user, data, platform)
    drain(conn, stack_env, out_dir, batch_id)

    # Then the batch completed with its rows in the four tables, references resolved
    row = batch(conn, batch_id)
    assert (row["status"], row["run_status"]) == ("completed", "succeeded"), row["rejection_reason"]
    assert counts(conn, user.tenant_id) == expected
    assert (row["campaigns_upserted"], row["ad_sets_upserted"], row["ads_upserted"],
            row["daily_metrics_upserted"]) == tuple(expected.values())
    assert row["affected_dates"] == [date(2026, 1, 1), date(2026, 1, 2), date(2026, 1, 3)]
    totals = conn.execute("SELECT sum(spend) AS spend, sum(impressions) AS impressions, "
                          "array_agg(DISTINCT currency) AS currencies FROM daily_metrics "
                          "WHERE tenant_id = %s", (user.tenant_id,)).fetchone()
    assert totals["spend"] == sum(Decimal(f.spend) for f in facts)
    assert totals["impressions"] == 1000 * len(facts)
    if platform != "tiktok":  # TikTok's export names no currency
        assert totals["currencies"] == ["USD"]
    linked = conn.execute(
        "SELECT count(*) AS n FROM daily_metrics m JOIN campaigns c ON c.id = m.campaign_id "
        "JOIN ad_sets s ON s.id = m.ad_set_id AND s.campaign_id = c.id "
        "WHERE m.tenant_id = %s", (user.tenant_id,)).fetchone()["n"]
    assert linked == expected["daily_metrics"]
    # and one IngestionCompleteEvent with the spec's metrics
    [event] = events(conn, batch_id)
    assert event["status"] == "completed" and event["platform"] == platform
    assert event["metrics"]["promoted_rows"] == expected["daily_metrics"]
    assert event["affected_dates"] == ["2026-01-01", "2026-01-02", "2026-01-03"]

    # When the same file is uploaded again
    again = submit(gateway, user, data, platform, status=200)

    # Then it is the same batch: no new work, no second event
    assert again == batch_id
    assert counts(conn, user.tenant_id) == expected
    assert len(events(conn, batch_id)) == 1


def test_amended_export_updates_facts_without_duplicating_dimensions(gateway, tenants, conn,
                                                                     stack_env, out_dir):
    # Given a Meta export already imported
    user = tenants.user()
    facts = ad_exports.grid(2, 4, 8, 2)
    first = submit(gateway, user, ad_exports.meta(facts))
    drain(conn, stack_env, out_dir, first)
    before = counts(conn, user.tenant_id)

    # When an amended export changes the spend of every fourth row
    second = submit(gateway, user, ad_exports.meta(ad_exports.amend(facts, 4, "999.99")))
    drain(conn, stack_env, out_dir, second)

    # Then those facts changed, nothing else was written, and no dimension was added
    row = batch(conn, second)
    assert row["status"] == "completed"
    assert (row["rows_inserted"], row["rows_updated"], row["rows_unchanged"]) == (0, 4, 12)
    assert (row["campaigns_upserted"], row["ad_sets_upserted"], row["ads_upserted"],
            row["daily_metrics_upserted"]) == (0, 0, 0, 4)
    assert counts(conn, user.tenant_id) == before
    assert conn.execute("SELECT count(*) AS n FROM daily_metrics WHERE tenant_id = %s AND "
                        "spend = 999.99", (user.tenant_id,)).fetchone()["n"] == 4


# ── the 90 % threshold ──────────────────────────────────────────────────────────────────────
def test_89_percent_valid_fails_and_with_force_partial_ends_partial(gateway, tenants, conn,
                                                                    stack_env, out_dir):
    # Given two exports of 100 rows, 11 of them with an unreadable spend
    user, other = tenants.user("acme"), tenants.user("globex")
    facts = ad_exports.grid(2, 4, 20, 5)
    mixed = [f if i % 9 or i >= 99 else replace(f, valid=False)
             for i, f in enumerate(facts)]
    assert sum(not f.valid for f in mixed) == 11
    failed = submit(gateway, user, ad_exports.meta(mixed))
    forced = submit(gateway, other, ad_exports.meta(mixed), force_partial="true")
    drain(conn, stack_env, out_dir, failed, forced)

    # Then without force_partial the batch failed and nothing reached any table, no event
    row = batch(conn, failed)
    assert (row["status"], row["rows_invalid"]) == ("failed", 11)
    assert counts(conn, user.tenant_id) == dict.fromkeys(TABLES, 0)
    assert events(conn, failed) == []
    assert {e["code"] for e in errors(conn, failed) if e["severity"] == "critical"} == {
        "AD_METRIC_SPEND_INVALID"}
    # (the spec's staging view shows the 11 as invalid, with their errors)
    view = conn.execute("SELECT validation_status AS s, count(*) AS n, min(row_index) AS first, "
                        "min(validation_errors->0->>'code') AS code FROM staging_rows "
                        "WHERE upload_id = %s GROUP BY 1 ORDER BY 1", (failed,)).fetchall()
    assert [(v["s"], v["n"]) for v in view] == [("invalid", 11), ("valid", 89)]
    assert (view[0]["first"], view[0]["code"]) == (0, "AD_METRIC_SPEND_INVALID")
    # and with it the 89 valid rows were promoted and the batch ended partial, with its event
    row = batch(conn, forced)
    assert (row["status"], row["rows_invalid"], row["daily_metrics_upserted"]) == ("partial", 11, 89)
    assert counts(conn, other.tenant_id)["daily_metrics"] == 89
    [event] = events(conn, forced)
    assert (event["status"], event["metrics"]["failed_rows"], event["metrics"]["promoted_rows"]) == (
        "partial", 11, 89)


def test_rows_repeating_a_day_and_ad_are_errors_never_the_first_rows_spend(
        gateway, tenants, conn, stack_env, out_dir):
    # Rows 1 and 3 name the same day, campaign, ad set and ad: which spend is right cannot be
    # told, so both are errors (issue 20: keeping the first one lost a real week's spend).
    user = tenants.user()
    facts = [Fact("90001", "80001", "70001", date(2026, 1, 1), spend="10.00"),
             Fact("90001", "80001", "70002", date(2026, 1, 1)),
             Fact("90001", "80001", "70001", date(2026, 1, 1), spend="99.00")]
    batch_id = submit(gateway, user, ad_exports.meta(facts), error_threshold_percent="70")
    drain(conn, stack_env, out_dir, batch_id)

    row = batch(conn, batch_id)
    assert (row["status"], row["rows_invalid"], row["daily_metrics_upserted"]) == (
        "completed", 2, 1)
    assert [(e["row_number"], e["code"]) for e in errors(conn, batch_id)
            if e["severity"] == "critical"] == [(1, "AD_METRIC_REPEATED_ROW"),
                                                (3, "AD_METRIC_REPEATED_ROW")]
    assert conn.execute("SELECT sum(spend) AS s FROM daily_metrics WHERE tenant_id = %s",
                        (user.tenant_id,)).fetchone()["s"] == Decimal("12.34")
    # the spec's staging view: the valid row staged, the two repeats invalid with their errors
    staged = conn.execute("SELECT row_index, validation_status FROM staging_rows "
                          "WHERE upload_id = %s ORDER BY row_index", (batch_id,)).fetchall()
    assert [(r["row_index"], r["validation_status"]) for r in staged] == [
        (0, "invalid"), (1, "valid"), (2, "invalid")]


# ── missing parents ─────────────────────────────────────────────────────────────────────────
def test_row_naming_an_unknown_ad_by_id_only_keeps_its_fact_with_a_warning(
        gateway, tenants, conn, stack_env, out_dir):
    # Given a TikTok export whose second row carries an ad id but no ad name, an ad never seen
    user = tenants.user()
    facts = [Fact("90001", "80001", "70001", date(2026, 1, 1)),
             Fact("90001", "80001", "79999", date(2026, 1, 1), ad_name=None)]
    batch_id = submit(gateway, user, ad_exports.tiktok(facts), "tiktok")
    drain(conn, stack_env, out_dir, batch_id)

    # Then both facts are stored, the second without an ad, and that row has the warning
    assert batch(conn, batch_id)["status"] == "completed"
    refs = conn.execute("SELECT ad_id IS NULL AS no_ad, ad_set_id IS NULL AS no_set FROM "
                        "daily_metrics WHERE tenant_id = %s ORDER BY ad_id NULLS LAST",
                        (user.tenant_id,)).fetchall()
    assert [(r["no_ad"], r["no_set"]) for r in refs] == [(False, False), (True, False)]
    assert [(e["row_number"], e["code"], e["severity"]) for e in errors(conn, batch_id)] == [
        (2, "AD_METRIC_AD_NOT_FOUND", "warning")]


# ── tenants ─────────────────────────────────────────────────────────────────────────────────
def test_another_tenant_never_sees_the_batch_or_its_rows(gateway, tenants, conn, stack_env,
                                                         out_dir):
    user, stranger = tenants.user("acme"), tenants.user("globex")
    batch_id = submit(gateway, user, ad_exports.meta(ad_exports.grid(1, 2, 2, 2)))
    drain(conn, stack_env, out_dir, batch_id)

    # The owner's batch API shows the per-entity counts and affected dates
    mine = batch_api(gateway, user, batch_id)
    assert mine.status_code == 200
    assert mine.json()["adMetrics"] == {
        "platform": "meta", "clientId": None, "campaignsUpserted": 1, "adSetsUpserted": 2,
        "adsUpserted": 2, "dailyMetricsUpserted": 4, "periodMetricsUpserted": 0,
        "affectedDates": ["2026-01-01", "2026-01-02"], "entityKeys": "ids",
        "reportGrain": "day", "reportPeriod": {"start": None, "end": None}}
    # Another tenant gets 404 for the batch and its errors, and has no rows
    for path in (f"/intake/batches/{batch_id}", f"/intake/batches/{batch_id}/errors"):
        with gateway.client(stranger.token) as client:
            response = client.get(path)
        assert response.status_code == 404, response.text
    assert counts(conn, stranger.tenant_id) == dict.fromkeys(TABLES, 0)


# ── faults ──────────────────────────────────────────────────────────────────────────────────
def test_sigkill_mid_staging_resumes_after_the_last_staged_row(gateway, tenants, conn,
                                                               stack_env, out_dir, tmp_path):
    # Given a 12,000-row Meta export whose worker holds after its first 10,000-row chunk
    user = tenants.user()
    batch_id = submit(gateway, user, ad_exports.meta(ad_exports.grid(10, 100, 1000, 12)))
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")
    flag = tmp_path / "hold"
    flag.touch()
    first = _held_worker(stack_env, out_dir, flag, "parse", "worker-1")
    wait_until(lambda: batch(conn, batch_id)["last_staged_row"] == 10_000, timeout=180,
               message="first chunk staged")

    # When that worker is killed outright and another takes the job over
    first.signal(signal.SIGKILL)
    first.proc.wait(30)
    second = stack.start_worker(stack_env, out_dir, name="worker-2")
    try:
        wait_until(lambda: batch(conn, batch_id)["status"] == "completed", timeout=300,
                   message="batch completed after takeover")
    finally:
        second.stop()

    # Then it resumed after row 10,000 and staged and promoted each row once
    assert '"resume_after_row":10000' in second.logs()
    assert conn.execute("SELECT count(*) AS n, count(DISTINCT natural_key_hash) AS keys FROM "
                        "import_staged_rows WHERE batch_id = %s", (batch_id,)).fetchone() == {
        "n": 12_000, "keys": 12_000}
    assert counts(conn, user.tenant_id) == {"campaigns": 10, "ad_sets": 100, "ads": 1000,
                                            "daily_metrics": 12_000}
    assert len(events(conn, batch_id)) == 1


def test_sigkill_mid_promotion_reruns_without_duplicates_and_one_event(
        gateway, tenants, conn, stack_env, out_dir, tmp_path):
    # Given a batch held inside its promotion transaction (upserts done, not committed)
    user = tenants.user()
    batch_id = submit(gateway, user, ad_exports.meta(ad_exports.grid(3, 6, 30, 4)))
    wait_until(lambda: published(conn, batch_id), timeout=30, message="job published")
    flag = tmp_path / "hold"
    flag.touch()
    first = _held_worker(stack_env, out_dir, flag, "promote", "worker-1")
    # (the facts' upsert, known by its CTE: pg_stat_activity keeps only a query's first 1 KiB)
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE query "
                                    "LIKE '%%), refs AS (%%' AND state = "
                                    "'idle in transaction'").fetchone()["n"] >= 1,
               timeout=120, message="promotion held uncommitted")

    # When the worker is killed there
    first.signal(signal.SIGKILL)
    first.proc.wait(30)

    # Then nothing was half-written, and a takeover promotes again to completion
    assert counts(conn, user.tenant_id) == dict.fromkeys(TABLES, 0)
    assert events(conn, batch_id) == []
    second = stack.start_worker(stack_env, out_dir, name="worker-2")
    try:
        wait_until(lambda: batch(conn, batch_id)["status"] == "completed", timeout=240,
                   message="batch completed after takeover")
    finally:
        second.stop()
    assert counts(conn, user.tenant_id) == {"campaigns": 3, "ad_sets": 6, "ads": 30,
                                            "daily_metrics": 120}
    assert len(events(conn, batch_id)) == 1


# ── the batch page ──────────────────────────────────────────────────────────────────────────
@pytest.mark.slow
def test_batch_page_shows_per_entity_counts_and_affected_dates(gateway, tenants, conn,
                                                               stack_env, out_dir, context):
    from playwright.sync_api import expect

    # Given a Meta export imported by a worker
    user = tenants.user(role="user")
    batch_id = submit(gateway, user, ad_exports.meta(ad_exports.grid(2, 3, 6, 2)))
    drain(conn, stack_env, out_dir, batch_id)

    # When its uploader opens the batch page
    page = context.new_page()
    browser.sign_in(page, gateway.url, user.email)
    page.goto(f"{gateway.url}/imports/{batch_id}")

    # Then the ad-metrics card shows what each step upserted and the days it covered
    card = page.locator("[data-field=ad_metrics]")
    expect(card.locator("[data-field=campaigns_upserted]")).to_have_text("2")
    expect(card.locator("[data-field=ad_sets_upserted]")).to_have_text("3")
    expect(card.locator("[data-field=ads_upserted]")).to_have_text("6")
    expect(card.locator("[data-field=daily_metrics_upserted]")).to_have_text("12")
    expect(card.locator("[data-field=affected_dates]")).to_have_text("2026-01-01, 2026-01-02")
    expect(card.locator("[data-field=platform]")).to_have_text("meta")
    page.screenshot(path=str(out_dir / "ad-metrics-batch.png"), full_page=True)
