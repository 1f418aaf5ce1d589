"""Which transport the clients use (``http_transport`` auto / httpx / streams), and the config keys
that choose it: validated, documented, and never part of the plan fingerprint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from shopsimrl_core import StreamsTransport, build_plan, select_transport
from shopsimrl_core.runs._config import config_from_mapping
from shopsimrl_core.adapters._environment import ShopSimulatorClient
from shopsimrl_core._errors import ConfigError
from shopsimrl_core.adapters._model import ChatModelClient

REPO = Path(__file__).resolve().parents[2]
SPLIT = REPO / "configs" / "sandbox" / "persona_splits.sandbox.json"
PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def test_auto_picks_streams_for_plain_http_and_httpx_for_https():
    assert isinstance(select_transport("http://127.0.0.1:8000/v1/chat/completions"), StreamsTransport)
    assert select_transport("https://api.example.com/v1/chat/completions") is None
    assert select_transport("http://127.0.0.1:8000/x", mode="httpx") is None
    transport = select_transport("http://127.0.0.1:8000/x", mode="streams", max_connections=7)
    assert isinstance(transport, StreamsTransport) and transport.max_connections == 7


def test_bad_modes_are_refused():
    with pytest.raises(ValueError, match="must be one of auto, httpx, streams"):
        select_transport("http://127.0.0.1/x", mode="fast")
    with pytest.raises(ValueError, match="only http://"):
        select_transport("https://api.example.com/x", mode="streams")


def test_proxy_variables_keep_httpx_only_when_they_apply(monkeypatch):
    url = "http://10.0.0.5:8000/v1/chat/completions"
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert select_transport(url, trust_env=True) is None  # httpx routes it through the proxy
    assert isinstance(select_transport(url, trust_env=False), StreamsTransport)  # proxies not honoured
    assert isinstance(select_transport(url, mode="streams", trust_env=True), StreamsTransport)
    monkeypatch.setenv("NO_PROXY", "localhost,10.0.0.5")
    assert isinstance(select_transport(url, trust_env=True), StreamsTransport)  # the host is exempt
    monkeypatch.setenv("NO_PROXY", "example.org")
    assert select_transport(url, trust_env=True) is None
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("ALL_PROXY", "http://proxy.internal:3128")
    assert select_transport(url, trust_env=True) is None


def test_model_client_selection_and_explicit_transport_wins(monkeypatch):
    plain = ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, trust_env=True)
    assert isinstance(plain._transport, StreamsTransport)
    secure = ChatModelClient(base_url="https://api.example.com/v1", model="m", api_key_env=None)
    assert secure._transport is None
    forced = ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, http_transport="httpx")
    assert forced._transport is None
    mock = httpx.MockTransport(lambda request: httpx.Response(200))
    explicit = ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, transport=mock,
                               http_transport="streams")
    assert explicit._transport is mock
    monkeypatch.setenv("http_proxy", "http://proxy.internal:3128")
    proxied = ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, trust_env=True)
    assert proxied._transport is None
    with pytest.raises(ValueError, match="http_transport"):
        ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, http_transport="nope")


def test_environment_client_gives_each_pool_its_own_transport():
    async def main():
        async with ShopSimulatorClient(base_url="http://127.0.0.1:9", persona=True, max_connections=5) as env:
            step, reset = env._clients()
            return step._transport, reset._transport

    step, reset = asyncio.run(main())
    assert isinstance(step, StreamsTransport) and isinstance(reset, StreamsTransport) and step is not reset
    assert step.max_connections == reset.max_connections == 5
    with pytest.raises(ValueError, match="only http://"):
        ShopSimulatorClient(base_url="https://env.example.com", persona=True, http_transport="streams")


def config(**sections):
    data = {"experiment": {"name": "t"}, "tasks": {"split_file": str(SPLIT), "split": "train", "sample_size": 3},
            "model": {"name": "m", "base_url": "http://127.0.0.1:30000/v1", "api_key_env": None}}
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return config_from_mapping(data, base_dir=REPO)


def test_config_keys_default_to_auto_and_are_validated():
    default = config()
    assert default.model.http_transport == "auto" and default.environment.http_transport == "auto"
    with pytest.raises(ConfigError, match=r"model\.http_transport: must be one of 'auto', 'httpx' or 'streams'"):
        config(model={"http_transport": "fast"})
    with pytest.raises(ConfigError, match=r"model\.http_transport: 'streams' supports only http://"):
        config(model={"base_url": "https://api.example.com/v1", "http_transport": "streams"})
    with pytest.raises(ConfigError, match=r"environment\.http_transport: 'streams' supports only http://"):
        config(environment={"base_url": "https://env.example.com", "http_transport": "streams"})


def test_http_transport_never_enters_the_fingerprint():
    plans = [build_plan(config(model={"http_transport": mode}, environment={"http_transport": mode, "persona": True}))
             for mode in ("auto", "httpx", "streams")]
    assert len({plan.fingerprint for plan in plans}) == 1
    assert "http_transport" not in repr(plans[0].semantic)
