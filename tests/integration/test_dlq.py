"""Dead letters (gateway/operations/dlq.py) against real moto SQS and Postgres: the mover archives SQS's dead
letters into Postgres, and list, show, redrive and purge work on that table, through the service,
the operators' API (/v1/admin/dlq), a tenant admin's API (/v1/dead-letters) and `ingest dlq`."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator

import orjson
import pytest

from gateway.operations import dlq, reopen
from shared import errors, objectstore
from shared.queue import DLQ_REASON
from tests.support import ops, stack, submit
from tests.support.stack import wait_until
from tests.support.tcpproxy import TcpProxy

OPERATOR = reopen.Actor("cli:test-operator")


@pytest.fixture
def store_root(stack_env):
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


@pytest.fixture
def dead(queues) -> dlq.DeadLetterQueue:
    return dlq.DeadLetterQueue(queues.client, queues.dlq_url)


def _run(conn, run_id) -> dict:
    return submit.run_row(conn, run_id)


def _rows(conn) -> list[dict]:
    return conn.execute("SELECT * FROM dead_letters ORDER BY message_id").fetchall()


def _state(conn) -> dict:
    """Everything a DLQ operation could change in the database."""
    return {table: conn.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
            for table in ("dead_letters", "ingestion_runs", "run_actions", "job_outbox")}


def _receive_counts(queues) -> dict[str, int]:
    """Receive (and delete) every message in the DLQ; their ApproximateReceiveCount by id."""
    return {m["MessageId"]: int(m["Attributes"]["ApproximateReceiveCount"])
            for m in ops.drain(queues, queues.dlq_url)}


# ── the mover ───────────────────────────────────────────────────────────────────────────────
def test_the_mover_archives_each_message_once_and_listing_leaves_sqs_alone(
        conn, queues, dead, tenants, store_root):
    # Given two jobs and a garbage message in the SQS dead-letter queue
    user = tenants.user()
    jobs = [ops.make_run(conn, store_root, user) for _ in range(2)]
    ids = [ops.to_dlq(queues, j.body) for j in jobs] + [ops.to_dlq(queues, "not a job")]

    # When the mover runs twice
    first = dlq.archive(dead, conn)
    second = dlq.archive(dead, conn)

    # Then each message moved once into the table, and SQS is empty
    assert (first.moved, second.moved) == (3, 0)
    assert {r["message_id"] for r in _rows(conn)} == set(ids)
    assert ops.depth(queues, queues.dlq_url) == 0
    # When the table is listed twice, Then both listings are the same: nothing was received
    listings = [dlq.list_letters(conn) for _ in range(2)]
    strip = [[{k: v for k, v in i.items() if k != "age_s"} for i in li["items"]]
             for li in listings]
    assert strip[0] == strip[1] and listings[0]["total"] == 3
    assert {i["receive_count"] for i in listings[1]["items"]} == {1}
    assert ops.depth(queues, queues.dlq_url) == 0
    # and the garbage message is listed too, with its parse error and no tenant
    [garbage] = [i for i in listings[0]["items"] if i["message_id"] == ids[2]]
    assert garbage["tenant_id"] is None and garbage["run_id"] is None
    assert garbage["reason"].startswith("Not a valid ingest job: message body is not JSON")
    assert {i["tenant_id"] for i in listings[0]["items"] if i["run_id"]} == {user.tenant_id}


def test_a_message_whose_delete_failed_is_archived_once(conn, queues, dead, tenants, store_root):
    # Given a dead letter the mover inserted but could not delete (it came back in SQS)
    job = ops.make_run(conn, store_root, tenants.user())
    message_id = ops.to_dlq(queues, job.body)
    [raw] = queues.client.receive_message(QueueUrl=queues.dlq_url, AttributeNames=["All"],
                                          MessageAttributeNames=["All"],
                                          WaitTimeSeconds=1)["Messages"]
    conn.execute(dlq.Q["archive_dead_letter"], dlq.archive_row(raw, 65536))
    queues.client.change_message_visibility(QueueUrl=queues.dlq_url,
                                            ReceiptHandle=raw["ReceiptHandle"],
                                            VisibilityTimeout=0)

    # When the mover runs
    report = dlq.archive(dead, conn)

    # Then it finds the row, only deletes the message, and keeps one row
    assert (report.moved, report.again) == (0, 1)
    [row] = _rows(conn)
    assert row["message_id"] == message_id and row["receive_count"] == 2
    assert row["last_seen_at"] > row["first_seen_at"]
    assert ops.depth(queues, queues.dlq_url) == 0


def test_bodies_are_capped_and_json_that_is_no_job_keeps_its_ids(conn, queues, dead, tenants):
    # Given a huge garbage body, and a JSON body naming a tenant and run but missing fields
    user = tenants.user()
    big = ops.to_dlq(queues, "x" * 5000)
    run_id = uuid.uuid4()
    named = ops.to_dlq(queues, orjson.dumps({"tenant_id": str(user.tenant_id),
                                             "run_id": str(run_id)}).decode())

    dlq.archive(dead, conn, body_max_bytes=1024)

    rows = {r["message_id"]: r for r in _rows(conn)}
    assert rows[big]["body_bytes"] == 5000 and rows[big]["body_truncated"]
    assert len(rows[big]["body"]) == 1024 and rows[big]["tenant_id"] is None
    assert rows[named]["tenant_id"] == user.tenant_id and rows[named]["run_id"] == run_id
    assert "invalid job field" in rows[named]["parse_error"]


# ── list and show ───────────────────────────────────────────────────────────────────────────
def test_list_says_why_each_message_is_there(conn, queues, dead, tenants, store_root):
    # Given a message the worker dead-lettered with a reason, one that exhausted its receives
    # while S3 was down (its run failed later), and one that is not a job at all
    user = tenants.user()
    refused = ops.make_run(conn, store_root, user, status="queued")
    ops.to_dlq(queues, refused.body, {DLQ_REASON: "run does not exist in tenant x."})
    exhausted = ops.make_run(conn, store_root, user, status="running")
    conn.execute("UPDATE ingestion_runs SET delivery_count = 3, stats = "
                 "'{\"last_retry_error\": \"read: EndpointConnectionError (transient)\"}' "
                 "WHERE run_id = %s", (exhausted.run_id,))
    ops.set_status(conn, exhausted.run_id, "failed",
                   error="Interrupted: the worker stopped responding (no heartbeat); retry.")
    ops.to_dlq(queues, exhausted.body)
    ops.to_dlq(queues, "not a job")
    dlq.archive(dead, conn)

    # When the dead letters are listed
    items = {i["run_id"]: i for i in dlq.list_letters(conn)["items"]}

    # Then each has its reason, receive count, run status and age
    assert items[refused.run_id]["reason"] == "run does not exist in tenant x."
    reason = items[exhausted.run_id]["reason"]
    assert reason.startswith("Receive limit reached after 3 deliveries")
    assert "read: EndpointConnectionError" in reason and "run is failed" in reason
    assert items[exhausted.run_id]["run_status"] == "failed"
    assert items[exhausted.run_id]["deliveries"] == 3
    assert items[None]["reason"].startswith("Not a valid ingest job: message body is not JSON")
    assert all(i["receive_count"] >= 1 and i["age_s"] >= 0 for i in items.values())


def test_show_returns_body_attributes_and_run(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    job = ops.make_run(conn, store_root, user)
    message_id = ops.to_dlq(queues, job.body, {"trace": "abc"})
    dlq.archive(dead, conn)

    shown = dlq.show(conn, message_id)

    assert shown["message_id"] == message_id and shown["run_id"] == job.run_id
    assert shown["body"]["run_id"] == str(job.run_id)
    assert shown["attributes"] == {"trace": "abc"}
    assert shown["run"]["status"] == "failed" and shown["status"] == "open"
    with pytest.raises(errors.NotFound):
        dlq.show(conn, "no-such-message")
    with pytest.raises(errors.NotFound):
        dlq.show(conn, message_id, tenant_id=uuid.uuid4())


# ── redrive ─────────────────────────────────────────────────────────────────────────────────
def test_redrive_dry_run_changes_nothing(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    for job in [ops.make_run(conn, store_root, user) for _ in range(2)]:
        ops.to_dlq(queues, job.body)
    dlq.archive(dead, conn)
    before = _state(conn)

    result = dlq.redrive(conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test", dry_run=True)

    assert result["redriven"] == 2
    assert {i["outcome"] for i in result["items"]} == {"would_redrive"}
    assert all(i["reopened"] for i in result["items"])
    assert _state(conn) == before
    assert ops.depth(queues) == 0


def test_redrive_reopens_a_failed_run_and_puts_its_job_in_the_outbox(conn, queues, dead,
                                                                     tenants, store_root):
    # Given an archived dead letter whose run failed
    user = tenants.user()
    job = ops.make_run(conn, store_root, user, error="Interrupted: no heartbeat.")
    message_id = ops.to_dlq(queues, job.body, {DLQ_REASON: "old reason"})
    dlq.archive(dead, conn)

    # When it is redriven
    result = dlq.redrive(conn, selection=dlq.Selection(run_ids=frozenset({job.run_id})),
                         actor=OPERATOR, reason="S3 is back")

    # Then the run is queued again, with the operator's action on record
    [item] = result["items"]
    assert item["outcome"] == "redriven" and item["reopened"] and item["run_status"] == "failed"
    run = _run(conn, job.run_id)
    assert run["status"] == "queued" and run["error"] is None and run["finished_at"] is None
    [action] = ops.actions(conn, job.run_id)
    assert action["action"] == "redrive" and action["actor"] == "cli:test-operator"
    assert action["reason"] == "S3 is back" and action["tenant_id"] == user.tenant_id
    assert action["details"]["previous_error"] == "Interrupted: no heartbeat."
    assert action["details"]["message_id"] == message_id
    # and its job waits in the outbox for the relay, the dead letter resolved as redriven
    [outbox] = conn.execute("SELECT * FROM job_outbox WHERE run_id = %s",
                            (job.run_id,)).fetchall()
    assert outbox["published_at"] is None and outbox["payload"] == orjson.loads(job.body)
    [row] = _rows(conn)
    assert row["status"] == "redriven" and row["resolved_by"] == "cli:test-operator"
    assert row["resolution_reason"] == "S3 is back"
    # and a second redrive finds nothing open
    assert dlq.redrive(conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                       reason="again")["items"] == []
    assert len(ops.actions(conn, job.run_id)) == 1


def test_redrive_leaves_other_runs_states_alone(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    jobs = {s: ops.make_run(conn, store_root, user, status=s)
            for s in ("succeeded", "queued", "running")}
    for job in jobs.values():
        ops.to_dlq(queues, job.body)
    dlq.archive(dead, conn)
    before = {s: _run(conn, j.run_id) for s, j in jobs.items()}

    result = dlq.redrive(conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test")

    assert result["redriven"] == 3 and not any(i["reopened"] for i in result["items"])
    assert {s: _run(conn, j.run_id) for s, j in jobs.items()} == before
    assert conn.execute("SELECT count(*) AS n FROM job_outbox").fetchone()["n"] == 3


def test_redrive_by_message_id_with_a_limit(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    ids = [ops.to_dlq(queues, ops.make_run(conn, store_root, user).body) for _ in range(4)]
    dlq.archive(dead, conn)

    result = dlq.redrive(conn, selection=dlq.Selection(message_ids=frozenset(ids[:3])),
                         actor=OPERATOR, reason="test", limit=2)

    assert result["redriven"] == 2
    assert {i["message_id"] for i in result["items"]} <= set(ids[:3])
    assert dlq.list_letters(conn)["total"] == 2


def test_redrive_skips_what_can_never_succeed(conn, queues, dead, tenants):
    user = tenants.user()
    ops.to_dlq(queues, "not a job")
    ghost = submit.jobs.IngestJob(
        run_id=uuid.uuid4(), doc_id=uuid.uuid4(), tenant_id=user.tenant_id,
        upload_uri="file:///nowhere/x.md", title="x", source_type="md", source_uri="upload://x",
        original_filename="x.md", content_hash="sha256:" + "0" * 64,
        embedding_model="m", embedding_dim=384, submitted_at="2026-01-01T00:00:00Z")
    ops.to_dlq(queues, submit.jobs.encode(ghost))
    dlq.archive(dead, conn)

    result = dlq.redrive(conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test")

    assert result["redriven"] == 0
    assert all(i["outcome"] == "skipped" and "purge it" in i["detail"] for i in result["items"])
    assert dlq.list_letters(conn)["total"] == 2
    assert conn.execute("SELECT count(*) AS n FROM job_outbox").fetchone()["n"] == 0


def test_selection_must_say_which_messages():
    with pytest.raises(errors.InvalidRequest):
        dlq.Selection()


# ── purge ───────────────────────────────────────────────────────────────────────────────────
def test_purge_resolves_only_older_dead_letters_on_the_record(conn, queues, dead, tenants,
                                                              store_root):
    # Given two dead letters, then (once they are a second old) two more
    user = tenants.user()
    old = [ops.make_run(conn, store_root, user) for _ in range(2)]
    for job in old:
        ops.to_dlq(queues, job.body)
    dlq.archive(dead, conn)
    cutoff = time.time()
    wait_until(lambda: time.time() - cutoff > 2.2, message="the old ones age")
    new = [ops.make_run(conn, store_root, user) for _ in range(2)]
    for job in new:
        ops.to_dlq(queues, job.body)
    dlq.archive(dead, conn)

    # When dead letters older than two seconds are purged
    result = dlq.purge(conn, older_than_s=dlq.parse_age("2s"), actor=OPERATOR,
                       reason="stale")

    # Then exactly the old two are resolved as purged, each on its run's record
    assert {i["run_id"] for i in result["items"]} == {j.run_id for j in old}
    assert {i["run_id"] for i in dlq.list_letters(conn)["items"]} == {j.run_id for j in new}
    purged = dlq.list_letters(conn, status="purged")["items"]
    assert {i["run_id"] for i in purged} == {j.run_id for j in old}
    assert all(i["resolved_by"] == "cli:test-operator" for i in purged)
    assert [a["action"] for a in ops.actions(conn, old[0].run_id)] == ["dlq_purge"]
    assert ops.actions(conn, new[0].run_id) == []
    # and a purged dead letter cannot be redriven
    assert dlq.redrive(conn, selection=dlq.Selection(run_ids=frozenset({old[0].run_id})),
                       actor=OPERATOR, reason="x")["items"] == []


def test_purge_dry_run_changes_nothing(conn, queues, dead, tenants, store_root):
    ops.to_dlq(queues, ops.make_run(conn, store_root, tenants.user()).body)
    dlq.archive(dead, conn)
    before = _state(conn)
    result = dlq.purge(conn, older_than_s=0, actor=OPERATOR, reason="x", dry_run=True)
    assert result["purged"] == 1 and _state(conn) == before


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("2h", 7200),
                                          ("7d", 604800), ("1w", 604800), ("30", 30)])
def test_ages_are_read_with_units(text, seconds):
    assert dlq.parse_age(text) == seconds


def test_an_unreadable_age_is_refused(conn):
    with pytest.raises(errors.InvalidRequest):
        dlq.parse_age("a week")
    with pytest.raises(errors.InvalidRequest):
        dlq.purge(conn, older_than_s=float("inf"), actor=OPERATOR, reason="x")


# ── through the gateway ─────────────────────────────────────────────────────────────────────
FAST = {"HOUSEKEEPING_INTERVAL_S": "0.5", "DLQ_ARCHIVE_INTERVAL_S": "0.5"}


@pytest.fixture
def moving_gateway(stack_env, out_dir) -> Iterator[stack.Process]:
    """A gateway whose housekeeping moves dead letters into Postgres every half second."""
    process = stack.start_gateway({**stack_env, **FAST}, out_dir, "gateway-moving")
    yield process
    process.stop()


@pytest.fixture
def still_gateway(stack_env, out_dir) -> Iterator[stack.Process]:
    """A gateway that never touches the SQS dead-letter queue by itself."""
    process = stack.start_gateway({**stack_env, "DLQ_ARCHIVE_INTERVAL_S": "0"}, out_dir,
                                  "gateway-still")
    yield process
    process.stop()


def _archived(conn, count: int) -> list[dict]:
    return wait_until(lambda: len(rows := _rows(conn)) == count and rows, timeout=30,
                      message=f"{count} dead letter(s) archived")


def test_operators_list_every_dead_letter_and_listing_twice_changes_nothing(
        moving_gateway, conn, queues, tenants, store_root):
    # Given dead letters of two tenants and a garbage message, moved by the gateway
    operator = tenants.user("platform", role="operator")
    a, b = tenants.user("acme"), tenants.user("globex")
    jobs = [ops.make_run(conn, store_root, u) for u in (a, b)]
    ids = {ops.to_dlq(queues, j.body) for j in jobs} | {ops.to_dlq(queues, "garbage")}
    _archived(conn, 3)
    wait_until(lambda: ops.depth(queues, queues.dlq_url) == 0, message="SQS emptied")

    # When an operator lists them twice
    with moving_gateway.client(operator.token) as client:
        first, second = (client.get("/v1/admin/dlq").json() for _ in range(2))
        garbage_id = next(i["message_id"] for i in first["items"] if i["tenant_id"] is None)
        shown = client.get(f"/v1/admin/dlq/{garbage_id}")

    # Then both list all three with the same receive counts, and SQS was not read
    assert {i["message_id"] for i in first["items"]} == ids and first["total"] == 3
    counts = [{i["message_id"]: i["receive_count"] for i in li["items"]} for li in (first, second)]
    assert counts[0] == counts[1] == dict.fromkeys(ids, 1)
    assert ops.depth(queues, queues.dlq_url) == 0 and len(_rows(conn)) == 3
    # and the garbage message is there, body and parse error included
    assert shown.status_code == 200 and shown.json()["body"] == "garbage"
    assert shown.json()["problem"].startswith("message body is not JSON")


def test_a_redrive_through_the_api_is_published_by_the_relay(moving_gateway, conn, queues,
                                                             tenants, store_root):
    operator = tenants.user("platform", role="operator")
    job = ops.make_run(conn, store_root, tenants.user("acme"))
    message_id = ops.to_dlq(queues, job.body)
    _archived(conn, 1)

    with moving_gateway.client(operator.token) as client:
        response = client.post("/v1/admin/dlq/redrive", json={"message_ids": [message_id],
                                                               "reason": "fixed"})

    assert response.status_code == 200, response.text
    assert response.json()["items"][0]["outcome"] == "redriven"
    assert _run(conn, job.run_id)["status"] == "queued"
    wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                    (job.run_id,)).fetchone()["published_at"],
               timeout=30, message="the relay publishes the redriven job")
    [published] = ops.drain(queues, queues.url)
    assert orjson.loads(published["Body"])["run_id"] == str(job.run_id)
    assert _rows(conn)[0]["status"] == "redriven"
    [action] = ops.actions(conn, job.run_id)
    assert action["actor"] == f"user:{operator.user_id}" and action["reason"] == "fixed"


def test_a_tenant_admin_sees_and_redrives_only_its_own_dead_letters(
        still_gateway, conn, queues, dead, tenants, store_root):
    # Given archived dead letters of two tenants and a garbage message naming no tenant
    admin_a, admin_b = tenants.user("acme"), tenants.user("globex")
    job_a = ops.make_run(conn, store_root, admin_a)
    job_b = ops.make_run(conn, store_root, admin_b)
    id_a, id_b = ops.to_dlq(queues, job_a.body), ops.to_dlq(queues, job_b.body)
    garbage = ops.to_dlq(queues, "not a job")
    dlq.archive(dead, conn)

    with still_gateway.client(admin_a.token) as client:
        # When tenant A's admin lists, shows and redrives everything
        listed = client.get("/v1/dead-letters").json()
        shown = client.get(f"/v1/dead-letters/{id_a}")
        hidden = [client.get(f"/v1/dead-letters/{i}") for i in (id_b, garbage)]
        redriven = client.post("/v1/dead-letters/redrive", json={"all": True}).json()
        figures = client.get("/v1/metrics").json()["ingest"]

    # Then A sees, shows and redrives A's dead letter only
    assert [i["message_id"] for i in listed["items"]] == [id_a] and listed["total"] == 1
    assert shown.status_code == 200 and shown.json()["body"]["run_id"] == str(job_a.run_id)
    assert [h.status_code for h in hidden] == [404, 404]
    assert [i["message_id"] for i in redriven["items"]] == [id_a]
    assert _run(conn, job_a.run_id)["status"] == "queued"
    assert _run(conn, job_b.run_id)["status"] == "failed"
    [action] = ops.actions(conn, job_a.run_id)
    assert action["actor"] == f"user:{admin_a.user_id}"
    states = {r["message_id"]: r["status"] for r in _rows(conn)}
    assert states == {id_a: "redriven", id_b: "open", garbage: "open"}
    # and its own figures count its own open dead letters only (none left)
    assert figures["dead_letters_open"] == 0


def test_tenant_admins_and_users_are_refused_operators_views_and_nothing_changes(
        still_gateway, conn, queues, dead, tenants, store_root):
    # Given a non-empty DLQ: archived dead letters in Postgres and fresh ones still in SQS
    admin, user = tenants.user("acme"), tenants.user("acme", role="user")
    archived = ops.make_run(conn, store_root, admin)
    ops.to_dlq(queues, archived.body)
    dlq.archive(dead, conn)
    in_sqs = {ops.to_dlq(queues, ops.make_run(conn, store_root, admin).body) for _ in range(2)}
    before = _state(conn)

    # When a tenant admin and a user try the operators' API and pages
    refused = []
    for who in (admin, user):
        with still_gateway.client(who.token) as client:
            message_id = before["dead_letters"][0]["message_id"]
            refused += [client.get("/v1/admin/dlq"), client.get(f"/v1/admin/dlq/{message_id}"),
                        client.post("/v1/admin/dlq/redrive", json={"all": True}),
                        client.post("/v1/admin/dlq/purge", json={"older_than": "0s",
                                                                 "confirm": True}),
                        client.get("/admin/fleet"), client.get("/admin/dlq")]
    with still_gateway.client(user.token) as client:
        refused += [client.get("/v1/dead-letters"),
                    client.post("/v1/dead-letters/redrive", json={"all": True}),
                    client.get("/v1/metrics")]
    with still_gateway.client(admin.token) as client:
        # A tenant admin may not purge (only operators do): there is no such route for them
        no_purge = client.post("/v1/dead-letters/purge", json={"older_than": "0s",
                                                              "confirm": True})

    # Then every answer is 403 and nothing changed: database, and SQS (nobody received)
    assert [r.status_code for r in refused] == [403] * len(refused)
    assert refused[0].json()["code"] == "forbidden"
    assert no_purge.status_code in (404, 405)
    assert _state(conn) == before
    assert _receive_counts(queues) == dict.fromkeys(in_sqs, 1)
    with still_gateway.client() as anonymous:
        assert anonymous.get("/v1/admin/dlq").status_code == 401
        assert anonymous.get("/v1/dead-letters").status_code == 401


def test_a_redrive_whose_send_fails_after_the_reopen_is_published_later(
        stack_env, out_dir, moto, conn, queues, dead, tenants, store_root):
    # Given a gateway whose SQS link can be cut, and an archived dead letter of a failed run
    proxy = TcpProxy(moto.port).start()
    gateway = stack.start_gateway({**stack_env, "AWS_ENDPOINT_URL": proxy.url,
                                   "DLQ_ARCHIVE_INTERVAL_S": "0"}, out_dir, "gateway-proxied")
    restored = None
    try:
        operator = tenants.user("platform", role="operator")
        job = ops.make_run(conn, store_root, tenants.user("acme"))
        ops.to_dlq(queues, job.body)
        dlq.archive(dead, conn)

        # When SQS refuses connections and the operator redrives
        proxy.stop()
        with gateway.client(operator.token) as client:
            response = client.post("/v1/admin/dlq/redrive", json={"all": True})

        # Then the redrive is done on the record: the run is reopened, the dead letter resolved,
        # and the job waits in the outbox with the failed publish noted
        assert response.status_code == 200, response.text
        assert response.json()["items"][0]["outcome"] == "redriven"
        assert _run(conn, job.run_id)["status"] == "queued"
        assert _rows(conn)[0]["status"] == "redriven"

        def outbox() -> dict:
            return conn.execute("SELECT * FROM job_outbox WHERE run_id = %s",
                                (job.run_id,)).fetchone()

        wait_until(lambda: outbox()["attempts"] > 0, timeout=30, message="a publish attempt")
        assert outbox()["published_at"] is None and outbox()["last_error"]
        assert ops.depth(queues) == 0

        # When SQS comes back on the same address, Then the relay publishes the job
        restored = TcpProxy(proxy.target_port, listen_port=proxy.port).start()
        wait_until(lambda: outbox()["published_at"], timeout=30, interval=0.2,
                   message="the job published once SQS is back")
        [message] = ops.drain(queues, queues.url)
        assert orjson.loads(message["Body"])["run_id"] == str(job.run_id)
    finally:
        gateway.stop()
        for p in (proxy, restored):
            if p is not None:
                p.stop()


# ── CLI: every tenant ───────────────────────────────────────────────────────────────────────
def _cli(stack_env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return stack.ingest(["dlq", *args], stack_env, stdin=stdin)


def test_cli_syncs_lists_every_tenant_and_purges_only_when_confirmed(
        conn, queues, tenants, stack_env, store_root, out_dir):
    # Given dead letters of two tenants, still in SQS
    job_a = ops.make_run(conn, store_root, tenants.user("acme"))
    job_b = ops.make_run(conn, store_root, tenants.user("globex"))
    for job in (job_a, job_b):
        ops.to_dlq(queues, job.body)

    # When the operator lists them (which moves them first), twice
    listed = _cli(stack_env, "list", "--json")
    table = _cli(stack_env, "list")
    # and purges without --yes where nobody can answer the question
    refused = _cli(stack_env, "purge", "--older-than", "0s", stdin="")
    # and then with --yes
    purged = _cli(stack_env, "purge", "--older-than", "0s", "--yes", "--json")
    (out_dir / "cli.log").write_text(
        "".join(p.stderr for p in (listed, table, refused, purged)))

    # Then both tenants' dead letters were listed, in JSON and as a table, moved out of SQS once
    assert listed.returncode == 0, listed.stderr
    items = orjson.loads(listed.stdout)["items"]
    assert {i["run_id"] for i in items} == {str(job_a.run_id), str(job_b.run_id)}
    assert {i["receive_count"] for i in items} == {1}
    assert str(job_a.run_id) in table.stdout and "2 dead letter(s)" in table.stdout
    assert ops.depth(queues, queues.dlq_url) == 0 and len(_rows(conn)) == 2
    # the unconfirmed purge changed nothing; the confirmed one resolved both
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert purged.returncode == 0 and orjson.loads(purged.stdout)["purged"] == 2
    assert {r["status"] for r in _rows(conn)} == {"purged"}
    # and the CLI's logs are JSON lines
    for line in purged.stderr.splitlines():
        assert orjson.loads(line)["process"] == "cli"


def test_a_cli_redrive_that_cannot_publish_leaves_the_job_for_a_gateway(
        conn, queues, dead, tenants, stack_env, store_root, out_dir):
    # Given an archived dead letter of a failed run, and SQS unreachable from the CLI
    job = ops.make_run(conn, store_root, tenants.user())
    dlq.archive(dead, conn)  # nothing yet
    ops.to_dlq(queues, job.body)
    dlq.archive(dead, conn)
    offline = {**stack_env, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}

    # When the operator redrives it
    done = _cli(offline, "redrive", "--all", "--no-sync", "--json")
    (out_dir / "cli.log").write_text(done.stderr)

    # Then the run is reopened and its job waits in the outbox
    assert done.returncode == 0, done.stderr
    result = orjson.loads(done.stdout)
    assert result["redriven"] == 1 and result["published"] == 0
    assert _run(conn, job.run_id)["status"] == "queued"
    assert conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                        (job.run_id,)).fetchone()["published_at"] is None

    # When a gateway runs, Then its relay publishes the job
    gateway = stack.start_gateway(stack_env, out_dir, "gateway-relay")
    try:
        wait_until(lambda: conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                                        (job.run_id,)).fetchone()["published_at"],
                   timeout=30, message="the gateway's relay publishes the job")
    finally:
        gateway.stop()
    [message] = ops.drain(queues, queues.url)
    assert orjson.loads(message["Body"])["run_id"] == str(job.run_id)
