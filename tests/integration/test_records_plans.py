"""Every set-based statement of staging, budget and promotion has a plan that is linear in the
batch, whatever the statistics say (issue 21, docs/decisions/0183).

A batch is staged beside another, larger batch of another tenant, with records of its own
tenant already stored; then every statement of the records pipeline (worker/records/records.sql)
and of the ad-metrics promotion (worker/records/ad_metrics.sql) is EXPLAINed with the
parameters the worker passes, in three states of the statistics: none at all (a fresh stack,
or cleared), fresh (ANALYZE after the batch was staged), and stale (ANALYZE while the stage
held only the other batch). A plan fails when it would read many rows once per row: a nested
loop (or a correlated subplan) whose inner side scans the stage or a production table other
than by a probe of one key.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest
from psycopg import sql

from shared import contracts
from shared.contracts import ad_metrics
from tests.support import staging
from worker.records import ad_promote, promote

RQ, AQ = promote.Q, ad_promote.Q
# The tables whose size grows with the data: rescanning one of them per row is the bug.
LARGE = ("import_staged_rows", "import_staged_judgments", "import_staged_plaintiffs",
         "import_staged_ad_metrics", "import_row_errors", "judgments", "plaintiffs",
         "plaintiff_judgments", "campaigns", "ad_sets", "ads", "daily_metrics")
# Columns an inner index scan must pin with `=` to be a probe of one key (or a handful).
# path_lookup (migrations/0030) is one name path: unique among name-only entities, and shared
# only by the handful of entities with ids that a file named by the same names.
PROBES = ("row_number", "case_number_normalized", "dedupe_key", "lookup_key", "path_lookup",
          "id", "plaintiff_id", "judgment_id", "natural_key")
STAGED, OTHER, STORED = 4_000, 12_000, 6_000
# The other tenant's campaigns, ad sets and ads: with only the tenant's few, a dimension table
# is one page, and a scan of one page per row is what the planner should pick (it prices by
# the table's size on disk, so the plan changes as the table grows).
OTHER_DIMENSIONS = 3_000
# Without statistics the planner takes `tenant_id = x` for 0.5 % of a table: below a few
# hundred rows any index that starts with tenant_id then looks as cheap as the unique one, and
# a probe may walk the tenant's (few) rows. That stays bounded (the guess grows with the
# table); the tables here are large enough to be past it, as a table worth the worry is.


# ── the plan check ──────────────────────────────────────────────────────────────────────────
def _walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _walk(child)


def _is_probe(node: dict[str, Any]) -> bool:
    if node["Node Type"] == "Tid Scan":
        # A TID scan given one ctid per outer row fetches that row: a probe (ad_metrics.sql
        # merge_slices joins its patches to their rows so). `ctid = ANY (list)` is not.
        return re.fullmatch(r"\((\S+ = ctid|ctid = \S+)\)", node.get("TID Cond", "")) is not None
    condition = node.get("Index Cond", "")
    return any(re.search(rf"(^|[\s(.]){column} = ", condition) for column in PROBES)


def _rescans(inner: dict[str, Any], ctes: dict[str, bool]) -> list[str]:
    """What an inner side executed once per outer row reads that is not a probe of a key."""
    found = []
    for node in _walk(inner):
        kind, table = node["Node Type"], node.get("Relation Name")
        if table in LARGE:
            if kind in ("Index Scan", "Index Only Scan", "Tid Scan") and _is_probe(node):
                continue
            if kind == "Bitmap Heap Scan" and all(_is_probe(n) for n in _walk(node)
                                                  if n["Node Type"] == "Bitmap Index Scan"):
                continue
            found.append(f"{kind} on {table} ({node.get('Index Cond') or node.get('Filter')})")
        elif kind == "CTE Scan" and ctes.get(node.get("CTE Name", "")):
            found.append(f"CTE Scan of {node['CTE Name']}, which reads a large table")
    return found


def quadratic(plan: dict[str, Any]) -> list[str]:
    """Every place in the plan that reads a large table once per row of another."""
    ctes = {n["Subplan Name"].removeprefix("CTE "):
            any(m.get("Relation Name") in LARGE for m in _walk(n))
            for n in _walk(plan) if n.get("Subplan Name", "").startswith("CTE ")}
    problems = []
    for node in _walk(plan):
        per_row = []
        if node["Node Type"] == "Nested Loop":
            per_row.append(node["Plans"][1])
        per_row += [c for c in node.get("Plans", ()) if c.get("Parent Relationship") == "SubPlan"
                    and not _hashed(node, c.get("Subplan Name", ""))]
        for inner in per_row:
            problems += _rescans(inner, ctes)
    return problems


def _hashed(node: dict[str, Any], name: str) -> bool:
    """A subplan run once into a hash table (`x NOT IN (SELECT …)`), not once per row. Before
    PostgreSQL 18 the subplan itself was named `hashed SubPlan n`; since, the expression that
    uses it says `(hashed SubPlan n)`."""
    if name.startswith("hashed"):
        return True
    own = {k: v for k, v in node.items() if k != "Plans"}
    return f"(hashed {name})" in orjson.dumps(own).decode()


def explain(conn, statement: str | sql.Composed, params: dict[str, Any]) -> dict[str, Any]:
    text = statement if isinstance(statement, str) else statement.as_string(conn)
    row = conn.execute("EXPLAIN (FORMAT JSON) " + text, params).fetchone()
    return row["QUERY PLAN"][0]["Plan"]


# ── the data ────────────────────────────────────────────────────────────────────────────────
def new_batch(conn, tenant_id, contract: str = "judgments", *, status: str = "processing",
              platform: str | None = None) -> uuid.UUID:
    return conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status, platform) VALUES (%s, %s, '1', 'f.csv', %s,"
        " 10, 'file:///nowhere', 'manual', %s, %s) RETURNING batch_id",
        (tenant_id, contract, hashlib.sha256(uuid.uuid4().bytes).hexdigest(), status,
         platform)).fetchone()["batch_id"]


def stage(conn, tenant_id, batch_id, contract: str, rows: list[dict[str, Any]]) -> None:
    """The rows in the contract's typed stage, keyed as the worker keys them."""
    staging.stage_rows(conn, contract, tenant_id, batch_id, rows)


