"""The episode runtime: what one episode does and records.

Prompts, skill injection, the per-episode state machine (``run_episode``) and the trace record it
writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:  # the same names, imported for type checkers: mypy sees real types, import stays lazy
    from shopsimrl_core.episode._prompts import PromptSet as PromptSet
    from shopsimrl_core.episode._prompts import load_prompt as load_prompt
    from shopsimrl_core.episode._runtime import EpisodeSettings as EpisodeSettings
    from shopsimrl_core.episode._runtime import run_episode as run_episode
    from shopsimrl_core.episode._skillbank import JsonSkillBank as JsonSkillBank
    from shopsimrl_core.episode._skillbank import NoSkills as NoSkills
    from shopsimrl_core.episode._skillbank import SkillProvider as SkillProvider
    from shopsimrl_core.episode._skillbank import load_skill_provider as load_skill_provider
    from shopsimrl_core.episode._skillbank import load_skillbank as load_skillbank
    from shopsimrl_core.episode._trace import is_complete as is_complete
    from shopsimrl_core.episode._trace import validate_trace as validate_trace

_getattr, __dir__, __all__ = lazy_face(__name__, _EXPORTS)
if not TYPE_CHECKING:  # hidden from type checkers: a name missing above is an error, not Any
    __getattr__ = _getattr
