"""Prompt assembly (runtime-semantics §9.2, §9.4, §10).

System message, persona and skill blocks, first user message, tool schemas and the repair
feedback of a protocol-error turn.

Two things are loaded and both are identified by what was loaded:

* the **system prompt** (inline string, a file, or the built-in ``prompts/system_<lang>.txt``);
  its identity is ``fingerprint(prompt)`` of the string before ``rstrip`` (the JSON-quoted quirk);
* the **protocol texts** (tool descriptions, repair instruction, persona header, first-message
  prefix, skill-block lines) from a ``shopsimrl-prompt-texts-v1`` JSON file. The file declares the
  ``prompt_version``, ``action_protocol`` and ``skill_renderer_version`` its texts belong to.

The built-in texts are this project's own wording and carry this project's own version strings
(runtime-semantics §1.1 rule 5). To reproduce a legacy experiment byte for byte, point the config at the legacy
system-prompt file and at a protocol-texts file holding the legacy texts and legacy version strings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import fingerprint, parse_json_text, read_json_file
from shopsimrl_core._versions import PROMPT_TEXTS_SCHEMA

__all__ = [
    "PromptSet",
    "load_prompt",
    "load_prompt_texts",
    "builtin_system_prompt",
    "repair_feedback_text",
    "LANGUAGES",
]

LANGUAGES = ("zh", "en")

_TEXT_KEYS = (
    "prompt_version",
    "action_protocol",
    "skill_renderer_version",
    "persona_header",
    "task_prefix",
    "search_description",
    "search_query_description",
    "click_description",
    "click_value_description",
    "repair_instruction",
    "skill_header",
    "skill_explanation",
)


@dataclass(frozen=True)
class PromptSet:
    """Everything the model reads that is not environment output, plus its identity.

    ``identity`` is the §10.5 prompt identity ``{prompt_version, system_prompt_sha256,
    skill_renderer_version}``; ``action_protocol`` goes into the runtime identity.
    """

    system_prompt: str
    """The configured system prompt exactly as loaded (hashed before ``rstrip``)."""
    identity: dict[str, Any]
    """Prompt identity (§10.5), key order prompt_version, system_prompt_sha256, skill_renderer_version."""
    action_protocol: str
    """Version string of the tool descriptions and repair instruction."""
    search_description: str
    search_query_description: str
    click_description: str
    click_value_description: str
    repair_instruction: str
    persona_header: str
    task_prefix: str
    skill_header: str
    skill_explanation: str
    source: dict[str, str | None] = field(default_factory=dict, compare=False)
    """Where the prompt and texts came from (display only; never hashed)."""

    # -- messages -------------------------------------------------------------------------------

    def skill_block(self, skills: list[dict[str, Any]]) -> str:
        """Render the skill block of §10.3 (empty string when no skill is selected)."""
        if not skills:
            return ""
        lines = [self.skill_header, self.skill_explanation]
        for skill in skills:
            skill_id = json.dumps(skill["skill_id"], ensure_ascii=False)
            version = json.dumps(skill.get("version", "1"), ensure_ascii=False)
            lines.append(f"<skill id={skill_id} version={version}>")
            lines.append(str(skill["content"]).strip())
            lines.append("</skill>")
        return "\n".join(lines)

    def system_message(self, user_persona: Any, skills: list[dict[str, Any]]) -> str:
        """Assemble the system message of §10.1: prompt, persona section (if any), skill block (if any)."""
        sections = [self.system_prompt.rstrip()]
        if isinstance(user_persona, dict) and user_persona:
            # default separators and sorted keys: this is the contract, not canonical JSON
            sections.append(self.persona_header + "\n" + json.dumps(user_persona, ensure_ascii=False, sort_keys=True))
        if skills:
            sections.append(self.skill_block(skills))
        return "\n\n".join(sections)

    def first_user_message(self, task_instruction: str, observation: str) -> str:
        """The first user message (§10.4): task prefix, instruction, blank line, reset observation."""
        return self.task_prefix + "\n" + task_instruction + "\n\n" + observation

    # -- tools ----------------------------------------------------------------------------------

    def tool_schemas(self, search_available: bool, actions: list[str]) -> list[dict[str, Any]]:
        """The tools offered on a page (§9.2), ``search`` first.

        ``search`` iff search is available, ``click`` with ``enum`` = the page's actions (same
        order) iff there is any.
        """
        tools: list[dict[str, Any]] = []
        if search_available is True:
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": "search",
                        "description": self.search_description,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "query": {
                                    "type": "string",
                                    "minLength": 1,
                                    "description": self.search_query_description,
                                }
                            },
                            "required": ["query"],
                            "additionalProperties": False,
                        },
                    },
                }
            )
        if actions:
            tools.append(
                {
                    "type": "function",
                    "function": {
                        "name": "click",
                        "description": self.click_description,
                        "parameters": {
                            "type": "object",
                            "properties": {
                                "value": {
                                    "type": "string",
                                    "enum": list(actions),
                                    "description": self.click_value_description,
                                }
                            },
                            "required": ["value"],
                            "additionalProperties": False,
                        },
                    },
                }
            )
        return tools

    def repair_feedback(self, code: str, message: str, available_tools: list[str]) -> dict[str, Any]:
        """The feedback object of a protocol-error turn (§9.4), keys in contract order."""
        return {
            "type": "tool_protocol_error",
            "code": code,
            "message": message,
            "instruction": self.repair_instruction,
            "available_tools": list(available_tools),
        }


def repair_feedback_text(feedback: dict[str, Any]) -> str:
    """Serialise feedback as §9.4 requires: compact, insertion order, non-ASCII literal."""
    return json.dumps(feedback, ensure_ascii=False, separators=(",", ":"))


def builtin_system_prompt(language: str = "zh") -> str:
    """Return the project's own default system prompt for *language* (``zh`` or ``en``)."""
    _check_language(language)
    return resources.files("shopsimrl_core").joinpath("prompts", f"system_{language}.txt").read_text(encoding="utf-8")


