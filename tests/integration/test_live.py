"""GET /v1/live over a real gateway and Postgres (issue 13 item 7, docs/decisions/0160): the
outbox's events and run status changes reach the streams of their own tenant only, a stream
resumes after Last-Event-ID, needs a session, and the process's streams are capped and hold
no database connection each."""

from __future__ import annotations

import time
import uuid

import pytest

from gateway.live import hub
from tests.support import sse, stack
from tests.support.stack import wait_until


def add_event(conn, tenant_id, note: str) -> int:
    """An outbox row as the webhook test action writes it (no batch needed); its number, which
    counts its tenant's events only (docs/decisions/0197)."""
    return conn.execute(
        "INSERT INTO event_outbox (tenant_id, event_type, payload) VALUES (%s, 'webhook.test', "
        "jsonb_build_object('note', %s::text)) RETURNING tenant_seq",
        (tenant_id, note)).fetchone()["tenant_seq"]


def note(event: sse.Event) -> str | None:
    return (event.data.get("payload") or {}).get("note")


@pytest.fixture
def streams():
    opened: list[sse.Stream] = []

    def open_(*args, **kwargs) -> sse.Stream:
        stream = sse.open_stream(*args, **kwargs)
        opened.append(stream)
        return stream

    yield open_
    for stream in opened:
        stream.close()


def test_an_outbox_event_reaches_its_own_tenants_stream_and_no_other(gateway, tenants, conn,
                                                                    streams):
    # Given a user of tenant A and one of tenant B, each with an open stream
    a, b = tenants.user(tenant="acme"), tenants.user(tenant="globex")
    stream_a, stream_b = streams(gateway.url, a.token), streams(gateway.url, b.token)
    assert stream_a.content_type.startswith("text/event-stream")

    # When an event of tenant A is committed
    seq = add_event(conn, a.tenant_id, "for-a")

    # Then A's stream gets it, with its number as the SSE id and the event's own fields
    event = stream_a.next()
    assert (event.event, event.id, note(event)) == ("webhook.test", str(seq), "for-a")
    assert set(event.data) == {"event_id", "event_type", "batch_id", "created_at", "payload"}

    # And B's stream never does: B's own later event is the first thing B receives (the one
    # listener hands announcements on in commit order, so A's would have come first)
    add_event(conn, b.tenant_id, "for-b")
    first_b = stream_b.next()
    assert note(first_b) == "for-b", first_b
    add_event(conn, a.tenant_id, "for-a-again")
    assert note(stream_a.next()) == "for-a-again"


def test_run_status_changes_reach_the_tenants_stream(gateway, tenants, conn, streams):
    a, b = tenants.user(tenant="acme"), tenants.user(tenant="globex")
    stream_a, stream_b = streams(gateway.url, a.token), streams(gateway.url, b.token)
    run_id = uuid.uuid4()

    # When a run of A is queued and then taken by a worker
    conn.execute("INSERT INTO ingestion_runs (run_id, tenant_id, status) VALUES (%s, %s, "
                 "'queued')", (run_id, a.tenant_id))
    conn.execute("UPDATE ingestion_runs SET status = 'running', stage = 'extract', "
                 "started_at = now() WHERE run_id = %s", (run_id,))

    # Then A's stream sees both steps, without ids (they are not resumable events)
    queued, running = stream_a.next(), stream_a.next()
    assert [(e.event, e.data["run_id"], e.data["status"], e.id) for e in (queued, running)] == [
        ("run.status", str(run_id), "queued", None), ("run.status", str(run_id), "running", None)]
    assert running.data["stage"] == "extract"
    # And B's stream does not
    add_event(conn, b.tenant_id, "marker")
    assert note(stream_b.next()) == "marker"


def test_last_event_id_resumes_after_the_given_id(gateway, tenants, conn, streams):
    # Given three events of A and one of B, committed while A had no stream open
    a, b = tenants.user(tenant="acme"), tenants.user(tenant="globex")
    first = add_event(conn, a.tenant_id, "one")
    add_event(conn, b.tenant_id, "b's")
    second, third = add_event(conn, a.tenant_id, "two"), add_event(conn, a.tenant_id, "three")

    # When A reconnects with the id of the first
    stream = streams(gateway.url, a.token, last_event_id=str(first))

    # Then it gets the two after it, in order, and nothing of B; then live events follow
    got = [stream.next(), stream.next()]
    assert [(e.id, note(e)) for e in got] == [(str(second), "two"), (str(third), "three")]
    fourth = add_event(conn, a.tenant_id, "four")
    assert (stream.next().id) == str(fourth)


