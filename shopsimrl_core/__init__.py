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
re-exported here and resolved lazily, so ``import shopsimrl_core`` stays cheap; the same names are
imported under ``TYPE_CHECKING`` so that type checkers see their real types (``_lazy.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    "EndpointAuth": "adapters",
    "bearer_headers": "adapters",
    "EpisodeOutcome": "analysis",
    "LabelTable": "analysis",
    "TraceAudit": "analysis",
    "audit_traces": "analysis",
    "bootstrap_coefficients": "analysis",
    "bootstrap_mean_ci": "analysis",
    "build_summary": "analysis",
    "category_intervals": "analysis",
    "compare_runs": "analysis",
    "CheckpointRun": "analysis",
    "Regression": "analysis",
    "best_checkpoint": "analysis",
    "regression_against_best": "analysis",
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
    "episode_metrics": "analysis",
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
    "acheck_environment": "runs",
    "acheck_model": "runs",
    "check_environment": "runs",
    "check_model": "runs",
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

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core._errors import ConfigError as ConfigError
    from shopsimrl_core._errors import FingerprintMismatch as FingerprintMismatch
    from shopsimrl_core._errors import InferenceError as InferenceError
    from shopsimrl_core._errors import LeaseError as LeaseError
    from shopsimrl_core._errors import ProtocolError as ProtocolError
    from shopsimrl_core._errors import RunLockedError as RunLockedError
    from shopsimrl_core._errors import ShopSimRLError as ShopSimRLError
    from shopsimrl_core._errors import ShopSimulatorError as ShopSimulatorError
    from shopsimrl_core._errors import SkillError as SkillError
    from shopsimrl_core._errors import TestSplitGuardError as TestSplitGuardError
    from shopsimrl_core._errors import TraceFormatError as TraceFormatError
    from shopsimrl_core._hashing import canonical_json as canonical_json
    from shopsimrl_core._hashing import fingerprint as fingerprint
    from shopsimrl_core._hashing import sha256_file as sha256_file
    from shopsimrl_core._hashing import write_json_atomic as write_json_atomic
    from shopsimrl_core._hashing import write_text_atomic as write_text_atomic
    from shopsimrl_core._versions import KNOWN_ENVIRONMENT_VERSIONS as KNOWN_ENVIRONMENT_VERSIONS
    from shopsimrl_core._versions import KNOWN_OBSERVATION_VERSIONS as KNOWN_OBSERVATION_VERSIONS
    from shopsimrl_core._versions import TRACE_SCHEMA as TRACE_SCHEMA
    from shopsimrl_core.adapters import ChatModelClient as ChatModelClient
    from shopsimrl_core.adapters import Conversation as Conversation
    from shopsimrl_core.adapters import EndpointAuth as EndpointAuth
    from shopsimrl_core.adapters import ModelOutput as ModelOutput
    from shopsimrl_core.adapters import ModelRequestError as ModelRequestError
    from shopsimrl_core.adapters import ReplicaSet as ReplicaSet
    from shopsimrl_core.adapters import ReplicatedChatModelClient as ReplicatedChatModelClient
    from shopsimrl_core.adapters import ShopSimulatorClient as ShopSimulatorClient
    from shopsimrl_core.adapters import TransportError as TransportError
    from shopsimrl_core.adapters import bearer_headers as bearer_headers
    from shopsimrl_core.adapters import select_transport as select_transport
    from shopsimrl_core.analysis import CheckpointRun as CheckpointRun
    from shopsimrl_core.analysis import EpisodeOutcome as EpisodeOutcome
    from shopsimrl_core.analysis import LabelTable as LabelTable
    from shopsimrl_core.analysis import Regression as Regression
    from shopsimrl_core.analysis import TraceAudit as TraceAudit
    from shopsimrl_core.analysis import audit_traces as audit_traces
    from shopsimrl_core.analysis import best_checkpoint as best_checkpoint
    from shopsimrl_core.analysis import bootstrap_coefficients as bootstrap_coefficients
    from shopsimrl_core.analysis import bootstrap_mean_ci as bootstrap_mean_ci
    from shopsimrl_core.analysis import build_summary as build_summary
    from shopsimrl_core.analysis import category_intervals as category_intervals
    from shopsimrl_core.analysis import compare_runs as compare_runs
    from shopsimrl_core.analysis import episode_metrics as episode_metrics
    from shopsimrl_core.analysis import fit_no_intercept_ols as fit_no_intercept_ols
    from shopsimrl_core.analysis import goal_leaks as goal_leaks
    from shopsimrl_core.analysis import iter_latest_records as iter_latest_records
    from shopsimrl_core.analysis import judge_run as judge_run
    from shopsimrl_core.analysis import label_episode as label_episode
    from shopsimrl_core.analysis import label_run as label_run
    from shopsimrl_core.analysis import paired_bootstrap_ci as paired_bootstrap_ci
    from shopsimrl_core.analysis import pass_at_k as pass_at_k
    from shopsimrl_core.analysis import pass_hat_k as pass_hat_k
    from shopsimrl_core.analysis import read_labels as read_labels
    from shopsimrl_core.analysis import regression_against_best as regression_against_best
    from shopsimrl_core.analysis import summarize_run as summarize_run
    from shopsimrl_core.analysis import summary_from_index as summary_from_index
    from shopsimrl_core.analysis import wilson_interval as wilson_interval
    from shopsimrl_core.documents import CheckpointComparison as CheckpointComparison
    from shopsimrl_core.documents import DocumentError as DocumentError
    from shopsimrl_core.documents import EvalSummary as EvalSummary
    from shopsimrl_core.documents import RunManifest as RunManifest
    from shopsimrl_core.documents import SkillBank as SkillBank
    from shopsimrl_core.documents import TraceRecord as TraceRecord
    from shopsimrl_core.documents import document_for as document_for
    from shopsimrl_core.episode import EpisodeSettings as EpisodeSettings
    from shopsimrl_core.episode import JsonSkillBank as JsonSkillBank
    from shopsimrl_core.episode import NoSkills as NoSkills
    from shopsimrl_core.episode import PromptSet as PromptSet
    from shopsimrl_core.episode import SkillProvider as SkillProvider
    from shopsimrl_core.episode import is_complete as is_complete
    from shopsimrl_core.episode import load_prompt as load_prompt
    from shopsimrl_core.episode import load_skill_provider as load_skill_provider
    from shopsimrl_core.episode import load_skillbank as load_skillbank
    from shopsimrl_core.episode import run_episode as run_episode
    from shopsimrl_core.episode import validate_trace as validate_trace
    from shopsimrl_core.export import export_sft as export_sft
    from shopsimrl_core.export import export_slime_tasks as export_slime_tasks
    from shopsimrl_core.export import export_traces as export_traces
    from shopsimrl_core.export import export_training_sft as export_training_sft
    from shopsimrl_core.export import redact_record as redact_record
    from shopsimrl_core.runs import ConsoleProgress as ConsoleProgress
    from shopsimrl_core.runs import EnvironmentConfig as EnvironmentConfig
    from shopsimrl_core.runs import EnvironmentPool as EnvironmentPool
    from shopsimrl_core.runs import EpisodeJob as EpisodeJob
    from shopsimrl_core.runs import EvalConfig as EvalConfig
    from shopsimrl_core.runs import EvalPlan as EvalPlan
    from shopsimrl_core.runs import EvaluationOptions as EvaluationOptions
    from shopsimrl_core.runs import LeaseJournal as LeaseJournal
    from shopsimrl_core.runs import ModelConfig as ModelConfig
    from shopsimrl_core.runs import OutageError as OutageError
    from shopsimrl_core.runs import PreflightError as PreflightError
    from shopsimrl_core.runs import PreflightReport as PreflightReport
    from shopsimrl_core.runs import ProgressEvent as ProgressEvent
    from shopsimrl_core.runs import RunIndex as RunIndex
    from shopsimrl_core.runs import RunResult as RunResult
    from shopsimrl_core.runs import RunStore as RunStore
    from shopsimrl_core.runs import RunTerminated as RunTerminated
    from shopsimrl_core.runs import SplitFile as SplitFile
    from shopsimrl_core.runs import TaskSplit as TaskSplit
    from shopsimrl_core.runs import TestAccessLedger as TestAccessLedger
    from shopsimrl_core.runs import TraceLine as TraceLine
    from shopsimrl_core.runs import acheck_environment as acheck_environment
    from shopsimrl_core.runs import acheck_model as acheck_model
    from shopsimrl_core.runs import apreflight as apreflight
    from shopsimrl_core.runs import arun_evaluation as arun_evaluation
    from shopsimrl_core.runs import build_plan as build_plan
    from shopsimrl_core.runs import check_environment as check_environment
    from shopsimrl_core.runs import check_model as check_model
    from shopsimrl_core.runs import config_from_mapping as config_from_mapping
    from shopsimrl_core.runs import episode_id as episode_id
    from shopsimrl_core.runs import episode_seed as episode_seed
    from shopsimrl_core.runs import iter_trace_lines as iter_trace_lines
    from shopsimrl_core.runs import load_config as load_config
    from shopsimrl_core.runs import load_split_file as load_split_file
    from shopsimrl_core.runs import open_run_index as open_run_index
    from shopsimrl_core.runs import plan_jobs as plan_jobs
    from shopsimrl_core.runs import preflight as preflight
    from shopsimrl_core.runs import probe_seed as probe_seed
    from shopsimrl_core.runs import run_evaluation as run_evaluation
    from shopsimrl_core.runs import semantic_projection as semantic_projection
    from shopsimrl_core.skills import AnalystCandidateProvider as AnalystCandidateProvider
    from shopsimrl_core.skills import AnalystModel as AnalystModel
    from shopsimrl_core.skills import AssignedSkillBank as AssignedSkillBank
    from shopsimrl_core.skills import CandidateProvider as CandidateProvider
    from shopsimrl_core.skills import CandidateSet as CandidateSet
    from shopsimrl_core.skills import FailureGroup as FailureGroup
    from shopsimrl_core.skills import FirewallContext as FirewallContext
    from shopsimrl_core.skills import GateAConfig as GateAConfig
    from shopsimrl_core.skills import GateAResult as GateAResult
    from shopsimrl_core.skills import OnlineGateConfig as OnlineGateConfig
    from shopsimrl_core.skills import RoundConfig as RoundConfig
    from shopsimrl_core.skills import RuleBasedMiner as RuleBasedMiner
    from shopsimrl_core.skills import SkillBankSnapshot as SkillBankSnapshot
    from shopsimrl_core.skills import Trace2SkillConfig as Trace2SkillConfig
    from shopsimrl_core.skills import Trace2SkillProvider as Trace2SkillProvider
    from shopsimrl_core.skills import assign_group as assign_group
    from shopsimrl_core.skills import build_candidate_pool as build_candidate_pool
    from shopsimrl_core.skills import build_curriculum as build_curriculum
    from shopsimrl_core.skills import build_draft as build_draft
    from shopsimrl_core.skills import build_round_pool as build_round_pool
    from shopsimrl_core.skills import build_skillbank as build_skillbank
    from shopsimrl_core.skills import check_text as check_text
    from shopsimrl_core.skills import context_from_traces as context_from_traces
    from shopsimrl_core.skills import freeze_round_bank as freeze_round_bank
    from shopsimrl_core.skills import freeze_round_curriculum as freeze_round_curriculum
    from shopsimrl_core.skills import gate_config_problems as gate_config_problems
    from shopsimrl_core.skills import mine_candidates as mine_candidates
    from shopsimrl_core.skills import plan_gate_a as plan_gate_a
    from shopsimrl_core.skills import require_train_only as require_train_only
    from shopsimrl_core.skills import run_gate_a as run_gate_a
    from shopsimrl_core.skills import run_online_failure_analysis as run_online_failure_analysis
    from shopsimrl_core.skills import run_online_gate as run_online_gate
    from shopsimrl_core.skills import run_round_gate as run_round_gate
    from shopsimrl_core.skills import run_trace2skill as run_trace2skill
    from shopsimrl_core.skills import run_training_round as run_training_round
    from shopsimrl_core.skills import snapshot_skillbank as snapshot_skillbank
    from shopsimrl_core.skills import write_draft as write_draft
    from shopsimrl_core.viewer import create_viewer_app as create_viewer_app

    __version__: str

_face_getattr, __dir__, _names = lazy_face(__name__, _EXPORTS)


def _getattr(name: str) -> Any:
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


if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr

__all__ = _names + ["__version__"]
