"""One place builds an endpoint's authentication header, and everything that calls an endpoint uses it.

Issue 25's newcomer change "a new endpoint auth header": with every consumer taking the
``EndpointAuth`` of ``ModelConfig.auth()``, a new header or scheme is a change there alone. The last
test proves it on real loopback HTTP: an ``EndpointAuth`` with another header, given only through
``ModelConfig.auth``, reaches the model client's completions, the health check and the preflight (the
server launcher's readiness probe reads the same ``ModelConfig.auth()``; the scan below keeps any
other header builder out).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from testkit.loopback import threaded_server

import shopsimrl_core as core
from shopsimrl_core import EndpointAuth
from shopsimrl_core.runs.config._config_sections import ModelConfig

ROOT = Path(__file__).resolve().parents[2]


def test_the_header_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTH_TEST_KEY", "k-123")
    assert EndpointAuth("AUTH_TEST_KEY").headers() == {"Authorization": "Bearer k-123"}
    assert EndpointAuth("AUTH_TEST_KEY", header="api-key", scheme="").headers() == {"api-key": "k-123"}
    assert EndpointAuth(None).headers() == {} and EndpointAuth(None).key_is_set()
    monkeypatch.delenv("AUTH_TEST_KEY")
    assert EndpointAuth("AUTH_TEST_KEY").headers(required=False) == {}
    assert not EndpointAuth("AUTH_TEST_KEY").key_is_set()
    with pytest.raises(core.ConfigError) as caught:
        EndpointAuth("AUTH_TEST_KEY").headers()
    assert caught.value.code == "api-key-missing" and "AUTH_TEST_KEY" in str(caught.value)


def test_no_module_builds_an_auth_header_of_its_own() -> None:
    pattern = re.compile(r"Bearer|[\"']Authorization[\"']")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for package in ("shopsimrl_core", "shopsimrl_dagster")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "_auth.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line.split("#", 1)[0])
    ]
    assert found == [], f"build headers with shopsimrl_core.adapters._auth.EndpointAuth: {found}"


class _Recorder(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible server that records each request's path and headers."""

    seen: list[tuple[str, dict[str, str]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        self._answer({"object": "list", "data": [{"id": "m", "object": "model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        message = {"role": "assistant", "content": "hi"}
        self._answer({"id": "c", "object": "chat.completion", "model": "m",
                      "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@pytest.fixture
def recorder() -> Iterator[str]:
    _Recorder.seen = []
    with threaded_server(_Recorder) as port:
        yield f"http://127.0.0.1:{port}/v1"


def test_a_new_header_given_only_by_model_config_auth_reaches_every_consumer(
    recorder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTH_TEST_KEY", "k-456")
    # the newcomer's whole change: ModelConfig.auth returns another header
    monkeypatch.setattr(ModelConfig, "auth", lambda self: EndpointAuth(self.api_key_env, header="api-key", scheme=""))
    model = ModelConfig(name="m", base_url=recorder, api_key_env="AUTH_TEST_KEY", http_transport="httpx")
    from shopsimrl_core.adapters import ChatModelClient

    async def complete() -> None:
        async with ChatModelClient.from_config(model) as client:
            await client.complete([{"role": "user", "content": "x"}], tools=None, seed=None)

    import asyncio

    asyncio.run(complete())
    core.check_model(recorder, "m", auth=model.auth(), http_transport="httpx")
    from shopsimrl_core.runs.endpoints._preflight import _headers

    class _Config:
        pass

    config = _Config()
    config.model = model  # type: ignore[attr-defined]
    assert _headers(config) == {"api-key": "k-456"}
    paths = [path for path, _ in _Recorder.seen]
    assert paths == ["/v1/chat/completions", "/v1/models"]
    for path, headers in _Recorder.seen:
        assert headers.get("api-key") == "k-456", path
        assert "authorization" not in headers, path