def judgment(i: int) -> dict[str, Any]:
    return {"case_number": f"2024-CV-{i:06d}", "plaintiff_name": "Acme Collections LLC",
            "defendant_name": f"Defendant {i % 97}", "amount": f"{1000 + i}.00",
            "filed_date": "2024-01-15", "court": "Supreme Court", "county": "Kings County"}


def plaintiff(i: int) -> dict[str, Any]:
    return {"name": f"Plaintiff {i % (STAGED // 2)}", "address_line1": f"{i % 500} Main St",
            "zip": "10001", "city": "New York", "state": "NY", "phone": "+12125550100",
            "email": None, "contact_name": None, "status": "active",
            "case_number": f"2024-CV-{i:06d}"}


def ad_row(i: int) -> dict[str, Any]:
    return {"campaign_external_id": f"c{i % 20}", "campaign_name": f"Campaign {i % 20}",
            "ad_set_external_id": f"s{i % 200}", "ad_set_name": f"Set {i % 200}",
            "ad_external_id": f"a{i % 1000}", "ad_name": f"Ad {i % 1000}",
            "metric_date": f"2026-01-{1 + i // 1000:02d}", "spend": "10.50",
            "impressions": 1000, "clicks": 10, "conversions": "1", "currency": "USD"}


def ad_key(data: dict[str, Any]) -> str:
    return "|".join(str(data[k]) for k in ("metric_date", "campaign_external_id",
                                           "ad_set_external_id", "ad_external_id"))


STATES = ("none", "fresh", "stale")


