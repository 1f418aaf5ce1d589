"""Command templates of the inference servers a run can launch (``serve.server``).

Each template is a list of arguments with placeholders filled per launch: ``{weights}``, ``{adapter}``,
``{host}``, ``{port}``, ``{served_model}``, ``{python}``, ``{gpus_per_server}``, ``{gpu_layers}`` and
``{max_lora_rank}``. The flags are the ones each server needs for this pipeline's requests, which carry
OpenAI ``tools`` and expect ``tool_calls`` back (docs/pipeline.md, "Serving checkpoints", explains each):

- vLLM: ``--enable-auto-tool-choice`` with a ``--tool-call-parser`` (``hermes`` fits Qwen-family chat
  templates; change it with ``serve.command`` for other families). Adapters are hot-loaded: the base is
  started with ``--enable-lora --max-lora-rank R`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``, and each run
  loads its adapter through ``/v1/load_lora_adapter`` under the checkpoint's served name.
- SGLang: ``sglang serve`` with ``--tool-call-parser qwen``. Adapters are hot-loaded through SGLang's
  ``/load_lora_adapter`` over a base started with ``--enable-lora --max-lora-rank R``; SGLang requests an
  adapter as ``<base>:<adapter>``, so ``model.name`` must have that form.
- llama-cpp-python's server: the ``chatml-function-calling`` chat format is the one that returns
  ``tool_calls``; it needs ``model.tool_call_content: empty`` (it answers 500 to ``content: null``). It
  offloads every layer to a GPU it was given and takes the model's own context length. An adapter is
  loaded at start (no runtime loading).
- llama.cpp's ``llama-server``: ``--jinja`` makes it apply the model's template with tool support; an
  adapter is loaded at start.
- the sandbox's baseline policy (``python -m shopsim_sandbox.policy serve``), whose "weights" are a
  policy checkpoint file: the demo and tests launch it exactly as a vLLM checkpoint would be, adapters
  included (the same runtime endpoints as vLLM).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from shopsimrl_core._errors import ConfigError

__all__ = [
    "SERVER_TEMPLATES",
    "ADAPTER_ARGS",
    "RUNTIME_LORA",
    "RuntimeLora",
    "fill_command",
    "check_value",
    "lora_rank_limit",
]

SERVER_TEMPLATES: dict[str, list[str]] = {
    "vllm": [
        "vllm",
        "serve",
        "{weights}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--served-model-name",
        "{served_model}",
        "--tensor-parallel-size",
        "{gpus_per_server}",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ],
    "sglang": [
        "sglang",
        "serve",
        "--model-path",
        "{weights}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--served-model-name",
        "{served_model}",
        "--tp-size",
        "{gpus_per_server}",
        "--tool-call-parser",
        "qwen",
    ],
    "llama_cpp_python": [
        "{python}",
        "-m",
        "llama_cpp.server",
        "--model",
        "{weights}",
        "--model_alias",
        "{served_model}",
        "--chat_format",
        "chatml-function-calling",
        "--n_gpu_layers",
        "{gpu_layers}",
        "--n_ctx",
        "0",
        "--host",
        "{host}",
        "--port",
        "{port}",
    ],
    "llama_server": [
        "llama-server",
        "-m",
        "{weights}",
        "--alias",
        "{served_model}",
        "--jinja",
        "--host",
        "{host}",
        "--port",
        "{port}",
    ],
    "shopsim_sandbox": [
        "{python}",
        "-m",
        "shopsim_sandbox.policy",
        "serve",
        "--checkpoint",
        "{weights}",
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--served-model-name",
        "{served_model}",
    ],
}
"""The shipped templates; ``serve.command`` replaces one, ``serve.extra_args`` extends it."""


@dataclass(frozen=True)
class RuntimeLora:
    """How a server loads adapters at runtime over a base started once."""

    args: tuple[str, ...]
    """Start flags of the base (the rank limit is ``{max_lora_rank}``)."""
    env: dict[str, str]
    """The environment switch its runtime endpoints need."""
    load: str
    """Path of the load endpoint from the server's root (vLLM's are under /v1, SGLang's at the root)."""
    unload: str
    """Path of the unload endpoint."""


