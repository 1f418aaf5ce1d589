"""Health checks of the endpoint and environment resources, against real loopback servers."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from shopsimrl_dagster.defs.resources import EndpointUnavailable, InferenceEndpoint, ShopSimulatorEnvironment
from shopsimrl_dagster.registry import Checkpoint

CHECKPOINT = Checkpoint("ckpt-1", 1)


class _Recorder:
    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.headers: list[dict[str, str]] = []


@pytest.fixture
def fake_server() -> Iterator[Any]:
    """A real HTTP server on a free loopback port answering canned JSON per path."""
    recorder = _Recorder({})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server naming)
            recorder.headers.append(dict(self.headers))
            body = recorder.routes.get(self.path)
            payload = json.dumps(body if body is not None else {"error": "not found"}).encode()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def test_unreachable_endpoint_fails_with_its_url() -> None:
    endpoint = InferenceEndpoint.of(api_key_env=None, base_url="http://127.0.0.1:9/v1", name="m", health_timeout_s=2)
    with pytest.raises(EndpointUnavailable) as error:
        endpoint.health_check(CHECKPOINT)
    assert "inference endpoint unreachable at http://127.0.0.1:9/v1/models" in error.value.description
    environment = ShopSimulatorEnvironment(base_url="http://127.0.0.1:9", health_timeout_s=2)
    with pytest.raises(EndpointUnavailable, match="ShopSimulator unreachable at http://127.0.0.1:9/healthz"):
        environment.health_check()


def test_sandbox_passes_both_health_checks_and_a_wrong_model_is_named(sandbox) -> None:
    body = ShopSimulatorEnvironment(base_url=sandbox.env_url).health_check()
    assert body["environment_version"] == "shopsimulator-paper-aligned-v8"
    endpoint = InferenceEndpoint.of(api_key_env=None, base_url=sandbox.policy_url, name=sandbox.served_model)
    assert endpoint.health_check(CHECKPOINT)["models"] == [sandbox.served_model]
    with pytest.raises(EndpointUnavailable) as error:
        endpoint.health_check(Checkpoint("ckpt-2", 2, served_model="grpo-step-2"))
    assert f"does not serve model 'grpo-step-2' (served: {sandbox.served_model})" in error.value.description
    assert "ckpt-2.json" in error.value.description


def test_environment_with_unknown_versions_is_refused(fake_server) -> None:
    fake_server.routes["/healthz"] = {
        "ready": True,
        "environment_version": "shopsimulator-paper-aligned-v9",
        "observation_version": "shopping-observation-v7",
        "environment_slots": 8,
        "free_slots": 8,
    }
    with pytest.raises(EndpointUnavailable) as error:
        ShopSimulatorEnvironment(base_url=fake_server.url).health_check()
    assert (
        "environment_version 'shopsimulator-paper-aligned-v9', which this runtime does not know"
        in error.value.description
    )
    fake_server.routes["/healthz"] = {
        **fake_server.routes["/healthz"],
        "environment_version": "shopsimulator-paper-aligned-v8",
        "observation_version": "shopping-observation-v6",
    }
    with pytest.raises(EndpointUnavailable, match="observation_version 'shopping-observation-v6'"):
        ShopSimulatorEnvironment(base_url=fake_server.url).health_check()


def test_api_key_comes_from_the_named_variable_and_never_into_messages(fake_server, monkeypatch) -> None:
    fake_server.routes["/v1/models"] = {"data": [{"id": "other-model"}]}
    endpoint = InferenceEndpoint.of(base_url=f"{fake_server.url}/v1", name="m", api_key_env="SHOPSIMRL_TEST_KEY")
    monkeypatch.delenv("SHOPSIMRL_TEST_KEY", raising=False)
    with pytest.raises(EndpointUnavailable, match="environment variable SHOPSIMRL_TEST_KEY is not set"):
        endpoint.health_check(CHECKPOINT)
    monkeypatch.setenv("SHOPSIMRL_TEST_KEY", "sk-sentinel-123")
    with pytest.raises(EndpointUnavailable) as error:
        endpoint.health_check(CHECKPOINT)
    assert fake_server.headers[-1]["Authorization"] == "Bearer sk-sentinel-123"
    assert "sk-sentinel-123" not in error.value.description
    assert "does not serve model 'm' (served: other-model)" in error.value.description
