"""Skills: candidate mining, the gold firewall, the paired gates and SkillBank building.

Candidates come from rules or an analyst model (``_candidates`` with ``_templates``, ``_analyst``);
``_firewall`` keeps instance data out of chunks; ``_pairing`` reads and pairs validation traces,
``_gate`` holds the rest the two paired gates share (estimation, the finishing path), ``_gate_a``
and ``_online_gate`` (with its ``_pool``) are the gates; ``_bank`` builds drafts, banks and
immutable snapshots.
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

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