RUNTIME_LORA: dict[str, RuntimeLora] = {
    "vllm": RuntimeLora(
        ("--enable-lora", "--max-lora-rank", "{max_lora_rank}"),
        {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    ),
    "sglang": RuntimeLora(
        ("--enable-lora", "--max-lora-rank", "{max_lora_rank}", "--lora-target-modules", "all"),
        {},
        "/load_lora_adapter",
        "/unload_lora_adapter",
    ),
    "shopsim_sandbox": RuntimeLora(
        ("--enable-lora", "--max-lora-rank", "{max_lora_rank}"),
        {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"},
        "/v1/load_lora_adapter",
        "/v1/unload_lora_adapter",
    ),
}
"""Servers whose adapters are hot-loaded: one base server for every adapter over the same base."""

ADAPTER_ARGS: dict[str, list[str]] = {
    # Servers that take their adapter at start: one server per adapter, served under the checkpoint's name.
    "llama_cpp_python": ["--lora_path", "{adapter}"],
    "llama_server": ["--lora", "{adapter}"],
}
"""Arguments that add a LoRA adapter at start to the templates without runtime loading."""

LORA_RANKS = (16, 32, 64, 128, 256, 320, 512)
"""Rank limits vLLM accepts for ``--max-lora-rank`` from its default (16) up; a limit is the smallest that fits."""

_PATH_VALUES = ("weights", "adapter", "served_model")


def lora_rank_limit(rank: int) -> int:
    """The server's rank limit for an adapter of *rank*: the smallest of ``LORA_RANKS`` that holds it.

    Adapters whose ranks round to the same limit share one base server.

    Raises:
        ConfigError: the rank is larger than any limit a server accepts.
    """
    for limit in LORA_RANKS:
        if rank <= limit:
            return limit
    raise ConfigError(
        f"serve.adapter: rank {rank} is above the largest LoRA rank servers accept ({LORA_RANKS[-1]})",
        code="config-invalid",
    )


def check_value(key: str, value: str) -> str:
    """*value* of ``serve.<key>`` (or a registry value) when it is a name or a path, never a server flag.

    Raises:
        ConfigError: the value starts with ``-`` (it would become a flag of the server's command line).
    """
    if value.startswith("-"):
        raise ConfigError(
            f"serve.{key}: {value!r} starts with '-' and would be read as a server flag; give a path or a "
            "name (prefix a relative path with ./), or add flags with serve.extra_args",
            code="config-invalid",
        )
    return value


def fill_command(
    server: str,
    values: Mapping[str, str],
    *,
    command: list[str] | None = None,
    extra_args: list[str] | None = None,
    adapter: bool = False,
    runtime_lora: bool = False,
) -> list[str]:
    """The argument list of one launch: the template of *server* (or *command*) with *values* filled in.

    With *adapter* the adapter is added to the start command (servers of ``ADAPTER_ARGS``); with
    *runtime_lora* the base is started ready to hot-load adapters (servers of ``RUNTIME_LORA``).

    Promise: every ``{name}`` of the template is replaced; weights, adapter and served names are never
    flags; a placeholder with no value, a value starting with ``-``, or an adapter for a server without
    adapter support, is a ``ConfigError`` naming the ``serve`` key to fix.
    """
    for key in _PATH_VALUES:
        if values.get(key):
            check_value(key, values[key])
    template = list(command) if command is not None else list(SERVER_TEMPLATES.get(server, []))
    if not template:
        raise ConfigError(f"serve.server: {server!r} has no shipped template; set serve.command", code="config-invalid")
    if runtime_lora and command is None:
        template += list(RUNTIME_LORA[server].args)
    elif adapter and command is None:
        if server not in ADAPTER_ARGS:
            raise ConfigError(
                f"serve.adapter: the {server} server cannot load a LoRA adapter; serve full weights "
                "or set serve.command",
                code="config-invalid",
            )
        template += ADAPTER_ARGS[server]
    filled = []
    for item in template + list(extra_args or []):
        try:
            filled.append(item.format_map(dict(values)))
        except KeyError as exc:
            raise ConfigError(
                f"serve.command: placeholder {{{exc.args[0]}}} has no value (known: "
                f"{', '.join('{' + k + '}' for k in sorted(values))}); fix the template",
                code="config-invalid",
            ) from None
        except (ValueError, IndexError) as exc:
            raise ConfigError(
                f"serve.command: {item!r} is not a valid template item ({exc}); write literal braces as {{{{ }}}}",
                code="config-invalid",
            ) from None
    return filled
