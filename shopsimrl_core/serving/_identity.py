"""What a launch serves: the served identity (the pool key), the base command's values, the adapter hot-loaded.

The identity is everything that makes two launches serve the same thing: the server kind, the filled
command line without the port, the weights' content identity, the environment and the device shape. For
an adapter over a server that hot-loads adapters (``RUNTIME_LORA``) it is the *base*'s with the rank limit
(from the adapter's ``adapter_config.json``), so every adapter of a base shares one server; the adapter is
then loaded under its name through the server's runtime endpoint and unloaded after the run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shopsimrl_core._errors import ConfigError, ShopSimRLError
from shopsimrl_core.runs.config._config import EvalConfig
from shopsimrl_core.serving._pool import pool_key
from shopsimrl_core.serving._templates import RUNTIME_LORA, RuntimeLora, fill_command, lora_rank_limit
from shopsimrl_core.serving._weights import adapter_rank, server_reference, weights_identity

__all__ = ["Served", "ServerStartError", "load_adapter", "served_for", "unload_adapter"]


class ServerStartError(ShopSimRLError):
    """The launched server exited or was not ready within ``serve.start_timeout`` (the log's tail is in the message)."""

    code = "server-start-failed"


@dataclass(frozen=True)
class Served:
    """What one run's launch serves: the base command's values, the pool key, the adapter to hot-load."""

    values: dict[str, str]
    key: str
    base_name: str
    """The name the server serves (the checkpoint's, or the base's when adapters are hot-loaded)."""
    lora_name: str | None
    """The name a hot-loaded adapter is loaded under (None: nothing is loaded at runtime)."""
    request_name: str
    """The model name the run's requests carry (``model.name``: the adapter's, or the served weights')."""
    adapter: str
    runtime: RuntimeLora | None
    """``RUNTIME_LORA`` of the server when the adapter is hot-loaded."""
    env: dict[str, str]


def served_for(config: EvalConfig) -> Served:
    """What a launch of *config* serves (ConfigError: an SGLang adapter name without ``<base>:``, a bad rank)."""
    serve = config.serve
    assert serve is not None
    name = config.model.name
    adapter = server_reference(serve.adapter) if serve.adapter is not None else ""
    runtime = RUNTIME_LORA.get(serve.server) if serve.adapter is not None and serve.command is None else None
    base_name, lora_name = name, None
    rank_limit = serve.max_lora_rank
    if runtime is not None:
        assert serve.adapter is not None
        if rank_limit is None:
            rank_limit = lora_rank_limit(adapter_rank(serve.adapter))
        if serve.server == "sglang":
            # SGLang requests an adapter as "<base>:<adapter>" (its OpenAI API's model field).
            if ":" not in name:
                raise ConfigError(
                    f"model.name: {name!r}: SGLang requests an adapter as <base>:<adapter>; name the checkpoint's "
                    "model like base:<checkpoint>",
                    code="config-invalid",
                )
            base_name, lora_name = name.split(":", 1)
        else:
            base_name, lora_name = "base", name
    values = {
        "weights": server_reference(serve.weights),
        "adapter": adapter,
        "host": serve.host,
        "served_model": base_name,
        "python": serve.python or sys.executable,
        "gpus_per_server": str(max(1, serve.gpus_per_server)),
        # llama.cpp offloads no layer unless told: every layer when the server was given a device.
        "gpu_layers": "-1" if serve.gpus and serve.gpus_per_server > 0 else "0",
        "max_lora_rank": str(rank_limit or 16),
    }
    env = dict(serve.env)
    if runtime is not None:
        env.update(runtime.env)
    argv = fill_command(
        serve.server,
        {**values, "port": "{port}"},
        command=serve.command,
        extra_args=serve.extra_args,
        adapter=serve.adapter is not None and runtime is None,
        runtime_lora=runtime is not None,
    )
    identity: dict[str, Any] = {
        "server": serve.server,
        "argv": argv,
        "weights": weights_identity(serve.weights),
        "env": env,
        "gpus": list(serve.gpus),
        "gpus_per_server": serve.gpus_per_server,
    }
    if serve.adapter is not None and runtime is None:
        identity["adapter"] = weights_identity(serve.adapter, "serve.adapter")
    return Served(values, pool_key(identity), base_name, lora_name, name, adapter, runtime, env)


def _root(base_url: str) -> str:
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def _post(url: str, body: dict[str, Any], headers: dict[str, str], timeout: float) -> tuple[int, str]:
    import httpx

    try:
        with httpx.Client(timeout=timeout, trust_env=False) as client:
            answer = client.post(url, json=body, headers=headers)
            return answer.status_code, answer.text[:300]
    except httpx.HTTPError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def load_adapter(served: Served, base_url: str, config: EvalConfig, say: Callable[[str], None]) -> None:
    """Load the run's adapter into the server at *base_url* (ServerStartError when it refuses)."""
    assert served.runtime is not None and served.lora_name is not None
    serve = config.serve
    assert serve is not None
    headers = config.model.auth().headers(required=False)
    url = _root(base_url) + served.runtime.load
    body = {"lora_name": served.lora_name, "lora_path": served.adapter}
    status, text = _post(url, body, headers, serve.start_timeout)
    if status == 400 and "already" in text.lower():
        # A run that died before unloading left it: load it afresh (the adapter's files may have changed).
        _post(_root(base_url) + served.runtime.unload, {"lora_name": served.lora_name}, headers, 30.0)
        status, text = _post(url, body, headers, serve.start_timeout)
    if status != 200:
        raise ServerStartError(
            f"serve.adapter: the {serve.server} server at {base_url} refused to load adapter {served.adapter} as "
            f"{served.lora_name!r} (HTTP {status}: {text}); check the adapter's base model and rank "
            f"(limit {served.values['max_lora_rank']})"
        )
    say(f"loaded adapter {served.adapter} as {served.lora_name} (rank limit {served.values['max_lora_rank']})")


def unload_adapter(served: Served, base_url: str, config: EvalConfig, say: Callable[[str], None]) -> None:
    """Unload the run's adapter (best effort: a failure is said, the server keeps it)."""
    assert served.runtime is not None and served.lora_name is not None
    headers = config.model.auth().headers(required=False)
    unload = _root(base_url) + served.runtime.unload
    status, text = _post(unload, {"lora_name": served.lora_name}, headers, 30.0)
    if status == 200:
        say(f"unloaded adapter {served.lora_name}")
    else:
        say(f"could not unload adapter {served.lora_name} (HTTP {status}: {text}); the server keeps it loaded")
