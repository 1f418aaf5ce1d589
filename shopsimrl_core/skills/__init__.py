"""Skills: candidate mining, the gold firewall, the paired gates and SkillBank building.

Candidates come from rules or an analyst model (``_candidates`` with ``_templates``, ``_analyst``);
``_firewall`` keeps instance data out of chunks; ``_pairing`` reads and pairs validation traces,
``_gate`` holds the rest the two paired gates share (estimation, the finishing path), ``_gate_a``
and ``_online_gate`` (with its ``_pool``) are the gates; ``_bank`` builds drafts, banks and
immutable snapshots.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "AnalystCandidateProvider": "_analyst",
    "SkillBankSnapshot": "_bank",
    "build_draft": "_bank",
    "build_skillbank": "_bank",
    "snapshot_skillbank": "_bank",
    "write_draft": "_bank",
    "CandidateProvider": "_candidates",
    "CandidateSet": "_candidates",
    "FailureGroup": "_candidates",
    "RuleBasedMiner": "_candidates",
    "mine_candidates": "_candidates",
    "require_train_only": "_candidates",
    "FirewallContext": "_firewall",
    "check_text": "_firewall",
    "context_from_traces": "_firewall",
    "AssignedSkillBank": "_gate_a",
    "GateAConfig": "_gate_a",
    "GateAResult": "_gate",
    "OnlineGateConfig": "_online_gate",
    "build_candidate_pool": "_pool",
    "gate_config_problems": "_gate",
    "plan_gate_a": "_gate_a",
    "run_gate_a": "_gate_a",
    "run_online_gate": "_online_gate",
    # the research loop (issue 14): Trace2Skill analysts, training rounds, the curriculum
    "AnalystModel": "trace2skill._structured",
    "Trace2SkillConfig": "trace2skill._pipeline",
    "Trace2SkillProvider": "trace2skill._provider",
    "run_trace2skill": "trace2skill._pipeline",
    "load_trace2skill_config": "trace2skill._config",
    "run_online_failure_analysis": "trace2skill._online",
    "RoundConfig": "_round",
    "run_training_round": "_round",
    "build_round_pool": "_round",
    "freeze_round_bank": "_round",
    "freeze_round_curriculum": "_round",
    "run_round_gate": "_round",
    "assign_group": "_curriculum",
    "build_curriculum": "_curriculum",
}

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.skills._analyst import AnalystCandidateProvider as AnalystCandidateProvider
    from shopsimrl_core.skills._bank import SkillBankSnapshot as SkillBankSnapshot
    from shopsimrl_core.skills._bank import build_draft as build_draft
    from shopsimrl_core.skills._bank import build_skillbank as build_skillbank
    from shopsimrl_core.skills._bank import snapshot_skillbank as snapshot_skillbank
    from shopsimrl_core.skills._bank import write_draft as write_draft
    from shopsimrl_core.skills._candidates import CandidateProvider as CandidateProvider
    from shopsimrl_core.skills._candidates import CandidateSet as CandidateSet
    from shopsimrl_core.skills._candidates import FailureGroup as FailureGroup
    from shopsimrl_core.skills._candidates import RuleBasedMiner as RuleBasedMiner
    from shopsimrl_core.skills._candidates import mine_candidates as mine_candidates
    from shopsimrl_core.skills._candidates import require_train_only as require_train_only
    from shopsimrl_core.skills._curriculum import assign_group as assign_group
    from shopsimrl_core.skills._curriculum import build_curriculum as build_curriculum
    from shopsimrl_core.skills._firewall import FirewallContext as FirewallContext
    from shopsimrl_core.skills._firewall import check_text as check_text
    from shopsimrl_core.skills._firewall import context_from_traces as context_from_traces
    from shopsimrl_core.skills._gate import GateAResult as GateAResult
    from shopsimrl_core.skills._gate import gate_config_problems as gate_config_problems
    from shopsimrl_core.skills._gate_a import AssignedSkillBank as AssignedSkillBank
    from shopsimrl_core.skills._gate_a import GateAConfig as GateAConfig
    from shopsimrl_core.skills._gate_a import plan_gate_a as plan_gate_a
    from shopsimrl_core.skills._gate_a import run_gate_a as run_gate_a
    from shopsimrl_core.skills._online_gate import OnlineGateConfig as OnlineGateConfig
    from shopsimrl_core.skills._online_gate import run_online_gate as run_online_gate
    from shopsimrl_core.skills._pool import build_candidate_pool as build_candidate_pool
    from shopsimrl_core.skills._round import RoundConfig as RoundConfig
    from shopsimrl_core.skills._round import build_round_pool as build_round_pool
    from shopsimrl_core.skills._round import freeze_round_bank as freeze_round_bank
    from shopsimrl_core.skills._round import freeze_round_curriculum as freeze_round_curriculum
    from shopsimrl_core.skills._round import run_round_gate as run_round_gate
    from shopsimrl_core.skills._round import run_training_round as run_training_round
    from shopsimrl_core.skills.trace2skill._config import load_trace2skill_config as load_trace2skill_config
    from shopsimrl_core.skills.trace2skill._online import run_online_failure_analysis as run_online_failure_analysis
    from shopsimrl_core.skills.trace2skill._pipeline import Trace2SkillConfig as Trace2SkillConfig
    from shopsimrl_core.skills.trace2skill._pipeline import run_trace2skill as run_trace2skill
    from shopsimrl_core.skills.trace2skill._provider import Trace2SkillProvider as Trace2SkillProvider
    from shopsimrl_core.skills.trace2skill._structured import AnalystModel as AnalystModel

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
