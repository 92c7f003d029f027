"""Event intake against real gateway processes and a real Postgres (issue 14, intake half):
API keys, POST /v1/events through each gateway's writer, the cursor."""

from __future__ import annotations

import json
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import httpx
import psutil
import psycopg
import pytest

from tests.support import stack


def _key(gw: stack.Process, admin_token: str, name: str = "producer") -> str:
    with gw.client(admin_token) as c:
        r = c.post("/v1/api-keys", json={"name": name})
    assert r.status_code == 201, r.text
    return r.json()["key"]


def _events(n: int, source: str = "billing", start: int = 1, prefix: str = "e") -> list[dict]:
    return [{"source_system": source, "source_event_id": f"{prefix}{i}", "source_sequence": i,
             "source_emitted_at": "2024-05-01T12:00:00Z", "type": "judgment.upserted",
             "payload": {"case_number": f"C-{i}", "amount": i}} for i in range(start, start + n)]


def _post(client: httpx.Client, key: str, events: list) -> httpx.Response:
    return client.post("/v1/events", json=events, headers={"X-Api-Key": key})


def _rows(conn: psycopg.Connection, tenant_id) -> list[dict]:
    return conn.execute("SELECT * FROM event_ledger WHERE tenant_id = %s ORDER BY ledger_id",
                        (tenant_id,)).fetchall()


