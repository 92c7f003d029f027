"""Judgments and plaintiffs promotion in slices (worker/records/promote.py, docs/decisions/0180,
0181): each slice is its own short transaction, yet a reader of /v1/records/* (the gateway's
own SQL) sees a batch's rows all at once, when the batch completes; a takeover resumes after
the last slice, a retry removes what a failed try left, and whoever writes a row a failed
batch left makes it theirs."""

from __future__ import annotations

import hashlib
import uuid
from decimal import Decimal
from typing import Any

import orjson
import pytest

from gateway.records import service
from shared import contracts, db
from tests.support import staging
from worker import runs
from worker.ledger import apply
from worker.records import promote
from worker.records.stage import Target

SLICE = 50


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(promote, "SLICE_ROWS", SLICE)


def judgment(case: str, amount: str = "100.00") -> dict[str, Any]:
    return {"case_number": case, "plaintiff_name": "Acme Collections LLC",
            "defendant_name": "John Q. Public", "amount": amount, "filed_date": "2024-01-15",
            "court": "Supreme Court", "county": "Kings County"}


def plaintiff(name: str, case: str) -> dict[str, Any]:
    return {"name": name, "address_line1": "1 Main St", "zip": "10001", "city": "New York",
            "state": "NY", "phone": None, "email": None, "contact_name": None,
            "status": "active", "case_number": case}


def staged_batch(conn, tenant_id, contract: str, rows: list[dict[str, Any]]) -> Target:
    """A batch staged as the worker leaves it (its rows valid, duplicates flagged), with its
    run running: ready for promote.promote."""
    batch_id = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status) VALUES (%s, %s, '1', 'f.csv', %s, 10,"
        " 'file:///nowhere', 'manual', 'processing') RETURNING batch_id",
        (tenant_id, contract, hashlib.sha256(uuid.uuid4().bytes).hexdigest())).fetchone()["batch_id"]
    run_id = uuid.uuid4()
    conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, status, run_type, batch_id) "
                 "VALUES (%s, %s, 'running', 'records_import', %s)", (run_id, tenant_id, batch_id))
    staging.stage_rows(conn, contract, tenant_id, batch_id, rows)
    target = Target(batch_id, tenant_id, run_id, 0)
    counts = promote.finish_staging(conn, target, contracts.get(contract), len(rows), 1)
    assert counts.total == len(rows)
    return target


def run_promotion(conn, target: Target, contract: str, *, tick=lambda _done: None,
                  hold=lambda: None, side_by_side: str | None = None) -> dict[str, int]:
    """promote.promote as the worker calls it; ``side_by_side``: the database's URL, the
    slices then written by connections of their own at once (docs/decisions/0390)."""
    batch = conn.execute("SELECT * FROM import_batches WHERE batch_id = %s",
                         (target.batch_id,)).fetchone()
    counts = promote.Counts(batch["rows_total"], batch["rows_invalid"], batch["rows_duplicate"])
    connect = (lambda: db.connect(side_by_side, autocommit=True)) if side_by_side else None
    return promote.promote(conn, target, contracts.get(contract), batch, counts, stats={},
                           db_ms_before=0, hold=hold, tick=tick, connect=connect)


def reader_view(database_url: str, tenant_id) -> dict[str, Any]:
    """What GET /v1/records/judgments answers: the gateway's statement, on a connection of
    its own (another session, as the gateway is)."""
    params = {"tenant_id": tenant_id, "q_key": None, "q_name": None, "case_number": None,
              "county": None, "court": None, "filed_from": None, "filed_to": None,
              "amount_min": None, "amount_max": None, "batch_id": None, "after_at": None,
              "after_id": None, "limit": 1000, "offset": 0}
    with db.connect(database_url, autocommit=True) as other:
        rows = other.execute(service.Q["list_judgments"], params).fetchall()
    return {r["case_number"]: r["amount"] for r in rows}


def raw_count(conn, table: str, tenant_id) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table} WHERE tenant_id = %s",
                        (tenant_id,)).fetchone()["n"]


def stored(conn, tenant_id, case: str, amount: str) -> None:
    conn.execute("INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name,"
                 " amount, filed_date, court, county) VALUES (%s, %s, 'Acme Collections LLC',"
                 " 'John Q. Public', %s, '2024-01-15', 'Supreme Court', 'Kings County')",
                 (tenant_id, case, Decimal(amount)))


