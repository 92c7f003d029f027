"""Applying the event ledger with real `ingest worker` processes over real Postgres.

Events are inserted straight into event_ledger in the shape the intake writer commits them
(gateway/events/, migrations/0018): pending, payload and its canonical SHA-256, first-seen now.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import urllib.request
from decimal import Decimal

from cli.embedded import free_port
from tests.support import stack
from tests.support.stack import wait_until

FAST = {"LEDGER_APPLY_BACKOFF_BASE_S": "0.01", "LEDGER_APPLY_BACKOFF_MAX_S": "0.05",
        "LEDGER_APPLY_POLL_S": "0.1"}


def judgment(case: str, amount: str = "1000.00", **extra) -> dict:
    return {"File #": case, "Plaintiff": "Acme Collections LLC", "Defendant": "John Q. Public",
            "Amount": amount, "Entry Date": "2024-01-15", **extra}


def put(conn, tenant_id, event_id: str, payload, *, type: str = "judgment.upserted",
        sequence: int | None = None, emitted: str | None = None, source: str = "jbi") -> int:
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return conn.execute(
        "INSERT INTO event_ledger (tenant_id, source_system, source_event_id, source_sequence, "
        "source_emitted_at, type, payload, payload_sha256) VALUES (%s, %s, %s, %s, %s, %s, "
        "%s::jsonb, %s) RETURNING ledger_id",
        (tenant_id, source, event_id, sequence, emitted, type, canonical,
         hashlib.sha256(canonical.encode()).hexdigest())).fetchone()["ledger_id"]


def event(conn, ledger_id: int) -> dict:
    return conn.execute("SELECT * FROM event_ledger WHERE ledger_id = %s", (ledger_id,)).fetchone()


def judgments(conn, tenant_id) -> list[dict]:
    return conn.execute("SELECT case_number, amount, updated_at, source, source_reference "
                        "FROM judgments WHERE tenant_id = %s ORDER BY case_number",
                        (tenant_id,)).fetchall()


def drain(stack_env, out_dir, env: dict | None = None, name: str = "worker") -> stack.Process:
    worker = stack.start_worker({**stack_env, **FAST, **(env or {})}, out_dir, name=name,
                                once=True)
    assert worker.proc.wait(120) == 0, worker.logs()[-4000:]
    return worker


def cli(stack_env, *args: str) -> subprocess.CompletedProcess:
    return stack.ingest(list(args), stack_env, timeout=60)


def test_event_is_applied_once_and_again_is_a_no_op(tenants, conn, stack_env, out_dir):
    # Given a judgment event pending in the ledger
    user = tenants.user()
    first = put(conn, user.tenant_id, "e-1", judgment("2024-CV-000001", "1,250.00"))

    # When a worker drains the ledger
    worker = drain(stack_env, out_dir)

    # Then the judgment exists once, through the contract's normalisers, and the event is done
    rows = judgments(conn, user.tenant_id)
    assert [(r["case_number"], r["amount"]) for r in rows] == [("2024-CV-000001",
                                                                 Decimal("1250.00"))]
    assert rows[0]["source"] == "jbi" and rows[0]["source_reference"] == "event jbi/e-1"
    row = event(conn, first)
    assert (row["process_state"], row["superseded"], row["apply_attempt_count"]) == (
        "processed", False, 1)
    assert row["entity_key"] == "2024CV000001"
    assert "ledger applier started" in worker.logs()

    # When the same payload arrives as another event, and a worker drains again
    second = put(conn, user.tenant_id, "e-2", judgment("2024-CV-000001", "1,250.00"))
    drain(stack_env, out_dir, name="worker-2")

    # Then nothing was written again: same row, same updated_at; the first event untouched
    again = judgments(conn, user.tenant_id)
    assert again == rows
    assert event(conn, second)["process_state"] == "processed"
    assert event(conn, first)["apply_attempt_count"] == 1


def test_reverse_sequence_order_keeps_the_newest(tenants, conn, stack_env, out_dir):
    # Given three versions of one judgment delivered newest first
    user = tenants.user()
    ids = {seq: put(conn, user.tenant_id, f"s-{seq}", judgment("2024-CV-7", f"{seq}00.00"),
                    sequence=seq) for seq in (3, 2, 1)}

    # When they are applied
    drain(stack_env, out_dir)

    # Then sequence 3's amount stands and the older two are processed as superseded
    assert [r["amount"] for r in judgments(conn, user.tenant_id)] == [Decimal("300.00")]
    states = {seq: (event(conn, i)["process_state"], event(conn, i)["superseded"])
              for seq, i in ids.items()}
    assert states == {3: ("processed", False), 2: ("processed", True), 1: ("processed", True)}

    # And a newer one still overwrites
    put(conn, user.tenant_id, "s-4", judgment("2024-CV-7", "400.00"), sequence=4)
    drain(stack_env, out_dir, name="worker-2")
    assert [r["amount"] for r in judgments(conn, user.tenant_id)] == [Decimal("400.00")]


def test_emitted_time_orders_events_without_sequence(tenants, conn, stack_env, out_dir):
    user = tenants.user()
    put(conn, user.tenant_id, "late", judgment("CV-9", "9.00"), emitted="2024-05-02T00:00:00Z")
    old = put(conn, user.tenant_id, "early", judgment("CV-9", "1.00"),
              emitted="2024-05-01T00:00:00Z")
    drain(stack_env, out_dir)
    assert [r["amount"] for r in judgments(conn, user.tenant_id)] == [Decimal("9.00")]
    assert event(conn, old)["superseded"] is True


def test_invalid_and_unknown_events_dead_letter_at_once(tenants, conn, stack_env, out_dir):
    user = tenants.user()
    bad = put(conn, user.tenant_id, "bad", judgment("CV-1", "not-money"))
    unknown = put(conn, user.tenant_id, "u", {"x": 1}, type="invoice.paid")
    metric = put(conn, user.tenant_id, "m", {"date": "2024-01-01"}, type="ad_metric.daily")
    drain(stack_env, out_dir)
    row = event(conn, bad)
    assert (row["process_state"], row["apply_attempt_count"]) == ("dead_letter", 1)
    assert "JUDGMENT_AMOUNT" in row["process_error"]
    row = event(conn, unknown)
    assert row["process_state"] == "dead_letter"
    assert row["process_error"].startswith("unknown type")
    row = event(conn, metric)  # an ad metric that names no platform
    assert row["process_state"] == "dead_letter"
    assert row["process_error"].startswith("payload.platform must be one of meta, google, tiktok")
    assert judgments(conn, user.tenant_id) == []


POISON_TRIGGER = """
CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.case_number = 'POISON-1' THEN RAISE EXCEPTION 'downstream refused %', NEW.case_number;
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER poison BEFORE INSERT OR UPDATE ON judgments FOR EACH ROW EXECUTE FUNCTION poison();
"""


def test_poison_event_dead_letters_after_its_attempts_and_replays_after_a_fix(
        tenants, conn, stack_env, out_dir):
    # Given an event whose apply fails every time (the database refuses it), and a good one
    user = tenants.user()
    conn.execute(POISON_TRIGGER)
    poison = put(conn, user.tenant_id, "p", judgment("POISON-1"))
    good = put(conn, user.tenant_id, "g", judgment("CV-GOOD"))

    # When a worker with 3 attempts drains the ledger
    drain(stack_env, out_dir, {"LEDGER_APPLY_MAX_ATTEMPTS": "3"})

    # Then the poison event is a dead letter after exactly 3 attempts; the good one applied
    row = event(conn, poison)
    assert (row["process_state"], row["apply_attempt_count"]) == ("dead_letter", 3)
    assert "downstream refused" in row["process_error"]
    assert event(conn, good)["process_state"] == "processed"

    # When the cause is fixed and an operator replays it from the CLI
    conn.execute("DROP TRIGGER poison ON judgments")
    listed = cli(stack_env, "events", "list", "--state", "dead_letter", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [e["ledger_id"] for e in json.loads(listed.stdout)["events"]] == [poison]
    shown = cli(stack_env, "events", "show", str(poison), "--json")
    assert json.loads(shown.stdout)["error"] == row["process_error"]
    replayed = cli(stack_env, "events", "replay", "--id", str(poison), "--actor", "ops-anna")
    assert replayed.returncode == 0, replayed.stderr
    replayed = event(conn, poison)  # a fresh budget; the count itself never goes back
    assert replayed["apply_attempt_count"] - replayed["apply_attempt_base"] == 0
    drain(stack_env, out_dir, {"LEDGER_APPLY_MAX_ATTEMPTS": "3"}, name="worker-2")

    # Then it is processed, and the replay is on record with who did it
    assert event(conn, poison)["process_state"] == "processed"
    assert [r["case_number"] for r in judgments(conn, user.tenant_id)] == ["CV-GOOD",
                                                                          "POISON-1"]
    replay = conn.execute("SELECT * FROM event_replays WHERE tenant_id = %s",
                          (user.tenant_id,)).fetchall()
    assert [(r["actor"], r["ledger_ids"], r["event_count"]) for r in replay] == [
        ("cli:ops-anna", [poison], 1)]


def test_one_poison_event_in_a_batch_dead_letters_only_itself(tenants, conn, stack_env,
                                                               out_dir):
    # Given 41 events of one tenant, claimed as one batch, the 21st refused by the database
    user = tenants.user()
    conn.execute(POISON_TRIGGER)
    ids = [put(conn, user.tenant_id, f"b-{i}", judgment("POISON-1" if i == 20 else f"CV-{i}"))
           for i in range(41)]

    # When a worker with 3 attempts drains the ledger
    worker = drain(stack_env, out_dir, {"LEDGER_APPLY_MAX_ATTEMPTS": "3",
                                        "LEDGER_APPLY_BATCH": "100"})

    # Then the batch was split down to the poison event, which alone used its 3 attempts; every
    # other event was applied at its first attempt
    rows = {r["ledger_id"]: r for r in conn.execute(
        "SELECT ledger_id, process_state, apply_attempt_count FROM event_ledger").fetchall()}
    assert (rows[ids[20]]["process_state"], rows[ids[20]]["apply_attempt_count"]) == (
        "dead_letter", 3)
    others = [rows[i] for i in ids if i != ids[20]]
    assert {(r["process_state"], r["apply_attempt_count"]) for r in others} == {("processed", 1)}
    assert len(judgments(conn, user.tenant_id)) == 40
    assert "splitting it" in worker.logs()


def test_worker_killed_mid_apply_applies_the_event_exactly_once(
        tenants, conn, stack_env, out_dir, tmp_path):
    # Given a worker held inside the apply transaction of an event, metrics on
    user = tenants.user()
    ledger_id = put(conn, user.tenant_id, "k", judgment("CV-KILL", "5.00"))
    pause = tmp_path / "hold"
    pause.touch()
    port = free_port()
    worker = stack.start_worker({**stack_env, **FAST, "WORKER_PAUSE_AT_STAGE": "ledger_apply",
                                 "WORKER_PAUSE_FILE": str(pause), "LEDGER_APPLY_LEASE_S": "1",
                                 "LEDGER_APPLY_REPORT_S": "0.2",
                                 "WORKER_METRICS_PORT": str(port)}, out_dir)
    stack.wait_for_log(worker, "ledger apply paused")
    # The judgment is written but not committed; the rehydration figures are on the port
    assert judgments(conn, user.tenant_id) == []
    assert '"ledger applier started","pending":1,' in worker.logs()  # the start-up report
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "ingest_ledger_pending_events 1.0" in text
    lag = [line for line in text.splitlines()
           if line.startswith("ingest_ledger_apply_lag_seconds ")]
    assert lag and float(lag[0].split()[1]) >= 0

    # When it is SIGKILLed there
    worker.signal(signal.SIGKILL)
    worker.proc.wait(30)
    row = event(conn, ledger_id)
    assert (row["process_state"], row["apply_attempt_count"]) == ("pending", 1)

    # Then another worker applies it once its lease ends, and it is applied exactly once
    pause.unlink()
    wait_until(lambda: conn.execute("SELECT next_apply_at <= now() AS due FROM event_ledger "
                                    "WHERE ledger_id = %s", (ledger_id,)).fetchone()["due"],
               timeout=30, message="lease ended")
    drain(stack_env, out_dir, name="worker-2")
    row = event(conn, ledger_id)
    assert (row["process_state"], row["apply_attempt_count"]) == ("processed", 2)
    assert [(r["case_number"], r["amount"]) for r in judgments(conn, user.tenant_id)] == [
        ("CV-KILL", Decimal("5.00"))]


def test_one_tenants_backlog_does_not_hold_back_another_tenants_events(
        tenants, conn, stack_env, out_dir):
    # Given 400 pending events of one tenant (a producer's flood), and then 5 of another
    flood = tenants.user(tenant="flood").tenant_id
    quiet = tenants.user(tenant="quiet").tenant_id
    conn.execute(
        "INSERT INTO event_ledger (tenant_id, source_system, source_event_id, type, payload, "
        "payload_sha256) SELECT %s, 'jbi', 'f-' || g, 'judgment.upserted', "
        "jsonb_build_object('File #', 'F-' || g, 'Plaintiff', 'Acme Collections LLC', "
        "'Defendant', 'John Q. Public', 'Amount', '10.00', 'Entry Date', '2024-01-15'), "
        "md5(g::text) || md5(g::text) FROM generate_series(1, 400) g", (flood,))
    mine = [put(conn, quiet, f"q-{i}", judgment(f"Q-{i}")) for i in range(5)]

    # When one worker applies them, 20 events a claim
    drain(stack_env, out_dir, {"LEDGER_APPLY_BATCH": "20"})

    # Then the second tenant's events were applied in the first claims, not after the flood
    last_mine = max(event(conn, i)["processed_at"] for i in mine)
    ahead = conn.execute("SELECT count(*) AS n FROM event_ledger WHERE tenant_id = %s AND "
                         "processed_at < %s", (flood, last_mine)).fetchone()["n"]
    assert ahead < 40, f"{ahead} of the flood's events were applied before the quiet tenant's"
    # and everything was applied, each once
    assert len(judgments(conn, quiet)) == 5 and len(judgments(conn, flood)) == 400
    assert conn.execute("SELECT count(*) AS n FROM event_ledger WHERE process_state <> "
                        "'processed' OR apply_attempt_count <> 1").fetchone()["n"] == 0


def meta_row(spend: str, **extra) -> dict:
    """One row of Meta's daily export, by its own column names."""
    return {"platform": "meta", "Campaign name": "Spring sale", "Campaign ID": "120200001",
            "Ad set name": "Lookalikes", "Ad set ID": "120200002", "Ad name": "Blue shoes",
            "Ad ID": "120200003", "Day": "2024-03-01", "Amount spent (USD)": spend,
            "Impressions": "1,200", "Clicks (all)": "34", "Results": "2", **extra}


