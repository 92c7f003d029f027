"""The ad-metrics promotion SQL (worker/records/ad_metrics.sql) on a real Postgres: staged rows
as the worker leaves them, promoted group by group into campaigns → ad sets → ads → daily
metrics (migrations/0021, docs/decisions/0149)."""

from __future__ import annotations

import hashlib
import uuid
from datetime import date
from decimal import Decimal
from typing import Any

import pytest

from shared import db
from tests.support import staging
from worker.records import ad_promote
from worker.records.stage import Target


def new_batch(conn, tenant_id, *, client_id=None, platform: str = "meta") -> uuid.UUID:
    digest = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    return conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, platform, client_id) VALUES (%s, 'ad_metrics', '1', "
        "'export.csv', %s, 10, 'file:///nowhere', 'manual', %s, %s) RETURNING batch_id",
        (tenant_id, digest, platform, client_id)).fetchone()["batch_id"]


def row(campaign: str = "c1", ad_set: str | None = "s1", ad: str | None = "a1", *,
        day: str = "2026-01-05", spend: str = "10.50", named: bool = True, **extra: Any) -> dict:
    values = {"campaign_external_id": campaign, "campaign_name": f"Campaign {campaign}",
              "ad_set_external_id": ad_set, "ad_set_name": f"Set {ad_set}" if ad_set else None,
              "ad_external_id": ad, "ad_name": f"Ad {ad}" if ad and named else None,
              "metric_date": day, "spend": spend, "impressions": 1000, "clicks": 10,
              "conversions": "1", "currency": "USD"}
    return {**values, **extra}


def stage(conn, tenant_id, batch_id, rows: list[dict]) -> None:
    staging.stage_rows(conn, "ad_metrics", tenant_id, batch_id, [
        {"natural_key": "|".join(str(data.get(k) or "") for k in (
            "metric_date", "campaign_external_id", "ad_set_external_id", "ad_external_id")),
         **data} for data in rows])


def promote(conn, tenant_id, batch_id, *, client_id=None, platform="meta",
            group_rows=ad_promote.GROUP_ROWS) -> dict:
    params = {"batch_id": batch_id, "tenant_id": tenant_id, "client_id": client_id,
              "platform": platform}
    with conn.transaction():
        return ad_promote.write_groups(conn, params, group_rows)


def count(conn, table: str, tenant_id) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


def warnings(conn, batch_id) -> list[tuple[int, str]]:
    return [(r["row_number"], r["code"]) for r in conn.execute(
        "SELECT row_number, code FROM import_row_errors WHERE batch_id = %s "
        "ORDER BY row_number, code", (batch_id,))]


def test_promotes_each_entity_once_and_facts_with_resolved_references(conn, tenants):
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    stage(conn, tenant, batch, [row("c1", "s1", "a1"), row("c1", "s1", "a2"),
                                row("c1", "s2", "a3", day="2026-01-06")])

    written = promote(conn, tenant, batch)

    assert {k: written[k] for k in ("campaigns_upserted", "ad_sets_upserted", "ads_upserted",
                                    "daily_metrics_upserted")} == {
        "campaigns_upserted": 1, "ad_sets_upserted": 2, "ads_upserted": 3,
        "daily_metrics_upserted": 3}
    facts = conn.execute(
        "SELECT a.external_id AS ad, s.external_id AS ad_set, c.external_id AS campaign, "
        "m.metric_date, m.spend FROM daily_metrics m JOIN ads a ON a.id = m.ad_id "
        "JOIN ad_sets s ON s.id = m.ad_set_id JOIN campaigns c ON c.id = m.campaign_id "
        "WHERE m.tenant_id = %s ORDER BY a.external_id", (tenant,)).fetchall()
    assert [(f["ad"], f["ad_set"], f["campaign"], f["metric_date"], f["spend"]) for f in facts] == [
        ("a1", "s1", "c1", date(2026, 1, 5), Decimal("10.5000")),
        ("a2", "s1", "c1", date(2026, 1, 5), Decimal("10.5000")),
        ("a3", "s2", "c1", date(2026, 1, 6), Decimal("10.5000"))]
    # and each ad points at its ad set and campaign
    assert conn.execute("SELECT count(*) AS n FROM ads a JOIN ad_sets s ON s.id = a.ad_set_id "
                        "WHERE a.tenant_id = %s", (tenant,)).fetchone()["n"] == 3


