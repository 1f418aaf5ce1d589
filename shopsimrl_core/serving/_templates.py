"""Command templates of the inference servers a run can launch (``serve.server``).

Each template is a list of arguments with placeholders filled per launch: ``{weights}``, ``{adapter}``,
``{host}``, ``{port}``, ``{served_model}``, ``{python}`` and ``{gpus_per_server}``. The flags are the ones
each server needs for this pipeline's requests, which carry OpenAI ``tools`` and expect ``tool_calls``
back (docs/pipeline.md, "Serving checkpoints", explains each):

- vLLM: ``--enable-auto-tool-choice`` with a ``--tool-call-parser`` (``hermes`` fits Qwen-family chat
  templates; change it with ``serve.command`` for other families); a LoRA adapter is served by
  ``--enable-lora --lora-modules NAME=PATH`` and requested under NAME.
- SGLang: ``--tool-call-parser`` (``qwen25``). SGLang requests an adapter as ``<base>:<name>``, which
  no single served name covers: serve adapters with vLLM, or give SGLang a ``command`` of your own.
- llama-cpp-python's server: the ``chatml-function-calling`` chat format is the one that returns
  ``tool_calls``; it needs ``model.tool_call_content: empty`` (it answers 500 to ``content: null``).
- llama.cpp's ``llama-server``: ``--jinja`` makes it apply the model's template with tool support.
- the sandbox's baseline policy (``python -m shopsim_sandbox.policy serve``), whose "weights" are a
  policy checkpoint file: the demo and tests launch it exactly as a vLLM checkpoint would be.
"""

from __future__ import annotations

from collections.abc import Mapping

from shopsimrl_core._errors import ConfigError

__all__ = ["SERVER_TEMPLATES", "ADAPTER_ARGS", "fill_command"]

SERVER_TEMPLATES: dict[str, list[str]] = {
    "vllm": [
        "vllm", "serve", "{weights}", "--host", "{host}", "--port", "{port}",
        "--served-model-name", "{served_model}", "--tensor-parallel-size", "{gpus_per_server}",
        "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    ],
    "sglang": [
        "{python}", "-m", "sglang.launch_server", "--model-path", "{weights}", "--host", "{host}",
        "--port", "{port}", "--served-model-name", "{served_model}", "--tp-size", "{gpus_per_server}",
        "--tool-call-parser", "qwen25",
    ],
    "llama_cpp_python": [
        "{python}", "-m", "llama_cpp.server", "--model", "{weights}", "--model_alias", "{served_model}",
        "--chat_format", "chatml-function-calling", "--host", "{host}", "--port", "{port}",
    ],
    "llama_server": [
        "llama-server", "-m", "{weights}", "--alias", "{served_model}", "--jinja", "--host", "{host}",
        "--port", "{port}",
    ],
    "shopsim_sandbox": [
        "{python}", "-m", "shopsim_sandbox.policy", "serve", "--checkpoint", "{weights}", "--host", "{host}",
        "--port", "{port}", "--served-model-name", "{served_model}",
    ],
}
"""The shipped templates; ``serve.command`` replaces one, ``serve.extra_args`` extends it."""

ADAPTER_ARGS: dict[str, list[str]] = {
    # With an adapter the base weights are served under "<name>-base" and the adapter under the
    # checkpoint's own served name, so requests for the checkpoint reach the adapter.
    "vllm": ["--enable-lora", "--lora-modules", "{served_model}={adapter}"],
    "llama_cpp_python": ["--lora_path", "{adapter}"],
    "llama_server": ["--lora", "{adapter}"],
}
"""Arguments that add a LoRA adapter to each shipped template (the sandbox policy has no adapters)."""

_BASE_NAME_FLAG = {"vllm": "--served-model-name"}


def fill_command(
    server: str,
    values: Mapping[str, str],
    *,
    command: list[str] | None = None,
    extra_args: list[str] | None = None,
    adapter: bool = False,
) -> list[str]:
    """The argument list of one launch: the template of *server* (or *command*) with *values* filled in.

    Promise: every ``{name}`` of the template is replaced; a placeholder with no value, or an adapter
    for a server without adapter support, is a ``ConfigError`` naming the ``serve`` key to fix.
    """
    template = list(command) if command is not None else list(SERVER_TEMPLATES.get(server, []))
    if not template:
        raise ConfigError(f"serve.server: {server!r} has no shipped template; set serve.command", code="config-invalid")
    if adapter and command is None:
        if server not in ADAPTER_ARGS:
            raise ConfigError(
                f"serve.adapter: the {server} server cannot load a LoRA adapter; serve full weights "
                "or set serve.command",
                code="config-invalid",
            )
        flag = _BASE_NAME_FLAG.get(server)
        if flag is not None:
            at = template.index(flag) + 1
            template[at] = "{served_model}-base"
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