def _check_language(language: str) -> None:
    if language not in LANGUAGES:
        raise ConfigError(
            f"prompt.language: unknown language {language!r}; valid values: {', '.join(LANGUAGES)}",
            code="config-invalid",
        )


def load_prompt_texts(path: Path | None = None, *, language: str = "zh") -> dict[str, str]:
    """Load and validate a ``shopsimrl-prompt-texts-v1`` file (the built-in one when *path* is None).

    Returns a dict with exactly the keys of ``_TEXT_KEYS``, all non-empty strings.

    Raises:
        ConfigError: unreadable file, wrong schema_version, missing or non-string keys (the message
            names the file and the key).
    """
    if path is None:
        _check_language(language)
        where = f"<built-in prompts/protocol_{language}.json>"
        resource = resources.files("shopsimrl_core").joinpath("prompts", f"protocol_{language}.json")
        raw = resource.read_text(encoding="utf-8")
        data = parse_json_text(raw, where, "prompt texts file")
    else:
        where = str(path)
        data = read_json_file(path, "prompt texts file", fix="fix the path")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: prompt texts file must hold a JSON object")
    if data.get("schema_version") != PROMPT_TEXTS_SCHEMA:
        raise ConfigError(
            f"{where}: schema_version: expected {PROMPT_TEXTS_SCHEMA!r} (got {data.get('schema_version')!r})"
        )
    texts: dict[str, str] = {}
    for key in _TEXT_KEYS:
        value = data.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{where}: {key}: must be a non-empty string (got {value!r})")
        texts[key] = value
    return texts


def load_prompt(
    system_prompt: str | None = None,
    system_prompt_file: Path | None = None,
    *,
    prompt_texts_file: Path | None = None,
    language: str = "zh",
) -> PromptSet:
    """Load the system prompt and the protocol texts and return the frozen :class:`PromptSet`.

    At most one of *system_prompt* / *system_prompt_file* may be given; with neither, the
    built-in prompt of *language* is used. *prompt_texts_file* overrides the built-in protocol
    texts of *language*. The identity hashes exactly the prompt string that was loaded.

    Raises:
        ConfigError: both prompt sources given, unreadable or non-UTF-8 prompt file, empty prompt,
            bad prompt texts file, unknown language.
    """
    if system_prompt is not None and system_prompt_file is not None:
        raise ConfigError(
            "prompt: system_prompt and system_prompt_file are both set; keep only one of them",
            code="config-invalid",
        )
    source_prompt: str | None
    if system_prompt is not None:
        prompt = system_prompt
        source_prompt = "<inline>"
    elif system_prompt_file is not None:
        try:
            prompt = Path(system_prompt_file).read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{system_prompt_file}: system prompt file is not UTF-8; re-save it as UTF-8") from exc
        except OSError as exc:
            raise ConfigError(
                f"{system_prompt_file}: cannot read system prompt file ({exc.strerror}); fix prompt.system_prompt_file"
            ) from exc
        source_prompt = str(system_prompt_file)
    else:
        prompt = builtin_system_prompt(language)
        source_prompt = f"<built-in prompts/system_{language}.txt>"
    if not prompt.strip():
        raise ConfigError(f"{source_prompt}: the system prompt is empty; give a non-empty prompt")
    texts = load_prompt_texts(prompt_texts_file, language=language)
    identity = {
        "prompt_version": texts["prompt_version"],
        "system_prompt_sha256": fingerprint(prompt),
        "skill_renderer_version": texts["skill_renderer_version"],
    }
    return PromptSet(
        system_prompt=prompt,
        identity=identity,
        action_protocol=texts["action_protocol"],
        search_description=texts["search_description"],
        search_query_description=texts["search_query_description"],
        click_description=texts["click_description"],
        click_value_description=texts["click_value_description"],
        repair_instruction=texts["repair_instruction"],
        persona_header=texts["persona_header"],
        task_prefix=texts["task_prefix"],
        skill_header=texts["skill_header"],
        skill_explanation=texts["skill_explanation"],
        source={
            "system_prompt": source_prompt,
            "prompt_texts": str(prompt_texts_file)
            if prompt_texts_file
            else f"<built-in prompts/protocol_{language}.json>",
        },
    )