def test_null_client_never_defeats_the_unique_keys(conn, tenants):
    # Given two client-less uploads of the same campaign/ad set/ad and a fact with no ad at all
    tenant = tenants.user().tenant_id
    for _ in range(2):
        batch = new_batch(conn, tenant)
        stage(conn, tenant, batch, [row("c1", "s1", "a1"), row("c1", None, None)])
        promote(conn, tenant, batch)

    # Then each dimension exists once, and so does each fact, NULL references included
    assert [count(conn, t, tenant) for t in ("campaigns", "ad_sets", "ads", "daily_metrics")] == [
        1, 1, 1, 2]
    with pytest.raises(Exception, match="daily_metrics_natural_key"), conn.transaction():
        conn.execute("INSERT INTO daily_metrics (tenant_id, platform, metric_date, campaign_id) "
                     "SELECT tenant_id, platform, metric_date, campaign_id FROM daily_metrics "
                     "WHERE tenant_id = %s AND ad_id IS NULL", (tenant,))


def test_a_client_and_the_tenant_itself_keep_apart_rows(conn, tenants):
    tenant = tenants.user().tenant_id
    client = conn.execute("INSERT INTO ad_clients (tenant_id, name) VALUES (%s, 'Brand') "
                          "RETURNING client_id", (tenant,)).fetchone()["client_id"]
    own, theirs = new_batch(conn, tenant), new_batch(conn, tenant, client_id=client)
    stage(conn, tenant, own, [row()])
    stage(conn, tenant, theirs, [row()])
    promote(conn, tenant, own)
    promote(conn, tenant, theirs, client_id=client)

    assert conn.execute("SELECT count(*) AS n, count(client_id) AS with_client FROM campaigns "
                        "WHERE tenant_id = %s", (tenant,)).fetchone() == {"n": 2, "with_client": 1}
    assert count(conn, "daily_metrics", tenant) == 2


def test_one_group_naming_an_entity_twice_is_deduplicated_last_row_wins(conn, tenants):
    # Given one group whose rows name the same campaign, ad set and ad several times, renamed
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    stage(conn, tenant, batch, [
        row(day="2026-01-05"), row(day="2026-01-06", campaign_name="Renamed",
                                   ad_set_name="Set renamed", ad_name="Ad renamed"),
        row(day="2026-01-07", campaign_name=None, ad_set_name="Set renamed",
            ad_name="Ad renamed")])

    # When promoted (ON CONFLICT DO UPDATE would fail on a key it met twice in one statement)
    written = promote(conn, tenant, batch)

    # Then one of each, with the last name given; a row without a name erases none
    assert (written["campaigns_upserted"], written["ad_sets_upserted"], written["ads_upserted"]) == (1, 1, 1)
    names = conn.execute("SELECT (SELECT name FROM campaigns WHERE tenant_id = %(t)s) AS c, "
                         "(SELECT name FROM ad_sets WHERE tenant_id = %(t)s) AS s, "
                         "(SELECT name FROM ads WHERE tenant_id = %(t)s) AS a",
                         {"t": tenant}).fetchone()
    assert names == {"c": "Renamed", "s": "Set renamed", "a": "Ad renamed"}
    assert count(conn, "daily_metrics", tenant) == 3


def test_groups_of_1000_resolve_parents_named_in_earlier_groups(conn, tenants):
    # Given 2,500 rows: ad sets and ads named in the first group, referred to by id only later
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    rows = [row(f"c{i % 5}", f"s{i % 50}", f"a{i % 500}", day=f"2026-01-{1 + i // 500:02d}",
                named=i < 1000) for i in range(2500)]
    for r in rows[1000:]:
        r["ad_set_name"] = None
    stage(conn, tenant, batch, rows)

    # When promoted in groups of 1,000
    groups = [r["upto"] for r in conn.execute(
        ad_promote.Q["groups"], {"batch_id": batch, "tenant_id": tenant, "group_rows": 1000})]
    written = promote(conn, tenant, batch, group_rows=1000)

    # Then the groups end at rows 1000, 2000 and 2500, every fact has all its references,
    # each entity was written once and no row warned of a missing parent
    assert groups == [1000, 2000, 2500]
    assert (written["campaigns_upserted"], written["ad_sets_upserted"], written["ads_upserted"],
            written["daily_metrics_upserted"]) == (5, 50, 500, 2500)
    assert conn.execute("SELECT count(*) AS n FROM daily_metrics WHERE tenant_id = %s AND "
                        "ad_id IS NOT NULL AND ad_set_id IS NOT NULL", (tenant,)).fetchone()["n"] == 2500
    assert warnings(conn, batch) == []


