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
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_dagster.definitions import build_definitions as build_definitions
    from shopsimrl_dagster.defs.assets import suite_asset_key as suite_asset_key
    from shopsimrl_dagster.defs.partitions import checkpoints as checkpoints
    from shopsimrl_dagster.defs.resources import CheckpointRegistry as CheckpointRegistry
    from shopsimrl_dagster.defs.resources import EndpointUnavailable as EndpointUnavailable
    from shopsimrl_dagster.defs.resources import EvaluationSuites as EvaluationSuites
    from shopsimrl_dagster.defs.resources import InferenceEndpoint as InferenceEndpoint
    from shopsimrl_dagster.defs.resources import RunStorage as RunStorage
    from shopsimrl_dagster.defs.resources import ShopSimulatorEnvironment as ShopSimulatorEnvironment
    from shopsimrl_dagster.defs.resources import resources_from_settings as resources_from_settings
    from shopsimrl_dagster.instance import LocalProcessRunLauncher as LocalProcessRunLauncher
    from shopsimrl_dagster.instance import prepare_dagster_home as prepare_dagster_home
    from shopsimrl_dagster.registry import Checkpoint as Checkpoint
    from shopsimrl_dagster.registry import latest_checkpoint as latest_checkpoint
    from shopsimrl_dagster.registry import read_registry as read_registry
    from shopsimrl_dagster.registry import register_checkpoint as register_checkpoint
    from shopsimrl_dagster.settings import EvaluationSuite as EvaluationSuite
    from shopsimrl_dagster.settings import PipelineSettings as PipelineSettings
    from shopsimrl_dagster.settings import load_pipeline_settings as load_pipeline_settings

__all__ = sorted(_EXPORTS)


def _getattr(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shopsimrl_dagster' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"shopsimrl_dagster.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