@pytest.fixture(params=STATES)
def world(request, conn, tenants) -> dict[str, Any]:
    """Another tenant's larger batch in the stage; the tenant's records stored (a third of the
    batch's case numbers, a quarter of its plaintiffs, half its campaigns, ad sets and ads, as
    an earlier import left them); the batches under test staged (judgments, plaintiffs, a Meta
    export, each repeating some keys). Statistics: none (cleared), fresh (ANALYZE now), or
    stale (ANALYZE when the stage held only the other batch and the tenant had nothing)."""
    state = request.param
    tenant = tenants.user("plans").tenant_id
    other = tenants.user("other").tenant_id
    old = new_batch(conn, other, status="completed")
    conn.execute(
        "INSERT INTO import_staged_judgments (batch_id, tenant_id, row_number, natural_key, "
        "case_number, plaintiff_name, defendant_name, amount, filed_date) SELECT %s, %s, i, "
        "'OLD' || i, 'OLD-' || i, 'P', 'D', 1, date '2024-01-01' FROM generate_series(1, %s) i",
        (old, other, OTHER))
    conn.execute(
        "INSERT INTO import_staged_plaintiffs (batch_id, tenant_id, row_number, natural_key, "
        "case_number, name) SELECT %s, %s, i, 'OLD' || i, 'OLD-' || i, 'P' || i "
        "FROM generate_series(1, %s) i", (old, other, OTHER))
    conn.execute(
        "INSERT INTO import_staged_ad_metrics (batch_id, tenant_id, row_number, natural_key, "
        "campaign_external_id, metric_date, spend, grain) SELECT %s, %s, i, 'OLD' || i, "
        "'c' || (i %% 50), date '2026-01-01', 1, 'day' FROM generate_series(1, %s) i",
        (old, other, OTHER))
    store_dimensions(conn, other, OTHER_DIMENSIONS)
    if state == "stale":
        conn.execute("ANALYZE")
    store(conn, tenant)
    batches = {}
    for contract, make in (("judgments", judgment), ("plaintiffs", plaintiff)):
        batch_id = new_batch(conn, tenant, contract)
        rows = [make(i % (STAGED - 100)) for i in range(STAGED)]  # the last 100 repeat keys
        stage(conn, tenant, batch_id, contract, rows)
        batches[contract] = batch_id
    ad_batch = new_batch(conn, tenant, "ad_metrics", platform="meta")
    rows = [ad_row(i % (STAGED - 100)) for i in range(STAGED)]
    stage(conn, tenant, ad_batch, "ad_metrics", [{**r, "natural_key": ad_key(r)} for r in rows])
    batches["ad_metrics"] = ad_batch
    if state == "fresh":
        conn.execute("ANALYZE")
    elif state == "none":
        clear_statistics(conn)
    return {"tenant_id": tenant, "batches": batches, "state": state}


