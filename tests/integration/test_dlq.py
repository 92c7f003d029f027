"""The DLQ service (gateway/dlq.py) against real moto SQS and Postgres: list, show, redrive, purge,
and the same through the admin API (tenant-scoped) and the `ingest dlq` CLI (all tenants)."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid

import orjson
import pytest

from gateway import dlq, reopen
from shared import errors, objectstore
from shared.queue import DLQ_REASON
from tests.support import ops, stack, submit

OPERATOR = reopen.Actor("cli:test-operator")


@pytest.fixture
def store_root(stack_env):
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


@pytest.fixture
def dead(queues) -> dlq.DeadLetterQueue:
    return dlq.DeadLetterQueue(queues.client, queues.dlq_url, queues.url)


def _run(conn, run_id) -> dict:
    return submit.run_row(conn, run_id)


# ── list and show ───────────────────────────────────────────────────────────────────────────
def test_list_pages_past_ten_and_releases_what_it_looked_at(conn, queues, dead, tenants,
                                                            store_root):
    # Given 23 dead letters (SQS hands out at most ten per receive)
    user = tenants.user()
    jobs = [ops.make_run(conn, store_root, user) for _ in range(23)]
    for job in jobs:
        ops.to_dlq(queues, job.body)

    # When the listing is read page by page
    pages = [dlq.list_letters(dead, conn, page=p, limit=10) for p in (1, 2, 3)]

    # Then every message appears exactly once, oldest first, and all are visible again after
    assert [p["total"] for p in pages] == [23, 23, 23]
    assert [len(p["items"]) for p in pages] == [10, 10, 3]
    ids = [i["message_id"] for p in pages for i in p["items"]]
    assert len(set(ids)) == 23
    sent = [i["sent_at"] for p in pages for i in p["items"]]
    assert sent == sorted(sent)
    assert {i["run_id"] for p in pages for i in p["items"]} == {j.run_id for j in jobs}
    assert queues.queue.depth(url=queues.dlq_url) == {"visible": 23, "in_flight": 0}


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

    # When the DLQ is listed
    items = {i["run_id"]: i for i in dlq.list_letters(dead, conn)["items"]}

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

    shown = dlq.show(dead, conn, message_id)

    assert shown["message_id"] == message_id and shown["run_id"] == job.run_id
    assert shown["body"]["run_id"] == str(job.run_id)
    assert shown["attributes"] == {"trace": "abc"}
    assert "SentTimestamp" in shown["system_attributes"]
    assert shown["run"]["status"] == "failed"
    with pytest.raises(errors.NotFound):
        dlq.show(dead, conn, "no-such-message")


# ── redrive ─────────────────────────────────────────────────────────────────────────────────
def test_redrive_dry_run_changes_nothing(conn, queues, dead, tenants, store_root):
    # Given two dead letters of failed runs
    user = tenants.user()
    jobs = [ops.make_run(conn, store_root, user) for _ in range(2)]
    for job in jobs:
        ops.to_dlq(queues, job.body)
    before = [_run(conn, j.run_id) for j in jobs]

    # When a dry-run redrive of all is asked for
    result = dlq.redrive(dead, conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test", dry_run=True)

    # Then it says what it would do, and nothing changed: runs, actions, both queues
    assert result["redriven"] == 2
    assert {i["outcome"] for i in result["items"]} == {"would_redrive"}
    assert all(i["reopened"] for i in result["items"])
    assert [_run(conn, j.run_id) for j in jobs] == before
    assert all(ops.actions(conn, j.run_id) == [] for j in jobs)
    assert queues.queue.depth(url=queues.dlq_url) == {"visible": 2, "in_flight": 0}
    assert ops.depth(queues) == 0


def test_redrive_reopens_a_failed_run_on_the_record_and_keeps_body_and_attributes(
        conn, queues, dead, tenants, store_root):
    # Given a dead letter with attributes, whose run failed
    user = tenants.user()
    job = ops.make_run(conn, store_root, user, error="Interrupted: no heartbeat.")
    ops.to_dlq(queues, job.body, {"trace": "t-1", DLQ_REASON: "old reason"})

    # When it is redriven
    result = dlq.redrive(dead, conn, selection=dlq.Selection(run_ids=frozenset({job.run_id})),
                         actor=OPERATOR, reason="S3 is back")

    # Then the run is queued again, with the operator's action on record
    [item] = result["items"]
    assert item["outcome"] == "redriven" and item["reopened"] and item["run_status"] == "failed"
    run = _run(conn, job.run_id)
    assert run["status"] == "queued" and run["error"] is None and run["finished_at"] is None
    assert run["queued_at"] is not None
    [action] = ops.actions(conn, job.run_id)
    assert action["action"] == "redrive" and action["actor"] == "cli:test-operator"
    assert action["reason"] == "S3 is back" and action["tenant_id"] == user.tenant_id
    assert action["details"]["previous_status"] == "failed"
    assert action["details"]["previous_error"] == "Interrupted: no heartbeat."
    assert action["details"]["reopened"] is True
    # and the message moved: same body, same attributes (but the stale DLQ reason), counted
    assert ops.depth(queues, queues.dlq_url) == 0
    [moved] = ops.drain(queues, queues.url)
    assert moved["Body"] == job.body and moved["MessageId"] == item["new_message_id"]
    attrs = {k: v["StringValue"] for k, v in moved["MessageAttributes"].items()}
    assert attrs == {"trace": "t-1", "redrive_count": "1"}


def test_redrive_leaves_other_runs_states_alone(conn, queues, dead, tenants, store_root):
    # Given dead letters of a succeeded, a queued and a running run
    user = tenants.user()
    jobs = {s: ops.make_run(conn, store_root, user, status=s)
            for s in ("succeeded", "queued", "running")}
    for job in jobs.values():
        ops.to_dlq(queues, job.body)
    before = {s: _run(conn, j.run_id) for s, j in jobs.items()}

    # When all are redriven
    result = dlq.redrive(dead, conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test")

    # Then they are all moved, none reopened, and no run changed
    assert result["redriven"] == 3 and not any(i["reopened"] for i in result["items"])
    assert {s: _run(conn, j.run_id) for s, j in jobs.items()} == before
    assert ops.depth(queues) == 3 and ops.depth(queues, queues.dlq_url) == 0


def test_redrive_by_message_id_with_a_limit(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    jobs = [ops.make_run(conn, store_root, user) for _ in range(4)]
    ids = [ops.to_dlq(queues, j.body) for j in jobs]

    result = dlq.redrive(dead, conn, selection=dlq.Selection(message_ids=frozenset(ids[:3])),
                         actor=OPERATOR, reason="test", limit=2)

    assert result["redriven"] == 2
    assert {i["message_id"] for i in result["items"]} <= set(ids[:3])
    assert ops.depth(queues) == 2 and ops.depth(queues, queues.dlq_url) == 2


def test_redrive_skips_what_can_never_succeed(conn, queues, dead, tenants):
    # Given a garbage message and a job whose run does not exist
    user = tenants.user()
    ops.to_dlq(queues, "not a job")
    ghost = submit.jobs.IngestJob(
        run_id=uuid.uuid4(), doc_id=uuid.uuid4(), tenant_id=user.tenant_id,
        upload_uri="file:///nowhere/x.md", title="x", source_type="md", source_uri="upload://x",
        original_filename="x.md", content_hash="sha256:" + "0" * 64,
        embedding_model="m", embedding_dim=384, submitted_at="2026-01-01T00:00:00Z")
    ops.to_dlq(queues, submit.jobs.encode(ghost))

    result = dlq.redrive(dead, conn, selection=dlq.Selection(all=True), actor=OPERATOR,
                         reason="test")

    # Then both stay in the DLQ with a reason to purge them
    assert result["redriven"] == 0
    assert all(i["outcome"] == "skipped" and "purge it" in i["detail"] for i in result["items"])
    assert ops.depth(queues, queues.dlq_url) == 2 and ops.depth(queues) == 0


def test_selection_must_say_which_messages():
    with pytest.raises(errors.InvalidRequest):
        dlq.Selection()


# ── purge ───────────────────────────────────────────────────────────────────────────────────
def test_purge_removes_only_older_messages(conn, queues, dead, tenants, store_root):
    # Given two dead letters, then three seconds later two more
    user = tenants.user()
    old = [ops.make_run(conn, store_root, user) for _ in range(2)]
    for job in old:
        ops.to_dlq(queues, job.body)
    time.sleep(3)
    new = [ops.make_run(conn, store_root, user) for _ in range(2)]
    for job in new:
        ops.to_dlq(queues, job.body)

    # When messages older than two seconds are purged
    result = dlq.purge(dead, conn, older_than_s=dlq.parse_age("2s"), actor=OPERATOR,
                       reason="stale")

    # Then exactly the old two are gone, each purge on its run's record; the new two remain
    assert {i["run_id"] for i in result["items"]} == {j.run_id for j in old}
    left = {i["run_id"] for i in dlq.list_letters(dead, conn)["items"]}
    assert left == {j.run_id for j in new}
    assert [a["action"] for a in ops.actions(conn, old[0].run_id)] == ["dlq_purge"]
    assert ops.actions(conn, new[0].run_id) == []


def test_purge_dry_run_deletes_nothing(conn, queues, dead, tenants, store_root):
    user = tenants.user()
    ops.to_dlq(queues, ops.make_run(conn, store_root, user).body)
    result = dlq.purge(dead, conn, older_than_s=0, actor=OPERATOR, reason="x", dry_run=True)
    assert result["purged"] == 1 and ops.depth(queues, queues.dlq_url) == 1


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("15m", 900), ("2h", 7200),
                                          ("7d", 604800), ("1w", 604800), ("30", 30)])
def test_ages_are_read_with_units(text, seconds):
    assert dlq.parse_age(text) == seconds


def test_an_unreadable_age_is_refused():
    with pytest.raises(errors.InvalidRequest):
        dlq.parse_age("a week")


# ── admin API: the caller's tenant only ─────────────────────────────────────────────────────
def test_admin_api_sees_and_redrives_only_its_tenant(gateway, conn, queues, tenants, store_root):
    # Given dead letters of two tenants, and a garbage message without a tenant
    admin_a, admin_b = tenants.user("acme"), tenants.user("globex")
    job_a = ops.make_run(conn, store_root, admin_a)
    job_b = ops.make_run(conn, store_root, admin_b)
    id_a, id_b = ops.to_dlq(queues, job_a.body), ops.to_dlq(queues, job_b.body)
    ops.to_dlq(queues, "not a job")

    with gateway.client(admin_a.token) as client:
        # When tenant A's admin lists, shows and redrives everything
        listed = client.get("/v1/admin/dlq").json()
        shown = client.get(f"/v1/admin/dlq/{id_a}")
        hidden = client.get(f"/v1/admin/dlq/{id_b}")
        redriven = client.post("/v1/admin/dlq/redrive", json={"all": True}).json()

    # Then A sees, shows and redrives A's message only
    assert [i["message_id"] for i in listed["items"]] == [id_a] and listed["total"] == 1
    assert shown.status_code == 200 and shown.json()["body"]["run_id"] == str(job_a.run_id)
    assert hidden.status_code == 404 and hidden.json()["code"] == "not_found"
    assert [i["message_id"] for i in redriven["items"]] == [id_a]
    assert _run(conn, job_a.run_id)["status"] == "queued"
    assert _run(conn, job_b.run_id)["status"] == "failed"
    [action] = ops.actions(conn, job_a.run_id)
    assert action["actor"] == f"user:{admin_a.user_id}"
    assert action["actor_user_id"] == admin_a.user_id
    assert ops.depth(queues, queues.dlq_url) == 2  # B's and the garbage


def test_admin_api_purge_needs_confirmation_and_is_tenant_scoped(gateway, conn, queues, tenants,
                                                                 store_root):
    admin_a, admin_b = tenants.user("acme"), tenants.user("globex")
    ops.to_dlq(queues, ops.make_run(conn, store_root, admin_a).body)
    ops.to_dlq(queues, ops.make_run(conn, store_root, admin_b).body)

    with gateway.client(admin_a.token) as client:
        unconfirmed = client.post("/v1/admin/dlq/purge", json={"older_than": "0s"})
        preview = client.post("/v1/admin/dlq/purge", json={"older_than": "0s", "dry_run": True})
        purged = client.post("/v1/admin/dlq/purge", json={"older_than": "0s", "confirm": True})
        bad_age = client.post("/v1/admin/dlq/purge", json={"older_than": "soon",
                                                            "confirm": True})

    assert unconfirmed.status_code == 400 and "confirm" in unconfirmed.json()["detail"]
    assert preview.json()["purged"] == 1 and preview.json()["dry_run"] is True
    assert purged.status_code == 200 and purged.json()["purged"] == 1
    assert bad_age.status_code == 400
    assert ops.depth(queues, queues.dlq_url) == 1  # B's message is untouched


def test_admin_api_is_for_admins_only(gateway, tenants):
    user = tenants.user(role="user")
    with gateway.client(user.token) as client:
        responses = [client.get("/v1/admin/dlq"),
                     client.post("/v1/admin/dlq/redrive", json={"all": True}),
                     client.post("/v1/admin/dlq/purge", json={"older_than": "1d",
                                                             "confirm": True})]
    assert [r.status_code for r in responses] == [403, 403, 403]
    with gateway.client() as anonymous:
        assert anonymous.get("/v1/admin/dlq").status_code == 401


# ── CLI: every tenant ───────────────────────────────────────────────────────────────────────
def _cli(stack_env, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", "dlq", *args], cwd=stack.ROOT,
                          env=stack.clean_env(stack_env), capture_output=True, text=True,
                          timeout=120, input=stdin)


def test_cli_lists_every_tenant_and_purges_only_when_confirmed(conn, queues, tenants, stack_env,
                                                               store_root, out_dir):
    # Given dead letters of two tenants
    job_a = ops.make_run(conn, store_root, tenants.user("acme"))
    job_b = ops.make_run(conn, store_root, tenants.user("globex"))
    for job in (job_a, job_b):
        ops.to_dlq(queues, job.body)

    # When the operator lists them
    listed = _cli(stack_env, "list", "--json")
    table = _cli(stack_env, "list")
    # and purges without --yes where nobody can answer the question
    refused = _cli(stack_env, "purge", "--older-than", "0s", stdin="")
    # and then with --yes
    purged = _cli(stack_env, "purge", "--older-than", "0s", "--yes", "--json")
    (out_dir / "cli.log").write_text(
        "".join(p.stderr for p in (listed, table, refused, purged)))

    # Then both tenants' messages were listed, in JSON and as a table
    assert listed.returncode == 0, listed.stderr
    items = orjson.loads(listed.stdout)["items"]
    assert {i["run_id"] for i in items} == {str(job_a.run_id), str(job_b.run_id)}
    assert str(job_a.run_id) in table.stdout and "2 dead letter(s)" in table.stdout
    # the unconfirmed purge deleted nothing; the confirmed one deleted both
    assert refused.returncode == 1 and "pass --yes" in refused.stderr
    assert purged.returncode == 0 and orjson.loads(purged.stdout)["purged"] == 2
    assert ops.depth(queues, queues.dlq_url) == 0
    # and the CLI's logs are JSON lines
    for line in purged.stderr.splitlines():
        assert orjson.loads(line)["process"] == "cli"
