"""Runs: everything from a config file to a finished run directory.

Evaluation config, frozen splits, the job plan, the run directory (``RunStore``), the evaluator
that drives many episodes at once, progress reporting and the test-split ledger.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "EvalConfig": "_config",
    "EnvironmentConfig": "_config_sections",
    "ModelConfig": "_config_sections",
    "PromptConfig": "_config_sections",
    "ServeConfig": "_config_sections",
    "config_from_mapping": "_config",
    "load_config": "_config",
    "RunResult": "_evaluation_options",
    "arun_evaluation": "_evaluator",
    "EvaluationOptions": "_evaluation_options",
    "RunTerminated": "_evaluation_options",
    "LeaseJournal": "_leases",
    "EnvironmentPool": "_env_pool",
    "OutageError": "_outage",
    "acheck_environment": "_health",
    "acheck_model": "_health",
    "check_environment": "_health",
    "check_model": "_health",
    "PreflightError": "_preflight",
    "PreflightReport": "_preflight",
    "apreflight": "_preflight",
    "preflight": "_preflight",
    "run_evaluation": "_evaluator",
    "EpisodeJob": "_jobs",
    "episode_id": "_jobs",
    "episode_seed": "_jobs",
    "plan_jobs": "_jobs",
    "EvalPlan": "_plan",
    "build_plan": "_plan",
    "semantic_projection": "_plan",
    "ConsoleProgress": "_progress",
    "ProgressEvent": "_progress",
    "probe_seed": "_seed_probe",
    "SplitFile": "_splits",
    "TaskSplit": "_splits",
    "load_split_file": "_splits",
    "RunIndex": "_index",
    "open_run_index": "_index",
    "RunStore": "_store",
    "TestAccessLedger": "_ledger",
    "TraceLine": "_jsonl",
    "iter_trace_lines": "_jsonl",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.runs._config import EvalConfig as EvalConfig
    from shopsimrl_core.runs._config import config_from_mapping as config_from_mapping
    from shopsimrl_core.runs._config import load_config as load_config
    from shopsimrl_core.runs._config_sections import EnvironmentConfig as EnvironmentConfig
    from shopsimrl_core.runs._config_sections import ModelConfig as ModelConfig
    from shopsimrl_core.runs._config_sections import PromptConfig as PromptConfig
    from shopsimrl_core.runs._config_sections import ServeConfig as ServeConfig
    from shopsimrl_core.runs._env_pool import EnvironmentPool as EnvironmentPool
    from shopsimrl_core.runs._evaluation_options import EvaluationOptions as EvaluationOptions
    from shopsimrl_core.runs._evaluation_options import RunResult as RunResult
    from shopsimrl_core.runs._evaluation_options import RunTerminated as RunTerminated
    from shopsimrl_core.runs._evaluator import arun_evaluation as arun_evaluation
    from shopsimrl_core.runs._evaluator import run_evaluation as run_evaluation
    from shopsimrl_core.runs._health import acheck_environment as acheck_environment
    from shopsimrl_core.runs._health import acheck_model as acheck_model
    from shopsimrl_core.runs._health import check_environment as check_environment
    from shopsimrl_core.runs._health import check_model as check_model
    from shopsimrl_core.runs._index import RunIndex as RunIndex
    from shopsimrl_core.runs._index import open_run_index as open_run_index
    from shopsimrl_core.runs._jobs import EpisodeJob as EpisodeJob
    from shopsimrl_core.runs._jobs import episode_id as episode_id
    from shopsimrl_core.runs._jobs import episode_seed as episode_seed
    from shopsimrl_core.runs._jobs import plan_jobs as plan_jobs
    from shopsimrl_core.runs._jsonl import TraceLine as TraceLine
    from shopsimrl_core.runs._jsonl import iter_trace_lines as iter_trace_lines
    from shopsimrl_core.runs._leases import LeaseJournal as LeaseJournal
    from shopsimrl_core.runs._ledger import TestAccessLedger as TestAccessLedger
    from shopsimrl_core.runs._outage import OutageError as OutageError
    from shopsimrl_core.runs._plan import EvalPlan as EvalPlan
    from shopsimrl_core.runs._plan import build_plan as build_plan
    from shopsimrl_core.runs._plan import semantic_projection as semantic_projection
    from shopsimrl_core.runs._preflight import PreflightError as PreflightError
    from shopsimrl_core.runs._preflight import PreflightReport as PreflightReport
    from shopsimrl_core.runs._preflight import apreflight as apreflight
    from shopsimrl_core.runs._preflight import preflight as preflight
    from shopsimrl_core.runs._progress import ConsoleProgress as ConsoleProgress
    from shopsimrl_core.runs._progress import ProgressEvent as ProgressEvent
    from shopsimrl_core.runs._seed_probe import probe_seed as probe_seed
    from shopsimrl_core.runs._splits import SplitFile as SplitFile
    from shopsimrl_core.runs._splits import TaskSplit as TaskSplit
    from shopsimrl_core.runs._splits import load_split_file as load_split_file
    from shopsimrl_core.runs._store import RunStore as RunStore

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