def store(conn, tenant) -> None:
    """What an earlier import of the tenant left in the production tables."""
    conn.execute(
        "INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name, amount,"
        " filed_date) SELECT %s, '2024-CV-' || lpad((i * 3)::text, 6, '0'), 'Stored LLC', 'D',"
        " 100, date '2023-01-01' FROM generate_series(0, %s - 1) i", (tenant, STORED))
    conn.execute(
        "INSERT INTO plaintiffs (tenant_id, name, address_line1, zip, source) SELECT %s,"
        " 'Plaintiff ' || i, i || ' Main St', '10001', 'manual' FROM generate_series(0, %s) i",
        (tenant, STORED // 2))
    conn.execute("INSERT INTO campaigns (tenant_id, platform, external_id, name) SELECT %s, "
                 "'meta', 'c' || i, 'Campaign ' || i FROM generate_series(0, 9) i", (tenant,))
    conn.execute("INSERT INTO ad_sets (tenant_id, platform, external_id, name, campaign_id) "
                 "SELECT %s, 'meta', 's' || i, 'Set ' || i, c.id FROM generate_series(0, 99) i "
                 "JOIN campaigns c ON c.tenant_id = %s AND c.external_id = 'c' || (i %% 10)",
                 (tenant, tenant))
    conn.execute("INSERT INTO ads (tenant_id, platform, external_id, name, ad_set_id) "
                 "SELECT %s, 'meta', 'a' || i, 'Ad ' || i, s.id FROM generate_series(0, 499) i "
                 "JOIN ad_sets s ON s.tenant_id = %s AND s.external_id = 's' || (i %% 100)",
                 (tenant, tenant))


def store_dimensions(conn, tenant, n: int) -> None:
    """Another tenant's campaigns, ad sets and ads (n each, one to one): what other tenants'
    imports leave in the dimension tables."""
    conn.execute("INSERT INTO campaigns (tenant_id, platform, external_id, name) SELECT %s, "
                 "'meta', 'oc' || i, 'Other ' || i FROM generate_series(1, %s) i", (tenant, n))
    conn.execute("INSERT INTO ad_sets (tenant_id, platform, external_id, name, campaign_id) "
                 "SELECT tenant_id, platform, 'os' || substr(external_id, 3), name, id "
                 "FROM campaigns WHERE tenant_id = %s", (tenant,))
    conn.execute("INSERT INTO ads (tenant_id, platform, external_id, name, ad_set_id) "
                 "SELECT tenant_id, platform, 'oa' || substr(external_id, 3), name, id "
                 "FROM ad_sets WHERE tenant_id = %s", (tenant,))


def clear_statistics(conn) -> None:
    for table in (*LARGE, "import_batches"):
        conn.execute("SELECT pg_clear_relation_stats('public', %s)", (table,))
        for column in conn.execute("SELECT attname FROM pg_attribute WHERE attrelid = "
                                   "%s::regclass AND attnum > 0 AND NOT attisdropped",
                                   (table,)).fetchall():
            conn.execute("SELECT pg_clear_attribute_stats('public', %s, %s, false)",
                         (table, column["attname"]))


# ── the statements, with the parameters the worker passes ───────────────────────────────────
def records_statements(world: dict[str, Any], contract: str) -> list[tuple[str, Any, dict]]:
    batch_id, tenant = world["batches"][contract], world["tenant_id"]
    keys = {"batch_id": batch_id, "tenant_id": tenant}
    run = {"run_id": uuid.uuid4(), "fence": 0}
    slice_ = {**keys, **run, "after": 0, "upto": promote.SLICE_ROWS, "source": "manual",
              "source_reference": None}
    rows = list(range(1, STAGED, 40))
    warn = {"code": "X", "message": "m"}
    out = [
        ("count_invalid", RQ["count_invalid"], keys),
        ("staged_rows_consistent", RQ["staged_rows_consistent"], {**keys, "last": STAGED}),
        ("forget_after", RQ["forget_after"], {**keys, "last": STAGED // 2}),
        ("forget_errors_after", RQ["forget_errors_after"], {**keys, "last": STAGED // 2}),
        ("advance_counter", RQ["advance_counter"], {**keys, **run, "previous": 0,
                                                    "last": STAGED}),
        ("repeats", RQ["repeats"], keys),
        ("flag_duplicates", promote.on_stage("flag_duplicates", contracts.get(contract)),
         {**keys, **warn, "rows": rows}),
        ("staging_complete", RQ["staging_complete"], {**keys, **run, "total": STAGED,
                                                      "invalid": 0, "duplicate": 100,
                                                      "parse_ms": 1}),
        ("begin_promotion", RQ["begin_promotion"], {**keys, **run}),
        ("slices_ahead", RQ["slices_ahead"], {**keys, **run}),
        ("forget_promoted", RQ["forget_promoted"], keys),
        ("advance_promotion", RQ["advance_promotion"], {**slice_, "inserted": 10}),
        ("finish_batch", RQ["finish_batch"], {**keys, "status": "completed", "inserted": 1,
                                              "updated": 1, "distinct": STAGED, "db_ms": 1,
                                              "finished_at": datetime.now(UTC)}),
    ]
    statements = promote.PROMOTIONS[contract]
    out += [(name, RQ[name], slice_) for name in (statements.insert, statements.upsert)]
    # the amends compare the slice's rows its insert did not write (docs/decisions/0490)
    out.append((statements.amends, RQ[statements.amends], {**slice_, "rows": rows}))
    out.append(("refuse_row", promote.on_stage("refuse_row", contracts.get(contract)),
                {**keys, "row": 7, "field": None, **warn}))
    if statements.links:
        out += [("link_plaintiffs", RQ["link_plaintiffs"], slice_),
                ("unlinked_plaintiffs", RQ["unlinked_plaintiffs"], {**slice_, **warn})]
    return out


def ad_statements(world: dict[str, Any]) -> list[tuple[str, Any, dict]]:
    keys = {"batch_id": world["batches"]["ad_metrics"], "tenant_id": world["tenant_id"]}
    group = {**keys, "client_id": None, "platform": "meta", "after": 0,
             "upto": ad_promote.GROUP_ROWS,
             "key_prefix": ad_promote.key_prefix(keys["tenant_id"], "meta", None)}
    notes = {"ad_set_code": "X", "ad_set_message": "m", "ad_code": "Y", "ad_message": "m",
             "ambiguous_code": "Z", "ambiguous_message": "m", "repeated_code": "R",
             "repeated_message": "m"}
    # Every statement the promotion runs per group, as ad_promote lists them (issue 20 added
    # name paths and periods), so a new one is planned here the day it is added.
    per_group = [(query, AQ[query], group) for _, queries in ad_promote.LEVELS
                 for query in queries]
    per_group += [(query, AQ[query], {**group, **notes}) for _, query in ad_promote.FACTS]
    return [
        ("repeats", RQ["repeats"], keys),
        ("flag_duplicates", promote.on_stage("flag_duplicates", ad_metrics.for_platform("meta")),
         {**keys, "code": "X", "message": "m", "rows": list(range(1, STAGED, 40))}),
        ("facts_to_prepare", AQ["facts_to_prepare"], keys),
        ("repeated_facts", AQ["repeated_facts"], keys),
        ("overflowing_facts", AQ["overflowing_facts"], keys),
        ("reject_rows", AQ["reject_rows"], {**keys, "field": None, "code": "X", "message": "m",
                                            "rows": list(range(1, STAGED, 40))}),
        ("slice_sums", AQ["slice_sums"], keys),
        ("merge_slices", AQ["merge_slices"], {
            **keys, "firsts": list(range(1, STAGED, 40)),
            **{name: [Decimal(1)] * (STAGED // 40) for name in ad_promote.SUMMED},
            "indicators": [None] * (STAGED // 40), "slices": [2] * (STAGED // 40),
            "aside": list(range(2, STAGED, 40))}),
        ("groups", AQ["groups"], {**keys, "group_rows": ad_promote.GROUP_ROWS}),
        *per_group,
        ("affected_dates", AQ["affected_dates"], keys),
    ]


def test_no_statement_reads_the_batch_or_a_table_once_per_row(conn, world):
    # Given a stage and tables whose statistics say nothing, describe them, or are stale

    # When each statement of each contract's staging and promotion is planned as the worker
    # runs it
    problems: dict[str, Any] = {}
    for contract in ("judgments", "plaintiffs", "ad_metrics"):
        statements = ad_statements(world) if contract == "ad_metrics" else \
            records_statements(world, contract)
        problems |= {f"{contract}: {name}": found for name, text, params in statements
                     if (found := quadratic(explain(conn, text, params)))}

    # Then none reads the stage or a production table once per row of another
    assert not problems, f"quadratic plans with {world['state']} statistics: {problems}"


@pytest.mark.parametrize("world", ["fresh"], indirect=True)
def test_the_check_catches_a_nested_loop_over_staged_rows(conn, world):
    # A join the planner may nest over the batch, planned with the nested loop forced: the
    # check must see it (else the test above could not fail).
    keys = {"batch_id": world["batches"]["judgments"], "tenant_id": world["tenant_id"]}
    conn.execute("SET enable_hashjoin = off")
    conn.execute("SET enable_mergejoin = off")
    plan = explain(conn, "SELECT count(*) FROM import_staged_judgments a "
                         "JOIN import_staged_judgments b "
                         "ON b.batch_id = a.batch_id AND b.case_number = a.case_number "
                         "AND b.row_number < a.row_number WHERE a.batch_id = %(batch_id)s "
                         "AND a.tenant_id = %(tenant_id)s", keys)
    assert quadratic(plan), orjson.dumps(plan).decode()
