"""shopsimrl_core — the pure runtime library of shopsimrl (no Dagster in here).

Everything an asset of the pipeline computes is a function of this package, callable from the CLI
and from a notebook. The layers are subpackages, lowest first:

- ``adapters``  — HTTP clients for the model endpoint and the ShopSimulator environment;
- ``episode``   — prompts, skill injection, the episode state machine and its trace record;
- ``runs``      — config, splits, the job plan, the run store and the evaluator;
- ``analysis``  — summaries, statistics, comparisons, labels, the trace audit;
- ``skills``    — candidate mining, the firewall, the gates and SkillBank building;
- ``export``    — trace and SFT exports for training;
- ``viewer``    — ``shopsimrl view``, the read-only trace viewer (Starlette);
- ``cli``       — the ``shopsimrl`` command;
- ``documents`` — typed models of every on-disk document (trace, manifest, summary, gate files).

Cross-cutting pieces stay at the top: ``_errors`` (the exception tree), ``_versions`` (schema
strings) and ``_hashing`` (canonical JSON, fingerprints, atomic writes). Every public name is
re-exported here and resolved lazily, so ``import shopsimrl_core`` stays cheap.
"""

from __future__ import annotations

from typing import Any

from shopsimrl_core._lazy import lazy_face

# public name -> the module (layer subpackage or top-level private module) that provides it
_EXPORTS: dict[str, str] = {
    "ConfigError": "_errors",
    "FingerprintMismatch": "_errors",
    "InferenceError": "_errors",
    "LeaseError": "_errors",
    "ProtocolError": "_errors",
    "RunLockedError": "_errors",
    "ShopSimRLError": "_errors",
    "ShopSimulatorError": "_errors",
    "SkillError": "_errors",
    "TestSplitGuardError": "_errors",
    "TraceFormatError": "_errors",
    "canonical_json": "_hashing",
    "fingerprint": "_hashing",
    "sha256_file": "_hashing",
    "write_json_atomic": "_hashing",
    "write_text_atomic": "_hashing",
    "KNOWN_ENVIRONMENT_VERSIONS": "_versions",
    "KNOWN_OBSERVATION_VERSIONS": "_versions",
    "TRACE_SCHEMA": "_versions",
    "ChatModelClient": "adapters",
    "ReplicaSet": "adapters",
    "ReplicatedChatModelClient": "adapters",
    "ModelOutput": "adapters",
    "ModelRequestError": "adapters",
    "ShopSimulatorClient": "adapters",
    "Conversation": "adapters",
    "TransportError": "adapters",
    "select_transport": "adapters",
    "EpisodeOutcome": "analysis",
    "LabelTable": "analysis",
    "TraceAudit": "analysis",
    "audit_traces": "analysis",
    "bootstrap_coefficients": "analysis",
    "bootstrap_mean_ci": "analysis",
    "build_summary": "analysis",
    "compare_runs": "analysis",
    "fit_no_intercept_ols": "analysis",
    "goal_leaks": "analysis",
    "iter_latest_records": "analysis",
    "label_episode": "analysis",
    "label_run": "analysis",
    "paired_bootstrap_ci": "analysis",
    "pass_at_k": "analysis",
    "pass_hat_k": "analysis",
    "read_labels": "analysis",
    "summarize_run": "analysis",
    "judge_run": "analysis",
    "summary_from_index": "analysis",
    "wilson_interval": "analysis",
    "create_viewer_app": "viewer",
    "CheckpointComparison": "documents",
    "DocumentError": "documents",
    "EvalSummary": "documents",
    "RunManifest": "documents",
    "SkillBank": "documents",
    "TraceRecord": "documents",
    "document_for": "documents",
    "EpisodeSettings": "episode",
    "JsonSkillBank": "episode",
    "NoSkills": "episode",
    "PromptSet": "episode",
    "SkillProvider": "episode",
    "is_complete": "episode",
    "load_prompt": "episode",
    "load_skill_provider": "episode",
    "load_skillbank": "episode",
    "run_episode": "episode",
    "validate_trace": "episode",
    "export_sft": "export",
    "export_slime_tasks": "export",
    "export_training_sft": "export",
    "export_traces": "export",
    "redact_record": "export",
    "ConsoleProgress": "runs",
    "EpisodeJob": "runs",
    "EvalConfig": "runs",
    "EnvironmentConfig": "runs",
    "ModelConfig": "runs",
    "EvalPlan": "runs",
    "ProgressEvent": "runs",
    "RunResult": "runs",
    "RunIndex": "runs",
    "open_run_index": "runs",
    "RunStore": "runs",
    "SplitFile": "runs",
    "TaskSplit": "runs",
    "TestAccessLedger": "runs",
    "TraceLine": "runs",
    "arun_evaluation": "runs",
    "EvaluationOptions": "runs",
    "RunTerminated": "runs",
    "LeaseJournal": "runs",
    "EnvironmentPool": "runs",
    "OutageError": "runs",
    "PreflightError": "runs",
    "PreflightReport": "runs",
    "apreflight": "runs",
    "preflight": "runs",
    "build_plan": "runs",
    "config_from_mapping": "runs",
    "episode_id": "runs",
    "episode_seed": "runs",
    "iter_trace_lines": "runs",
    "load_config": "runs",
    "load_split_file": "runs",
    "plan_jobs": "runs",
    "probe_seed": "runs",
    "run_evaluation": "runs",
    "semantic_projection": "runs",
    "AnalystCandidateProvider": "skills",
    "AssignedSkillBank": "skills",
    "CandidateProvider": "skills",
    "CandidateSet": "skills",
    "FailureGroup": "skills",
    "FirewallContext": "skills",
    "GateAConfig": "skills",
    "GateAResult": "skills",
    "OnlineGateConfig": "skills",
    "RuleBasedMiner": "skills",
    "SkillBankSnapshot": "skills",
    "build_candidate_pool": "skills",
    "build_draft": "skills",
    "build_skillbank": "skills",
    "check_text": "skills",
    "context_from_traces": "skills",
    "gate_config_problems": "skills",
    "mine_candidates": "skills",
    "plan_gate_a": "skills",
    "require_train_only": "skills",
    "run_gate_a": "skills",
    "run_online_gate": "skills",
    "snapshot_skillbank": "skills",
    "write_draft": "skills",
    "AnalystModel": "skills",
    "RoundConfig": "skills",
    "Trace2SkillConfig": "skills",
    "Trace2SkillProvider": "skills",
    "assign_group": "skills",
    "build_curriculum": "skills",
    "run_online_failure_analysis": "skills",
    "run_trace2skill": "skills",
    "run_training_round": "skills",
    "build_round_pool": "skills",
    "freeze_round_bank": "skills",
    "freeze_round_curriculum": "skills",
    "run_round_gate": "skills",
}

_face_getattr, __dir__, _names = lazy_face(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    # __version__ is looked up on first use: importlib.metadata costs every CLI start-up ~50 ms
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("shopsimrl")
        except PackageNotFoundError:  # running from a source tree without installation
            value = "0.0.0+local"
        globals()["__version__"] = value
        return value
    return _face_getattr(name)

__all__ = _names + ["__version__"]
