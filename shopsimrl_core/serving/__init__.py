"""Serving checkpoints: launch the inference server of a checkpoint for a run, and stop it afterwards.

A run whose config has a ``serve`` section (``ServeConfig``) gets its server from
:func:`launched_server`: the running server of the same served identity from the server pool of
``serve.state_dir`` (one model load per base model: runs share it, adapters are hot-loaded over one
base), or a new one from a shipped command template (vLLM, SGLang, llama.cpp's servers, the sandbox
policy) filled with the weights, a free port and the served name, devices from the GPU pool, readiness
checked, stopped when unused for ``serve.idle_timeout`` seconds, orphans of dead owners stopped while a
run waits for devices. :func:`weights_identity` is what the plan records of the weights instead of the port.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

# lazy like the other faces: importing serving._weights (the plan does) must not start _launch, which
# imports the runs layers that import the plan (an import cycle, tests/core/test_import_cycles.py)
_EXPORTS: dict[str, str] = {
    "DeviceLease": "_devices",
    "acquire_devices": "_devices",
    "SERVER_LOG_DIR": "_launch",
    "LaunchedServer": "_launch",
    "ServerStartError": "_launch",
    "launched_server": "_launch",
    "holding_servers": "_launch",
    "server_state_dir": "_launch",
    "ServerRecord": "_processes",
    "group_alive": "_processes",
    "process_start_ticks": "_processes",
    "reap_orphans": "_processes",
    "stop_group": "_processes",
    "ADAPTER_ARGS": "_templates",
    "SERVER_TEMPLATES": "_templates",
    "fill_command": "_templates",
    "WEIGHTS_IDENTITY_SCHEME": "_weights",
    "HUB_MARKER": "_weights",
    "RUNTIME_LORA": "_templates",
    "lora_rank_limit": "_templates",
    "weights_identity": "_weights",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.serving._devices import DeviceLease as DeviceLease
    from shopsimrl_core.serving._devices import acquire_devices as acquire_devices
    from shopsimrl_core.serving._launch import SERVER_LOG_DIR as SERVER_LOG_DIR
    from shopsimrl_core.serving._launch import LaunchedServer as LaunchedServer
    from shopsimrl_core.serving._launch import ServerStartError as ServerStartError
    from shopsimrl_core.serving._launch import holding_servers as holding_servers
    from shopsimrl_core.serving._launch import launched_server as launched_server
    from shopsimrl_core.serving._launch import server_state_dir as server_state_dir
    from shopsimrl_core.serving._processes import ServerRecord as ServerRecord
    from shopsimrl_core.serving._processes import group_alive as group_alive
    from shopsimrl_core.serving._processes import process_start_ticks as process_start_ticks
    from shopsimrl_core.serving._processes import reap_orphans as reap_orphans
    from shopsimrl_core.serving._processes import stop_group as stop_group
    from shopsimrl_core.serving._templates import ADAPTER_ARGS as ADAPTER_ARGS
    from shopsimrl_core.serving._templates import RUNTIME_LORA as RUNTIME_LORA
    from shopsimrl_core.serving._templates import SERVER_TEMPLATES as SERVER_TEMPLATES
    from shopsimrl_core.serving._templates import fill_command as fill_command
    from shopsimrl_core.serving._templates import lora_rank_limit as lora_rank_limit
    from shopsimrl_core.serving._weights import HUB_MARKER as HUB_MARKER
    from shopsimrl_core.serving._weights import WEIGHTS_IDENTITY_SCHEME as WEIGHTS_IDENTITY_SCHEME
    from shopsimrl_core.serving._weights import weights_identity as weights_identity

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