def test_a_lost_listener_comes_back_and_tells_open_streams_to_look_again(gateway, tenants,
                                                                         conn, streams):
    # Given an open stream
    user = tenants.user()
    stream = streams(gateway.url, user.token)

    # When the gateway's listening connection is killed (a failover, a restart)
    killed = conn.execute("SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
                          "WHERE datname = current_database() AND application_name = %s",
                          (hub.APPLICATION_NAME,)).fetchall()
    assert [r["ok"] for r in killed] == [True]

    # Then the stream stays open, is told to resync once the listener is back, and carries on
    stream.until(lambda e: e.event == "live.resync", timeout=60)
    seq = add_event(conn, user.tenant_id, "after")
    assert stream.until(lambda e: e.event == "webhook.test")[0].id == str(seq)


def test_the_stream_needs_a_live_session(gateway, tenants, conn):
    user = tenants.user()
    with gateway.client() as client:
        anonymous = client.get("/v1/live")
        forged = client.get("/v1/live", headers={"Authorization": "Bearer not-a-token"})
        bad_id = client.get("/v1/live", headers={"Authorization": f"Bearer {user.token}",
                                                 "Last-Event-ID": "1; DROP TABLE"})
    assert (anonymous.status_code, anonymous.json()["code"]) == (401, "unauthorized")
    assert forged.status_code == 401
    assert (bad_id.status_code, bad_id.json()["code"]) == (400, "invalid_request")

    # The web UI's session cookie opens it too, and a deactivated user's does not
    stream = sse.open_stream(gateway.url, cookie=f"df_session={user.token}")
    assert stream.status == 200
    stream.close()
    conn.execute("UPDATE users SET deactivated_at = now() WHERE user_id = %s", (user.user_id,))
    with gateway.client() as client:
        ended = client.get("/v1/live", headers={"Cookie": f"df_session={user.token}"})
    assert ended.status_code == 401


def test_streams_are_capped_end_in_time_and_hold_no_database_connection(
        stack_env, out_dir, tenants, conn, streams):
    # Given a gateway with a pool of two connections, room for three streams, a fast heartbeat
    # and streams that last ten seconds (long enough to open them all on a loaded machine)
    gw = stack.start_gateway({**stack_env, "DB_POOL_MAX": "2", "LIVE_MAX_STREAMS": "3",
                              "LIVE_HEARTBEAT_S": "0.2", "LIVE_STREAM_MAX_S": "10"}, out_dir,
                             name="gateway-live")
    try:
        user = tenants.user()
        # When three streams are open, more than the pool has connections
        open_ = [streams(gw.url, user.token) for _ in range(3)]
        # Then ordinary requests are still answered: no stream holds a connection
        with gw.client(user.token) as client:
            assert client.get("/v1/ingestion-runs").status_code == 200
            # And a fourth stream is refused with a reason and when to come back
            refused = client.get("/v1/live")
        assert (refused.status_code, refused.json()["code"]) == (503, "live_streams_full")
        assert refused.headers["retry-after"] == "30"
        # And the gateway's metrics count them, with the listener up
        with gw.client(stack_env["METRICS_TOKEN"]) as client:
            metrics = client.get("/metrics").text
        assert "ingest_live_streams 3.0" in metrics and "ingest_live_listening 1.0" in metrics
        # And a quiet stream gets heartbeat comments, then ends by itself, freeing its place
        wait_until(lambda: "keepalive" in open_[0].comments, timeout=10, message="heartbeat")
        wait_until(lambda: all(s.ended.is_set() for s in open_), timeout=60, message="ended")
        assert streams(gw.url, user.token).status == 200
    finally:
        gw.stop()


def test_a_stopping_gateway_ends_its_open_streams_instead_of_waiting_for_them(
        stack_env, out_dir, tenants, streams):
    # Given a gateway with two open streams (streams otherwise last LIVE_STREAM_MAX_S, 600 s)
    gw = stack.start_gateway(stack_env, out_dir, name="gateway-stopping")
    user = tenants.user()
    open_ = [streams(gw.url, user.token) for _ in range(2)]

    # When it is told to stop (SIGTERM, as a deploy or `make run`'s Ctrl-C does)
    started = time.monotonic()
    assert gw.stop() in (0, -15)  # uvicorn re-raises the signal once it has shut down

    # Then it exits well inside uvicorn's 10 s graceful-shutdown timeout, and both streams
    # ended (their browsers reconnect elsewhere with Last-Event-ID)
    assert time.monotonic() - started < 5
    assert all(s.ended.wait(5) for s in open_)


