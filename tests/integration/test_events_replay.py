"""GET /v1/events, GET /v1/events/{id}, POST /v1/events/replay against a real gateway:
tenant scoping, filters, replay on the record, CSRF for the browser's cookie."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from shared import db
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
    # A fresh budget: no attempt used since the replay, while the count (the claims' fence)
    # never goes back (ADR 0194)
    state = conn.execute("SELECT process_state, apply_attempt_count, apply_attempt_base "
                         "FROM event_ledger WHERE ledger_id = %s", (a,)).fetchone()
    assert (state["process_state"], state["apply_attempt_count"] - state["apply_attempt_base"],
            state["apply_attempt_count"]) == ("pending", 0, 11)


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


def _key(gateway, token: str) -> str:
    with gateway.client(token) as client:
        return client.post("/v1/api-keys", json={"name": "producer"}).json()["key"]


def test_an_admin_discards_or_edits_an_event_and_each_is_on_the_record(gateway, tenants, conn):
    # Given a dead letter (its amount is not money), a pending event and a processed one
    admin = tenants.user("acme")
    broken = judgment("CV-D", "lots")
    d = put(conn, admin.tenant_id, "d", broken)
    dead(conn, d, "JUDGMENT_AMOUNT_INVALID: Amount is not money")
    p = put(conn, admin.tenant_id, "p", judgment("CV-P"))
    x = put(conn, admin.tenant_id, "x", judgment("CV-X"))
    conn.execute("UPDATE event_ledger SET process_state = 'processed', processed_at = now() "
                 "WHERE ledger_id = %s", (x,))
    sha = conn.execute("SELECT payload_sha256 FROM event_ledger WHERE ledger_id = %s",
                       (d,)).fetchone()["payload_sha256"]
    fixed = judgment("CV-D", "1,000.00")
    with gateway.client(admin.token) as client:
        # When the admin corrects the dead letter's payload and discards the pending one
        edited = client.post(f"/v1/events/{d}/edit", json={
            "payload": fixed, "reason": "upstream sent words for the amount",
            "version": client.get(f"/v1/events/{d}").json()["version"]})
        assert edited.status_code == 200, edited.text
        assert edited.json()["state"] == "pending"
        discarded = client.post(f"/v1/events/{p}/discard", json={"reason": "test data",
                                                                 "state": "pending"})
        assert discarded.status_code == 200, discarded.text

        # Then a settled event is refused, and so is an action without a reason or a payload
        # that could not be stored
        for path, body in ((f"/v1/events/{x}/discard", {"reason": "r", "version": 1}),
                           (f"/v1/events/{p}/edit", {"payload": fixed, "reason": "r",
                                                     "version": 2})):
            refused = client.post(path, json=body)
            assert (refused.status_code, refused.json()["code"]) == (409, "event_settled")
        assert client.post(f"/v1/events/{d}/discard", json={"reason": "  ", "version": 2}
                           ).status_code == 400
        bad = client.post(f"/v1/events/{d}/edit", json={"payload": {"a": "\u0000"},
                                                         "reason": "r", "version": 2})
        assert bad.status_code == 400 and "NUL" in bad.json()["detail"]
        assert client.post(f"/v1/events/{d}/edit", json={"payload": [1], "reason": "r",
                                                         "version": 2}).status_code == 400
        # Without the version or state the admin decided on, nothing is done
        unsure = client.post(f"/v1/events/{d}/discard", json={"reason": "r"})
        assert (unsure.status_code, unsure.json()["code"]) == (400, "precondition_required")

        # And the event's page shows what was done, by whom and why
        shown = client.get(f"/v1/events/{d}").json()
        assert shown["payload"] == fixed and shown["apply_attempt_count"] == 0
        assert [(a["action"], a["actor"], a["reason"], a["previous_state"])
                for a in shown["actions"]] == [
            ("edit", f"user:{admin.user_id}", "upstream sent words for the amount",
             "dead_letter")]
        assert client.get("/v1/events", params={"state": "discarded"}).json()["total"] == 1

    rows = {r["ledger_id"]: r for r in conn.execute(
        "SELECT * FROM event_ledger WHERE tenant_id = %s", (admin.tenant_id,)).fetchall()}
    assert (rows[d]["process_state"], rows[d]["process_error"]) == ("pending", None)
    assert rows[d]["payload_sha256"] == sha  # the producer's fingerprint stays
    assert rows[p]["process_state"] == "discarded"
    [record] = conn.execute("SELECT * FROM event_actions WHERE ledger_id = %s", (d,)).fetchall()
    assert (record["actor_user_id"], record["previous_payload"], record["previous_error"]) == (
        admin.user_id, broken, "JUDGMENT_AMOUNT_INVALID: Amount is not money")

    # And resends of the original events stay duplicates: nothing comes back as new work
    key = _key(gateway, admin.token)
    resend = [{"source_system": "jbi", "source_event_id": "d", "type": "judgment.upserted",
               "payload": broken},
              {"source_system": "jbi", "source_event_id": "p", "type": "judgment.upserted",
               "payload": judgment("CV-P")}]
    with gateway.client() as client:
        answer = client.post("/v1/events", json=resend, headers={"X-Api-Key": key}).json()
    assert [o["outcome"] for o in answer["outcomes"]] == ["duplicate", "duplicate"]
    assert conn.execute("SELECT process_state FROM event_ledger WHERE ledger_id = %s",
                        (p,)).fetchone()["process_state"] == "discarded"


def test_another_tenants_admin_can_neither_discard_nor_edit(gateway, tenants, conn):
    owner, other = tenants.user("acme"), tenants.user("globex")
    ledger_id = put(conn, owner.tenant_id, "o", judgment("CV-O"))
    dead(conn, ledger_id, "boom")
    with gateway.client(other.token) as client:
        for path, body in ((f"/v1/events/{ledger_id}/discard", {"reason": "mine now",
                                                                 "version": 1}),
                           (f"/v1/events/{ledger_id}/edit", {"payload": {}, "reason": "x",
                                                             "version": 1})):
            answer = client.post(path, json=body)
            assert (answer.status_code, answer.json()["code"]) == (404, "event_not_found")
    with gateway.client(tenants.user("acme", role="user").token) as client:
        assert client.post(f"/v1/events/{ledger_id}/discard",
                           json={"reason": "r", "version": 1}).status_code == 403
    assert conn.execute("SELECT process_state FROM event_ledger WHERE ledger_id = %s",
                        (ledger_id,)).fetchone()["process_state"] == "dead_letter"
    assert conn.execute("SELECT count(*) AS n FROM event_actions").fetchone()["n"] == 0


def test_an_applier_that_claimed_before_an_edit_cannot_write_the_old_payload(
        gateway, tenants, conn, database_url):
    # Given a pending event an applier has claimed (its attempt counted) but not applied yet
    from worker.ledger import apply as ledger_apply

    admin = tenants.user("acme")
    ledger_id = put(conn, admin.tenant_id, "c", judgment("CV-C", "1.00"))
    [claimed] = conn.execute(ledger_apply.Q["claim"], {"limit": 10, "lease_s": 0,
                                                       "after": None}).fetchall()
    # When an admin edits it meanwhile
    with gateway.client(admin.token) as client:
        assert client.post(f"/v1/events/{ledger_id}/edit", json={
            "payload": judgment("CV-C", "2.00"), "reason": "amount corrected",
            "state": "pending"}).status_code == 200

    # Then the earlier claim is fenced out, however many claims come after the edit
    def item(row):
        event = ledger_apply.Event.of(row)
        return ledger_apply.Item(event, ledger_apply.validate(event))

    with db.connect(database_url, autocommit=True) as worker_conn:
        assert ledger_apply.apply_batch(worker_conn, admin.tenant_id, [item(claimed)]) == []
        [again] = worker_conn.execute(ledger_apply.Q["claim"], {
            "limit": 10, "lease_s": 60, "after": None}).fetchall()
        assert again["apply_attempt_count"] == claimed["apply_attempt_count"] + 2
        [outcome] = ledger_apply.apply_batch(worker_conn, admin.tenant_id, [item(again)])
    assert (outcome.ledger_id, outcome.superseded) == (ledger_id, False)
    amounts = conn.execute("SELECT amount FROM judgments WHERE tenant_id = %s",
                           (admin.tenant_id,)).fetchall()
    assert [str(r["amount"]) for r in amounts] == ["2.00"]


def test_ten_concurrent_identical_edits_are_one_action_and_a_stale_one_is_409(gateway, tenants,
                                                                             conn):
    # Given a dead letter at the version an admin loaded
    admin = tenants.user("acme")
    d = put(conn, admin.tenant_id, "d10", judgment("CV-10", "lots"))
    dead(conn, d, "JUDGMENT_AMOUNT_INVALID: Amount is not money")
    with gateway.client(admin.token) as client:
        version = client.get(f"/v1/events/{d}").json()["version"]
    body = {"payload": judgment("CV-10", "10.00"), "reason": "amount fixed", "version": version}

    # When the same edit is sent ten times at once (a double click, a client's retries)
    def send(_):
        with gateway.client(admin.token) as c:
            return c.post(f"/v1/events/{d}/edit", json=body)

    with ThreadPoolExecutor(10) as pool:
        answers = list(pool.map(send, range(10)))

    # Then each got the same answer, for one action, on the record once
    assert {a.status_code for a in answers} == {200}, [a.text for a in answers]
    assert len({a.json()["action_id"] for a in answers}) == 1
    assert conn.execute("SELECT count(*) AS n FROM event_actions WHERE ledger_id = %s",
                        (d,)).fetchone()["n"] == 1
    row = conn.execute("SELECT version, apply_attempt_count, apply_attempt_base FROM "
                       "event_ledger WHERE ledger_id = %s", (d,)).fetchone()
    assert row["version"] == version + 1 and row["apply_attempt_count"] == 11  # edited once

    with gateway.client(admin.token) as client:
        # And another admin's edit decided on the same version is refused, not applied over it
        other = client.post(f"/v1/events/{d}/edit", json={**body, "reason": "my fix"})
        assert (other.status_code, other.json()["code"]) == (409, "event_changed")
        # as is a discard on what the first admin saw, and an edit by state once it moved on
        stale = client.post(f"/v1/events/{d}/discard", json={"reason": "r",
                                                             "state": "dead_letter"})
        assert (stale.status_code, stale.json()["code"]) == (409, "event_changed")
    assert conn.execute("SELECT payload->>'Amount' AS a FROM event_ledger WHERE ledger_id = %s",
                        (d,)).fetchone()["a"] == "10.00"


def test_an_edit_corrects_the_time_and_sequence_and_a_resend_of_the_original_stays_a_duplicate(
        gateway, tenants, conn):
    admin = tenants.user("acme")
    key = _key(gateway, admin.token)
    original = {"source_system": "jbi", "source_event_id": "t1", "type": "judgment.upserted",
                "source_sequence": 7, "source_emitted_at": "2024-05-01T12:00:00Z",
                "payload": judgment("CV-T1")}
    with gateway.client() as c:
        [sent] = c.post("/v1/events", json=[original], headers={"X-Api-Key": key}).json()[
            "outcomes"]
    d = sent["ledger_id"]
    dead(conn, d, "clock was a year off")
    with gateway.client(admin.token) as client:
        # A time that intake would refuse is refused here too
        late = client.post(f"/v1/events/{d}/edit", json={
            "source_emitted_at": "2999-01-01T00:00:00Z", "reason": "r", "state": "dead_letter"})
        assert late.status_code == 400 and "clock" in late.json()["detail"]
        fixed = client.post(f"/v1/events/{d}/edit", json={
            "source_emitted_at": "2025-05-01T12:00:00+02:00", "source_sequence": None,
            "reason": "producer clock a year behind", "state": "dead_letter"})
        assert fixed.status_code == 200, fixed.text
        shown = client.get(f"/v1/events/{d}").json()
        assert (shown["source_emitted_at"], shown["source_sequence"], shown["state"]) == (
            "2025-05-01T10:00:00+00:00", None, "pending")
        [action] = shown["actions"]
        assert (action["previous_source_sequence"], action["previous_source_emitted_at"]) == (
            7, "2024-05-01T12:00:00+00:00")
    with gateway.client() as c:  # the producer resends its original: still the same event
        again = c.post("/v1/events", json=[original, {**original, "source_sequence": 8}],
                       headers={"X-Api-Key": key}).json()["outcomes"]
    assert [(o["outcome"], o.get("code")) for o in again] == [
        ("duplicate", None), ("conflict", "sequence_differs")]


def test_an_admin_previews_and_discards_a_backlog_by_filter_each_on_the_record(gateway, tenants,
                                                                              conn):
    # Given junk events of one type (pending and dead letters), others, and another tenant's
    admin = tenants.user("acme")
    other = tenants.user("globex")
    junk = [put(conn, admin.tenant_id, f"j{i}", {"n": i}, type="lead.created")
            for i in range(12)]
    for ledger_id in junk[:4]:
        dead(conn, ledger_id, "unknown type lead.created")
    conn.execute("UPDATE event_ledger SET process_state = 'processed', processed_at = now() "
                 "WHERE ledger_id = %s", (junk[11],))
    keep = put(conn, admin.tenant_id, "k", judgment("CV-K"))
    theirs = put(conn, other.tenant_id, "t", {"n": 1}, type="lead.created")
    wanted = {"type": "lead.created"}
    with gateway.client(admin.token) as client:
        # When the admin previews the filter
        preview = client.post("/v1/events/discard", json={**wanted, "preview": True})
        assert preview.status_code == 200, preview.text
        assert preview.json()["matched"] == 11
        # a purge with a smaller confirmed count than match now is refused
        grew = client.post("/v1/events/discard", json={**wanted, "reason": "junk",
                                                       "at_most": 10})
        assert (grew.status_code, grew.json()["code"]) == (409, "purge_grew")
        assert client.post("/v1/events/discard", json=wanted).status_code == 400  # no reason
        # a filter that matches nothing discards nothing and records no purge
        none = client.post("/v1/events/discard", json={"type": "nothing.such", "reason": "r"})
        assert none.json() == {"purge_id": None, "discarded": 0, "matched": 0}, none.text
        # and a time must be a time, with its offset, not a number of seconds
        for bad in ({**wanted, "preview": True, "until": 0},
                    {**wanted, "preview": True, "since": "2024-05-01T00:00:00"},
                    # and a switch is true or false, not 0 (schemathesis sent this one)
                    {**wanted, "preview": 0, "reason": "0"}):
            assert client.post("/v1/events/discard", json=bad).status_code == 400, bad
        assert client.get("/v1/events", params={"until": "0.5"}).status_code == 400
        assert client.get("/v1/events", params={
            "until": "2999-01-01T00:00:00.5+05:30"}).json()["total"] == 13  # 12 junk, keep
        # and then discards them, saying why
        done = client.post("/v1/events/discard", json={**wanted, "reason": "a test producer's "
                                                                 "junk", "at_most": 11})
        assert done.status_code == 200, done.text
        assert (done.json()["discarded"], done.json()["matched"]) == (11, 11)
        history = client.get(f"/v1/events/{junk[0]}").json()["actions"]
    # Then each matching event is discarded and on the record like a single discard; the
    # processed one, the other type and the other tenant's are untouched
    states = {r["ledger_id"]: r["process_state"] for r in conn.execute(
        "SELECT ledger_id, process_state FROM event_ledger").fetchall()}
    assert {states[i] for i in junk[:11]} == {"discarded"}
    assert (states[junk[11]], states[keep], states[theirs]) == ("processed", "pending", "pending")
    actions = conn.execute("SELECT ledger_id, action, actor, reason, previous_state, purge_id "
                           "FROM event_actions ORDER BY ledger_id").fetchall()
    assert [a["ledger_id"] for a in actions] == junk[:11]
    assert {(a["action"], a["actor"], a["reason"]) for a in actions} == {
        ("discard", f"user:{admin.user_id}", "a test producer's junk")}
    assert [a["previous_state"] for a in actions].count("dead_letter") == 4
    [purge] = conn.execute("SELECT * FROM event_purges").fetchall()
    assert (purge["tenant_id"], purge["event_count"], purge["previewed"], purge["filter"]) == (
        admin.tenant_id, 11, 11, {"type": "lead.created"})
    assert purge["finished_at"] is not None and {a["purge_id"] for a in actions} == {
        purge["purge_id"]}
    assert history[0]["purge_id"] == purge["purge_id"]


def test_an_operator_purges_by_filter_from_the_cli_after_a_preview(tenants, conn, stack_env):
    from tests.support import stack

    acme, globex = tenants.user("acme"), tenants.user("globex")
    junk = [put(conn, t.tenant_id, f"j{i}", {"n": i}, type="lead.created")
            for t in (acme, globex) for i in range(3)]
    conn.execute("UPDATE event_ledger SET ingest_first_seen_at = '2024-05-01T12:00:00Z' "
                 "WHERE ledger_id = ANY(%s)", (junk[:2],))
    window = ["--type", "lead.created", "--since", "2024-05-01T00:00:00Z",
              "--until", "2024-05-02T00:00:00Z"]
    seen = stack.ingest(["events", "discard", "--matching", *window, "--preview"], stack_env)
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.startswith("2 event(s) match")
    refused = stack.ingest(["events", "discard", "--matching", *window, "--at-most", "1",
                            "--reason", "flood"], stack_env)
    assert refused.returncode == 1 and "more than the 1 you were shown" in refused.stderr
    done = stack.ingest(["events", "discard", "--matching", *window, "--at-most", "2",
                         "--reason", "flood", "--actor", "ops-anna"], stack_env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("discarded 2 event(s)")
    states = [r["process_state"] for r in conn.execute(
        "SELECT process_state FROM event_ledger ORDER BY ledger_id").fetchall()]
    assert states == ["discarded"] * 2 + ["pending"] * 4
    assert [r["actor"] for r in conn.execute("SELECT actor FROM event_actions").fetchall()] == [
        "cli:ops-anna"] * 2
