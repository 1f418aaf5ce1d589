"""Serving checkpoints: launch the inference server of a checkpoint for a run, and stop it afterwards.

A run whose config has a ``serve`` section (``ServeConfig``) gets its server from
:func:`launched_server`: a shipped command template (vLLM, SGLang, llama.cpp's servers, the sandbox
policy) filled with the weights, a free port and the served name, devices from the GPU pool, readiness
checked, the process group stopped on every exit path, orphans of SIGKILLed runs stopped at the next
launch. :func:`weights_identity` is what the plan records of the weights instead of the port.
"""

from shopsimrl_core.serving._devices import DeviceLease, acquire_devices
from shopsimrl_core.serving._launch import (
    SERVER_LOG_DIR,
    LaunchedServer,
    ServerStartError,
    launched_server,
    server_state_dir,
)
from shopsimrl_core.serving._processes import (
    ServerRecord,
    group_alive,
    process_start_ticks,
    reap_orphans,
    stop_group,
)
from shopsimrl_core.serving._templates import ADAPTER_ARGS, SERVER_TEMPLATES, fill_command
from shopsimrl_core.serving._weights import WEIGHTS_IDENTITY_SCHEME, weights_identity

__all__ = [
    "ADAPTER_ARGS",
    "DeviceLease",
    "LaunchedServer",
    "SERVER_LOG_DIR",
    "SERVER_TEMPLATES",
    "ServerRecord",
    "ServerStartError",
    "WEIGHTS_IDENTITY_SCHEME",
    "acquire_devices",
    "fill_command",
    "group_alive",
    "launched_server",
    "process_start_ticks",
    "reap_orphans",
    "server_state_dir",
    "stop_group",
    "weights_identity",
]