def test_event_ids_count_the_tenants_own_events_only(gateway, tenants, conn, streams):
    # Given thirteen events of another tenant first
    a, b = tenants.user(tenant="acme"), tenants.user(tenant="globex")
    for n in range(13):
        add_event(conn, b.tenant_id, f"b-{n}")
    stream = streams(gateway.url, a.token)

    # When A's first and second events are committed
    add_event(conn, a.tenant_id, "first")
    add_event(conn, a.tenant_id, "second")

    # Then their ids are 1 and 2: nothing tells A how many events others had
    assert [(e.id, note(e)) for e in (stream.next(), stream.next())] == [
        ("1", "first"), ("2", "second")]

    # And a Last-Event-ID that was never A's (an id of the old global numbering) is answered
    # with live.resync: the page fetches again rather than trusting a resume
    stale = streams(gateway.url, a.token, last_event_id="14")
    assert stale.next().event == "live.resync"


def test_a_stream_ends_at_once_when_its_session_ends_and_leaks_no_later_event(
        gateway, tenants, conn, streams):
    # Given streams of four users of one tenant, on a gateway whose heartbeat check runs only
    # every 15 s (the default): only the pushed announcement can end a stream sooner
    leaving, removed, repassworded, staying = (tenants.user(tenant="acme") for _ in range(4))
    users = (leaving, removed, repassworded, staying)
    open_ = {user: streams(gateway.url, user.token) for user in users}

    # When one signs out, an admin deactivates another, a third's password is reset, and the
    # tenant's next event is committed right after
    started = time.monotonic()
    with gateway.client(leaving.token) as client:
        assert client.post("/v1/auth/logout").status_code in (200, 204)
    conn.execute("UPDATE users SET deactivated_at = now() WHERE user_id = %s",
                 (removed.user_id,))
    conn.execute("UPDATE users SET token_version = token_version + 1 WHERE user_id = %s",
                 (repassworded.user_id,))
    seq = add_event(conn, staying.tenant_id, "after the sign-outs")

    # Then their three streams end at once, none of them having delivered that event
    ended = [open_[u] for u in (leaving, removed, repassworded)]
    wait_until(lambda: all(s.ended.is_set() for s in ended), timeout=30,
               message="the ended sessions' streams closed")
    took = time.monotonic() - started
    assert took < 3, f"{took:.1f} s"
    for stream in ended:
        leaked = []
        while True:
            try:
                leaked.append(stream.next(timeout=0.1))
            except AssertionError:
                break
        assert leaked == [], leaked
    # And the fourth carries on with it
    assert open_[staying].until(lambda e: e.event == "webhook.test")[0].id == str(seq)
    assert not open_[staying].ended.is_set()
    # And reconnecting with an old session is refused
    with gateway.client(leaving.token) as client:
        assert client.get("/v1/live").status_code == 401
    assert "live streams ended with their sessions" in gateway.logs()


def test_one_tenant_cannot_take_every_stream_of_the_gateway(stack_env, out_dir, tenants,
                                                           streams):
    # Given room for five streams per gateway and two per tenant
    gw = stack.start_gateway({**stack_env, "LIVE_MAX_STREAMS": "5",
                              "LIVE_MAX_STREAMS_PER_TENANT": "2"}, out_dir, name="gw-cap")
    try:
        noisy, other = tenants.user(tenant="noisy"), tenants.user(tenant="other")
        # When one user of a tenant opens two streams and asks for a third
        for _ in range(2):
            streams(gw.url, noisy.token)
        with gw.client(noisy.token) as client:
            refused = client.get("/v1/live")
        # Then it is refused with its own code and when to come back
        assert (refused.status_code, refused.json()["code"]) == (429, "live_tenant_streams_full")
        assert refused.headers["retry-after"] == "30"
        # And another tenant still gets its streams
        assert streams(gw.url, other.token).status == 200
    finally:
        gw.stop()


def test_a_stream_outlives_many_body_rate_windows_and_ends_cleanly_at_its_limit(
        stack_env, out_dir, tenants, streams):
    # Given body-rate windows of half a second (the default is 10 s; a stream used to be cut
    # after two of them, at 20 s) and streams that last four seconds, eight windows
    gw = stack.start_gateway({**stack_env, "BODY_RATE_WINDOW_S": "0.5", "LIVE_HEARTBEAT_S": "1",
                              "LIVE_STREAM_MAX_S": "4"}, out_dir, name="gw-long")
    try:
        user = tenants.user()
        started = time.monotonic()
        stream = streams(gw.url, user.token)
        # Then the stream lasts its whole four seconds, with its heartbeats, and then ends as a
        # stream should: the last chunk written, no error on either side
        assert stream.ended.wait(30)
        lasted = time.monotonic() - started
        assert lasted >= 4, f"cut after {lasted:.1f} s"
        assert stream.error is None, stream.error
        assert stream.comments.count("keepalive") >= 3, stream.comments
    finally:
        gw.stop()
    assert "Traceback" not in gw.logs() and "RequestTimeout" not in gw.logs(), gw.logs()[-3000:]