@pytest.mark.parametrize("side_by_side", [False, True], ids=["one", "side_by_side"])
def test_a_reader_sees_a_batch_all_at_once_while_its_slices_commit(conn, tenants, database_url,
                                                                   side_by_side):
    # Given stored judgments, one of which the file amends and one it repeats unchanged
    tenant = tenants.user().tenant_id
    stored(conn, tenant, "OLD-1", "100.00")
    stored(conn, tenant, "OLD-2", "100.00")
    rows = [judgment(f"NEW-{i}") for i in range(300)]
    rows[10] = judgment("OLD-1", "999.00")
    rows[20] = judgment("OLD-2", "100.00")
    rows.append(judgment("NEW-5"))  # a repeat within the file: the first row wins
    target = staged_batch(conn, tenant, "judgments", rows)
    before = reader_view(database_url, tenant)

    # When it is promoted, a reader looking after every slice
    seen, inserted_so_far = [], []

    def look(_done: float) -> None:
        seen.append(reader_view(database_url, tenant))
        inserted_so_far.append(raw_count(conn, "judgments", tenant))

    result = run_promotion(conn, target, "judgments", tick=look,
                           side_by_side=database_url if side_by_side else None)

    # Then the slices committed one by one (rows were written long before the end) ...
    if side_by_side:  # ticked each time the slices committed in order moved on
        assert 1 <= len(seen) <= 7 and inserted_so_far[-1] == 300
    else:
        assert len(seen) == 7 and inserted_so_far[0] < inserted_so_far[-1] == 300
    # ... yet every reader saw exactly what was there before: nothing new, the old amount
    assert all(view == before for view in seen)
    assert before == {"OLD-1": Decimal("100.00"), "OLD-2": Decimal("100.00")}
    # and after the flip, everything at once
    after = reader_view(database_url, tenant)
    assert len(after) == 300 and after["OLD-1"] == Decimal("999.00")
    assert (result["inserted"], result["updated"], result["unchanged"]) == (298, 1, 1)
    batch = conn.execute("SELECT status, rows_inserted, rows_updated, rows_unchanged, "
                         "rows_duplicate FROM import_batches WHERE batch_id = %s",
                         (target.batch_id,)).fetchone()
    assert batch == {"status": "completed", "rows_inserted": 298, "rows_updated": 1,
                     "rows_unchanged": 1, "rows_duplicate": 1}


def test_a_takeover_resumes_after_the_last_committed_slice(conn, tenants, database_url):
    # Given a promotion that stops after its third slice (the worker died there)
    tenant = tenants.user().tenant_id
    target = staged_batch(conn, tenant, "judgments", [judgment(f"C-{i}") for i in range(400)])

    def die(done: float) -> None:
        if done >= 3 * SLICE / 400:
            raise runs.LeaseLost("killed")

    with pytest.raises(runs.LeaseLost):
        run_promotion(conn, target, "judgments", tick=die)
    assert conn.execute("SELECT promoted_upto FROM import_batches WHERE batch_id = %s",
                        (target.batch_id,)).fetchone()["promoted_upto"] == 3 * SLICE
    assert reader_view(database_url, tenant) == {}

    # When a takeover promotes again
    result = run_promotion(conn, target, "judgments")

    # Then it resumed there: every row once, all counted as inserted, all seen now
    assert result["inserted"] == 400 and raw_count(conn, "judgments", tenant) == 400
    assert len(reader_view(database_url, tenant)) == 400