def facts(conn, tenant_id) -> list[dict]:
    return conn.execute(
        "SELECT m.platform, m.client_id, m.metric_date::text AS day, m.spend, m.impressions, "
        "m.currency, c.external_id AS campaign, s.external_id AS ad_set, a.external_id AS ad "
        "FROM daily_metrics m JOIN campaigns c ON c.id = m.campaign_id "
        "LEFT JOIN ad_sets s ON s.id = m.ad_set_id LEFT JOIN ads a ON a.id = m.ad_id "
        "WHERE m.tenant_id = %s ORDER BY m.platform, day", (tenant_id,)).fetchall()


def test_ad_metric_events_apply_through_their_platforms_contract(tenants, conn, stack_env,
                                                                 out_dir):
    user = tenants.user()
    client = conn.execute("INSERT INTO ad_clients (tenant_id, name) VALUES (%s, 'Acme Shoes') "
                          "RETURNING client_id", (user.tenant_id,)).fetchone()["client_id"]
    other_tenant = tenants.user(tenant="globex").tenant_id
    theirs = conn.execute("INSERT INTO ad_clients (tenant_id, name) VALUES (%s, 'Globex') "
                          "RETURNING client_id", (other_tenant,)).fetchone()["client_id"]
    # Given a Meta row for a client (its export's column names), the same day again with a
    # newer sequence and more spend, and an older one delivered last
    first = put(conn, user.tenant_id, "m-1", meta_row("12.50", client_id=str(client)),
                type="ad_metric.daily", source="meta-sync", sequence=1)
    newer = put(conn, user.tenant_id, "m-3", meta_row("20.00", client_id=str(client)),
                type="ad_metric.daily", source="meta-sync", sequence=3)
    older = put(conn, user.tenant_id, "m-2", meta_row("15.00", client_id=str(client)),
                type="ad_metric.daily", source="meta-sync", sequence=2)
    # a Google row by field names, without a client, naming an ad group nothing created
    google = put(conn, user.tenant_id, "g-1", {
        "platform": "google", "campaign_external_id": "987", "campaign_name": "Brand",
        "ad_set_external_id": "555", "metric_date": "2024-03-02", "spend": "3.10",
        "currency": "EUR", "impressions": "40"}, type="ad_metric.daily", source="gads")
    # and rows that can never apply: another tenant's client, a client id that is no UUID, a
    # spend that is not money
    foreign = put(conn, user.tenant_id, "x-1", meta_row("1.00", client_id=str(theirs)),
                  type="ad_metric.daily", source="meta-sync")
    garbled = put(conn, user.tenant_id, "x-2", meta_row("1.00", client_id="acme"),
                  type="ad_metric.daily", source="meta-sync")
    bad_spend = put(conn, user.tenant_id, "x-3", meta_row("lots"), type="ad_metric.daily",
                    source="meta-sync")

    # When a worker applies the ledger
    worker = drain(stack_env, out_dir)

    # Then the newest Meta figures stand, on the client's campaign, ad set and ad; the two
    # older versions, applied in the same batch as the newest, wrote nothing (ADR 0281)
    assert [(event(conn, i)["process_state"], event(conn, i)["superseded"])
            for i in (first, newer, older, google)] == [
        ("processed", True), ("processed", False), ("processed", True), ("processed", False)]
    assert facts(conn, user.tenant_id) == [
        {"platform": "google", "client_id": None, "day": "2024-03-02", "spend": Decimal("3.1000"),
         "impressions": 40, "currency": "EUR", "campaign": "987", "ad_set": None, "ad": None},
        {"platform": "meta", "client_id": client, "day": "2024-03-01",
         "spend": Decimal("20.0000"), "impressions": 1200, "currency": "USD",
         "campaign": "120200001", "ad_set": "120200002", "ad": "120200003"}]
    # and the Google fact was kept without its unknown ad group, which the log names
    assert "AD_METRIC_AD_SET_NOT_FOUND" in worker.logs()
    # while the rows that cannot apply are dead letters that say why, and wrote nothing
    errors = {i: event(conn, i) for i in (foreign, garbled, bad_spend)}
    assert all(e["process_state"] == "dead_letter" for e in errors.values())
    assert "names no advertiser client of your tenant" in errors[foreign]["process_error"]
    assert "client_id must be the id of one of your tenant's" in errors[garbled]["process_error"]
    assert errors[bad_spend]["process_error"].startswith("AD_METRIC_SPEND_INVALID")
    assert facts(conn, other_tenant) == []
    assert conn.execute("SELECT count(*) AS n FROM campaigns WHERE tenant_id = %s",
                        (user.tenant_id,)).fetchone()["n"] == 2


