"""`ingest dev` (what `make run` starts), each run in a folder of its own with a newcomer's
environment (tests/support/devstack.py): its database is durable and password-protected, a
restart keeps the data and publishes again the jobs moto lost, and a child that dies is
restarted. The fresh-clone `make run` → upload → Ctrl-C path is tests/e2e/test_newcomer.py."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import time
from pathlib import Path
from uuid import UUID

import httpx
import psycopg
import pytest

from cli.embedded import EmbeddedPostgres, free_port
from tests.support import devstack
from tests.support.stack import ROOT, wait_until
from worker import runs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
PRIVATE = ("pg-password", "dev.env", "dev-token", "dev-password", "jwt-secret")


def _start(folder: Path, out_dir: Path, workers: int, **settings: str) -> devstack.DevStack:
    port = free_port()
    # PYTHONPATH: the folder is not the project; everything else is a newcomer's environment.
    # The query model's int8 export is made once per machine, not once per stack: the gateway
    # loads the model as it starts (ADR 0321), as the soak's stack does.
    env = devstack.newcomer_env(folder / "home", PYTHONPATH=str(ROOT),
                                EMBEDDING_CACHE_DIR=str(ROOT / ".ingest" / "models"), **settings)
    (folder / "home").mkdir(parents=True, exist_ok=True)
    argv = [str(ROOT / ".venv" / "bin" / "python"), "-m", "cli.main", "dev",
            "--port", str(port), "--workers", str(workers)]
    stack = devstack.start(argv, folder, env, out_dir, port)
    try:
        stack.wait_ready()
    except BaseException:
        # The test's own cleanup never gets the stack: stop it here, Ctrl-C first so its
        # supervisor stops the Postgres it started (CI once left one running for a whole run).
        with contextlib.suppress(Exception):
            stack.interrupt()
        stack.kill()
        raise
    return stack


def _upload(stack: devstack.DevStack, token: str, name: str) -> str:
    response = httpx.post(f"{stack.url}/v1/ingest", headers={"Authorization": f"Bearer {token}"},
                          files={"file": (name, f"# {name}\n\nDragonfly dev stack.".encode())},
                          timeout=30)
    assert response.status_code == 202, response.text
    return str(response.json()["run_id"])


def _status(conn: psycopg.Connection, run_id: str) -> str:
    return conn.execute("SELECT status FROM ingestion_runs WHERE run_id = %s",
                        (run_id,)).fetchone()[0]


def _wait_succeeded(conn: psycopg.Connection, *run_ids: str, timeout: float = 240) -> None:
    def done() -> bool:
        states = [_status(conn, r) for r in run_ids]
        assert "failed" not in states, states
        return all(s == "succeeded" for s in states)

    wait_until(done, timeout=timeout, interval=0.5, message=f"runs {run_ids} succeeded")


def _published_at(conn: psycopg.Connection, run_id: str):
    return conn.execute("SELECT published_at FROM job_outbox WHERE run_id = %s",
                        (run_id,)).fetchone()[0]


def _assert_private_and_durable(stack: devstack.DevStack) -> None:
    for name in PRIVATE:
        mode = stat.S_IMODE((stack.state / name).stat().st_mode)
        assert mode == 0o600, f"{name} is {oct(mode)}"
    dsn = stack.settings()["DATABASE_URL"]
    password = (stack.state / "pg-password").read_text().strip()
    assert password in dsn
    # Without the password the server refuses, even from this machine
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(dsn.replace(f":{password}@", "@"), connect_timeout=5).close()
    # With it, the server is durable: a power cut cannot corrupt the stack's data
    with psycopg.connect(dsn) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            assert conn.execute(f"SHOW {setting}").fetchone()[0] == "on", setting
        method = conn.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules").fetchall()
        assert method == [("scram-sha-256",)]


def test_a_cluster_made_with_trust_auth_is_migrated_to_a_password(stack_folder, out_dir):
    # Given .ingest/pgdata from before 0040: trust auth, a database with data in it
    old = EmbeddedPostgres(stack_folder / ".ingest" / "pgdata", disposable=True)
    old.start()
    with psycopg.connect(old.ensure_database("ingest"), autocommit=True) as conn:
        conn.execute("CREATE TABLE kept (note text); INSERT INTO kept VALUES ('from before')")
    old.stop()

    # When `ingest dev` starts on it
    stack = _start(stack_folder, out_dir, workers=0)
    try:
        # Then the server wants the generated password now, is durable, and kept the data
        _assert_private_and_durable(stack)
        with psycopg.connect(stack.settings()["DATABASE_URL"]) as conn:
            assert conn.execute("SELECT note FROM kept").fetchone() == ("from before",)
        assert stack.interrupt() == 0
    finally:
        stack.kill()


def test_a_postgres_16_folder_stops_ingest_dev_with_the_way_out(stack_folder, out_dir):
    # Given .ingest/pgdata from before 0087, made by the pgserver wheel's Postgres 16
    data = stack_folder / ".ingest" / "pgdata"
    data.mkdir(parents=True)
    (data / "PG_VERSION").write_text("16\n")
    (data / "base").mkdir()

    # When `ingest dev` starts on it
    port = free_port()
    env = devstack.newcomer_env(stack_folder / "home", PYTHONPATH=str(ROOT))
    (stack_folder / "home").mkdir()
    stack = devstack.start([str(ROOT / ".venv" / "bin" / "python"), "-m", "cli.main", "dev",
                            "--port", str(port), "--workers", "0"], stack_folder, env, out_dir,
                           port)
    try:
        # Then it stops at once with one paragraph saying how to migrate or start fresh, having
        # started nothing and left the old cluster as it was
        assert stack.proc.wait(120) == 1
        said = stack.log.read_text()
        assert "Traceback" not in said
        assert said.count("\n") == 1, said
        for needle in ("holds a Postgres 16 cluster", "Postgres 18", "pg_dump", "pg_upgrade",
                       f"mv {data.resolve()} ", "docs/operations.md"):
            assert needle in said, needle
        assert sorted(p.name for p in data.iterdir()) == ["PG_VERSION", "base"]
        assert (data / "PG_VERSION").read_text() == "16\n"
        assert not (stack_folder / ".ingest" / "dev.env").exists()
    finally:
        stack.kill()


def test_a_restart_keeps_the_data_and_publishes_the_jobs_moto_lost(stack_folder, out_dir):
    # Given a stack without workers, where one upload waits queued and another's run was left
    # running 5 minutes ago by a worker that is gone (no session holds its lock)
    stack = _start(stack_folder, out_dir, workers=0)
    try:
        _assert_private_and_durable(stack)
        token = stack.token()
        queued, orphaned = _upload(stack, token, "queued.md"), _upload(stack, token, "orphan.md")
        with psycopg.connect(stack.settings()["DATABASE_URL"], autocommit=True) as conn:
            wait_until(lambda: _published_at(conn, queued) and _published_at(conn, orphaned),
                       message="both jobs published to moto")
            conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now(), "
                         "updated_at = now() - interval '5 minutes' WHERE run_id = %s",
                         (orphaned,))
        assert stack.interrupt() == 0
    finally:
        stack.kill()

    # When it starts again with a worker (moto's messages died with it), whose takeover window
    # (scaled down from 15 min) the orphan's heartbeat has passed, and the crash guard's not
    stack = _start(stack_folder, out_dir, workers=1, RUNNING_STALE_AFTER_S="60")
    try:
        # Then both runs are processed without anyone's help, with the same token and data
        again = stack.token()
        assert again == (stack_folder / ".ingest" / "dev-token").read_text().strip()
        with psycopg.connect(stack.settings()["DATABASE_URL"], autocommit=True) as conn:
            _wait_succeeded(conn, queued, orphaned)
        listed = httpx.get(f"{stack.url}/v1/documents",
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert listed.status_code == 200 and listed.json()["total"] == 2
        assert stack.interrupt() == 0
    finally:
        stack.kill()


def test_a_child_that_dies_is_restarted_and_no_work_is_lost(stack_folder, out_dir):
    # A worker killed -9 leaves its long poll open in moto, which hands the next message to it:
    # that message comes back only after the visibility timeout (60 s by default; the run took
    # 86 s for it). 12 s keeps the heartbeat (5 s) well inside, as the settings require.
    stack = _start(stack_folder, out_dir, workers=1, SQS_VISIBILITY_TIMEOUT_S="12")
    try:
        token = stack.token()
        conn = psycopg.connect(stack.settings()["DATABASE_URL"], autocommit=True)
        owner = psycopg.connect(stack.settings()["DATABASE_URL"], autocommit=True)
        _wait_succeeded(conn, _upload(stack, token, "first.md"))

        # Given a run queued with its message in moto (the worker is frozen, so nobody takes
        # it), and a running run whose worker is alive (its session holds the run's lock)
        worker = stack.child("cli.main worker")
        worker.suspend()
        queued, owned = _upload(stack, token, "queued.md"), _upload(stack, token, "owned.md")
        wait_until(lambda: _published_at(conn, queued) and _published_at(conn, owned),
                   message="both jobs published to moto")
        owner.execute("SELECT pg_advisory_lock(%s)", (runs.lock_key(UUID(owned)),))
        conn.execute("UPDATE ingestion_runs SET status = 'running', started_at = now() "
                     "WHERE run_id = %s", (owned,))
        owned_published = _published_at(conn, owned)

        # When moto is killed -9
        moto = stack.child("moto.server")
        moto.kill()
        # Then a new moto answers on the same port, and the queued run completes
        wait_until(lambda: stack.child("moto.server").pid != moto.pid, timeout=60,
                   message="moto restarted")
        worker.resume()
        _wait_succeeded(conn, queued)
        # and an upload after the restart is processed too
        _wait_succeeded(conn, _upload(stack, token, "after-moto.md"))
        # while the run with a live owner was left in its owner's hands
        assert _published_at(conn, owned) == owned_published
        assert '"child":"moto"' in stack.log.read_text()

        # When the worker is killed -9, Then another takes its place and processes uploads
        worker.send_signal(signal.SIGKILL)
        wait_until(lambda: stack.child("cli.main worker").pid != worker.pid, timeout=60,
                   message="worker restarted")
        _wait_succeeded(conn, _upload(stack, token, "after-worker.md"))
        restarts = [line for line in stack.log.read_text().splitlines()
                    if "child exited; restarting it" in line]
        assert any('"child":"worker-1"' in line and '"returncode":-9' in line
                   for line in restarts), restarts
        owner.close()
        conn.close()

        # When one of the gateways is killed -9 while a client keeps calling the API, Then
        # every call is answered (its peer on the port takes the connections; a call whose
        # connection died with the process is sent again once), and it is started again
        gateways = _gateways(stack)
        assert len(gateways) == 2, gateways
        answers = _calls_while(stack, token, lambda: os.kill(gateways["gateway-1"],
                                                             signal.SIGKILL))
        wait_until(lambda: _gateways(stack).get("gateway-1") not in (None,
                                                                     gateways["gateway-1"]),
                   timeout=60, message="gateway-1 restarted")
        assert answers and set(answers) == {200}, answers
        assert _gateways(stack)["gateway-2"] == gateways["gateway-2"]  # the other lived on

        # And Ctrl-C still stops everything, with no restart on the way out
        children = stack.children()
        assert stack.interrupt() == 0
        devstack.assert_all_gone(children)
        assert len(stack.log.read_text().split("child restarted")) == 4
    finally:
        stack.kill()


def _gateways(stack: devstack.DevStack) -> dict[str, int]:
    """The supervised gateways that are up, and their pids (.ingest/children.json)."""
    try:
        children = json.loads((stack.state / "children.json").read_text())["children"]
    except (OSError, ValueError, KeyError):
        return {}
    return {name: c["pid"] for name, c in children.items()
            if name.startswith("gateway") and c["up"]}


def _calls_while(stack: devstack.DevStack, token: str, fault) -> list[int]:  # type: ignore[no-untyped-def]
    """Statuses of GET /v1/ingestion-runs called back to back for 5 s after ``fault`` runs,
    each sent again once when its connection failed (as any HTTP client library retries)."""
    statuses: list[int] = []
    headers = {"Authorization": f"Bearer {token}"}
    fault()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for attempt in (1, 2):
            try:  # a new connection each call: the kernel spreads them over the listeners
                statuses.append(httpx.get(f"{stack.url}/v1/ingestion-runs", headers=headers,
                                          timeout=10).status_code)
                break
            except httpx.TransportError:
                if attempt == 2:
                    statuses.append(0)
    return statuses


def _postmaster_pid(stack: devstack.DevStack) -> int | None:
    try:
        return int((stack.state / "pgdata" / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return None


def _ready(stack: devstack.DevStack) -> int:
    try:
        return httpx.get(f"{stack.url}/health/ready", timeout=5).status_code
    except httpx.HTTPError:
        return 0


def test_postgres_killed_under_make_run_is_started_again_and_work_goes_on(stack_folder,
                                                                          out_dir):
    import psutil

    stack = _start(stack_folder, out_dir, workers=1)
    try:
        token = stack.token()
        url = stack.settings()["DATABASE_URL"]
        with psycopg.connect(url, autocommit=True) as conn:
            before = _upload(stack, token, "before.md")
            _wait_succeeded(conn, before)

        # When the Postgres server dies (kill -9: a crash, the OOM killer)
        postmaster = psutil.Process(_postmaster_pid(stack))
        postmaster.kill()
        postmaster.wait(30)

        # Then `ingest dev` starts it again on the same data and port, the gateway is ready
        # again without a restart of its own, and an upload is processed end to end
        wait_until(lambda: _postmaster_pid(stack) not in (None, postmaster.pid), timeout=120,
                   interval=0.5, message="postgres started again")
        wait_until(lambda: _ready(stack) == 200, timeout=60, interval=0.5,
                   message="gateway ready again")
        with psycopg.connect(url, autocommit=True) as conn:
            assert _status(conn, before) == "succeeded"  # durable: nothing committed was lost
            _wait_succeeded(conn, _upload(stack, token, "after.md"))
        lines = [json.loads(line) for line in stack.log.read_text().splitlines()
                 if line.startswith("{")]
        exited = {line["child"] for line in lines if line["event"] == "child exited; restarting it"}
        assert exited == {"postgres"}, exited  # gateway and worker lived through it
        assert any(line["event"] == "child restarted" and line["child"] == "postgres"
                   for line in lines)

        # And Ctrl-C still stops everything, the restarted server included
        children = stack.children()
        assert any(p.pid == _postmaster_pid(stack) for p in children)
        assert stack.interrupt() == 0
        devstack.assert_all_gone(children)
    finally:
        stack.kill()
