"""Runs: everything from a config file to a finished run directory.

Evaluation config, frozen splits, the job plan, the run directory (``RunStore``), the evaluator
that drives many episodes at once, progress reporting and the test-split ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "EvalConfig": "config._config",
    "EnvironmentConfig": "config._config_sections",
    "ModelConfig": "config._config_sections",
    "PromptConfig": "config._config_sections",
    "ServeConfig": "config._config_sections",
    "config_from_mapping": "config._config",
    "load_config": "config._config",
    "RunResult": "execution._evaluation_options",
    "arun_evaluation": "execution._evaluator",
    "EvaluationOptions": "execution._evaluation_options",
    "RunTerminated": "execution._evaluation_options",
    "LeaseJournal": "leases._leases",
    "EnvironmentPool": "leases._env_pool",
    "OutageError": "leases._outage",
    "acheck_environment": "endpoints._health",
    "acheck_model": "endpoints._health",
    "check_environment": "endpoints._health",
    "check_model": "endpoints._health",
    "PreflightError": "endpoints._preflight",
    "PreflightReport": "endpoints._preflight",
    "apreflight": "endpoints._preflight",
    "preflight": "endpoints._preflight",
    "run_evaluation": "execution._evaluator",
    "EpisodeJob": "planning._jobs",
    "episode_id": "planning._jobs",
    "episode_seed": "planning._jobs",
    "plan_jobs": "planning._jobs",
    "EvalPlan": "planning._plan",
    "build_plan": "planning._plan",
    "semantic_projection": "planning._plan",
    "ConsoleProgress": "execution._progress",
    "ProgressEvent": "execution._progress",
    "probe_seed": "endpoints._seed_probe",
    "SplitFile": "planning._splits",
    "TaskSplit": "planning._splits",
    "load_split_file": "planning._splits",
    "RunIndex": "storage._index",
    "open_run_index": "storage._index",
    "RunStore": "storage._store",
    "TestAccessLedger": "storage._ledger",
    "TraceLine": "storage._jsonl",
    "iter_trace_lines": "storage._jsonl",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.runs.config._config import EvalConfig as EvalConfig
    from shopsimrl_core.runs.config._config import config_from_mapping as config_from_mapping
    from shopsimrl_core.runs.config._config import load_config as load_config
    from shopsimrl_core.runs.config._config_sections import EnvironmentConfig as EnvironmentConfig
    from shopsimrl_core.runs.config._config_sections import ModelConfig as ModelConfig
    from shopsimrl_core.runs.config._config_sections import PromptConfig as PromptConfig
    from shopsimrl_core.runs.config._config_sections import ServeConfig as ServeConfig
    from shopsimrl_core.runs.endpoints._health import acheck_environment as acheck_environment
    from shopsimrl_core.runs.endpoints._health import acheck_model as acheck_model
    from shopsimrl_core.runs.endpoints._health import check_environment as check_environment
    from shopsimrl_core.runs.endpoints._health import check_model as check_model
    from shopsimrl_core.runs.endpoints._preflight import PreflightError as PreflightError
    from shopsimrl_core.runs.endpoints._preflight import PreflightReport as PreflightReport
    from shopsimrl_core.runs.endpoints._preflight import apreflight as apreflight
    from shopsimrl_core.runs.endpoints._preflight import preflight as preflight
    from shopsimrl_core.runs.endpoints._seed_probe import probe_seed as probe_seed
    from shopsimrl_core.runs.execution._evaluation_options import EvaluationOptions as EvaluationOptions
    from shopsimrl_core.runs.execution._evaluation_options import RunResult as RunResult
    from shopsimrl_core.runs.execution._evaluation_options import RunTerminated as RunTerminated
    from shopsimrl_core.runs.execution._evaluator import arun_evaluation as arun_evaluation
    from shopsimrl_core.runs.execution._evaluator import run_evaluation as run_evaluation
    from shopsimrl_core.runs.execution._progress import ConsoleProgress as ConsoleProgress
    from shopsimrl_core.runs.execution._progress import ProgressEvent as ProgressEvent
    from shopsimrl_core.runs.leases._env_pool import EnvironmentPool as EnvironmentPool
    from shopsimrl_core.runs.leases._leases import LeaseJournal as LeaseJournal
    from shopsimrl_core.runs.leases._outage import OutageError as OutageError
    from shopsimrl_core.runs.planning._jobs import EpisodeJob as EpisodeJob
    from shopsimrl_core.runs.planning._jobs import episode_id as episode_id
    from shopsimrl_core.runs.planning._jobs import episode_seed as episode_seed
    from shopsimrl_core.runs.planning._jobs import plan_jobs as plan_jobs
    from shopsimrl_core.runs.planning._plan import EvalPlan as EvalPlan
    from shopsimrl_core.runs.planning._plan import build_plan as build_plan
    from shopsimrl_core.runs.planning._plan import semantic_projection as semantic_projection
    from shopsimrl_core.runs.planning._splits import SplitFile as SplitFile
    from shopsimrl_core.runs.planning._splits import TaskSplit as TaskSplit
    from shopsimrl_core.runs.planning._splits import load_split_file as load_split_file
    from shopsimrl_core.runs.storage._index import RunIndex as RunIndex
    from shopsimrl_core.runs.storage._index import open_run_index as open_run_index
    from shopsimrl_core.runs.storage._jsonl import TraceLine as TraceLine
    from shopsimrl_core.runs.storage._jsonl import iter_trace_lines as iter_trace_lines
    from shopsimrl_core.runs.storage._ledger import TestAccessLedger as TestAccessLedger
    from shopsimrl_core.runs.storage._store import RunStore as RunStore

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
