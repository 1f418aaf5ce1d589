"""Trace2Skill: analyst models turn train traces into skill chunks (runtime-semantics §18).

Success evidence cards and live, gold-aware failure audits (``_cards``), consolidation and the
compiler (``_consolidate``), structured calls with bounded repair (``_structured``), the
resumable pipeline and its versioned outputs (``_pipeline``), and the ``CandidateProvider`` that
plugs it in beside the rule miner (``_provider``). Prompts and version strings are in ``_prompts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.skills.trace2skill._compact import compact_trace as compact_trace
    from shopsimrl_core.skills.trace2skill._config import load_trace2skill_config as load_trace2skill_config
    from shopsimrl_core.skills.trace2skill._online import run_online_failure_analysis as run_online_failure_analysis
    from shopsimrl_core.skills.trace2skill._pipeline import Trace2SkillConfig as Trace2SkillConfig
    from shopsimrl_core.skills.trace2skill._pipeline import Trace2SkillResult as Trace2SkillResult
    from shopsimrl_core.skills.trace2skill._pipeline import load_train_traces as load_train_traces
    from shopsimrl_core.skills.trace2skill._pipeline import run_trace2skill as run_trace2skill
    from shopsimrl_core.skills.trace2skill._prompts import EVIDENCE_CARD_SCHEMA as EVIDENCE_CARD_SCHEMA
    from shopsimrl_core.skills.trace2skill._prompts import EVIDENCE_CLUSTER_SCHEMA as EVIDENCE_CLUSTER_SCHEMA
    from shopsimrl_core.skills.trace2skill._prompts import (
        ONLINE_FAILURE_ANALYSIS_SCHEMA as ONLINE_FAILURE_ANALYSIS_SCHEMA,
    )
    from shopsimrl_core.skills.trace2skill._prompts import PROMPT_VERSION as PROMPT_VERSION
    from shopsimrl_core.skills.trace2skill._prompts import TRACE2SKILL_SCHEMA as TRACE2SKILL_SCHEMA
    from shopsimrl_core.skills.trace2skill._provider import Trace2SkillProvider as Trace2SkillProvider
    from shopsimrl_core.skills.trace2skill._structured import AnalystModel as AnalystModel
    from shopsimrl_core.skills.trace2skill._structured import StructuredOutputError as StructuredOutputError
    from shopsimrl_core.skills.trace2skill._structured import StructuredResult as StructuredResult
    from shopsimrl_core.skills.trace2skill._structured import structured_call as structured_call

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