def test_a_parent_named_only_in_a_later_group_is_found_by_earlier_groups(conn, tenants):
    # Given 2,500 rows whose first 1,500 name their ad sets and ads by id only, and whose last
    # 1,000 name them (a file sorted by day, the names filled in on the last days)
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    rows = [row(f"c{i % 5}", f"s{i % 50}", f"a{i % 500}", day=f"2026-01-{1 + i // 500:02d}",
                named=i >= 1500) for i in range(2500)]
    for r in rows[:1500]:
        r["ad_set_name"] = None
    stage(conn, tenant, batch, rows)

    # When promoted in groups of 1,000
    written = promote(conn, tenant, batch, group_rows=1000)

    # Then the dimensions were written once for the whole file, before any fact: every fact of
    # the first groups has its references, and no row warned of a missing parent
    assert (written["ad_sets_upserted"], written["ads_upserted"],
            written["daily_metrics_upserted"]) == (50, 500, 2500)
    assert conn.execute("SELECT count(*) AS n FROM daily_metrics WHERE tenant_id = %s AND "
                        "ad_id IS NOT NULL AND ad_set_id IS NOT NULL", (tenant,)).fetchone()["n"] == 2500
    assert warnings(conn, batch) == []


def test_missing_parent_sets_the_reference_null_with_a_warning(conn, tenants):
    # Given a row naming an ad by id only (no ad name) that the tenant does not have, and one
    # naming an ad set by id only likewise
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    stage(conn, tenant, batch, [row("c1", "s1", "a1"), row("c1", "s1", "a9", named=False),
                                row("c1", "s7", None, ad_set_name=None)])

    promote(conn, tenant, batch)

    # Then both facts are kept with NULL references, and each row has its warning
    facts = conn.execute("SELECT m.ad_set_id IS NULL AS no_set, m.ad_id IS NULL AS no_ad "
                         "FROM daily_metrics m WHERE tenant_id = %s ORDER BY m.id",
                         (tenant,)).fetchall()
    assert [(f["no_set"], f["no_ad"]) for f in facts] == [(False, False), (False, True),
                                                          (True, True)]
    assert warnings(conn, batch) == [(2, "AD_METRIC_AD_NOT_FOUND"),
                                     (3, "AD_METRIC_AD_SET_NOT_FOUND")]
    assert count(conn, "ads", tenant) == 1
    # and each warning's evidence is its row as staged, nothing of the promotion's own
    assert evidence(conn, batch) == [(2, True, "a9"), (3, True, None)]


def test_a_period_rows_warning_carries_its_staged_row_as_evidence(conn, tenants):
    # Given a period row (no day) naming an ad by id only that the tenant does not have
    tenant = tenants.user().tenant_id
    batch = new_batch(conn, tenant)
    stage(conn, tenant, batch, [row("c1", "s1", "a1", day=None, grain="period",
                                    period_start="2026-01-01", period_end="2026-01-31"),
                                row("c1", "s1", "a9", named=False, day=None, grain="period",
                                    period_start="2026-01-01", period_end="2026-01-31")])

    written = promote(conn, tenant, batch)

    # Then both periods are kept, and the second row is warned with its staged values
    assert written["period_metrics_upserted"] == 2
    assert warnings(conn, batch) == [(2, "AD_METRIC_AD_NOT_FOUND")]
    assert evidence(conn, batch) == [(2, True, "a9")]


