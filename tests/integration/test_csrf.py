"""CSRF on every state-changing route a signed-in browser can call (docs/decisions/0031).

For each route: the session cookie alone (what another site can make a browser send) and a
forged header are refused with 403 and change nothing in Postgres, the queue or the store; the
same call with the page's token is then accepted, so the 403 was the CSRF check and not some
other refusal. The users routes are tested with their feature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from gateway.operations import dlq
from gateway.sources import access as source_access
from shared import objectstore
from tests.integration.test_retry import _failed_upload
from tests.integration.test_web import _document, page_csrf, sign_in
from tests.support import ops, s3sync, submit
from tests.support.stack import wait_until

FORGED = "0" * 64


@dataclass
class Case:
    """One route: what to call and a snapshot of everything the call could change."""
    method: str
    path: str
    body: dict[str, Any] | None
    snapshot: Callable[[], Any]
    accepted: int


def _rows(conn, sql: str, *params: Any) -> list[dict]:
    return [dict(r) for r in conn.execute(sql, params).fetchall()]


def _call(client: httpx.Client, case: Case, token: str | None) -> httpx.Response:
    headers = {"X-CSRF-Token": token} if token else {}
    return client.request(case.method, case.path, json=case.body, headers=headers)


def _assert_csrf_guards(client: httpx.Client, case: Case) -> None:
    before = case.snapshot()
    for token in (None, FORGED):
        refused = _call(client, case, token)
        assert refused.status_code == 403, (case.path, token, refused.text)
        assert refused.json()["code"] == "forbidden"
        assert case.snapshot() == before, (case.path, token)
    accepted = _call(client, case, page_csrf(client))
    assert accepted.status_code == case.accepted, (case.path, accepted.text)
    assert case.snapshot() != before, f"{case.path} with the token changed nothing"


@pytest.fixture
def admin(tenants):
    return tenants.user(role="admin")


@pytest.fixture
def store_root(stack_env):
    return objectstore.file_path(stack_env["UPLOAD_STORE_URI"])


def test_retry_needs_the_csrf_header(gateway, conn, admin, queues):
    with gateway.client(admin.token) as api:
        run_id = _failed_upload(conn, queues, api)["run_id"]
    case = Case("POST", f"/v1/ingestion-runs/{run_id}/retry", {"reason": "forged"},
                lambda: (_rows(conn, "SELECT status, error FROM ingestion_runs"),
                         _rows(conn, "SELECT action, reason FROM run_actions"),
                         _rows(conn, "SELECT run_id, published_at IS NULL AS p FROM job_outbox")),
                202)
    with sign_in(gateway, admin.email) as browser:
        _assert_csrf_guards(browser, case)
    assert submit.status(conn, run_id) == "queued"


def test_deactivate_needs_the_csrf_header(gateway, conn, admin):
    doc_id = _document(conn, admin.tenant_id, "Handbook", ["One chunk of the handbook."])
    case = Case("POST", f"/v1/documents/{doc_id}/deactivate", None,
                lambda: _rows(conn, "SELECT is_active, deactivated_at FROM document_versions"),
                200)
    with sign_in(gateway, admin.email) as browser:
        _assert_csrf_guards(browser, case)


def _sources(conn) -> list[dict]:
    return _rows(conn, "SELECT source_id, name, bucket, prefix, enabled, deleted_at, updated_at "
                       "FROM ingestion_sources ORDER BY source_id")


def test_source_create_update_delete_and_sync_need_the_csrf_header(gateway, conn, admin, s3):
    bucket = s3sync.new_bucket(s3, {"a.md": b"# A\n\nSome words about A.\n"})
    source_access.grant(conn, tenant_id=admin.tenant_id, bucket=bucket, prefix="",
                        granted_by="test", platform=())  # tenant admins need a grant (0065)
    with sign_in(gateway, admin.email) as browser:
        _assert_csrf_guards(browser, Case("POST", "/v1/sources", {"bucket": bucket},
                                          lambda: _sources(conn), 201))
        [source] = _sources(conn)
        base = f"/v1/sources/{source['source_id']}"

        _assert_csrf_guards(browser, Case("PATCH", base, {"prefix": "docs/"},
                                          lambda: _sources(conn), 200))

        syncs = Case("POST", f"{base}/sync", None,
                     lambda: (_rows(conn, "SELECT sync_id FROM source_syncs"),
                              _rows(conn, "SELECT run_id FROM ingestion_runs")), 202)
        _assert_csrf_guards(browser, syncs)
        # Deleting waits for the sync just started, which lists a prefix with nothing in it.
        wait_until(lambda: browser.get(f"{base}/syncs").json()["items"][0]["status"]
                   != "running", timeout=60, message="the sync ends")

        _assert_csrf_guards(browser, Case("DELETE", base, None, lambda: _sources(conn), 200))


def _dead_letter(conn, queues, store_root, user) -> submit.Submitted:
    """A failed run whose job sits in the DLQ, as after maxReceiveCount."""
    run = ops.make_run(conn, store_root, user, status="failed")
    ops.to_dlq(queues, submit.jobs.encode(run.job))
    return run


def test_dlq_redrive_and_purge_need_the_csrf_header(gateway, conn, tenants, store_root, queues):
    # Given two dead letters, and a platform operator (the DLQ is theirs, docs/decisions/0061)
    operator = tenants.user(role="operator")
    first = _dead_letter(conn, queues, store_root, operator)
    _dead_letter(conn, queues, store_root, operator)

    def state():
        return (ops.depth(queues, queues.dlq_url), ops.depth(queues, queues.url),
                _rows(conn, "SELECT run_id, status FROM ingestion_runs ORDER BY run_id"),
                _rows(conn, "SELECT action FROM run_actions"),
                _rows(conn, "SELECT message_id, status FROM dead_letters ORDER BY message_id"))

    # moved into the dead_letters table, as the gateway's housekeeping does
    dlq.archive(dlq.DeadLetterQueue(queues.client, queues.dlq_url), conn)
    assert len(_rows(conn, "SELECT 1 FROM dead_letters WHERE status = 'open'")) == 2
    with sign_in(gateway, operator.email) as browser:
        # Redrive one: refused without the token, done with it
        _assert_csrf_guards(browser, Case("POST", "/v1/admin/dlq/redrive",
                                          {"run_ids": [str(first.run_id)]}, state, 200))
        # The redriven job reaches the queue through the outbox relay, after the answer: wait
        # for it, or the purge's "nothing changed" snapshots would see it arrive (CI did once)
        wait_until(lambda: ops.depth(queues, queues.url) == 1, timeout=30,
                   message="the redriven job published")
        # Purge the other (anything older than 0 s): the same
        _assert_csrf_guards(browser, Case("POST", "/v1/admin/dlq/purge",
                                          {"older_than": "0s", "confirm": True}, state, 200))
    assert ops.depth(queues, queues.dlq_url) == 0