def test_side_by_side_slices_commit_in_order_and_a_takeover_resumes_after_them(
        conn, tenants, database_url):
    # Given slices written side by side (docs/decisions/0390), stopped once the third has
    # committed (the lease lost there): the slices under way then end as they may
    tenant = tenants.user().tenant_id
    target = staged_batch(conn, tenant, "judgments", [judgment(f"S-{i}") for i in range(1000)])
    positions: list[int] = []

    def die(done: float) -> None:
        positions.append(round(done * 1000))
        # the counter never passes a slice that is not committed, nor a row written past it
        # (both read in one snapshot: more slices commit meanwhile)
        seen = conn.execute(
            "SELECT b.promoted_upto, (SELECT count(*) FROM judgments j WHERE j.tenant_id = "
            "b.tenant_id) AS rows FROM import_batches b WHERE b.batch_id = %s",
            (target.batch_id,)).fetchone()
        assert seen["promoted_upto"] % SLICE == 0 and seen["rows"] == seen["promoted_upto"]
        if done >= 3 * SLICE / 1000:
            raise runs.LeaseLost("killed")

    with pytest.raises(runs.LeaseLost):
        run_promotion(conn, target, "judgments", tick=die, side_by_side=database_url)
    upto = conn.execute("SELECT promoted_upto FROM import_batches WHERE batch_id = %s",
                        (target.batch_id,)).fetchone()["promoted_upto"]
    assert positions == sorted(positions) and positions[-1] >= 3 * SLICE
    assert upto % SLICE == 0 and 3 * SLICE <= upto < 1000
    assert raw_count(conn, "judgments", tenant) == upto
    assert reader_view(database_url, tenant) == {}

    # When a takeover promotes again, side by side too
    result = run_promotion(conn, target, "judgments", side_by_side=database_url)

    # Then every row is there once, counted as inserted, and seen
    assert result["inserted"] == 1000 and raw_count(conn, "judgments", tenant) == 1000
    assert len(reader_view(database_url, tenant)) == 1000


def test_a_retried_batch_first_removes_what_its_failed_try_inserted(conn, tenants,
                                                                    database_url):
    # Given a batch that failed after two slices (its rows inserted, never seen)
    tenant = tenants.user().tenant_id
    target = staged_batch(conn, tenant, "judgments", [judgment(f"R-{i}") for i in range(200)])

    def die(done: float) -> None:
        if done >= 2 * SLICE / 200:
            raise runs.LeaseLost("killed")

    with pytest.raises(runs.LeaseLost):
        run_promotion(conn, target, "judgments", tick=die)
    conn.execute("UPDATE import_batches SET status = 'failed' WHERE batch_id = %s",
                 (target.batch_id,))
    assert raw_count(conn, "judgments", tenant) == 2 * SLICE
    assert reader_view(database_url, tenant) == {}

    # When it is retried: reopened, staged again, promoted
    with conn.transaction():
        conn.execute("SELECT set_config('ingest.reopen_batch', %s, true)", (str(target.batch_id),))
        conn.execute("UPDATE import_batches SET status = 'pending' WHERE batch_id = %s",
                     (target.batch_id,))
    conn.execute(promote.Q["start_batch"], target.keys)
    promote.finish_staging(conn, target, contracts.JUDGMENTS, 200, 1)
    result = run_promotion(conn, target, "judgments")

    # Then its rows are there once, counted as this try's inserts
    assert result["inserted"] == 200 and raw_count(conn, "judgments", tenant) == 200
    assert len(reader_view(database_url, tenant)) == 200


def test_an_event_or_a_later_batch_takes_over_what_a_failed_batch_left(conn, tenants,
                                                                       database_url):
    # Given rows a failed batch inserted and never showed
    tenant = tenants.user().tenant_id
    target = staged_batch(conn, tenant, "judgments", [judgment(f"F-{i}") for i in range(100)])

    def die(done: float) -> None:
        raise runs.LeaseLost("killed")

    with pytest.raises(runs.LeaseLost):
        run_promotion(conn, target, "judgments", tick=die)
    # (failed by the crash guard, which leaves them: gateway/operations/crash_guard.sql)
    conn.execute("UPDATE import_batches SET status = 'failed' WHERE batch_id = %s",
                 (target.batch_id,))

    # When an event writes one of them with the very same values
    with conn.transaction():
        conn.execute(apply.UPSERT_JUDGMENT, {
            "tenant_id": tenant, "data": orjson.dumps(judgment("F-1")).decode(),
            "source": "manual", "source_reference": "event", "batch_id": None})
    # and a later batch carries another one, unchanged
    later = staged_batch(conn, tenant, "judgments", [judgment("F-2"), judgment("L-1")])
    result = run_promotion(conn, later, "judgments")

    # Then both are seen, with their writers'; the rest stays unseen
    view = reader_view(database_url, tenant)
    assert set(view) == {"F-1", "F-2", "L-1"}
    assert (result["inserted"], result["updated"]) == (1, 1)


