"""Paging of every listing: bounded page/limit (400 `invalid_paging`, never a 500 from an OFFSET
that overflows bigint), keyset cursors that visit every row once and, being positions, never
reach past the caller's tenant (docs/decisions/0200)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from gateway.web import session
from tests.integration.test_reads import insert_document, insert_run

# What an attacker tried (issue 9 §3), and each bound's first value outside it.
ABSURD = [
    {"page": "991517780281114492928"}, {"page": "9223372036854775807"}, {"page": "1001"},
    {"page": "0"}, {"page": "-1"}, {"limit": "0"}, {"limit": "101"},
    {"limit": "9223372036854775807"}, {"page": "2", "limit": "99999999999999999999"},
]


def api_listings(source_id: uuid.UUID) -> list[str]:
    return ["/v1/sources", "/v1/ingestion-runs", "/v1/documents",
            f"/v1/sources/{source_id}/syncs"]


def test_absurd_page_or_limit_is_a_400_on_every_api_listing(gateway, tenants):
    # Given an admin (every listing, sources included, is open to them)
    admin = tenants.user(role="admin")
    answers = {}
    with gateway.client(admin.token) as client:
        # When each listing is asked for an absurd page or limit
        for path in api_listings(uuid.uuid4()):
            for params in ABSURD:
                answers[path, json.dumps(params)] = client.get(path, params=params)
        # (while the last allowed page still answers, empty)
        last = client.get("/v1/ingestion-runs", params={"page": 1000, "limit": 100})

    # Then each is a 400 invalid_paging with a sentence, not a 500
    wrong = {k: (r.status_code, r.text[:200]) for k, r in answers.items()
             if r.status_code != 400 or r.json().get("code") != "invalid_paging"}
    assert not wrong, wrong
    for response in answers.values():
        assert response.headers["content-type"].startswith("application/json")
        assert set(response.json()) == {"code", "detail"} and response.json()["detail"]
    assert last.status_code == 200 and last.json()["items"] == [], last.text


def test_only_a_listing_with_cursors_says_to_follow_next_cursor(gateway, tenants):
    # A 400 must not send a client after a next_cursor that the endpoint never gives (issue 20).
    admin = tenants.user(role="admin")
    with gateway.client(admin.token) as client:
        pages_only = [client.get(path, params={"page": "0"}) for path in (
            f"/intake/batches/{uuid.uuid4()}/errors", "/v1/sources",
            f"/v1/sources/{uuid.uuid4()}/syncs")]
        with_cursors = [client.get(path, params={"page": "0"}) for path in (
            "/v1/imports", "/v1/ingestion-runs", "/v1/documents")]
    for response in pages_only + with_cursors:
        assert (response.status_code, response.json()["code"]) == (400, "invalid_paging")
    assert all("next_cursor" not in r.json()["detail"] for r in pages_only), [
        r.json()["detail"] for r in pages_only]
    assert all("follow next_cursor" in r.json()["detail"] for r in with_cursors)


@pytest.mark.parametrize("path", ["/runs", "/documents"])
def test_absurd_page_on_a_web_page_is_an_html_400(gateway, tenants, path):
    # Given a signed-in reader of the web UI
    user = tenants.user(role="user")
    with httpx.Client(base_url=gateway.url, cookies={session.COOKIE: user.token},
                      timeout=60) as browser:
        # When the page's address carries an absurd page number
        answers = [browser.get(path, params={"page": p})
                   for p in ("991517780281114492928", "9223372036854775807", "0", "1001")]
        fine = browser.get(path, params={"page": "2"})

    # Then the reader gets an error page that says so, not JSON and not a 500
    for answer in answers:
        assert answer.status_code == 400, (answer.request.url, answer.text[:300])
        assert answer.headers["content-type"].startswith("text/html")
        assert "That address could not be read" in answer.text
    assert fine.status_code == 200 and fine.headers["content-type"].startswith("text/html")


def walk(client: httpx.Client, path: str, **params) -> tuple[list[dict], int]:
    """Follow next_cursor from the first page to the end; every item and the pages read."""
    items, pages, cursor = [], 0, None
    while True:
        response = client.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert response.status_code == 200, response.text
        body = response.json()
        items += body["items"]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return items, pages
        assert pages < 100, "the walk never ends"


def test_a_cursor_walk_returns_every_run_once_newest_first(gateway, tenants, conn):
    # Given 45 runs of a tenant, several created at the same instant, and another tenant's runs
    user = tenants.user(role="user")
    other = tenants.user(tenant="globex", role="user")
    ids = {insert_run(conn, user.tenant_id, status="failed" if n % 3 == 0 else "succeeded",
                      minutes=n // 4) for n in range(45)}
    for n in range(5):
        insert_run(conn, other.tenant_id, minutes=n)

    with gateway.client(user.token) as client:
        # When a client follows next_cursor, 10 at a time
        items, pages = walk(client, "/v1/ingestion-runs", limit=10)
        failed, _ = walk(client, "/v1/ingestion-runs", limit=4, status="failed")
        first = client.get("/v1/ingestion-runs", params={"limit": 10}).json()
        second_page = client.get("/v1/ingestion-runs", params={"page": 2, "limit": 10}).json()

    # Then it sees each of its runs exactly once, newest first, in 5 pages, and nothing else
    seen = [r["run_id"] for r in items]
    assert len(seen) == len(set(seen)) == 45 and set(seen) == ids and pages == 5
    keys = [(r["created_at"], r["run_id"]) for r in items]
    assert keys == sorted(keys, reverse=True)
    assert {r["run_id"] for r in failed} == {r["run_id"] for r in items if r["status"] == "failed"}
    assert len(failed) == 15
    # And page numbers still work, in the same order; total counts the whole listing
    assert [r["run_id"] for r in second_page["items"]] == seen[10:20]
    assert first["total"] == 45 and first["page"] == 1 and first["next_cursor"]


def test_a_cursor_walk_returns_every_document_once(gateway, tenants, conn):
    # Given 23 documents with an active version (two share each creation minute) and one without
    user = tenants.user(role="user")
    ids = {insert_document(conn, user.tenant_id, f"doc {n}", minutes=n // 2) for n in range(23)}
    insert_document(conn, user.tenant_id, "doc without content", active=False)

    with gateway.client(user.token) as client:
        items, pages = walk(client, "/v1/documents", limit=5)
        matching, _ = walk(client, "/v1/documents", limit=2, search="doc 1")

    seen = [d["doc_id"] for d in items]
    assert len(seen) == len(set(seen)) == 23 and set(seen) == ids and pages == 5
    assert sorted(d["title"] for d in matching) == sorted(
        d["title"] for d in items if d["title"].startswith("doc 1"))


def test_a_cursor_is_a_position_and_never_shows_another_tenants_rows(gateway, tenants, conn):
    # Given a real cursor of a tenant's run listing, and another tenant's runs interleaved
    user = tenants.user(role="user")
    other = tenants.user(tenant="globex", role="user")
    mine = [insert_run(conn, user.tenant_id, status="failed", minutes=n) for n in range(6)]
    theirs = {insert_run(conn, other.tenant_id, status="failed", minutes=n) for n in range(6)}
    with gateway.client(user.token) as client:
        cursor = client.get("/v1/ingestion-runs", params={"limit": 2}).json()["next_cursor"]
        micros, _, _ = cursor.partition("-")
        # When cursors are moved, written by hand, or carried to another filter or listing
        moved = f"{int(micros) - 120_000_000}-{uuid.uuid4().hex}"
        shaped = {
            "moved position": client.get("/v1/ingestion-runs", params={"cursor": moved}),
            "other filter": client.get("/v1/ingestion-runs",
                                       params={"cursor": cursor, "status": "failed"}),
            "other listing": client.get("/v1/documents", params={"cursor": cursor}),
            "page and cursor": client.get("/v1/ingestion-runs",
                                          params={"cursor": cursor, "page": 2}),
        }
        misshapen = {name: client.get("/v1/ingestion-runs", params={"cursor": c})
                     for name, c in {"garbage": "not-a-cursor", "too long": "1" * 17 + "-" + "a" * 32,
                                     "signed, as before": cursor + ".c2lnbmF0dXJl"}.items()}
    with gateway.client(other.token) as client:
        # or another tenant replays it
        foreign = client.get("/v1/ingestion-runs", params={"cursor": cursor})

    # Then each cursor of the declared shape is a place in the caller's own listing...
    for name, answer in shaped.items():
        assert answer.status_code == 200, (name, answer.text)
        assert not {r["run_id"] for r in answer.json()["items"]} & {str(t) for t in theirs}, name
    assert shaped["page and cursor"].json()["items"] == shaped["other filter"].json()["items"]
    # ...another tenant's cursor shows that tenant only its own rows...
    assert foreign.status_code == 200
    assert {r["run_id"] for r in foreign.json()["items"]} <= {str(t) for t in theirs}
    assert not {r["run_id"] for r in foreign.json()["items"]} & {str(m) for m in mine}
    # ...and any other string is a 400 invalid_cursor
    for name, answer in misshapen.items():
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_cursor", name