def evidence(conn, batch_id) -> list[tuple[int, bool, str | None]]:
    """Each row error's row, whether its evidence is exactly the staged row's values, and
    the ad id in it."""
    return [(r["row_number"], r["same"], r["ad"]) for r in conn.execute(
        "SELECT e.row_number, e.raw = staged_values(to_jsonb(s)) AS same, "
        "e.raw ->> 'ad_external_id' AS ad FROM import_row_errors e "
        "JOIN import_staged_ad_metrics s ON s.batch_id = e.batch_id "
        "AND s.row_number = e.row_number WHERE e.batch_id = %s ORDER BY e.row_number",
        (batch_id,))]


def test_amended_export_updates_facts_and_adds_no_dimension(conn, tenants):
    tenant = tenants.user().tenant_id
    first = new_batch(conn, tenant)
    stage(conn, tenant, first, [row("c1", "s1", "a1"), row("c1", "s1", "a2")])
    promote(conn, tenant, first)

    # When an amended export changes one ad's spend
    amended = new_batch(conn, tenant)
    stage(conn, tenant, amended, [row("c1", "s1", "a1", spend="99.00"), row("c1", "s1", "a2")])
    written = promote(conn, tenant, amended)

    # Then one fact changed, one is unchanged, no dimension was written again
    assert written["facts"] == {"distinct_rows": 2, "inserted": 0, "updated": 1}
    assert (written["campaigns_upserted"], written["ad_sets_upserted"], written["ads_upserted"]) == (0, 0, 0)
    assert [count(conn, t, tenant) for t in ("campaigns", "ad_sets", "ads", "daily_metrics")] == [
        1, 1, 2, 2]
    assert conn.execute("SELECT m.spend FROM daily_metrics m JOIN ads a ON a.id = m.ad_id "
                        "WHERE a.external_id = 'a1' AND m.tenant_id = %s",
                        (tenant,)).fetchone()["spend"] == Decimal("99.0000")


def test_an_export_naming_stored_entities_unchanged_never_locks_them(conn, tenants,
                                                                    database_url):
    # Given stored dimensions, and another transaction holding their rows (FOR NO KEY UPDATE:
    # an upsert's ON CONFLICT lock waits for it, a fact's foreign-key check does not)
    tenant = tenants.user().tenant_id
    first = new_batch(conn, tenant)
    stage(conn, tenant, first, [row("c1", "s1", "a1"), row("c1", "s1", "a2")])
    promote(conn, tenant, first)
    again = new_batch(conn, tenant)
    stage(conn, tenant, again, [row("c1", "s1", "a1", day="2026-01-06"),
                                row("c1", "s1", "a2", day="2026-01-06")])
    with db.connect(database_url) as holder:
        for table in ("campaigns", "ad_sets", "ads"):
            holder.execute(f"SELECT 1 FROM {table} WHERE tenant_id = %s FOR NO KEY UPDATE",
                           (tenant,))

        # When the next day's export, naming them as stored, is promoted
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '2s'")
            written = ad_promote.write_groups(conn, {
                "batch_id": again, "tenant_id": tenant, "client_id": None,
                "platform": "meta"}, ad_promote.GROUP_ROWS)
        holder.rollback()

    # Then it waited for none of them (docs/decisions/0276) and wrote only the facts
    assert (written["campaigns_upserted"], written["ad_sets_upserted"],
            written["ads_upserted"]) == (0, 0, 0)
    assert written["facts"] == {"distinct_rows": 2, "inserted": 2, "updated": 0}


def test_another_tenants_dimensions_are_never_resolved(conn, tenants):
    # Given tenant A has ad a1; tenant B's export names a1 by id only
    a, b = tenants.user("acme").tenant_id, tenants.user("globex").tenant_id
    batch_a = new_batch(conn, a)
    stage(conn, a, batch_a, [row("c1", "s1", "a1")])
    promote(conn, a, batch_a)
    batch_b = new_batch(conn, b)
    stage(conn, b, batch_b, [row("c1", "s1", "a1", named=False)])
    promote(conn, b, batch_b)

    # Then B's fact has no ad (and a warning), and no row of B references one of A's
    assert warnings(conn, batch_b) == [(1, "AD_METRIC_AD_NOT_FOUND")]
    assert conn.execute("SELECT ad_id FROM daily_metrics WHERE tenant_id = %s",
                        (b,)).fetchone()["ad_id"] is None
    assert conn.execute(
        "SELECT count(*) AS n FROM daily_metrics m JOIN campaigns c ON c.id = m.campaign_id "
        "WHERE m.tenant_id <> c.tenant_id").fetchone()["n"] == 0


