"""The ad facts' references (migrations/0240, docs/decisions/0480): checked once per statement
and distinct entity, with every guarantee the six foreign keys gave."""

from __future__ import annotations

import hashlib
import uuid

import pytest
from psycopg import errors as pg_errors

FACT = ("INSERT INTO {table} (tenant_id, client_id, platform, {when}, campaign_id, ad_set_id, "
        "ad_id, spend, batch_id) VALUES (%s, %s, 'meta', {days}, %s, %s, %s, 1, %s) "
        "RETURNING id")
# A fact's day (or period) from %(day)s, so that two facts of one test never share a key.
TABLES = {"daily_metrics": ("metric_date", "date '2026-01-05' + %s"),
          "period_metrics": ("period_start, period_end", "date '2026-01-01' + %s, date '2026-01-31'")}


def fact(conn, table: str, tenant, *, client=None, campaign=None, ad_set=None, ad=None,
         batch=None, day: int = 0):
    when, days = TABLES[table]
    return conn.execute(FACT.format(table=table, when=when, days=days),
                        (tenant, client, day, campaign, ad_set, ad, batch)).fetchone()["id"]


def bare_tenant(conn) -> uuid.UUID:
    return conn.execute("INSERT INTO tenants (name) VALUES (%s) RETURNING tenant_id",
                        (f"t-{uuid.uuid4()}",)).fetchone()["tenant_id"]


def parents(conn, tenant) -> dict[str, uuid.UUID]:
    """A client, campaign, ad set, ad and batch of ``tenant``."""
    client = conn.execute("INSERT INTO ad_clients (tenant_id, name) VALUES (%s, %s) "
                          "RETURNING client_id", (tenant, f"c-{uuid.uuid4()}")).fetchone()
    made = {"client": client["client_id"]}
    for level, table in (("campaign", "campaigns"), ("ad_set", "ad_sets"), ("ad", "ads")):
        made[level] = conn.execute(
            f"INSERT INTO {table} (tenant_id, platform, external_id) VALUES (%s, 'meta', %s) "
            "RETURNING id", (tenant, uuid.uuid4().hex)).fetchone()["id"]
    made["batch"] = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, platform) VALUES (%s, 'ad_metrics', '1', 'x.csv', %s, "
        "10, 'file:///nowhere', 'manual', 'meta') RETURNING batch_id",
        (tenant, hashlib.sha256(uuid.uuid4().bytes).hexdigest())).fetchone()["batch_id"]
    return made


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_fact_names_only_its_own_tenants_existing_rows(conn, table):
    mine, theirs = bare_tenant(conn), bare_tenant(conn)
    own, other = parents(conn, mine), parents(conn, theirs)
    # Every reference its own tenant's: written, and written again by an update
    fid = fact(conn, table, mine, **own)
    conn.execute(f"UPDATE {table} SET spend = 2 WHERE id = %s", (fid,))
    # A reference that does not exist, or is another tenant's, is refused on insert and update
    for name in own:
        for wrong in (uuid.uuid4(), other[name]):
            with pytest.raises(pg_errors.ForeignKeyViolation):
                fact(conn, table, mine, **{**own, name: wrong}, day=1)
            column = "client_id" if name == "client" else f"{name}_id"
            with pytest.raises(pg_errors.ForeignKeyViolation):
                conn.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", (wrong, fid))
    # A fact with no reference at all still needs its tenant
    with pytest.raises(pg_errors.ForeignKeyViolation):
        fact(conn, table, uuid.uuid4())
    with pytest.raises(pg_errors.ForeignKeyViolation):
        conn.execute(f"UPDATE {table} SET tenant_id = %s WHERE id = %s", (uuid.uuid4(), fid))
    # One bad row among good ones fails the whole statement
    when, days = TABLES[table]
    with pytest.raises(pg_errors.ForeignKeyViolation):
        conn.execute(f"INSERT INTO {table} (tenant_id, platform, {when}, ad_id, spend) "
                     f"SELECT %s, 'meta', {days}, a, 1 FROM unnest(%s::uuid[]) a",
                     (mine, 2, [own["ad"], uuid.uuid4()]))


@pytest.mark.parametrize("table", sorted(TABLES))
def test_a_row_that_facts_name_is_neither_deleted_nor_renumbered(conn, table):
    tenant = bare_tenant(conn)
    own = parents(conn, tenant)
    fact(conn, table, tenant, **own)
    keyed = {"client": ("ad_clients", "client_id"), "campaign": ("campaigns", "id"),
             "ad_set": ("ad_sets", "id"), "ad": ("ads", "id"),
             "batch": ("import_batches", "batch_id")}
    for name, (parent, key) in keyed.items():
        with pytest.raises(pg_errors.ForeignKeyViolation):
            conn.execute(f"DELETE FROM {parent} WHERE {key} = %s", (own[name],))
        with pytest.raises(pg_errors.ForeignKeyViolation):
            conn.execute(f"UPDATE {parent} SET {key} = %s WHERE {key} = %s",
                         (uuid.uuid4(), own[name]))
    # A change that keeps the key is fine; so is removing a row no fact names
    conn.execute("UPDATE ads SET name = 'renamed' WHERE id = %s", (own["ad"],))
    spare = parents(conn, tenant)
    for name, (parent, key) in keyed.items():
        conn.execute(f"DELETE FROM {parent} WHERE {key} = %s", (spare[name],))
    # A tenant whose only fact names nothing else keeps it too
    lone = bare_tenant(conn)
    fact(conn, table, lone)
    with pytest.raises(pg_errors.ForeignKeyViolation):
        conn.execute("DELETE FROM tenants WHERE tenant_id = %s", (lone,))
    with pytest.raises(pg_errors.ForeignKeyViolation):
        conn.execute("UPDATE tenants SET tenant_id = %s WHERE tenant_id = %s",
                     (uuid.uuid4(), lone))
    # And no parent is emptied by TRUNCATE while facts exist
    with pytest.raises(pg_errors.FeatureNotSupported):
        conn.execute("TRUNCATE ads CASCADE")


def test_a_statement_probes_each_entity_it_names_once(conn):
    # The six keys probed every parent once per written row: 200 facts of one ad were 200
    # probes of ads (and of campaigns, ad sets, the batch, the tenant); now one each.
    tenant = bare_tenant(conn)
    own = parents(conn, tenant)
    with conn.transaction():
        before = probes(conn)
        conn.execute(
            "INSERT INTO daily_metrics (tenant_id, client_id, platform, metric_date, campaign_id,"
            " ad_set_id, ad_id, spend, batch_id) SELECT %s, %s, 'meta', date '2026-01-01' + i, "
            "%s, %s, %s, 1, %s FROM generate_series(1, 200) i",
            (tenant, own["client"], own["campaign"], own["ad_set"], own["ad"], own["batch"]))
        after = probes(conn)
    assert {t: after[t] - before[t] for t in before} == {
        "ad_clients": 1, "ad_sets": 1, "ads": 1, "campaigns": 1, "import_batches": 1,
        "tenants": 1}


def probes(conn) -> dict[str, int]:
    """Index scans of the facts' parents in this transaction so far."""
    return {r["relname"]: r["idx_scan"] for r in conn.execute(
        "SELECT relname, idx_scan FROM pg_stat_xact_user_tables WHERE relname = ANY(%s)",
        (["tenants", "ad_clients", "campaigns", "ad_sets", "ads", "import_batches"],))}
