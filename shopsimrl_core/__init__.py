"""shopsimrl_core — the pure runtime library of shopsimrl (no Dagster in here).

Everything an asset of the pipeline computes is a function of this package, callable from the CLI
and from a notebook. Public names are re-exported here; modules named ``_x.py`` are private.

Names are resolved lazily so that ``import shopsimrl_core`` stays cheap (the CLI's ``plan`` must not
pay for polars or httpx).
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version as _version
from typing import Any

try:
    __version__ = _version("shopsimrl")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

# public name -> private module that defines it
_EXPORTS: dict[str, str] = {
    # hashing and versions
    "canonical_json": "_hashing",
    "fingerprint": "_hashing",
    "write_json_atomic": "_hashing",
    # errors
    "ShopSimRLError": "_errors",
    "ConfigError": "_errors",
    "TestSplitGuardError": "_errors",
    "FingerprintMismatch": "_errors",
    "RunLockedError": "_errors",
    "TraceFormatError": "_errors",
    "ShopSimulatorError": "_errors",
    "LeaseError": "_errors",
    "InferenceError": "_errors",
    "ProtocolError": "_errors",
    "SkillError": "_errors",
    # jobs
    "EpisodeJob": "_jobs",
    "plan_jobs": "_jobs",
    "episode_seed": "_jobs",
    "episode_id": "_jobs",
}


def _register(module: str, *names: str) -> None:
    for name in names:
        _EXPORTS[name] = module


# Filled in by each layer's module list (kept here so the public surface is visible in one place).
_register("_config", "EvalConfig", "load_config")
_register("_splits", "SplitFile", "TaskSplit", "load_split_file")
_register("_plan", "EvalPlan", "build_plan")
_register("_store", "RunStore")
_register("_evaluator", "run_evaluation", "RunResult")
_register("_summary", "summarize_run", "build_summary")
_register("_model", "ChatModelClient", "ModelOutput")
_register("_environment", "ShopSimulatorClient")
_register("_prompts", "PromptSet", "load_prompt")
_register("_skills", "SkillProvider", "NoSkills", "JsonSkillBank", "load_skill_provider", "load_skillbank")
_register("_episode", "EpisodeSettings", "run_episode")
_register("_model", "ModelRequestError")
_register("_trace", "validate_trace", "is_complete")
_register("_versions", "KNOWN_ENVIRONMENT_VERSIONS", "KNOWN_OBSERVATION_VERSIONS", "TRACE_SCHEMA")  # DAGSTER: health checks
_register("_stats", "compare_runs", "wilson_interval", "bootstrap_mean_ci", "paired_bootstrap_ci", "pass_at_k", "pass_hat_k")  # CORE-RUN
_register("_store", "TestAccessLedger")  # CORE-RUN
_register("_evaluator", "arun_evaluation")  # CORE-RUN
_register("_progress", "ProgressEvent", "ConsoleProgress")  # CORE-RUN
_register("_plan", "semantic_projection")  # CORE-RUN
_register("_config", "config_from_mapping")  # CORE-RUN
_register("_transport", "StreamsTransport", "select_transport")  # TRANSPORT

_register("_labels", "label_run", "label_episode", "read_labels", "LabelTable", "iter_latest_records")  # SKILLS
_register("_firewall", "check_text", "FirewallContext", "context_from_traces")  # SKILLS
_register("_candidates", "mine_candidates", "RuleBasedMiner", "CandidateProvider", "FailureGroup", "CandidateSet", "require_train_only")  # SKILLS
_register("_skillbank_build", "build_draft", "write_draft", "build_skillbank", "snapshot_skillbank", "SkillBankSnapshot")  # SKILLS
_register("_ols", "fit_no_intercept_ols", "bootstrap_coefficients")  # SKILLS
_register("_gate", "GateAConfig", "GateAResult", "run_gate_a", "plan_gate_a", "AssignedSkillBank", "OnlineGateConfig", "run_online_gate", "build_candidate_pool", "gate_config_problems")  # SKILLS
_register("_export", "export_traces", "export_sft", "redact_record")  # SKILLS
_register("_analyst", "AnalystCandidateProvider")  # SKILLS
_register("_audit", "audit_traces", "TraceAudit", "EpisodeOutcome", "goal_leaks")  # trace audit behind the pipeline's checks
_register("_hashing", "sha256_file")
_register("_store", "iter_trace_lines", "TraceLine")
_register("_seed_probe", "probe_seed")  # SPEC-AUDIT: §22.10
__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'shopsimrl_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"shopsimrl_core.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
