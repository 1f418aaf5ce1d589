"""Trace2Skill: analyst models turn train traces into skill chunks (runtime-semantics §18).

Success evidence cards and live, gold-aware failure audits (``_cards``), consolidation and the
compiler (``_consolidate``), structured calls with bounded repair (``_structured``), the
resumable pipeline and its versioned outputs (``_pipeline``), and the ``CandidateProvider`` that
plugs it in beside the rule miner (``_provider``). Prompts and version strings are in ``_prompts``.
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "AnalystModel": "_structured",
    "StructuredOutputError": "_structured",
    "StructuredResult": "_structured",
    "structured_call": "_structured",
    "Trace2SkillConfig": "_pipeline",
    "Trace2SkillResult": "_pipeline",
    "load_train_traces": "_pipeline",
    "run_trace2skill": "_pipeline",
    "run_online_failure_analysis": "_online",
    "Trace2SkillProvider": "_provider",
    "load_trace2skill_config": "_config",
    "compact_trace": "_compact",
    "TRACE2SKILL_SCHEMA": "_prompts",
    "EVIDENCE_CARD_SCHEMA": "_prompts",
    "EVIDENCE_CLUSTER_SCHEMA": "_prompts",
    "ONLINE_FAILURE_ANALYSIS_SCHEMA": "_prompts",
    "PROMPT_VERSION": "_prompts",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
