"""Shared fixtures: a real Postgres, a real SQS/S3 endpoint, per-test databases and queues.

Each test gets its own database cloned from a migrated template (cheap and isolated) and its
own queue pair, so tests never see each other's rows or messages.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# For this process only (in-process clients and models), before anything imports boto3 or
# sentence-transformers. Processes a test starts never see these: tests/support/stack.py
# builds their environment from scratch, and stack_env carries the same settings explicitly.
os.environ.setdefault("AWS_ACCESS_KEY_ID", "test")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "test")
os.environ.setdefault("AWS_REGION", "us-east-1")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import psycopg  # noqa: E402
import pytest  # noqa: E402

from cli.embedded import EmbeddedPostgres, MotoServer  # noqa: E402
from gateway import auth  # noqa: E402
from shared import aws, db, queue  # noqa: E402
from shared.db import migrate  # noqa: E402
from tests.support import stack  # noqa: E402

TEMPLATE = "ingest_template"
OUTPUT = stack.ROOT / "test-output"
# One bcrypt hash for every test user: hashing at cost 12 per user would dominate the suite.
TEST_PASSWORD = "correct horse battery"
_TEST_HASH = auth.hash_password(TEST_PASSWORD)


@pytest.fixture(scope="session")
def pg() -> Iterator[EmbeddedPostgres]:
    # Not under pytest's temp root: every pytest run of this user resets that root to 0700 and
    # prunes old runs' folders, which would cut the server (run as `pgserver` under root) off
    # from its data while this session still uses it.
    folder = Path(tempfile.mkdtemp(prefix="ingest-test-pg-"))
    folder.chmod(0o755)
    # Disposable: no fsync, trust auth. Only the test suite opts out of a durable server.
    server = EmbeddedPostgres(folder / "data", disposable=True)
    server.start()
    migrate.apply(server.ensure_database(TEMPLATE))
    yield server
    server.stop("immediate")
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    server = MotoServer(log_path=tmp_path_factory.mktemp("moto") / "moto.log")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def database_url(pg: EmbeddedPostgres) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        # FILE_COPY: a disposable server (no fsync) copies the template's files in ~30 ms; the
        # default WAL_LOG writes every page to the WAL, ~2x that, on each of ~1,500 tests.
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}" STRATEGY FILE_COPY')
    yield pg.url(name)
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg.Connection]:
    with db.connect(database_url, autocommit=True) as c:
        yield c


@dataclass(frozen=True)
class Queues:
    url: str
    dlq_url: str
    client: object

    @property
    def queue(self) -> queue.Queue:
        return queue.Queue(self.client, self.url, self.dlq_url)


@pytest.fixture
def queues(moto: MotoServer) -> Iterator[Queues]:
    sqs = aws.client("sqs", endpoint_url=moto.url, region="us-east-1")
    name = f"q-{uuid.uuid4().hex[:10]}"
    url, dlq_url = queue.ensure_queues(sqs, name, visibility_timeout_s=30)
    yield Queues(url, dlq_url, sqs)
    for u in (url, dlq_url):
        sqs.delete_queue(QueueUrl=u)


@pytest.fixture
def s3(moto: MotoServer):
    return aws.client("s3", endpoint_url=moto.url, region="us-east-1")


def tenant_of(email: str) -> str:
    """The tenant a test user signs in to: Tenants.user names its users <role>-…@<tenant>.test
    (sign-in names the tenant, docs/decisions/0202); other addresses are acme's."""
    domain = email.rpartition("@")[2].lower()
    return domain.removesuffix(".test") if domain.endswith(".test") else "acme"


@dataclass(frozen=True)
class User:
    user_id: uuid.UUID
    tenant_id: uuid.UUID
    email: str
    role: str
    token: str
    tenant: str = "acme"  # its tenant's name: sign-in names it (docs/decisions/0202)


class Tenants:
    """Makes tenants and users directly in the database, with tokens signed like the gateway's."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def user(self, tenant: str = "acme", role: str = "admin", email: str | None = None) -> User:
        tenant_id = self.conn.execute(
            "INSERT INTO tenants (name) VALUES (%s) ON CONFLICT (name) DO UPDATE SET name = "
            "EXCLUDED.name RETURNING tenant_id", (tenant,)).fetchone()["tenant_id"]
        email = email or f"{role}-{uuid.uuid4().hex[:6]}@{tenant}.test"
        user_id = self.conn.execute(
            "INSERT INTO users (tenant_id, email, password_hash, role) VALUES (%s, %s, %s, %s) "
            "RETURNING user_id", (tenant_id, email, _TEST_HASH, role)).fetchone()["user_id"]
        principal = auth.Principal(user_id, tenant_id, role)
        return User(user_id, tenant_id, email, role,
                    auth.issue_token(principal, stack.TEST_JWT_SECRET, 1), tenant)


@pytest.fixture
def tenants(conn: psycopg.Connection) -> Tenants:
    return Tenants(conn)


@pytest.fixture
def out_dir(request: pytest.FixtureRequest) -> Path:
    """A clean folder for this test's logs and screenshots, kept after the run for reviewers:
    nothing a previous run left there can satisfy this test's log assertions."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid)[-150:]
    path = OUTPUT / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture
def stack_env(database_url: str, moto: MotoServer, queues: Queues, tmp_path: Path) -> dict[str, str]:
    """The environment a gateway or worker of this test runs with."""
    return {
        "DATABASE_URL": database_url,
        "AWS_ENDPOINT_URL": moto.url,
        "SQS_QUEUE_URL": queues.url,
        "SQS_DLQ_URL": queues.dlq_url,
        "UPLOAD_STORE_URI": (tmp_path / "uploads").as_uri(),
        "ARTIFACT_STORE_URI": (tmp_path / "artifacts").as_uri(),
        "JWT_SECRET": stack.TEST_JWT_SECRET,
        # Required outside DEV_MODE (docs/decisions/0062); /metrics tests use their own.
        "METRICS_TOKEN": "test-metrics-token-" + "m" * 20,
        "DEV_MODE": "false",
        # Tests speak plain HTTP to 127.0.0.1: cookies without Secure, as for local
        # development (docs/decisions/0203); test_cookies.py checks the default.
        "SESSION_COOKIE_SECURE": "false",
        "OUTBOX_POLL_S": "0.5",
        # The query model loads on the first vector query, not as each of the suite's ~600
        # gateways starts (docs/decisions/0321); test_readiness.py covers loading at start.
        "SEARCH_MODEL_AT_START": "false",
        "OUTBOX_MAX_BACKOFF_S": "1",
        "LOG_LEVEL": "INFO",
        **stack.MOTO_ENV,
        **stack.OFFLINE_ENV,
    }


@pytest.fixture
def gateway(stack_env: dict[str, str], out_dir: Path) -> Iterator[stack.Process]:
    process = stack.start_gateway(stack_env, out_dir)
    yield process
    process.stop()


@pytest.fixture(scope="session", autouse=True)
def no_secrets_in_logs() -> Iterator[None]:
    """Whatever the suite's processes logged (test-output/**/*.log, and this process's records)
    holds no JWT, bearer token, DSN password, AWS key, SSN or e-mail address (§5.3–5.4)."""
    from tests.support import logscan

    with logscan.watch(OUTPUT) as findings:
        yield
    assert not findings, "secrets or personal data reached the logs:\n" + "\n".join(
        str(f) for f in findings[:20])
