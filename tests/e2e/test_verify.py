"""`ingest verify` (import-runs-state-machine.md §4) against a real gateway, worker, Postgres and
SQS/S3: it passes on a working stack and leaves nothing behind, --dry-run writes nothing, and
a stack whose worker is down fails with exit status 1."""

from __future__ import annotations

import subprocess

from tests.support import stack

COUNTED = ("import_batches", "ingestion_runs", "job_outbox", "judgments", "import_row_errors",
           "event_outbox", "webhook_deliveries")


def counts(conn) -> dict[str, int]:
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"] for t in COUNTED}


def verify(gateway, user, stack_env, *args: str, database: bool = True,
           timeout: float = 300) -> subprocess.CompletedProcess:
    """`ingest verify --url … --token …` with exactly the settings it is meant to have."""
    env = {"DATABASE_URL": stack_env["DATABASE_URL"]} if database else {}
    return stack.ingest(["verify", "--url", gateway.url, "--token", user.token, *args],
                        {**env, "LOG_LEVEL": "WARNING"}, timeout=timeout)


def lines(result: subprocess.CompletedProcess) -> dict[str, str]:
    """check name → PASS / FAIL / SKIP, from the printed report."""
    out = {}
    for line in result.stdout.splitlines():
        name, sep, rest = line.strip().partition(": ")
        if sep and rest.split()[0] in ("PASS", "FAIL", "SKIP"):
            out[name] = rest.split()[0]
    return out


def test_verify_passes_on_a_working_stack_and_removes_its_rows(gateway, tenants, conn,
                                                               stack_env, out_dir):
    # Given a running gateway and worker, and a tenant with data of its own and a webhook, so
    # the verification import's completion event fans out to a delivery
    user = tenants.user()
    conn.execute("INSERT INTO webhooks (tenant_id, url, event_types, secret) VALUES "
                 "(%s, 'https://hooks.example.com/in', '{ingestion.complete}', 'whsec_dGVzdA==')",
                 (user.tenant_id,))
    worker = stack.start_worker(stack_env, out_dir)
    try:
        stack.wait_for_log(worker, '"event":"worker started"', timeout=120)
        before = counts(conn)

        # When verify runs against it
        result = verify(gateway, user, stack_env)
    finally:
        worker.stop()

    # Then every check passes and it exits 0
    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result) == {name: "PASS" for name in (
        "gateway", "unique keys", "no stale imports", "fresh import", "duplicate skip",
        "cleanup")}, result.stdout
    # and its own rows are gone again
    assert counts(conn) == before
    # and the worker logged the import without the row's names (§5.3: no personal data)
    logs = worker.logs()
    assert "ingest_job_complete" in logs
    for value in ("Golden Path Verifier", "Verification Defendant"):
        assert value not in logs


def test_verify_dry_run_writes_nothing(gateway, tenants, conn, stack_env):
    user = tenants.user()
    before = counts(conn)

    result = verify(gateway, user, stack_env, "--dry-run")

    assert result.returncode == 0, result.stdout + result.stderr
    assert lines(result) == {"gateway": "PASS", "unique keys": "PASS",
                             "no stale imports": "PASS", "fresh import": "SKIP",
                             "duplicate skip": "SKIP", "cleanup": "SKIP"}, result.stdout
    assert counts(conn) == before


def test_verify_fails_when_no_worker_finishes_the_import(gateway, tenants, conn, stack_env):
    # Given a stack without a worker: the import is queued but never completes
    user = tenants.user()
    before = counts(conn)

    result = verify(gateway, user, stack_env, "--timeout", "5")

    # Then the fresh import FAILs, verify exits 1, and it still removes what it wrote
    assert result.returncode == 1, result.stdout + result.stderr
    checks = lines(result)
    assert checks["fresh import"] == "FAIL" and checks["cleanup"] == "PASS", result.stdout
    assert "not finished within 5 s" in result.stdout
    assert "[FAILURE]" in result.stdout
    assert counts(conn) == before


def test_verify_without_a_database_is_incomplete_not_passed(gateway, tenants, stack_env):
    user = tenants.user()

    result = verify(gateway, user, stack_env, database=False)

    assert result.returncode == 2, result.stdout + result.stderr
    assert lines(result)["gateway"] == "PASS"
    assert lines(result)["fresh import"] == "SKIP" and "[INCOMPLETE]" in result.stdout
