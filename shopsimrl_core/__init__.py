"""shopsimrl_core — the pure runtime library of shopsimrl (no Dagster in here).

Everything an asset of the pipeline computes is a function of this package, callable from the CLI
and from a notebook. The layers are subpackages, lowest first:

- ``adapters``  — HTTP clients for the model endpoint and the ShopSimulator environment;
- ``episode``   — prompts, skill injection, the episode state machine and its trace record;
- ``runs``      — config, splits, the job plan, the run store and the evaluator;
- ``analysis``  — summaries, statistics, comparisons, labels, the trace audit;
- ``skills``    — candidate mining, the firewall, the gates and SkillBank building;
- ``export``    — trace and SFT exports for training;
- ``cli``       — the ``shopsimrl`` command.

Cross-cutting pieces stay at the top: ``_errors`` (the exception tree), ``_versions`` (schema
strings) and ``_hashing`` (canonical JSON, fingerprints, atomic writes). Every public name is
re-exported here and resolved lazily, so ``import shopsimrl_core`` stays cheap.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version as _version

from shopsimrl_core._lazy import lazy_face

try:
    __version__ = _version("shopsimrl")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+local"

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
    "KNOWN_ENVIRONMENT_VERSIONS": "_versions",
    "KNOWN_OBSERVATION_VERSIONS": "_versions",
    "TRACE_SCHEMA": "_versions",
    "ChatModelClient": "adapters",
    "ModelOutput": "adapters",
    "ModelRequestError": "adapters",
    "ShopSimulatorClient": "adapters",
    "StreamsTransport": "adapters",
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
    "wilson_interval": "analysis",
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
    "export_traces": "export",
    "redact_record": "export",
    "ConsoleProgress": "runs",
    "EpisodeJob": "runs",
    "EvalConfig": "runs",
    "EvalPlan": "runs",
    "ProgressEvent": "runs",
    "RunResult": "runs",
    "RunStore": "runs",
    "SplitFile": "runs",
    "TaskSplit": "runs",
    "TestAccessLedger": "runs",
    "TraceLine": "runs",
    "arun_evaluation": "runs",
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
}

__getattr__, __dir__, _names = lazy_face(__name__, _EXPORTS)
__all__ = _names + ["__version__"]
