"""GET /v1/events, GET /v1/events/{id}, POST /v1/events/replay against a real gateway:
tenant scoping, filters, replay on the record, CSRF for the browser's cookie."""

from __future__ import annotations

from tests.e2e.test_ledger_apply import judgment, put


def dead(conn, ledger_id: int, error: str) -> None:
    conn.execute("UPDATE event_ledger SET process_state = 'dead_letter', process_error = %s, "
                 "apply_attempt_count = 10 WHERE ledger_id = %s", (error, ledger_id))


def test_admin_lists_shows_and_replays_own_dead_letters(gateway, tenants, conn):
    admin = tenants.user("acme")
    a = put(conn, admin.tenant_id, "a", judgment("CV-A"), source="jbi")
    b = put(conn, admin.tenant_id, "b", judgment("CV-B"), source="simplicity")
    c = put(conn, admin.tenant_id, "c", judgment("CV-C"), source="jbi")
    dead(conn, a, "JUDGMENT_AMOUNT_INVALID: bad")
    dead(conn, b, "failed 10 times; last: timeout")
    with gateway.client(admin.token) as client:
        listed = client.get("/v1/events", params={"state": "dead_letter"}).json()
        assert (listed["total"], [e["ledger_id"] for e in listed["events"]]) == (2, [b, a])
        by_source = client.get("/v1/events", params={"state": "dead_letter",
                                                      "source_system": "jbi"}).json()
        assert [e["ledger_id"] for e in by_source["events"]] == [a]
        by_error = client.get("/v1/events", params={"error": "TIMEOUT"}).json()
        assert [e["ledger_id"] for e in by_error["events"]] == [b]
        assert client.get("/v1/events", params={"state": "pending"}).json()["total"] == 1
        assert client.get("/v1/events", params={"limit": 1001}).status_code == 400
        assert client.get("/v1/events", params={"state": "nope"}).json()["code"]

        shown = client.get(f"/v1/events/{a}").json()
        assert shown["payload"]["File #"] == "CV-A" and shown["state"] == "dead_letter"

        # Replay by filter: only the matching dead letter moves, and a pending id is ignored
        answer = client.post("/v1/events/replay", json={"error": "timeout"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"replayed": 1, "ledger_ids": [b]}
        assert client.post("/v1/events/replay", json={"ledger_ids": [a, c]}).json() == {
            "replayed": 1, "ledger_ids": [a]}
        assert client.post("/v1/events/replay", json={}).status_code == 400
        assert client.get(f"/v1/events/{a}").json()["replays"][0]["actor"] == (
            f"user:{admin.user_id}")
    rows = conn.execute("SELECT actor_user_id, ledger_ids, filter, event_count FROM "
                        "event_replays ORDER BY replay_id").fetchall()
    assert [(r["actor_user_id"], r["ledger_ids"], r["filter"], r["event_count"])
            for r in rows] == [(admin.user_id, None, {"error": "timeout"}, 1),
                               (admin.user_id, [a], None, 1)]
    state = conn.execute("SELECT process_state, apply_attempt_count FROM event_ledger "
                         "WHERE ledger_id = %s", (a,)).fetchone()
    assert (state["process_state"], state["apply_attempt_count"]) == ("pending", 0)


def test_another_tenants_admin_cannot_list_see_or_replay(gateway, tenants, conn):
    owner = tenants.user("acme")
    other = tenants.user("globex")
    user = tenants.user("acme", role="user")
    ledger_id = put(conn, owner.tenant_id, "x", judgment("CV-X"))
    dead(conn, ledger_id, "boom")
    with gateway.client(other.token) as client:
        assert client.get("/v1/events").json() == {"events": [], "total": 0}
        # A tenant admin's tenant_id parameter is ignored: only operators choose tenants
        assert client.get("/v1/events", params={"tenant_id": str(owner.tenant_id)}).json()[
            "total"] == 0
        missing = client.get(f"/v1/events/{ledger_id}")
        assert missing.status_code == 404 and missing.json()["code"] == "event_not_found"
        assert client.post("/v1/events/replay", json={"ledger_ids": [ledger_id]}).json() == {
            "replayed": 0, "ledger_ids": []}
        assert client.post("/v1/events/replay", json={"all": True}).json()["replayed"] == 0
    with gateway.client(user.token) as client:
        assert client.get("/v1/events").status_code == 403
    assert conn.execute("SELECT process_state FROM event_ledger WHERE ledger_id = %s",
                        (ledger_id,)).fetchone()["process_state"] == "dead_letter"
    assert conn.execute("SELECT count(*) AS n FROM event_replays").fetchone()["n"] == 0
    operator = tenants.user("platform", role="operator")
    with gateway.client(operator.token) as client:
        assert [e["ledger_id"] for e in client.get("/v1/events").json()["events"]] == [ledger_id]


def test_cookie_replay_needs_the_csrf_header(gateway, tenants, conn):
    admin = tenants.user("acme")
    ledger_id = put(conn, admin.tenant_id, "y", judgment("CV-Y"))
    dead(conn, ledger_id, "boom")
    with gateway.client() as client:
        client.cookies.set("df_session", admin.token)
        refused = client.post("/v1/events/replay", json={"ledger_ids": [ledger_id]})
        assert refused.status_code == 403
    assert conn.execute("SELECT process_state FROM event_ledger WHERE ledger_id = %s",
                        (ledger_id,)).fetchone()["process_state"] == "dead_letter"


def test_an_events_history_lists_only_the_replays_that_reset_it(gateway, tenants, conn):
    # Given three dead letters of one tenant with different errors
    admin = tenants.user("acme")
    a = put(conn, admin.tenant_id, "ha", judgment("CV-HA"))
    b = put(conn, admin.tenant_id, "hb", judgment("CV-HB"))
    c = put(conn, admin.tenant_id, "hc", judgment("CV-HC"))
    for ledger_id, error in ((a, "timeout"), (b, "timeout"), (c, "JUDGMENT_AMOUNT_INVALID")):
        dead(conn, ledger_id, error)
    with gateway.client(admin.token) as client:
        # When a filter replay resets a and b, and an id replay resets c
        by_filter = client.post("/v1/events/replay", json={"error": "timeout"}).json()
        assert by_filter == {"replayed": 2, "ledger_ids": [a, b]}
        assert client.post("/v1/events/replay", json={"ledger_ids": [c]}).json()[
            "replayed"] == 1
        # And a later filter replay matches nothing of theirs (they are pending now)
        dead(conn, c, "timeout again")
        assert client.post("/v1/events/replay", json={"error": "again"}).json()[
            "ledger_ids"] == [c]

        # Then each event's history lists the replays that touched it, and no other
        history = {i: [r["replay_id"] for r in client.get(f"/v1/events/{i}").json()["replays"]]
                   for i in (a, b, c)}
    replays = [r["replay_id"] for r in conn.execute(
        "SELECT replay_id FROM event_replays ORDER BY replay_id").fetchall()]
    assert len(replays) == 3
    first, by_id, again = replays
    assert history == {a: [first], b: [first], c: [again, by_id]}
    # The filter stays on record beside the ids it reset
    assert conn.execute("SELECT filter FROM event_replays WHERE replay_id = %s",
                        (first,)).fetchone()["filter"] == {"error": "timeout"}
