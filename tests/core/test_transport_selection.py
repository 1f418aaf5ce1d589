"""Which HTTP engine the clients use (``http_transport`` auto / h1 / aiohttp / httpx), and the config keys
that choose it: validated, documented, and never part of the plan fingerprint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from shopsimrl_core import build_plan, select_transport
from shopsimrl_core._errors import ConfigError
from shopsimrl_core.adapters._environment import ShopSimulatorClient
from shopsimrl_core.adapters._h1 import H1Engine
from shopsimrl_core.adapters._http import AiohttpEngine, HttpxEngine
from shopsimrl_core.adapters._model import ChatModelClient
from shopsimrl_core.runs.config._config import config_from_mapping

REPO = Path(__file__).resolve().parents[2]
SPLIT = REPO / "configs" / "sandbox" / "persona_splits.sandbox.json"
PROXY_VARS = (
    "HTTP_PROXY",
    "http_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
)


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def no_netrc(monkeypatch, tmp_path):
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


def test_auto_picks_h1_for_http_and_https():
    assert select_transport("http://127.0.0.1:8000/v1/chat/completions") == "h1"
    assert select_transport("https://api.example.com/v1/chat/completions", trust_env=True) == "h1"
    assert select_transport("http://127.0.0.1:8000/x", mode="h1", trust_env=True) == "h1"
    assert select_transport("http://user:secret@127.0.0.1:8000/x") == "aiohttp"  # credentials: Basic auth
    assert select_transport("http://127.0.0.1:8000/x", mode="httpx") == "httpx"
    assert select_transport("https://api.example.com/x", mode="aiohttp") == "aiohttp"


def test_bad_modes_and_urls_are_refused():
    with pytest.raises(ValueError, match="must be one of auto, h1, aiohttp, httpx"):
        select_transport("http://127.0.0.1/x", mode="streams")
    with pytest.raises(ValueError, match="only http:// and https://"):
        select_transport("ftp://127.0.0.1/x")


def test_proxies_only_httpx_understands_keep_httpx(monkeypatch):
    url = "http://10.0.0.5:8000/v1/chat/completions"
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    assert select_transport(url, trust_env=True) == "aiohttp"  # aiohttp honours HTTP(S)_PROXY itself
    monkeypatch.setenv("HTTP_PROXY", "socks5://proxy.internal:1080")
    assert select_transport(url, trust_env=True) == "httpx"
    assert select_transport(url, trust_env=False) == "h1"  # proxies not honoured at all
    assert select_transport(url, mode="aiohttp", trust_env=True) == "aiohttp"
    assert select_transport(url, mode="h1", trust_env=True) == "h1"  # h1 never uses a proxy
    monkeypatch.setenv("NO_PROXY", "localhost,10.0.0.5")
    assert select_transport(url, trust_env=True) == "h1"  # the host is exempt
    monkeypatch.delenv("NO_PROXY")
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("ALL_PROXY", "http://proxy.internal:3128")
    assert select_transport(url, trust_env=True) == "httpx"


def test_netrc_credentials_for_the_host_keep_aiohttp(monkeypatch, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine models.internal login u password p\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    assert select_transport("https://models.internal/v1/x", trust_env=True) == "aiohttp"  # aiohttp reads .netrc
    assert select_transport("https://other.internal/v1/x", trust_env=True) == "h1"  # no entry for this host
    assert select_transport("https://models.internal/v1/x", trust_env=False) == "h1"
    netrc.write_text("machine\n")  # unparsable: ignored, as aiohttp ignores it
    assert select_transport("https://models.internal/v1/x", trust_env=True) == "h1"


def test_model_client_engine_and_explicit_transport_wins(monkeypatch):
    def engine_of(**kwargs):
        return ChatModelClient(
            base_url=kwargs.pop("base_url", "http://127.0.0.1:9/v1"), model="m", api_key_env=None, **kwargs
        )._http()

    async def main():
        assert isinstance(engine_of(trust_env=True), H1Engine)
        assert isinstance(engine_of(base_url="https://api.example.com/v1"), H1Engine)
        assert isinstance(engine_of(http_transport="aiohttp"), AiohttpEngine)
        assert isinstance(engine_of(http_transport="httpx"), HttpxEngine)
        mock = httpx.MockTransport(lambda request: httpx.Response(200))
        assert isinstance(engine_of(transport=mock, http_transport="aiohttp"), HttpxEngine)
        monkeypatch.setenv("ALL_PROXY", "http://proxy.internal:3128")  # only httpx honours ALL_PROXY
        assert isinstance(engine_of(trust_env=True), HttpxEngine)

    asyncio.run(main())
    with pytest.raises(ValueError, match="http_transport"):
        ChatModelClient(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None, http_transport="nope")


def test_environment_client_gives_each_pool_its_own_engine():
    async def main():
        async with ShopSimulatorClient(base_url="http://127.0.0.1:9", persona=True, max_connections=5) as env:
            return env._clients()

    step, reset = asyncio.run(main())
    assert isinstance(step, H1Engine) and isinstance(reset, H1Engine) and step is not reset
    assert step.max_connections == reset.max_connections == 5
    assert reset.read_timeout is None
    with pytest.raises(ValueError, match="http_transport"):
        ShopSimulatorClient(base_url="https://env.example.com", persona=True, http_transport="streams")


def config(**sections):
    data = {
        "experiment": {"name": "t"},
        "tasks": {"split_file": str(SPLIT), "split": "train", "sample_size": 3},
        "model": {"name": "m", "base_url": "http://127.0.0.1:30000/v1", "api_key_env": None},
    }
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return config_from_mapping(data, base_dir=REPO)


def test_config_keys_default_to_auto_and_are_validated():
    default = config()
    assert default.model.http_transport == "auto" and default.environment.http_transport == "auto"
    assert (
        config(model={"base_url": "https://api.example.com/v1", "http_transport": "aiohttp"}).model.http_transport
        == "aiohttp"
    )
    with pytest.raises(ConfigError, match=r"model\.http_transport: must be one of 'auto', 'h1', 'aiohttp' or 'httpx'"):
        config(model={"http_transport": "fast"})
    with pytest.raises(
        ConfigError, match=r"environment\.http_transport: must be one of 'auto', 'h1', 'aiohttp' or 'httpx'"
    ):
        config(environment={"http_transport": "streams"})


def test_http_transport_never_enters_the_fingerprint():
    plans = [
        build_plan(config(model={"http_transport": mode}, environment={"http_transport": mode, "persona": True}))
        for mode in ("auto", "h1", "aiohttp", "httpx")
    ]
    assert len({plan.fingerprint for plan in plans}) == 1
    assert "http_transport" not in repr(plans[0].semantic)
