"""`ingest dev`: the whole stack on one machine, data under .ingest/, stopped by Ctrl-C.

Postgres and moto run as child processes; the gateway and workers are started exactly as in
production (`ingest gateway`, `ingest worker`), configured only through the environment.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from uuid import UUID

from cli.embedded import EmbeddedPostgres, MotoServer, free_port
from shared import aws, db, objectstore, queue
from shared.db import migrate

STATE = Path(".ingest")
QUEUE_NAME = "ingest-jobs"
BUCKET = "ingest-uploads"
DEV_TENANT = "dev"
DEV_ADMIN = "admin@dev.local"


def run(*, workers: int | None, port: int | None) -> int:
    STATE.mkdir(exist_ok=True)
    workers = int(os.environ.get("WORKER_PROCESSES", "1")) if workers is None else workers
    port = port or int(os.environ.get("PORT", "8000"))
    pg = EmbeddedPostgres(STATE / "pgdata", port=_saved_port("pg-port"))
    moto = MotoServer(port=_saved_port("moto-port"), log_path=STATE / "moto.log")
    children: list[subprocess.Popen] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        database_url = _start_database(pg)
        env = _environment(database_url, moto.start(), port)
        _prepare_queues_and_bucket(env, database_url)
        token = _seed(database_url, env["JWT_SECRET"])
        children.append(_spawn("gateway", env))
        children += [_spawn("worker", env) for _ in range(workers)]
        _announce(port, token, workers)
        while not stopping:
            if any(c.poll() is not None for c in children):
                print("a child process exited; stopping the stack", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    finally:
        _stop_children(children)
        moto.stop()
        pg.stop()
        print("stopped", file=sys.stderr)


def _saved_port(name: str) -> int:
    """Reuse last run's port, so a second `make run` keeps the same URLs when it can."""
    path = STATE / name
    if path.exists():
        port = int(path.read_text())
        if _is_free(port):
            return port
    port = free_port()
    path.write_text(str(port))
    return port


def _is_free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def _start_database(pg: EmbeddedPostgres) -> str:
    pg.start()
    url = pg.ensure_database("ingest")
    migrate.apply(url)
    return url


def _secret(name: str, nbytes: int = 32) -> str:
    path = STATE / name
    if not path.exists():
        path.write_text(secrets.token_urlsafe(nbytes))
        path.chmod(0o600)
    return path.read_text().strip()


def _environment(database_url: str, aws_url: str, port: int) -> dict[str, str]:
    root = STATE.resolve()
    settings = {
        "DEV_MODE": "true",
        "DATABASE_URL": database_url,
        "AWS_ENDPOINT_URL": aws_url,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_REGION": "us-east-1",
        "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
        "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(),
        "JWT_SECRET": _secret("jwt-secret"),
        "PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return settings


def _prepare_queues_and_bucket(env: dict[str, str], database_url: str) -> None:
    sqs = aws.client("sqs", endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"])
    s3 = aws.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region=env["AWS_REGION"])
    env["SQS_QUEUE_URL"], env["SQS_DLQ_URL"] = queue.ensure_queues(sqs, QUEUE_NAME)
    objectstore.ensure_bucket(s3, BUCKET, env["AWS_REGION"])
    (STATE / "dev.env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    # moto keeps messages in memory: jobs published before the last stop are gone, so runs
    # still waiting for a worker get their jobs published again (the worker dedups by run).
    with db.connect(database_url) as conn:
        conn.execute("""UPDATE job_outbox o SET published_at = NULL, next_attempt_at = now()
                        FROM ingestion_runs r
                        WHERE r.run_id = o.run_id AND r.status = 'queued'
                          AND o.published_at IS NOT NULL""")


def _seed(database_url: str, jwt_secret: str) -> str:
    from gateway import auth, users

    password = _secret("dev-password", 12)
    with db.connect(database_url) as conn:
        tenant_id = users.ensure_tenant(conn, DEV_TENANT)
        admin = users.create_user(conn, tenant_id=tenant_id, email=DEV_ADMIN, password=password,
                                  role=auth.OPERATOR, replace=True)
    # The seed re-sets the password, which moves the token version on: the token carries it.
    principal = auth.Principal(UUID(str(admin["user_id"])), tenant_id, auth.OPERATOR,
                               admin["token_version"])
    token = auth.issue_token(principal, jwt_secret, expiry_hours=24 * 30)
    (STATE / "dev-token").write_text(token + "\n")
    return token


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", command],
                            env={**os.environ, **env})


def _announce(port: int, token: str, workers: int) -> None:
    print(f"""
Dragonfly Ingest is running ({workers} worker process(es)); Ctrl-C stops everything.
  API:       http://127.0.0.1:{port}   (OpenAPI: http://127.0.0.1:{port}/schema)
  Sign in:   {DEV_ADMIN} / password in {STATE}/dev-password
  Token:     {token}
             (also in {STATE}/dev-token)
  Try:       curl -H "Authorization: Bearer $(cat {STATE}/dev-token)" \\
                  -F file=@README.md http://127.0.0.1:{port}/v1/ingest
""", flush=True)


def _stop_children(children: list[subprocess.Popen], grace_s: float = 30) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
