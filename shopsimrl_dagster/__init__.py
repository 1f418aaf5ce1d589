"""shopsimrl_dagster — the Dagster code location of shopsimrl (thin: every computation is in shopsimrl_core).

- ``shopsimrl_dagster.definitions.defs``: the code location (``workspace.yaml`` and ``dg`` load it);
  every module of ``shopsimrl_dagster/defs/`` contributes assets, checks, jobs, sensors, schedules
  or resources. ``build_definitions(settings)`` builds the same for an explicit settings object.
- ``python -m shopsimrl_dagster.demo``: the main demo (``make demo``).
- ``python -m shopsimrl_dagster.registry add …``: register a checkpoint (what training jobs call).

Public names are re-exported lazily so that ``python -m shopsimrl_dagster.registry`` stays quick.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "InferenceEndpoint": "defs.resources",
    "ShopSimulatorEnvironment": "defs.resources",
    "RunStorage": "defs.resources",
    "CheckpointRegistry": "defs.resources",
    "EvaluationSuites": "defs.resources",
    "EndpointUnavailable": "defs.resources",
    "resources_from_settings": "defs.resources",
    "checkpoints": "defs.partitions",
    "Checkpoint": "registry",
    "read_registry": "registry",
    "register_checkpoint": "registry",
    "latest_checkpoint": "registry",
    "PipelineSettings": "settings",
    "EvaluationSuite": "settings",
    "load_pipeline_settings": "settings",
    "prepare_dagster_home": "instance",
    "LocalProcessRunLauncher": "instance",
    "build_definitions": "definitions",
    "suite_asset_key": "defs.assets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shopsimrl_dagster' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"shopsimrl_dagster.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