def test_prepare_rejects_repeats_and_overflows_and_sums_slices_once(conn, tenants):
    # Given a file (keys as the contract stages them: fact, then chr(30), then breakdown) with
    # two slices of one fact, two slices whose sum no fact can hold, a row repeated with its
    # breakdown, and a plain row
    tenant = tenants.user("prep").tenant_id
    batch = new_batch(conn, tenant)
    rows = [("A\x1eage=18", row(spend="1.50", impressions=10)),
            ("A\x1eage=25", row(spend="2.25", impressions=20)),
            ("B\x1eage=18", row(spend="9000000000000")),
            ("B\x1eage=25", row(spend="2000000000000")),
            ("C\x1eage=18", row()), ("C\x1eage=18", row()), ("D", row())]
    staging.stage_rows(conn, "ad_metrics", tenant, batch,
                       [{"natural_key": key, **data} for key, data in rows])
    target = Target(batch_id=batch, tenant_id=tenant, run_id=uuid.uuid4(), fence=0)

    # When the file is prepared, twice
    first = ad_promote.prepare(conn, target)
    again = ad_promote.prepare(conn, target)

    # Then the repeats and the overflowing slices are errors and left the stage, the slices of
    # A are one row with their sums, and the second run changed nothing
    assert first == {"repeated_rows": 2, "overflowing_rows": 2, "summed_facts": 1,
                     "summed_slices": 1}
    assert again == {"repeated_rows": 0, "overflowing_rows": 0, "summed_facts": 0,
                     "summed_slices": 0}
    assert [(e["row_number"], e["field"], e["code"]) for e in conn.execute(
        "SELECT row_number, field, code FROM import_row_errors WHERE batch_id = %s "
        "ORDER BY row_number", (batch,))] == [
        (3, "spend", "AD_METRIC_TOTAL_OUT_OF_RANGE"), (4, "spend", "AD_METRIC_TOTAL_OUT_OF_RANGE"),
        (5, None, "AD_METRIC_REPEATED_ROW"), (6, None, "AD_METRIC_REPEATED_ROW")]
    staged = {r["row_number"]: r for r in conn.execute(
        "SELECT row_number, is_duplicate, spend, impressions, slices, breakdown "
        "FROM import_staged_ad_metrics WHERE batch_id = %s", (batch,))}
    assert sorted(staged) == [1, 2, 7]
    assert [staged[n]["is_duplicate"] for n in (1, 2, 7)] == [False, True, False]
    merged = staged[1]
    assert (merged["spend"], merged["impressions"], merged["slices"], merged["breakdown"]) == (
        Decimal("3.75"), 30, 2, None)


def test_prepare_of_one_row_per_fact_finds_a_single_row_beyond_a_facts_columns(conn, tenants):
    # Given a file of one row per fact (a daily export: prepare's three passes are skipped
    # then, ADR 0510), one of whose rows alone holds more than a fact's spend can
    tenant = tenants.user("prep-one").tenant_id
    batch = new_batch(conn, tenant)
    staging.stage_rows(conn, "ad_metrics", tenant, batch, [
        {"natural_key": "A", **row()}, {"natural_key": "B", **row(spend="10000000000000")},
        {"natural_key": "C", **row()}])
    target = Target(batch_id=batch, tenant_id=tenant, run_id=uuid.uuid4(), fence=0)

    # When the file is prepared
    prepared = ad_promote.prepare(conn, target)

    # Then that row is an error and left the stage, and the others are untouched
    assert prepared == {"repeated_rows": 0, "overflowing_rows": 1, "summed_facts": 0,
                        "summed_slices": 0}
    assert [r["row_number"] for r in conn.execute(
        "SELECT row_number FROM import_staged_ad_metrics WHERE batch_id = %s AND NOT is_duplicate"
        " ORDER BY row_number", (batch,))] == [1, 3]
