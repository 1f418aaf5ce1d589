"""The core's one-endpoint health checks (``check_environment``, ``check_model``) and the one auth-header builder."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

import shopsimrl_core as core
from shopsimrl_core import PreflightError, bearer_headers, check_environment, check_model

HEALTHZ = {
    "ready": True,
    "environment_version": sorted(core.KNOWN_ENVIRONMENT_VERSIONS)[0],
    "observation_version": sorted(core.KNOWN_OBSERVATION_VERSIONS)[0],
    "environment_slots": 4,
    "free_slots": 4,
}


def _transport(routes: dict[str, Any], seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    """Answers each path with (status, body): a dict/list body as JSON, a str as an HTML page."""

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        status, body = routes.get(request.url.path, (404, {"error": "not found"}))
        if isinstance(body, str):
            return httpx.Response(status, text=body, headers={"content-type": "text/html"})
        return httpx.Response(status, content=json.dumps(body).encode(), headers={"content-type": "application/json"})

    return httpx.MockTransport(handle)


def test_a_ready_compatible_environment_returns_its_healthz() -> None:
    body = check_environment("http://env/", transport=_transport({"/healthz": (200, HEALTHZ)}))
    assert body == HEALTHZ


@pytest.mark.parametrize(
    ("answer", "code", "text"),
    [
        ((200, {**HEALTHZ, "ready": False}), "environment-not-ready", "ShopSimulator at http://env is not ready"),
        (
            (200, {**HEALTHZ, "environment_version": "shopsimulator-paper-aligned-v0"}),
            "environment-incompatible",
            "reports environment_version 'shopsimulator-paper-aligned-v0', which this runtime does not know (known: ",
        ),
        ((200, {**HEALTHZ, "observation_version": None}), "environment-incompatible", "observation_version None"),
        ((503, {"error": "warming up"}), "environment-unreachable", "at http://env/healthz answered HTTP 503"),
        ((200, "<html>proxy</html>"), "environment-unreachable", "did not answer JSON (got text/html)"),
    ],
)
def test_an_environment_that_is_not_usable_is_refused_with_its_code(answer: Any, code: str, text: str) -> None:
    with pytest.raises(PreflightError) as error:
        check_environment("http://env", transport=_transport({"/healthz": answer}))
    assert error.value.code == code
    assert text in str(error.value)
    assert getattr(error.value, "url", "").startswith("http://env")


def test_nothing_listening_is_unreachable_with_the_url() -> None:
    with pytest.raises(PreflightError) as error:
        check_environment("http://127.0.0.1:9", timeout=2)
    assert error.value.code == "environment-unreachable"
    assert str(error.value).startswith("ShopSimulator unreachable at http://127.0.0.1:9/healthz (")
    with pytest.raises(PreflightError) as error:
        check_model("http://127.0.0.1:9/v1", "m", timeout=2, what="inference endpoint")
    assert error.value.code == "model-unreachable"
    assert str(error.value).startswith("inference endpoint unreachable at http://127.0.0.1:9/v1/models (")


def test_a_served_model_passes_and_the_key_goes_only_into_the_header(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOPSIMRL_HEALTH_KEY", "sk-sentinel-9")
    seen: list[httpx.Request] = []
    models = (200, {"object": "list", "data": [{"id": "a"}, {"id": "m"}]})
    transport = _transport({"/v1/models": models}, seen)
    assert check_model("http://llm/v1/", "m", api_key_env="SHOPSIMRL_HEALTH_KEY", transport=transport) == ["a", "m"]
    assert seen[-1].headers["authorization"] == "Bearer sk-sentinel-9"
    with pytest.raises(PreflightError) as error:
        check_model("http://llm/v1", "b", api_key_env="SHOPSIMRL_HEALTH_KEY", transport=transport)
    assert error.value.code == "model-not-served"
    assert str(error.value) == "model endpoint http://llm/v1 does not serve model 'b' (served: a, m)"
    assert error.value.served_models == ["a", "m"]  # type: ignore[attr-defined]
    assert "sk-sentinel-9" not in str(error.value)


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        ((401, {"error": "bad key"}), "model-unauthorized"),
        ((403, {"error": "forbidden"}), "model-unauthorized"),
        ((500, {"error": "boom"}), "model-unreachable"),
        ((200, "<html>a web server</html>"), "model-bad-response"),
        ((200, {"models": ["m"]}), "model-bad-response"),
    ],
)
def test_a_model_server_that_is_not_usable_is_refused_with_its_code(answer: Any, code: str) -> None:
    with pytest.raises(PreflightError) as error:
        check_model("http://llm/v1", "m", transport=_transport({"/v1/models": answer}))
    assert error.value.code == code


def test_an_unset_key_is_refused_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SHOPSIMRL_HEALTH_KEY", raising=False)
    seen: list[httpx.Request] = []
    with pytest.raises(PreflightError) as error:
        check_model("http://llm/v1", "m", api_key_env="SHOPSIMRL_HEALTH_KEY", transport=_transport({}, seen))
    assert error.value.code == "api-key-missing"
    assert str(error.value) == "model endpoint: environment variable SHOPSIMRL_HEALTH_KEY is not set"
    assert seen == []


def test_the_sync_checks_work_inside_a_running_loop() -> None:
    async def main() -> dict[str, Any]:
        return check_environment("http://env", transport=_transport({"/healthz": (200, HEALTHZ)}))

    assert asyncio.run(main()) == HEALTHZ


def test_bearer_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHOPSIMRL_HEALTH_KEY", "sk-1")
    assert bearer_headers("SHOPSIMRL_HEALTH_KEY") == {"Authorization": "Bearer sk-1"}
    assert bearer_headers(None) == {}
    monkeypatch.setenv("SHOPSIMRL_HEALTH_KEY", "")
    assert bearer_headers("SHOPSIMRL_HEALTH_KEY", required=False) == {}
    with pytest.raises(core.ConfigError, match="environment variable SHOPSIMRL_HEALTH_KEY is not set") as error:
        bearer_headers("SHOPSIMRL_HEALTH_KEY")
    assert error.value.code == "api-key-missing"
    assert error.value.variable == "SHOPSIMRL_HEALTH_KEY"  # type: ignore[attr-defined]