def test_rows_made_unreadable_on_purpose_are_dead_lettered_and_the_rest_is_applied(
        tenants, conn, stack_env, out_dir):
    # Given, among good events of two tenants, two rows Postgres stores but Python cannot read
    # back (as intake let through on main): a time in year 0 UTC, a 5,000-digit number
    acme, globex = tenants.user(tenant="acme"), tenants.user(tenant="globex")
    before = [put(conn, acme.tenant_id, f"a-{i}", judgment(f"A-{i}")) for i in range(3)]
    year_zero = put(conn, acme.tenant_id, "t0", judgment("A-T0"),
                    emitted="0001-01-01T00:00:00+14:00")
    huge = put(conn, acme.tenant_id, "n0", judgment("A-N0"))
    conn.execute("UPDATE event_ledger SET payload = jsonb_set(payload, '{Amount}', "
                 "repeat('9', 5000)::jsonb) WHERE ledger_id = %s", (huge,))
    after = [put(conn, acme.tenant_id, f"b-{i}", judgment(f"B-{i}")) for i in range(3)]
    theirs = [put(conn, globex.tenant_id, f"g-{i}", judgment(f"G-{i}")) for i in range(3)]

    # When one worker drains the ledger, all of it in one claim
    drain(stack_env, out_dir, {"LEDGER_APPLY_MAX_ATTEMPTS": "3"})

    # Then each unreadable row is a dead letter after one attempt, naming the column and not
    # its value; every other event of both tenants was applied, once
    for ledger_id, column in ((year_zero, "source_emitted_at"), (huge, "payload")):
        row = conn.execute("SELECT process_state, apply_attempt_count, process_error "
                           "FROM event_ledger WHERE ledger_id = %s", (ledger_id,)).fetchone()
        assert (row["process_state"], row["apply_attempt_count"]) == ("dead_letter", 1)
        assert f"cannot be read back: {column}" in row["process_error"]
        assert "9999999" not in row["process_error"] and "BC" not in row["process_error"]
    states = {i: event(conn, i) for i in (*before, *after, *theirs)}
    assert {(e["process_state"], e["apply_attempt_count"]) for e in states.values()} == {
        ("processed", 1)}
    assert len(judgments(conn, acme.tenant_id)) == 6 and len(judgments(conn, globex.tenant_id)) == 3

    # And the listings still answer: the CLI shows the stored time as Postgres writes it
    listed = cli(stack_env, "events", "list", "--state", "dead_letter", "--json")
    assert listed.returncode == 0, listed.stderr
    shown = {e["ledger_id"]: e for e in json.loads(listed.stdout)["events"]}
    assert set(shown) == {year_zero, huge}
    assert shown[year_zero]["source_emitted_at"].endswith("BC")
    detail = cli(stack_env, "events", "show", str(huge), "--json")
    assert detail.returncode == 0, detail.stderr
    assert json.loads(detail.stdout)["payload_readable"] is False

    # When an operator corrects the time of the one and the payload of the other from the
    # CLI, as each dead letter's error says, on the state they saw
    assert "correct its source_emitted_at (edit it" in shown[year_zero]["error"]
    assert "correct its payload (edit it" in shown[huge]["error"]
    timed = cli(stack_env, "events", "edit", str(year_zero), "--emitted-at",
                "2024-01-01T00:00:00Z", "--if-state", "dead_letter",
                "--reason", "clock bug upstream", "--actor", "ops-anna")
    assert timed.returncode == 0, timed.stderr
    fixed = cli(stack_env, "events", "edit", str(huge), "--payload",
                json.dumps(judgment("A-N0", "99.00")), "--reason", "amount garbled",
                "--actor", "ops-anna", "--if-version", str(shown[huge]["version"]))
    assert fixed.returncode == 0, fixed.stderr
    # (the same command again is the same action, not a second one)
    again = cli(stack_env, "events", "edit", str(huge), "--payload",
                json.dumps(judgment("A-N0", "99.00")), "--reason", "amount garbled",
                "--actor", "ops-anna", "--if-version", str(shown[huge]["version"]))
    assert again.returncode == 0 and again.stdout == fixed.stdout, again.stderr
    drain(stack_env, out_dir, name="worker-2")

    # Then both corrected events applied, and both corrections are on the record
    settled = conn.execute("SELECT ledger_id, process_state, source_emitted_at FROM "
                           "event_ledger WHERE ledger_id IN (%s, %s)",
                           (year_zero, huge)).fetchall()
    assert {r["ledger_id"]: r["process_state"] for r in settled} == {
        year_zero: "processed", huge: "processed"}
    assert Decimal("99.00") in [r["amount"] for r in judgments(conn, acme.tenant_id)]
    assert len(judgments(conn, acme.tenant_id)) == 8
    actions = conn.execute("SELECT ledger_id, action, actor, reason, previous_state FROM "
                           "event_actions ORDER BY action_id").fetchall()
    assert [tuple(a.values()) for a in actions] == [
        (year_zero, "edit", "cli:ops-anna", "clock bug upstream", "dead_letter"),
        (huge, "edit", "cli:ops-anna", "amount garbled", "dead_letter")]


def test_later_in_the_batch_wins_when_nothing_else_orders_two_events(gateway, tenants, conn,
                                                                    stack_env, out_dir):
    # Given one batch with two versions of a case, ids that sort against the array order
    admin = tenants.user()
    with gateway.client(admin.token) as c:
        key = c.post("/v1/api-keys", json={"name": "crm"}).json()["key"]
    batch = [{"source_system": "crm", "source_event_id": eid, "type": "judgment.upserted",
              "payload": judgment("2024-CV-ORDER", amount)}
             for eid, amount in (("z-first", "1.00"), ("a-second", "2.00"))]
    with gateway.client() as c:
        assert c.post("/v1/events", json=batch, headers={"X-Api-Key": key}).status_code == 202

    # When a worker applies them
    drain(stack_env, out_dir)

    # Then the later one in the array stands
    assert [r["amount"] for r in judgments(conn, admin.tenant_id)] == [Decimal("2.00")]
