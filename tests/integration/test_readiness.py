"""/health/ready is true only when the process can serve every route (docs/decisions/0321): its
query model loaded, the database, the queue and the object store reachable. Until the model is
in, vector, hybrid and ask answer 503 `model_loading` at once, and text search works.

The app runs in this process (real Postgres and moto), with a model loader the test releases,
so the loading window is as long as the test needs and no real model is loaded."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.search import embedding, service
from shared.settings import GatewaySettings
from tests.support.stack import wait_until


class FakeEncoder:
    model_name = "fake-model"
    dim = 384

    def encode(self, texts: list[str]) -> np.ndarray:
        vectors = np.ones((len(texts), self.dim), dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _settings(stack_env: dict[str, str], **overrides: str) -> GatewaySettings:
    env = {**stack_env, "SEARCH_MODEL_AT_START": "true", **overrides}
    return GatewaySettings(**{k.lower(): v for k, v in env.items()
                              if k.lower() in GatewaySettings.model_fields})


@pytest.fixture
def released() -> threading.Event:
    return threading.Event()


def _app(settings: GatewaySettings, released: threading.Event):  # type: ignore[no-untyped-def]
    def load(_: str) -> FakeEncoder:
        released.wait(60)  # the model's files being read, for as long as the test says
        return FakeEncoder()

    app = create_app(settings)
    app.state.search = service.Runtime(settings, embedding.QueryEmbedder("fake-model", load))
    return app


def test_until_the_model_is_loaded_vector_queries_are_refused_at_once_and_text_works(
        stack_env, tenants, released):
    user = tenants.user()
    with TestClient(_app(_settings(stack_env), released)) as client:
        client.headers["Authorization"] = f"Bearer {user.token}"
        # Given a gateway that started and is still loading its query model
        ready = client.get("/health/ready")
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["query_model"] == "loading"
        assert ready.json()["checks"]["database"] == "ok"
        assert ready.headers["retry-after"] == "5"

        # Then vector and hybrid search and ask are refused at once, saying when to come back
        for call in (lambda: client.get("/v1/search", params={"q": "vat", "mode": "vector"}),
                     lambda: client.get("/v1/search", params={"q": "vat", "mode": "hybrid"}),
                     lambda: client.post("/v1/ask", json={"question": "what is vat?"})):
            started = time.monotonic()
            refused = call()
            assert time.monotonic() - started < 2
            assert (refused.status_code, refused.json()["code"]) == (503, "model_loading")
            assert refused.headers["retry-after"] == "5"
        # And text search answers meanwhile
        assert client.get("/v1/search", params={"q": "vat", "mode": "text"}).status_code == 200

        # When the model is in
        released.set()

        # Then the gateway is ready and vector search answers
        wait_until(lambda: client.get("/health/ready").status_code == 200, timeout=30,
                   message="ready once the model loaded")
        assert client.get("/health/ready").json()["checks"]["query_model"] == "loaded"
        answered = client.get("/v1/search", params={"q": "vat", "mode": "vector"})
        assert answered.status_code == 200, answered.text


def test_a_missing_bucket_makes_the_gateway_not_ready_and_says_which_check(stack_env, released):
    released.set()
    settings = _settings(stack_env, UPLOAD_STORE_URI="s3://no-such-bucket-for-readiness/u")
    with TestClient(_app(settings, released)) as client:
        wait_until(lambda: client.get("/health/ready").json()["checks"]["query_model"]
                   == "loaded", timeout=30, message="model loaded")
        ready = client.get("/health/ready")
    assert ready.status_code == 503
    checks = ready.json()["checks"]
    assert checks["object_store"].startswith("unreachable") and checks["queue"] == "ok"
    assert "object_store" in ready.json()["detail"]
