"""Skills: candidate mining (rules and analyst models), the gold firewall, the paired gates and
SkillBank building.
"""

from __future__ import annotations

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
    "AssignedSkillBank": "_gate",
    "GateAConfig": "_gate",
    "GateAResult": "_gate",
    "OnlineGateConfig": "_gate",
    "build_candidate_pool": "_gate",
    "gate_config_problems": "_gate",
    "plan_gate_a": "_gate",
    "run_gate_a": "_gate",
    "run_online_gate": "_gate",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
