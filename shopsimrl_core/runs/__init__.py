"""Runs: everything from a config file to a finished run directory.

Evaluation config, frozen splits, the job plan, the run directory (``RunStore``), the evaluator
that drives many episodes at once, progress reporting and the test-split ledger.
"""

from __future__ import annotations

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

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
