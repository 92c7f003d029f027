"""compose.yaml and infra/Dockerfile, checked on paper: no Docker engine runs where tests do.

Each check is one that a typo would break: a misspelt variable, service, host, port, queue or
bucket name, dependency condition or health path fails here instead of at `docker compose up`.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml

from gateway.operations import health_routes as health
from shared import aws, queue
from shared.settings import CommonSettings, GatewaySettings, WorkerSettings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "infra" / "Dockerfile"
ELASTICMQ_CONF = ROOT / "infra" / "elasticmq.conf"

SERVICES = {"postgres", "elasticmq", "minio", "bootstrap", "gateway", "worker"}
OURS = ("bootstrap", "gateway", "worker")
SETTINGS = {"bootstrap": CommonSettings, "gateway": GatewaySettings, "worker": WorkerSettings}

# What each process cannot do without (the rest has working defaults).
COMMON_REQUIRED = {"DATABASE_URL", "AWS_REGION", "SQS_QUEUE_URL", "SQS_DLQ_URL",
                   "UPLOAD_STORE_URI", "ARTIFACT_STORE_URI"}
REQUIRED = {
    "bootstrap": {"DATABASE_URL", "AWS_REGION"},
    "gateway": COMMON_REQUIRED | {"JWT_SECRET", "METRICS_TOKEN"},
    "worker": COMMON_REQUIRED | {"WORKER_MAX_CONCURRENT_JOBS"},
}
# Read by boto3/botocore and Hugging Face rather than by our settings classes.
EXTERNAL = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL_SQS",
            "AWS_ENDPOINT_URL_S3", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def _fields(settings_class: type) -> set[str]:
    return {name.upper() for name in settings_class.model_fields}


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), "write environment as a mapping, so YAML merge keys apply"
    return {key: str(value) for key, value in env.items()}


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _hostport(url: str) -> tuple[str | None, int | None]:
    parsed = urlparse(url)
    return parsed.hostname, parsed.port


# ── services and images ─────────────────────────────────────────────────────────────────────
def test_compose_parses_and_defines_exactly_the_stack(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES


def test_no_image_is_localstack_and_every_image_is_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service["image"]
        assert "localstack" not in image.lower(), f"{name}: LocalStack needs an auth token now"
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        assert tag and tag != "latest", f"{name}: pin a tag, not {image!r}"


def test_infrastructure_images(services: dict[str, Any]) -> None:
    # The same majors as the embedded wheel of `ingest dev` (Postgres 18, pgvector 0.8).
    assert services["postgres"]["image"] == "pgvector/pgvector:0.8.6-pg18-trixie"
    assert services["elasticmq"]["image"].startswith("softwaremill/elasticmq-native:")
    # Docker Hub's minio/minio is gone; MinIO's own images live on quay.io.
    assert services["minio"]["image"].startswith("quay.io/minio/minio:RELEASE.")


def test_our_services_share_one_image_built_from_infra_dockerfile(services: dict[str, Any]) -> None:
    images = {services[name]["image"] for name in OURS}
    assert len(images) == 1, images
    for name in OURS:
        build = services[name]["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE


def test_commands(services: dict[str, Any]) -> None:
    assert services["bootstrap"]["command"] == [
        "ingest", "bootstrap", "--queue-name", "ingest-jobs", "--bucket", "ingest-uploads"]
    assert services["gateway"]["command"] == [
        "ingest", "gateway", "--host", "0.0.0.0", "--port", "8000"]
    assert services["worker"]["command"] == ["ingest", "worker"]


# ── environment ─────────────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("name", OURS)
def test_required_settings_are_set(services: dict[str, Any], name: str) -> None:
    required = REQUIRED[name]
    assert required <= _fields(SETTINGS[name]), "this test names a setting that does not exist"
    missing = required - set(_env(services[name]))
    assert not missing, f"{name} lacks {sorted(missing)}"


@pytest.mark.parametrize("name", OURS)
def test_every_variable_is_read_by_the_process(services: dict[str, Any], name: str) -> None:
    unknown = set(_env(services[name])) - _fields(SETTINGS[name]) - EXTERNAL
    assert not unknown, f"{name} sets variables nothing reads (typo?): {sorted(unknown)}"


def test_the_jwt_secret_comes_from_the_host_and_only_the_gateway_gets_it(
        services: dict[str, Any]) -> None:
    assert _env(services["gateway"])["JWT_SECRET"].startswith("${JWT_SECRET:?")
    for name in ("bootstrap", "worker"):
        assert "JWT_SECRET" not in _env(services[name])


def test_nothing_runs_in_dev_mode(services: dict[str, Any]) -> None:
    for name in OURS:
        env = _env(services[name])
        assert env.get("DEV_MODE", "false").lower() in ("false", "0")
        assert env.get("AUTH_ENABLED", "true").lower() in ("true", "1")


@pytest.mark.parametrize("name", OURS)
def test_sqs_and_s3_have_their_own_endpoints(services: dict[str, Any], name: str) -> None:
    env = _env(services[name])
    # Our code hands AWS_ENDPOINT_URL to every client, which would send S3 calls to ElasticMQ.
    assert "AWS_ENDPOINT_URL" not in env
    assert _hostport(env["AWS_ENDPOINT_URL_SQS"]) == ("elasticmq", _elasticmq_conf()["bind-port"])
    assert _hostport(env["AWS_ENDPOINT_URL_S3"]) == ("minio", 9000)


def test_botocore_routes_each_service_to_its_own_endpoint(
        services: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(services["worker"])
    for key in ("AWS_ENDPOINT_URL", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(ROOT / "no-such-aws-config"))  # no profile endpoints
    for key in ("AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.setenv(key, env[key])
    settings = WorkerSettings()
    assert settings.aws_endpoint_url is None
    for service, key in (("sqs", "AWS_ENDPOINT_URL_SQS"), ("s3", "AWS_ENDPOINT_URL_S3")):
        client = aws.client(service, endpoint_url=settings.aws_endpoint_url,
                            region=settings.aws_region)
        assert client.meta.endpoint_url == env[key]


def _elasticmq_conf() -> dict[str, Any]:
    text = re.sub(r"#.*", "", ELASTICMQ_CONF.read_text())

    def block(name: str) -> str:
        match = re.search(name + r"\s*\{([^}]*)\}", text)
        assert match, f"{name} block missing from {ELASTICMQ_CONF.name}"
        return match.group(1)

    def value(body: str, key: str) -> str:
        match = re.search(rf"^\s*{key}\s*=\s*\"?([^\"\s]*)\"?\s*$", body, re.MULTILINE)
        assert match, f"{key} missing from {ELASTICMQ_CONF.name}"
        return match.group(1)

    node, rest, account = block("node-address"), block("rest-sqs"), block("aws")
    return {"protocol": value(node, "protocol"), "host": value(node, "host"),
            "port": int(value(node, "port")), "context-path": value(node, "context-path"),
            "bind-port": int(value(rest, "bind-port")), "accountId": value(account, "accountId")}


def test_elasticmq_config_is_mounted_where_the_image_reads_it(services: dict[str, Any]) -> None:
    mounts = {target: source for source, target, *_ in
              (v.split(":") for v in services["elasticmq"]["volumes"])}
    assert (ROOT / mounts["/opt/elasticmq.conf"]).resolve() == ELASTICMQ_CONF


def test_queue_urls_are_those_elasticmq_returns_to_bootstrap(services: dict[str, Any]) -> None:
    conf = _elasticmq_conf()
    assert conf["host"] == "elasticmq", "node-address must be the compose service name"
    assert conf["port"] == conf["bind-port"]
    base = f"{conf['protocol']}://{conf['host']}:{conf['port']}{conf['context-path']}"

    # Not a stand-in for SQS in any behaviour test: it only records which queue names the real
    # ensure_queues asks for, and answers with the URLs ElasticMQ would build for them.
    class RecordingSqs:
        def create_queue(self, QueueName: str, Attributes: dict[str, str]) -> dict[str, str]:  # noqa: N803
            return {"QueueUrl": f"{base}/{conf['accountId']}/{QueueName}"}

        def get_queue_attributes(self, **_: Any) -> dict[str, Any]:
            return {"Attributes": {"QueueArn": "arn:aws:sqs:us-east-1:000000000000:dlq"}}

    name = _option(services["bootstrap"]["command"], "--queue-name")
    url, dlq_url = queue.ensure_queues(RecordingSqs(), name)
    for service in ("gateway", "worker"):
        env = _env(services[service])
        assert (env["SQS_QUEUE_URL"], env["SQS_DLQ_URL"]) == (url, dlq_url)


def test_stores_are_in_the_bucket_that_bootstrap_creates(services: dict[str, Any]) -> None:
    bucket = _option(services["bootstrap"]["command"], "--bucket")
    for name in ("gateway", "worker"):
        env = _env(services[name])
        upload, artifact = urlparse(env["UPLOAD_STORE_URI"]), urlparse(env["ARTIFACT_STORE_URI"])
        assert (upload.scheme, upload.netloc) == ("s3", bucket)
        assert (artifact.scheme, artifact.netloc) == ("s3", bucket)
        assert upload.path.strip("/") and artifact.path.strip("/") != upload.path.strip("/")


def test_s3_credentials_are_minios_root_user(services: dict[str, Any]) -> None:
    minio = _env(services["minio"])
    for name in OURS:
        env = _env(services[name])
        assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"]


def test_database_url_points_at_the_postgres_service(services: dict[str, Any]) -> None:
    pg = _env(services["postgres"])
    for name in OURS:
        url = _env(services[name])["DATABASE_URL"]
        match = re.fullmatch(r"postgresql://([^:@]+):(.+)@([^:/]+):(\d+)/(\w+)", url)
        assert match, url
        user, password, host, port, dbname = match.groups()
        assert (user, password, host, port, dbname) == (
            pg["POSTGRES_USER"], pg["POSTGRES_PASSWORD"], "postgres", "5432", pg["POSTGRES_DB"])


# ── start-up order, health, ports ───────────────────────────────────────────────────────────
def test_depends_on_names_real_services_with_valid_conditions(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for target, spec in (service.get("depends_on") or {}).items():
            assert target in services, f"{name} depends on unknown service {target!r}"
            condition = spec["condition"]
            assert condition in CONDITIONS, f"{name} → {target}: {condition!r}"
            if condition == "service_healthy":
                probe = (services[target].get("healthcheck") or {}).get("test")
                assert probe, f"{target} has no healthcheck to wait for"
            if condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"{target} must run once"


def test_start_up_order(services: dict[str, Any]) -> None:
    def conditions(name: str) -> dict[str, str]:
        return {t: s["condition"] for t, s in services[name]["depends_on"].items()}

    boot = conditions("bootstrap")
    assert boot["postgres"] == "service_healthy"
    assert boot["elasticmq"] in ("service_started", "service_healthy")
    assert boot["minio"] in ("service_started", "service_healthy")
    for name in ("gateway", "worker"):
        assert conditions(name) == {"bootstrap": "service_completed_successfully"}


def test_postgres_keeps_row_values_out_of_its_log(services: dict[str, Any]) -> None:
    # As the embedded server (cli/embedded.py PRIVATE_LOG_OPTIONS, decision 0177).
    command = " ".join(services["postgres"]["command"])
    assert "log_error_verbosity=terse" in command
    assert "log_min_error_statement=panic" in command


def test_postgres_health_and_volume(compose: dict[str, Any], services: dict[str, Any]) -> None:
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    named = {v.split(":")[0] for s in services.values() for v in s.get("volumes", [])
             if not v.startswith((".", "/"))}
    # Postgres 18 images want the mount one level up from 16's (.../data is refused).
    assert "pgdata18:/var/lib/postgresql" in services["postgres"]["volumes"]
    assert named <= set(compose.get("volumes") or {}), "declare named volumes at the top level"


def test_gateway_is_published_and_health_checked_on_ready(services: dict[str, Any]) -> None:
    gateway = services["gateway"]
    port = _option(gateway["command"], "--port")
    assert [str(p).rsplit(":", 1)[-1] for p in gateway["ports"]] == [port]
    probe = " ".join(gateway["healthcheck"]["test"])
    url = re.search(r"http://[^'\"\s]+", probe)
    assert url, probe
    parsed = urlparse(url.group(0))
    assert parsed.path == "/health/ready" and parsed.port == int(port)
    assert parsed.path in health.ready.paths, "the probe must hit a route the gateway serves"


def test_worker_has_no_ports_and_two_replicas(services: dict[str, Any]) -> None:
    worker = services["worker"]
    assert "ports" not in worker
    assert "container_name" not in worker, "a fixed name forbids replicas"
    assert worker["deploy"]["replicas"] == 2


# ── Dockerfile ──────────────────────────────────────────────────────────────────────────────
def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_dockerfile_base_image() -> None:
    froms = [args for keyword, args in _instructions() if keyword == "FROM"]
    assert froms and froms[-1].split()[0] == "python:3.11-slim"


def test_dockerfile_installs_torch_cpu_at_the_projects_pin_before_the_project() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [d for d in pyproject["project"]["dependencies"] if d.startswith("torch")]
    assert pins == ["torch==2.13.0"]
    runs = [args for keyword, args in _instructions() if keyword == "RUN"]
    torch = [i for i, r in enumerate(runs) if "torch==2.13.0" in shlex.split(r)]
    project = [i for i, r in enumerate(runs) if re.search(r"\bpip install \.(\s|$)", r)]
    assert torch and project, "install torch==2.13.0, then the project with `pip install .`"
    assert torch[0] < project[0]
    args = shlex.split(runs[torch[0]])
    assert args[args.index("--index-url") + 1] == "https://download.pytorch.org/whl/cpu"


def test_dockerfile_copies_every_package_and_the_migrations() -> None:
    copied = set()
    for keyword, args in _instructions():
        if keyword == "COPY" and not args.startswith("--from"):
            *sources, _ = shlex.split(args)
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path"
                copied.add(source.rstrip("/"))
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", "migrations"} <= copied
    # The image build proves the installed package carries every migration.
    assert any("migrate.discover()" in args for keyword, args in _instructions() if keyword == "RUN")


def test_dockerfile_runs_offline_as_a_non_root_user() -> None:
    env: dict[str, str] = {}
    for keyword, args in _instructions():
        if keyword == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
    users = [args for keyword, args in _instructions() if keyword == "USER"]
    assert users, "no USER: the image would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
