"""`ingest dev`: the whole stack on one machine, data under .ingest/, stopped by Ctrl-C.

Postgres and moto run as child processes; the gateway and workers are started exactly as in
production (`ingest gateway`, `ingest worker`), configured only through the environment. The
stack needs nothing from the caller's environment: its settings (database password, moto's
dummy AWS keys, queue URLs, JWT secret) are made here and handed to the children explicitly.
A child that exits is restarted with backoff (cli/supervisor.py, docs/decisions/0041).
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import UUID

from cli.embedded import DataFolderVersionError, EmbeddedPostgres, MotoServer, Postmaster, free_port
from cli.supervisor import Supervisor
from shared import aws, db, errors, objectstore, queue
from shared.db import migrate
from shared.settings import DevSettings

if TYPE_CHECKING:
    from gateway import auth

log = logging.getLogger("cli.dev")
Q = db.load_queries(Path(__file__).with_name("dev.sql"))

STATE = Path(".ingest")
QUEUE_NAME = "ingest-jobs"
BUCKET = "ingest-uploads"
DEV_TENANT = "dev"
DEV_ADMIN = "admin@dev.local"
# moto accepts any keys; the stack's processes get these, never the caller's real ones.
MOTO_KEYS = ("test", "test")
REGION = "us-east-1"


def run(*, workers: int | None, port: int | None) -> int:
    settings = DevSettings()
    STATE.mkdir(mode=0o700, exist_ok=True)
    workers = settings.worker_processes if workers is None else workers
    port = port or settings.port
    # Postgres and moto never take the API's port: a port the OS just called free can be handed
    # out again at once, and a stack whose gateway cannot bind is never ready (CI saw it once).
    pg_port = _saved_port("pg-port", taken={port})
    pg = EmbeddedPostgres(STATE / "pgdata", port=pg_port,
                          password=_secret("pg-password"))
    try:
        pg.check_version()  # before anything starts: a Postgres 16 folder is not ours to open
    except DataFolderVersionError as exc:
        print(exc, file=sys.stderr)
        return 1
    moto = MotoServer(port=_saved_port("moto-port", taken={port, pg_port}),
                      log_path=STATE / "moto.log")
    supervisor = Supervisor(backoff_s=settings.dev_restart_backoff_s,
                            backoff_max_s=settings.dev_restart_backoff_max_s,
                            state_path=STATE / "children.json")

    def stop(*_: object) -> None:
        supervisor.stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        database_url = _start_database(pg)
        moto.start()
        # The children reach SQS/S3 at DEV_AWS_ENDPOINT_URL when something sits between them
        # and moto (bench/soak.py's outage switch); `ingest dev` itself always talks to moto.
        env = _environment(database_url, settings.dev_aws_endpoint_url or moto.url, port)
        _prepare_queues_and_bucket(env, moto.url)
        _write_private(STATE / "dev.env", "".join(f"{k}={v}\n" for k, v in env.items()))
        _republish_lost_jobs(database_url)
        token = _seed(database_url, env["JWT_SECRET"])

        def moto_back() -> None:
            # A new moto has empty queues and no bucket: make them again on the same port (so
            # every child's URLs stay valid) and publish again what the old one held.
            _prepare_queues_and_bucket(env, moto.url)
            _republish_lost_jobs(database_url)

        supervisor.add("moto", _moto_starter(moto), moto_back, stop_last=True,
                       running=moto.proc)
        # Same data folder and port: gateway and workers reconnect through their pools, and
        # a crashed server recovers from its WAL on start (it is durable, ADR 0040).
        supervisor.add("postgres", lambda: _restart_database(pg), stop_last=True,
                       running=pg.postmaster())
        # Several gateways on the one port (SO_REUSEPORT), each restarted on its own: one that
        # dies leaves the others serving (docs/decisions/0324).
        gateway_env = {**env, "REUSE_PORT": "true"}
        for i in range(settings.dev_gateway_processes):
            supervisor.add(f"gateway-{i + 1}", lambda: _spawn("gateway", gateway_env))
        for i in range(workers):
            supervisor.add(f"worker-{i + 1}", lambda: _spawn("worker", env))
        _announce(port, token, workers, settings.dev_gateway_processes)
        supervisor.run()
        return 0
    finally:
        supervisor.stop_all()
        moto.stop()
        pg.stop()
        print("stopped", file=sys.stderr)


def _saved_port(name: str, taken: set[int]) -> int:
    """Reuse last run's port, so a second `make run` keeps the same URLs when it can; never one
    of `taken` (the ports the stack's other servers will bind)."""
    path = STATE / name
    if path.exists():
        port = int(path.read_text())
        if port not in taken and _is_free(port):
            return port
    port = free_port()
    while port in taken:
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


def _restart_database(pg: EmbeddedPostgres) -> Postmaster:
    pg.start()
    return pg.postmaster()


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read, never readable by others even for a moment."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an existing file keeps its old mode through os.open
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def _secret(name: str, nbytes: int = 32) -> str:
    path = STATE / name
    if not path.exists():
        _write_private(path, secrets.token_urlsafe(nbytes))
    path.chmod(0o600)
    return path.read_text().strip()


def _environment(database_url: str, aws_url: str, port: int) -> dict[str, str]:
    root = STATE.resolve()
    return {
        "DEV_MODE": "true",
        "DATABASE_URL": database_url,
        "AWS_ENDPOINT_URL": aws_url,
        "AWS_ACCESS_KEY_ID": MOTO_KEYS[0],
        "AWS_SECRET_ACCESS_KEY": MOTO_KEYS[1],
        "AWS_REGION": REGION,
        "UPLOAD_STORE_URI": (root / "uploads").as_uri(),
        "ARTIFACT_STORE_URI": (root / "artifacts").as_uri(),
        "JWT_SECRET": _secret("jwt-secret"),
        "PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def _client(service: str, env: dict[str, str], endpoint_url: str) -> Any:
    # The keys are passed, not read from this process's environment, which may have none.
    return aws.client(service, endpoint_url=endpoint_url, region=env["AWS_REGION"],
                      credentials=(env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]))


def _prepare_queues_and_bucket(env: dict[str, str], moto_url: str) -> None:
    urls = queue.ensure_queues(_client("sqs", env, moto_url), QUEUE_NAME)
    if "SQS_QUEUE_URL" in env and (env["SQS_QUEUE_URL"], env["SQS_DLQ_URL"]) != urls:
        log.error("moto gave the queues new URLs; restart `ingest dev`", extra={"urls": urls})
    env["SQS_QUEUE_URL"], env["SQS_DLQ_URL"] = urls
    objectstore.ensure_bucket(_client("s3", env, moto_url), BUCKET, env["AWS_REGION"])


def _republish_lost_jobs(database_url: str) -> None:
    """Publish again (through the outbox) the jobs moto lost: those of queued runs, and of
    running runs whose lock no session holds (their worker is gone). A run whose worker lives
    keeps its message in that worker's hands and is left alone."""
    with db.connect(database_url) as conn:
        queued = conn.execute(Q["republish_queued"]).fetchall()
        orphaned = len(conn.execute(Q["republish_orphaned_running"]).fetchall())
    if queued or orphaned:
        log.info("jobs republished", extra={"queued_runs": len(queued),
                                            "running_runs_without_owner": orphaned})


def _seed(database_url: str, jwt_secret: str) -> str:
    """The dev tenant and its admin (an operator), and a token for it.

    A restart keeps an existing admin as it is: re-setting its password would move its token
    version on and end every token an earlier `make run` printed. The password is set only for
    a new admin, or when its password file is gone."""
    from gateway import auth
    from gateway.auth import users

    new_password = not (STATE / "dev-password").exists()
    password = _secret("dev-password", 12)
    with db.connect(database_url) as conn:
        tenant_id = users.ensure_tenant(conn, DEV_TENANT)
        principal = None if new_password else _existing_admin(conn)
        if principal is None:
            admin = users.create_user(conn, tenant_id=tenant_id, email=DEV_ADMIN,
                                      password=password, role=auth.OPERATOR, replace=True)
            principal = auth.Principal(UUID(str(admin["user_id"])), tenant_id, auth.OPERATOR,
                                       admin["token_version"])
    token = auth.issue_token(principal, jwt_secret, expiry_hours=24 * 30)
    _write_private(STATE / "dev-token", token + "\n")
    return token


def _existing_admin(conn: db.Conn) -> auth.Principal | None:
    from gateway import auth
    from gateway.auth import users

    try:
        principal = users.token_principal(conn, DEV_ADMIN, DEV_TENANT)
    except errors.NotFound:
        return None
    return principal if principal.role == auth.OPERATOR else None


def _moto_starter(moto: MotoServer) -> Callable[[], subprocess.Popen]:
    def start() -> subprocess.Popen:
        moto.stop()  # a retry after a failed hook: the last try's moto may still be running
        moto.start()  # same port: the URLs every child holds stay valid
        assert moto.proc is not None
        return moto.proc

    return start


def _spawn(command: str, env: dict[str, str]) -> subprocess.Popen:
    # Its own process group: a Ctrl-C at the terminal reaches only `ingest dev`, which stops
    # the children in order instead of having them die mid-way on their own.
    return subprocess.Popen([sys.executable, "-m", "cli.main", command],
                            env={**os.environ, **env}, process_group=0)


def _announce(port: int, token: str, workers: int, gateways: int) -> None:
    print(f"""
Dragonfly Ingest is running ({gateways} gateway and {workers} worker process(es)); Ctrl-C
stops everything.
  API:       http://127.0.0.1:{port}   (OpenAPI: http://127.0.0.1:{port}/schema)
  Sign in:   tenant {DEV_TENANT}, {DEV_ADMIN} / password in {STATE}/dev-password
  Token:     {token}
             (also in {STATE}/dev-token)
  Try:       curl -H "Authorization: Bearer $(cat {STATE}/dev-token)" \\
                  -F file=@README.md http://127.0.0.1:{port}/v1/ingest
""", flush=True)