def test_the_same_events_sent_three_times_from_8_clients_make_one_row_each(gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    events = _events(1000)
    batches = [events[i:i + 100] for i in range(0, 1000, 100)] * 3
    local = threading.local()

    def send(batch: list) -> dict:
        if not hasattr(local, "client"):
            local.client = gateway.client()
        r = _post(local.client, key, batch)
        assert r.status_code == 202, r.text
        return r.json()["counts"]

    with ThreadPoolExecutor(8) as pool:
        counts = list(pool.map(send, batches))
    rows = _rows(conn, admin.tenant_id)
    assert len(rows) == 1000
    assert {r["ingest_attempt_count"] for r in rows} == {3}
    assert all(r["process_state"] == "pending" and r["conflict_count"] == 0 for r in rows)
    # Each event was new exactly once, a duplicate the other two times.
    assert sum(c["new"] for c in counts) == 1000
    assert sum(c["duplicate"] for c in counts) == 2000


def test_a_conflict_keeps_the_first_payload_and_is_counted(gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    first, other = _events(1), _events(1)
    other[0]["payload"] = {"case_number": "C-1", "amount": 999}
    with gateway.client() as c:
        assert _post(c, key, first).json()["outcomes"][0]["outcome"] == "new"
        assert _post(c, key, other).json()["outcomes"][0]["outcome"] == "conflict"
        # The same key twice in one batch (one writer group): each gets its own outcome.
        r = _post(c, key, [*first, *other])
    assert [o["outcome"] for o in r.json()["outcomes"]] == ["duplicate", "conflict"]
    [row] = _rows(conn, admin.tenant_id)
    assert row["payload"] == {"case_number": "C-1", "amount": 1}
    assert row["ingest_attempt_count"] == 4 and row["conflict_count"] == 2


def test_a_repeat_leaves_a_processed_row_as_it_was(gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    with gateway.client() as c:
        _post(c, key, _events(1))
        conn.execute("UPDATE event_ledger SET process_state = 'processed', processed_at = now(), "
                     "entity_key = 'C-1'")
        changed = _events(1)
        changed[0]["payload"] = {"case_number": "C-1", "amount": 2}
        assert _post(c, key, changed).status_code == 202
    [row] = _rows(conn, admin.tenant_id)
    assert (row["process_state"], row["entity_key"], row["payload"]["amount"]) == ("processed", "C-1", 1)
    assert row["ingest_attempt_count"] == 2 and row["conflict_count"] == 1


def test_bad_events_are_refused_one_by_one(gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    good = _events(2)
    batch = [good[0], {"source_system": "billing", "type": "x", "payload": {}},
             {**good[1], "source_event_id": "bad-seq", "source_sequence": -1},
             {**good[1], "source_event_id": "bad-time", "source_emitted_at": "yesterday"},
             {**good[1], "source_event_id": "nul", "payload": {"a": "x\u0000y"}},
             {**good[1], "source_event_id": "list-payload", "payload": [1]},
             "not an object", good[1]]
    with gateway.client() as c:
        r = _post(c, key, batch)
    assert r.status_code == 202, r.text
    assert [(o["outcome"], o.get("code")) for o in r.json()["outcomes"]] == [
        ("new", None), ("rejected", "missing_source_event_id"),
        ("rejected", "invalid_source_sequence"), ("rejected", "invalid_source_emitted_at"),
        ("rejected", "payload_has_nul"), ("rejected", "invalid_payload"),
        ("rejected", "invalid_event"), ("new", None)]
    assert [r["source_event_id"] for r in _rows(conn, admin.tenant_id)] == ["e1", "e2"]


def test_a_body_over_the_limit_or_too_many_events_is_413(stack_env, out_dir, tenants, conn):
    gw = stack.start_gateway({**stack_env, "EVENTS_MAX_BODY_KB": "64", "EVENTS_MAX_BATCH": "50"},
                             out_dir)
    try:
        admin = tenants.user()
        key = _key(gw, admin.token)
        big = _events(1)
        big[0]["payload"] = {"blob": "x" * 70_000}
        with gw.client() as c:
            r = _post(c, key, big)
            assert (r.status_code, r.json()["code"]) == (413, "body_too_large")
            r = _post(c, key, _events(51))
            assert (r.status_code, r.json()["code"]) == (413, "too_many_events")
            assert _post(c, key, "{not json").status_code == 400
        assert _rows(conn, admin.tenant_id) == []
    finally:
        gw.stop()


def test_a_full_queue_answers_429_and_nothing_is_lost_after_retries(stack_env, out_dir, tenants, conn, database_url):
    # A writer task takes queued requests up to EVENTS_GROUP_MAX events before it commits, so
    # what a blocked writer holds is tasks x group max beyond the queue: here 10 + 20 events,
    # three batches. Left at 4 tasks x 1,000 it could take all eight batches and refuse none.
    gw = stack.start_gateway({**stack_env, "EVENTS_QUEUE_SIZE": "20", "EVENTS_MAX_BATCH": "10",
                              "EVENTS_GROUP_MAX": "10", "EVENTS_WRITER_CONNECTIONS": "1"},
                             out_dir)
    try:
        admin = tenants.user()
        key = _key(gw, admin.token)
        events = _events(200)
        batches = [events[i:i + 10] for i in range(0, 200, 10)]
        # Hold the ledger: the writer blocks in its first commit and the queue fills for sure.
        with psycopg.connect(database_url) as blocker:
            blocker.execute("LOCK TABLE event_ledger IN EXCLUSIVE MODE")
            with ThreadPoolExecutor(8) as pool:
                held = [pool.submit(lambda b=b: _post(gw.client(), key, b)) for b in batches[:8]]
                refused = stack.wait_until(
                    lambda: next((f.result() for f in held if f.done()), None), timeout=30,
                    message="a batch answered while the ledger was locked")
                assert refused.status_code == 429, refused.text
                assert int(refused.headers["Retry-After"]) >= 1
                assert refused.json()["code"] == "intake_busy"
                blocker.rollback()  # release: the writer commits what it holds
                answers = [f.result() for f in held]
        with gw.client() as c:
            metrics = c.get("/metrics", headers={
                "Authorization": f"Bearer {stack_env['METRICS_TOKEN']}"}).text
            assert "ingest_events_queue_saturated_total" in metrics
            for batch, answer in zip(batches, answers + [None] * 12, strict=True):
                while answer is None or answer.status_code == 429:  # the client's retry loop
                    answer = _post(c, key, batch)
                assert answer.status_code == 202, answer.text
        saturated = [line for line in metrics.splitlines()
                     if line.startswith("ingest_events_queue_saturated_total")]
        assert float(saturated[0].split()[-1]) >= 1
        rows = _rows(conn, admin.tenant_id)
        assert sorted(r["source_event_id"] for r in rows) == sorted(e["source_event_id"] for e in events)
    finally:
        gw.stop()


def test_a_gateway_killed_mid_burst_loses_no_acknowledged_event(stack_env, out_dir, tenants, conn):
    gw = stack.start_gateway(stack_env, out_dir)
    admin = tenants.user()
    key = _key(gw, admin.token)
    acknowledged: list[str] = []
    lock = threading.Lock()

    def producer(n: int) -> None:
        with gw.client() as c:
            for b in range(200):
                batch = _events(50, prefix=f"p{n}-b{b}-")
                try:
                    r = _post(c, key, batch)
                except httpx.HTTPError:
                    return
                if r.status_code == 202:
                    with lock:
                        acknowledged.extend(e["source_event_id"] for e in batch)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    stack.wait_until(lambda: len(acknowledged) >= 1000, timeout=60, message="1,000 events acked")
    gw.signal(signal.SIGKILL)
    for t in threads:
        t.join(60)
    gw.proc.wait(10)
    stored = [r["source_event_id"] for r in _rows(conn, admin.tenant_id)]
    assert set(acknowledged) <= set(stored)
    assert len(stored) == len(set(stored))
    assert {r["ingest_attempt_count"] for r in _rows(conn, admin.tenant_id)} == {1}


def test_keys_are_per_tenant_and_revocable(gateway, tenants, conn):
    acme, other = tenants.user("acme"), tenants.user("globex")
    acme_key, other_key = _key(gateway, acme.token), _key(gateway, other.token)
    with gateway.client() as c:
        _post(c, acme_key, _events(5))
        # Globex's key writes globex's ledger, whatever its events say, and reads its own cursor.
        assert _post(c, other_key, _events(3)).status_code == 202
        assert c.get("/v1/events/cursor", params={"source_system": "billing"},
                     headers={"X-Api-Key": acme_key}).json()["sequence"] == 5
        assert c.get("/v1/events/cursor", params={"source_system": "billing"},
                     headers={"X-Api-Key": other_key}).json()["sequence"] == 3
    assert len(_rows(conn, acme.tenant_id)) == 5 and len(_rows(conn, other.tenant_id)) == 3
    with gateway.client(acme.token) as c:
        listed = c.get("/v1/api-keys").json()["items"]
        assert len(listed) == 1 and "key" not in listed[0] and "key_hash" not in listed[0]
        key_id = listed[0]["key_id"]
    with gateway.client(other.token) as c:  # another tenant's admin cannot revoke it
        assert c.delete(f"/v1/api-keys/{key_id}").status_code == 404
    with gateway.client(acme.token) as c:
        assert c.delete(f"/v1/api-keys/{key_id}").status_code == 204
        assert c.get("/v1/api-keys").json()["items"][0]["revoked_at"] is not None
    with gateway.client() as c:
        r = _post(c, acme_key, _events(1, start=6))
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
        assert _post(c, "dfk_" + "x" * 43, _events(1)).status_code == 401
        assert _post(c, "", _events(1)).status_code == 401
        assert c.post("/v1/events", json=_events(1)).status_code == 401  # no key at all


def _key_listeners(conn: psycopg.Connection) -> int:
    """Gateways of this test's database whose LISTEN on df_api_keys is in place (ADR 0440)."""
    return conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'ingest-gateway-api-keys' AND state = 'idle' AND query <> ''"
    ).fetchone()["n"]


def test_a_revoked_key_stops_at_once_on_a_gateway_that_answered_it_from_memory(
        gateway, stack_env, out_dir, tenants, conn):
    """Gateway 2 answers live keys from memory (EVENTS_KEY_CACHE_S, ADR 0440); a key revoked
    through gateway 1, by hand in SQL or whose row is removed must be refused there within
    moments (announced at commit, migrations/0200), not when its 60 s are up; other keys,
    another tenant's among them, go on acting for their own tenant only."""
    second = stack.start_gateway(stack_env, out_dir / "second", name="gateway-2")
    try:
        acme, globex = tenants.user("acme"), tenants.user("globex")
        names = ("by-api", "by-hand", "removed", "kept")
        acme_keys = {name: _key(gateway, acme.token, name) for name in names}
        globex_key = _key(gateway, globex.token)
        stack.wait_until(lambda: _key_listeners(conn) == 2, 30,
                         message="both gateways listen for revocations")
        with second.client() as c:
            for attempt in range(2):  # looked up once, then answered from memory
                for i, key in enumerate([*acme_keys.values(), globex_key]):
                    r = _post(c, key, _events(1, start=10 * attempt + i))
                    assert r.status_code == 202, r.text
        with gateway.client(acme.token) as c:
            ids = {k["name"]: k["key_id"] for k in c.get("/v1/api-keys").json()["items"]}
            assert c.delete(f"/v1/api-keys/{ids['by-api']}").status_code == 204
        conn.execute("UPDATE api_keys SET revoked_at = now() WHERE key_id = %s", (ids["by-hand"],))
        conn.execute("DELETE FROM api_keys WHERE key_id = %s", (ids["removed"],))
        with second.client() as c:
            for name in ("by-api", "by-hand", "removed"):
                stack.wait_until(
                    lambda name=name: _post(c, acme_keys[name], _events(1)).status_code == 401,
                    timeout=3, interval=0.05, message=f"the {name} key refused by gateway 2")
            assert _post(c, acme_keys["kept"], _events(1, start=50)).status_code == 202
            assert _post(c, globex_key, _events(2, start=60, prefix="g")).status_code == 202
        sources = conn.execute("SELECT tenant_id, count(*) AS n FROM event_ledger "
                               "WHERE source_event_id LIKE 'g%%' GROUP BY tenant_id").fetchall()
        assert sources == [{"tenant_id": globex.tenant_id, "n": 2}]
    finally:
        second.stop()


@pytest.mark.parametrize("method,path", [
    ("GET", "/v1/ingestion-runs"), ("GET", "/v1/api-keys"), ("POST", "/v1/api-keys"),
    ("GET", "/v1/documents"), ("GET", "/v1/imports"), ("GET", "/v1/auth/me"),
    ("GET", "/v1/users/"), ("GET", "/v1/metrics"), ("GET", "/v1/dead-letters")])
def test_an_api_key_opens_no_other_route(gateway, tenants, method, path):
    key = _key(gateway, tenants.user().token)
    with gateway.client() as c:
        r = c.request(method, path, headers={"X-Api-Key": key}, json={"name": "x"}
                      if method == "POST" else None)
    assert r.status_code in (401, 403), (path, r.status_code, r.text)


def test_only_event_intake_and_the_cursor_accept_an_api_key(stack_env):
    # The guard opens a route to a key only when its handler opts in: list every route.
    from gateway.app import create_app
    from shared.settings import GatewaySettings

    app = create_app(GatewaySettings(**{k.lower(): v for k, v in stack_env.items()
                                        if k.lower() in GatewaySettings.model_fields}))
    opted = sorted((method, route.path) for route in app.routes
                   for handler in getattr(route, "route_handlers", [])
                   if handler.opt.get("api_key") for method in handler.http_methods)
    assert opted == [("GET", "/v1/events/cursor"), ("POST", "/v1/events")]


def test_the_cursor_is_the_end_of_the_first_contiguous_run(gateway, tenants):
    admin, user = tenants.user(), tenants.user(role="user")
    key = _key(gateway, admin.token)
    events = [e for e in _events(10) if e["source_sequence"] != 6] + _events(2, source="crm")
    with gateway.client() as c:
        assert _post(c, key, events).status_code == 202
        assert _post(c, key, events[:3]).status_code == 202  # repeats do not move it
        get = lambda **kw: c.get("/v1/events/cursor", params={"source_system": "billing"}, **kw)  # noqa: E731
        assert get(headers={"X-Api-Key": key}).json() == {"source_system": "billing", "sequence": 5}
        assert get(headers={"Authorization": f"Bearer {admin.token}"}).json()["sequence"] == 5
        assert get(headers={"Authorization": f"Bearer {user.token}"}).status_code == 403
        assert c.get("/v1/events/cursor", params={"source_system": "nothing"},
                     headers={"X-Api-Key": key}).json()["sequence"] is None
        _post(c, key, _events(1, start=6))
        assert get(headers={"X-Api-Key": key}).json()["sequence"] == 10


def test_a_user_token_cannot_post_events(gateway, tenants):
    admin = tenants.user()
    with gateway.client(admin.token) as c:
        r = c.post("/v1/events", json=_events(1))
    assert r.status_code == 401


def test_the_writer_turns_health_critical_while_the_database_refuses_and_recovers(
        stack_env, out_dir, tenants, conn):
    gw = stack.start_gateway({**stack_env, "EVENTS_WRITER_RETRY_BUDGET": "2"}, out_dir)
    try:
        admin = tenants.user()
        key = _key(gw, admin.token)
        # A real transient error from Postgres (SQLSTATE 40001) on every ledger write while the
        # switch is on; key checks and the rest of the gateway keep working.
        conn.execute("CREATE TABLE fault_on (x int)")
        conn.execute("INSERT INTO fault_on VALUES (1)")
        conn.execute("""CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF EXISTS (SELECT 1 FROM fault_on) THEN
                RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; END IF;
            RETURN NEW; END $$""")
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON event_ledger "
                     "FOR EACH ROW EXECUTE FUNCTION refuse()")
        result: dict = {}
        sender = threading.Thread(target=lambda: result.update(
            r=_post(gw.client(), key, _events(3))))
        sender.start()

        def critical() -> httpx.Response | None:
            r = httpx.get(f"{gw.url}/health/ready", timeout=10)
            return r if r.json()["checks"]["event_writer"].startswith("critical") else None

        ready = stack.wait_until(critical, timeout=60, message="event writer reported critical")
        assert ready.status_code == 503
        assert gw.proc.poll() is None  # the process keeps running, and keeps retrying
        conn.execute("DELETE FROM fault_on")
        sender.join(60)
        assert result["r"].status_code == 202, result["r"].text
        assert httpx.get(f"{gw.url}/health/ready", timeout=10).json()[
            "checks"]["event_writer"] == "ok"
        assert len(_rows(conn, admin.tenant_id)) == 3
    finally:
        gw.stop()


def test_the_writer_recovers_when_postgres_ends_its_connections(stack_env, out_dir, tenants, conn):
    # The writer's pool lends connections unchecked (ADR 0287): a group that finds its
    # connection ended is retried on a new one, and the request is still answered 202.
    gw = stack.start_gateway(stack_env, out_dir)
    try:
        admin = tenants.user()
        key = _key(gw, admin.token)
        assert _post(gw.client(), key, _events(4, prefix="a")).status_code == 202
        ports = [c.laddr.port for c in psutil.Process(gw.proc.pid).net_connections("tcp")
                 if c.raddr and c.raddr.port == conn.info.port]
        ended = conn.execute("SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n "
                             "FROM pg_stat_activity WHERE client_port = ANY(%s)",
                             (ports,)).fetchone()
        assert ended["n"] >= 2  # the requests' pool and the writer's
        r = _post(gw.client(), key, _events(4, prefix="b"))
        assert [o["outcome"] for o in r.json()["outcomes"]] == ["new"] * 4, r.text
        assert len(_rows(conn, admin.tenant_id)) == 8
    finally:
        gw.stop()


def _outcomes(response: httpx.Response) -> list[tuple]:
    assert response.status_code == 202, response.text
    return [(o["outcome"], o.get("code")) for o in response.json()["outcomes"]]


def test_emitted_times_outside_the_range_or_ahead_of_the_clock_are_refused(gateway, tenants, conn):
    # Both stall every tenant's apply on main: their UTC value is in year 0 / year 10000, which
    # Postgres stores but Python cannot read back. A time days ahead is a source's broken clock.
    admin = tenants.user()
    key = _key(gateway, admin.token)
    soon_at = datetime.now(UTC) + timedelta(hours=20)
    soon = soon_at.isoformat()
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    times = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", later, soon,
             "1066-10-14T09:00:00Z", "0001-01-01T00:00:00Z"]
    batch = [{**_events(1, prefix=f"t{n}-")[0], "source_emitted_at": t}
             for n, t in enumerate(times)]
    with gateway.client() as c:
        outcomes = _outcomes(_post(c, key, batch))
    assert outcomes == [("rejected", "source_emitted_at_out_of_range"),
                        ("rejected", "source_emitted_at_out_of_range"),
                        ("rejected", "source_emitted_at_in_future"),
                        ("new", None), ("new", None), ("new", None)]
    stored = [r["source_emitted_at"] for r in _rows(conn, admin.tenant_id)]
    assert [t.year for t in stored] == [soon_at.year, 1066, 1]


def test_each_kind_of_bad_value_has_its_own_code(gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    good = _events(6)
    batch = [{**good[0], "source_event_id": 123},                   # a number, not a string
             {**good[1], "type": ["judgment.upserted"]},            # a list, not a string
             {**good[2], "source_event_id": None},                  # missing
             {**good[3], "payload": {"note": "C:\\u0000 is six characters"}},  # text, no NUL
             {**good[4], "payload": {"note": "a real \u0000 NUL"}},
             good[5]]
    body = json.dumps(batch)
    # A 5,000-digit number (Python's json refuses to write one, so it is spliced in as text):
    # one event's error, never the batch's.
    huge = json.dumps({**_events(1, prefix="huge-")[0], "payload": {"amount": "HUGE"}})
    body = body[:-1] + ", " + huge.replace('"HUGE"', "9" * 5000) + "]"
    with gateway.client() as c:
        r = c.post("/v1/events", content=body.encode(),
                   headers={"X-Api-Key": key, "Content-Type": "application/json"})
    assert _outcomes(r) == [("rejected", "invalid_source_event_id"), ("rejected", "invalid_type"),
                            ("rejected", "missing_source_event_id"), ("new", None),
                            ("rejected", "payload_has_nul"), ("new", None),
                            ("rejected", "number_too_large")]
    rows = {r["source_event_id"]: r for r in _rows(conn, admin.tenant_id)}
    assert set(rows) == {"e4", "e6"}
    assert rows["e4"]["payload"]["note"] == "C:\\u0000 is six characters"


def test_a_resend_that_differs_only_in_type_sequence_or_time_is_a_conflict_with_its_code(
        gateway, tenants, conn):
    admin = tenants.user()
    key = _key(gateway, admin.token)
    [first] = _events(1)
    resends = [first, {**first, "type": "plaintiff.upserted"}, {**first, "source_sequence": 99},
               {**first, "source_emitted_at": "2024-05-01T12:00:01Z"},
               {**first, "payload": {"case_number": "C-1", "amount": 2}},
               # The same instant written with another offset is the same time.
               {**first, "source_emitted_at": "2024-05-01T14:00:00+02:00"}]
    with gateway.client() as c:
        assert _outcomes(_post(c, key, [first])) == [("new", None)]
        one_by_one = [_outcomes(_post(c, key, [e]))[0] for e in resends]
        together = _outcomes(_post(c, key, resends))  # one writer group, one key
    expected = [("duplicate", None), ("conflict", "type_differs"),
                ("conflict", "sequence_differs"), ("conflict", "emitted_at_differs"),
                ("conflict", "payload_differs"), ("duplicate", None)]
    assert one_by_one == expected and together == expected
    [row] = _rows(conn, admin.tenant_id)
    assert (row["type"], row["source_sequence"], row["payload"]["amount"]) == (
        "judgment.upserted", 1, 1)
    assert row["conflict_count"] == 8 and row["ingest_attempt_count"] == 13


def test_inside_one_batch_the_array_order_is_the_arrival_order(gateway, tenants, conn):
    # Two versions of one case, without sequence or time: ids that sort against the array.
    admin = tenants.user()
    key = _key(gateway, admin.token)
    batch = [{"source_system": "crm", "source_event_id": eid, "type": "judgment.upserted",
              "payload": {"case_number": "C-9", "amount": amount}}
             for eid, amount in (("z-first", "1.00"), ("m-second", "2.00"), ("a-third", "3.00"))]
    with gateway.client() as c:
        assert _outcomes(_post(c, key, batch)) == [("new", None)] * 3
    rows = _rows(conn, admin.tenant_id)  # by ledger_id, the arrival order apply falls back on
    assert [r["source_event_id"] for r in rows] == ["z-first", "m-second", "a-third"]


TIMED_PARTS = ("pre", "read", "check", "queue", "db", "wake", "post")


def test_server_timing_splits_an_intake_answer_into_its_parts(stack_env, out_dir, tenants):
    # EVENTS_SERVER_TIMING (ADR 0341): the bench reads where a request's time went from this
    # header, so each part must be there and add up; `db` is stamped by the writer itself.
    gw = stack.start_gateway({**stack_env, "EVENTS_SERVER_TIMING": "1"}, out_dir)
    try:
        key = _key(gw, tenants.user().token)
        with gw.client() as c:
            r = _post(c, key, _events(50, prefix="timed"))
        assert r.status_code == 202, r.text
        assert r.json()["counts"]["new"] == 50
        parts = {name: float(dur) for name, dur in
                 (part.split(";dur=") for part in r.headers["server-timing"].split(", "))}
        assert set(parts) == {*TIMED_PARTS, "total", "lagmax", "lagsum", "gc", "gc2", "group"}
        assert parts.pop("group") == 50  # a count, not a time: the events in its group (ADR 0360)
        assert all(ms >= 0 for ms in parts.values()), parts
        assert 0 < parts["total"] <= r.elapsed.total_seconds() * 1000, parts
        # Two decimals per part: the seven parts sum to the total within their rounding.
        assert abs(sum(parts[p] for p in TIMED_PARTS) - parts["total"]) < 0.05, parts
        # The writer stamped its group (taken, then committed): the commit took time.
        assert parts["db"] > 0, parts
    finally:
        gw.stop()


def test_no_server_timing_unless_it_is_turned_on(gateway, tenants):
    key = _key(gateway, tenants.user().token)
    with gateway.client() as c:
        r = _post(c, key, _events(2, prefix="untimed"))
    assert r.status_code == 202, r.text
    assert "server-timing" not in r.headers


def test_a_group_the_statement_refuses_keeps_nothing_and_the_next_group_commits(
        database_url, tenants, conn):
    """The group's statement and its COMMIT go in one pipeline (ADR 0400), with the next
    group's BEGIN when more wait (ADR 0441): when the statement fails, the error reaches the
    caller (which splits the group), nothing of the group is kept, and the lane's next
    connection (the pool holds one) commits the next group; a BEGIN sent for a group that
    does not come is ended when the writer goes idle."""
    import asyncio
    import hashlib

    from gateway.events import writer
    from gateway.events.intake import Event
    from shared import db

    tenant_id = tenants.user().tenant_id

    def event(n: int, payload: str) -> Event:
        return Event(tenant_id, "billing", f"g{n}", n, datetime(2024, 5, 1, tzinfo=UTC),
                     "judgment.upserted", payload, hashlib.sha256(payload.encode()).hexdigest())

    async def run() -> tuple[BaseException | None, list[list[dict]], list[bool]]:
        pool = db.async_pool(database_url, min_size=1, max_size=1,
                             configure=writer.prepare, check=False)
        await pool.open(wait=True)
        lane = writer.Lane(pool)
        begun = []
        try:
            first = await writer.upsert(lane, [event(1, '{"a": 1}')], begin_next=True)
            begun.append(lane.in_transaction)  # the next group's BEGIN already sent
            refused = None
            try:  # COPY takes the text; the statement's cast to jsonb refuses it
                await writer.upsert(lane, [event(2, '{"a": 2}'), event(3, "{not json")],
                                    begin_next=True)
            except Exception as exc:  # noqa: BLE001 - what the writer's split sees
                refused = exc
            begun.append(lane.in_transaction)  # rolled back and given back to the pool
            last = await writer.upsert(lane, [event(4, '{"a": 4}'), event(5, "{}")],
                                       begin_next=True)
            await lane.settle()  # the writer went idle
            begun.append(lane.in_transaction)
            return refused, [first, last], begun
        finally:
            await lane.release()
            await pool.close()

    refused, outcomes, begun = asyncio.run(run())
    assert isinstance(refused, psycopg.errors.InvalidTextRepresentation)
    assert [[o["outcome"] for o in group] for group in outcomes] == [["new"], ["new", "new"]]
    assert [r["source_event_id"] for r in _rows(conn, tenant_id)] == ["g1", "g4", "g5"]
    assert begun == [True, False, False]
    idle_in_transaction = conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND state LIKE 'idle in transaction%%'").fetchone()["n"]
    assert idle_in_transaction == 0
