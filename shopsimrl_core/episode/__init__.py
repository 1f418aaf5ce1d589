"""The episode runtime: what one episode does and records.

Prompts, skill injection, the per-episode state machine (``run_episode``) and the trace record it
writes.
"""

from __future__ import annotations

from shopsimrl_core._lazy import lazy_face

_EXPORTS: dict[str, str] = {
    "PromptSet": "_prompts",
    "load_prompt": "_prompts",
    "EpisodeSettings": "_runtime",
    "run_episode": "_runtime",
    "JsonSkillBank": "_skillbank",
    "NoSkills": "_skillbank",
    "SkillProvider": "_skillbank",
    "load_skill_provider": "_skillbank",
    "load_skillbank": "_skillbank",
    "is_complete": "_trace",
    "validate_trace": "_trace",
}

__getattr__, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