def test_a_batch_the_worker_fails_takes_its_unseen_rows_with_it(conn, tenants):
    # Given a completed batch, and one whose slices wrote rows before it was stopped (slices
    # ahead of staging's end, docs/decisions/0273, or a flip that failed)
    tenant = tenants.user().tenant_id
    done = staged_batch(conn, tenant, "judgments", [judgment("D-1")])
    run_promotion(conn, done, "judgments")
    target = staged_batch(conn, tenant, "judgments", [judgment(f"F-{i}") for i in range(100)])

    def die(done: float) -> None:
        raise runs.LeaseLost("killed")

    with pytest.raises(runs.LeaseLost):
        run_promotion(conn, target, "judgments", tick=die)
    assert raw_count(conn, "judgments", tenant) == 1 + SLICE

    # When the worker fails it, and something asks to forget the completed one's rows
    assert promote.fail(conn, target, "Interrupted.", "promote", {}, [], "unexpected_error")
    conn.execute(promote.Q["forget_promoted"], done.keys)

    # Then the failed batch's rows are gone and the completed batch keeps its own
    assert raw_count(conn, "judgments", tenant) == 1


@pytest.mark.parametrize("side_by_side", [False, True], ids=["one", "side_by_side"])
def test_plaintiffs_and_their_links_appear_with_their_batch(conn, tenants, database_url,
                                                            side_by_side):
    # (side by side asked, plaintiffs' slices are still written one at a time: two slices
    # may link one plaintiff to one judgment, docs/decisions/0390)
    # Given judgments on view, and a plaintiffs file naming them (and one unknown case)
    tenant = tenants.user().tenant_id
    for i in range(3):
        stored(conn, tenant, f"P-{i}", "100.00")
    # one of its plaintiffs is on view already, without a link
    conn.execute("INSERT INTO plaintiffs (tenant_id, name, address_line1, zip, source) VALUES "
                 "(%s, 'Plaintiff 0', '1 Main St', '10001', 'manual')", (tenant,))
    rows = [plaintiff(f"Plaintiff {i % 90}", f"P-{i % 3}") for i in range(120)]
    rows.append(plaintiff("Nobody Known", "UNKNOWN-1"))
    target = staged_batch(conn, tenant, "plaintiffs", rows)
    links: list[int] = []

    def look(_done: float) -> None:
        links.append(visible_links(database_url, tenant))

    result = run_promotion(conn, target, "plaintiffs", tick=look,
                           side_by_side=database_url if side_by_side else None)

    # Then no link was seen before the end (not even the stored plaintiff's new one), all
    # of them after: one per name, none for the unknown case number, which is warned
    assert links and set(links) == {0}
    assert visible_links(database_url, tenant) == 90
    assert (result["inserted"], result["updated"]) == (90, 1)
    codes = [r["code"] for r in conn.execute(
        "SELECT code FROM import_row_errors WHERE batch_id = %s AND row_number > 0",
        (target.batch_id,))]
    assert codes.count(promote.PLAINTIFF_JUDGMENT_NOT_FOUND.code) == 1


def visible_links(database_url: str, tenant_id) -> int:
    """Links as GET /v1/records/plaintiffs shows them (its case_numbers)."""
    params = {"tenant_id": tenant_id, "q_name": None, "status": None, "state": None,
              "batch_id": None, "case_number": None, "after_at": None, "after_id": None,
              "limit": 1000, "offset": 0}
    with db.connect(database_url, autocommit=True) as other:
        rows = other.execute(service.Q["list_plaintiffs"], params).fetchall()
    return sum(len(r["case_numbers"]) for r in rows)


