"""Settings refuse configurations that would run a production gateway unsafely."""

from __future__ import annotations

import pydantic
import pytest

from shared.settings import GatewaySettings, WorkerSettings

STRONG = "k" * 48
METRICS = "m" * 24


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """Only what a test passes counts: the developer's or CI's environment must not leak in."""
    for key in ("JWT_SECRET", "AUTH_ENABLED", "DEV_MODE", "DEV_TENANT_ID", "DEV_USER_ID",
                "UPLOAD_MAX_SIZE_MB", "WORKER_MAX_CONCURRENT_JOBS", "SQS_WAIT_TIME_S",
                "METRICS_TOKEN"):
        monkeypatch.delenv(key, raising=False)


def refused(**kwargs) -> str:
    with pytest.raises(pydantic.ValidationError) as info:
        GatewaySettings(**kwargs)
    return str(info.value)


def test_production_settings_with_a_strong_secret_construct():
    settings = GatewaySettings(jwt_secret=STRONG, metrics_token=METRICS)
    assert settings.auth_enabled and not settings.dev_mode


@pytest.mark.parametrize("token", ["", "secret", "short"])
def test_metrics_need_a_real_token_outside_dev_mode(token):
    # /metrics and /api/metrics span every tenant: never open in production.
    assert "METRICS_TOKEN must be set outside DEV_MODE" in refused(jwt_secret=STRONG,
                                                                   metrics_token=token)


def test_metrics_may_be_open_in_dev_mode():
    assert GatewaySettings(dev_mode=True).metrics_token == ""


def test_auth_disabled_without_dev_mode_is_refused():
    assert "DEV_MODE" in refused(jwt_secret=STRONG, auth_enabled=False)


def test_auth_disabled_from_the_environment_without_dev_mode_is_refused(monkeypatch):
    monkeypatch.setenv("JWT_SECRET", STRONG)
    monkeypatch.setenv("AUTH_ENABLED", "false")
    with pytest.raises(pydantic.ValidationError, match="DEV_MODE"):
        GatewaySettings()


def test_auth_disabled_in_dev_mode_needs_the_dev_principal():
    assert "DEV_TENANT_ID" in refused(auth_enabled=False, dev_mode=True)


def test_auth_disabled_in_dev_mode_with_a_dev_principal_constructs():
    settings = GatewaySettings(auth_enabled=False, dev_mode=True,
                               dev_tenant_id="00000000-0000-0000-0000-000000000001",
                               dev_user_id="00000000-0000-0000-0000-000000000002")
    assert not settings.auth_enabled


@pytest.mark.parametrize("secret", ["", "change-me", "CHANGEME", "secret", "dev", "jwt-secret"])
def test_placeholder_secret_is_refused_outside_dev(secret):
    assert "JWT_SECRET" in refused(jwt_secret=secret)


@pytest.mark.parametrize("secret", ["short", "x" * 31])
def test_short_secret_is_refused_outside_dev(secret):
    assert "at least 32" in refused(jwt_secret=secret)


def test_missing_secret_from_environment_is_refused():
    with pytest.raises(pydantic.ValidationError, match="JWT_SECRET"):
        GatewaySettings()


def test_thirty_two_characters_are_enough():
    assert GatewaySettings(jwt_secret="x" * 32, metrics_token=METRICS).jwt_secret == "x" * 32


@pytest.mark.parametrize("secret", ["", "change-me", "short"])
def test_weak_secret_is_fine_in_dev_mode(secret):
    assert GatewaySettings(jwt_secret=secret, dev_mode=True).dev_mode


def test_upload_limit_is_read_in_megabytes(monkeypatch):
    monkeypatch.setenv("UPLOAD_MAX_SIZE_MB", "1.5")
    assert GatewaySettings(jwt_secret=STRONG, metrics_token=METRICS).upload_max_bytes == 1_572_864


def test_worker_concurrency_must_be_positive(monkeypatch):
    monkeypatch.setenv("WORKER_MAX_CONCURRENT_JOBS", "0")
    with pytest.raises(pydantic.ValidationError):
        WorkerSettings()


def test_sqs_long_poll_is_capped_at_twenty_seconds(monkeypatch):
    monkeypatch.setenv("SQS_WAIT_TIME_S", "21")
    with pytest.raises(pydantic.ValidationError):
        WorkerSettings()