@pytest.mark.parametrize("side_by_side", [False, True], ids=["one", "side_by_side"])
def test_a_row_the_database_refuses_is_that_rows_error_and_the_rest_is_promoted(
        conn, tenants, database_url, side_by_side):
    # Given staged rows the contract passed but the judgments table refuses: a negative
    # amount, a case number of 101 characters, one with no letter or digit to key on (one of
    # them amends a stored judgment, so the flip meets it), among good rows
    tenant = tenants.user().tenant_id
    stored(conn, tenant, "OLD-1", "100.00")
    rows = [judgment(f"OK-{i}") for i in range(120)]
    rows[7] = judgment("BAD-1", "-5.00")
    rows[70] = judgment("C" * 101)
    rows[90] = judgment("-#-")
    rows[100] = judgment("OLD-1", "-1.00")
    target = staged_batch(conn, tenant, "judgments", rows)

    # When it is promoted
    result = run_promotion(conn, target, "judgments",
                           side_by_side=database_url if side_by_side else None)

    # Then each refused row has its error (code, field), the rest is on view, the batch is
    # partial and counts them invalid
    errors = conn.execute("SELECT row_number, field, code, severity, raw IS NOT NULL AS raw "
                          "FROM import_row_errors WHERE batch_id = %s ORDER BY row_number",
                          (target.batch_id,)).fetchall()
    assert [(e["row_number"], e["field"], e["code"], e["severity"], e["raw"]) for e in errors] == [
        (8, "amount", "JUDGMENT_NOT_STORED", "critical", True),
        (71, "case_number", "JUDGMENT_NOT_STORED", "critical", True),
        (91, "case_number", "JUDGMENT_NOT_STORED", "critical", True),
        (101, "amount", "JUDGMENT_NOT_STORED", "critical", True)]
    view = reader_view(database_url, tenant)
    assert len(view) == 117 and view["OLD-1"] == Decimal("100.00")
    batch = conn.execute("SELECT status, rows_invalid, rows_valid, rows_inserted FROM "
                         "import_batches WHERE batch_id = %s", (target.batch_id,)).fetchone()
    assert batch == {"status": "partial", "rows_invalid": 4, "rows_valid": 116,
                     "rows_inserted": 116}
    assert result["partial"] == 1
    staged = conn.execute("SELECT count(*) AS n FROM import_staged_rows WHERE batch_id = %s",
                          (target.batch_id,)).fetchone()["n"]
    assert staged == 116


def test_refusals_past_the_error_budget_fail_the_batch_and_show_nothing(conn, tenants,
                                                                        database_url):
    tenant = tenants.user().tenant_id
    rows = [judgment(f"OK-{i}") if i % 5 else judgment(f"NEG-{i}", "-1.00") for i in range(60)]
    target = staged_batch(conn, tenant, "judgments", rows)

    with pytest.raises(promote.BatchRejected) as refused:
        run_promotion(conn, target, "judgments")

    assert refused.value.batch_code == promote.BUDGET_CODE
    assert reader_view(database_url, tenant) == {}


def test_a_chunk_staged_while_a_slice_is_promoted_ahead_does_not_wait_for_it(conn, tenants,
                                                                              database_url):
    # Given a batch still staging, and a slice promoted ahead (docs/decisions/0273) that has
    # written judgments of it and not committed yet: each row's foreign key check holds the
    # batch's row FOR KEY SHARE until the slice commits
    tenant = tenants.user().tenant_id
    batch_id = conn.execute(
        "INSERT INTO import_batches (tenant_id, contract, contract_version, file_name, file_hash,"
        " byte_size, upload_uri, source, status) VALUES (%s, 'judgments', '1', 'f.csv', %s, 10,"
        " 'file:///nowhere', 'manual', 'processing') RETURNING batch_id",
        (tenant, hashlib.sha256(uuid.uuid4().bytes).hexdigest())).fetchone()["batch_id"]
    run_id = uuid.uuid4()
    conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, status, run_type, batch_id) "
                 "VALUES (%s, %s, 'running', 'records_import', %s)", (run_id, tenant, batch_id))
    with db.connect(database_url) as slice_ahead:
        slice_ahead.execute(
            "INSERT INTO judgments (tenant_id, case_number, plaintiff_name, defendant_name,"
            " amount, filed_date, batch_id) VALUES (%s, 'A-1', 'P', 'D', 1, '2024-01-15', %s)",
            (tenant, batch_id))

        # When the next chunk's transaction moves the batch's counter meanwhile
        conn.execute("SET lock_timeout = '2s'")
        try:
            moved = conn.execute(promote.Q["advance_counter"], {
                "batch_id": batch_id, "tenant_id": tenant, "run_id": run_id, "fence": 0,
                "previous": 0, "last": 10}).fetchone()
        finally:
            conn.execute("RESET lock_timeout")
            slice_ahead.rollback()

    # Then it did not wait for the slice: an update of the batch's row that changes no key
    # column locks it FOR NO KEY UPDATE, which a foreign key's FOR KEY SHARE lets through
    # (migrations/0110, docs/decisions/0350)
    assert moved is not None and moved["last_staged_row"] == 10
