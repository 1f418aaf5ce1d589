"""Skill providers and the SkillBank file (runtime-semantics §11).

A provider picks, for one episode, the skill records injected into the system prompt. It sees only
the **public** episode context ``{task_id, sample_id, split, task_instruction, user_persona,
observation_state, task_mode}`` — never the private goal.

Hash conventions (runtime-semantics §2.3): ``content_sha256 = fingerprint(content)`` (the JSON-quoted string) and
``bank_sha256 = fingerprint(parsed bank)``, so reformatting the file keeps the hash.

A bank is read once into its document model, ``SkillBank`` (``load_skillbank``); providers and the
skills layer read its attributes, and ``bank.to_json()`` is the parsed file again, key for key, so its
``bank_sha256`` is the file's.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from shopsimrl_core._errors import ConfigError
from shopsimrl_core._hashing import fingerprint, read_json_file
from shopsimrl_core._versions import SKILLBANK_SCHEMA

if TYPE_CHECKING:  # the document models are imported when a bank is read: a run without one never builds them
    from shopsimrl_core.documents._skills import SkillBank, SkillRecord

__all__ = [
    "SkillProvider",
    "NoSkills",
    "JsonSkillBank",
    "load_skillbank",
    "as_skillbank",
    "validate_skillbank",
    "load_skill_provider",
    "content_sha256",
    "bank_sha256",
    "skill_record",
]


@runtime_checkable
class SkillProvider(Protocol):
    """Chooses the skills of one episode from its public context."""

    @property
    def identity(self) -> dict[str, Any]:
        """The provider identity (§11.4), compared for equality and hashed into the plan."""
        ...

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """Return the §11.1 skill records for this episode, in injection order."""
        ...


def content_sha256(content: str) -> str:
    """Return ``fingerprint(content)``: SHA-256 of the JSON-quoted string (§2.2), not of raw bytes."""
    return fingerprint(content)


def bank_sha256(bank: SkillBank | Mapping[str, Any]) -> str:
    """Return ``fingerprint(bank)`` of the entire parsed SkillBank JSON (a model: of its ``to_json()``)."""
    from shopsimrl_core.documents._skills import SkillBank

    return fingerprint(bank.to_json() if isinstance(bank, SkillBank) else bank)


def skill_record(raw: SkillRecord, scope: str) -> dict[str, Any]:
    """Build the stored skill record of §11.1 from a bank record, keys in contract order.

    ``metadata`` is a copy of the record's metadata plus ``selection_scope`` (``task``/``global``).
    """
    metadata: dict[str, Any] = copy.deepcopy(raw.metadata) if raw.metadata is not None else {}
    metadata["selection_scope"] = scope
    return {
        "skill_id": raw.skill_id,
        "content": raw.content,
        "version": _version_string(raw.version),
        "metadata": metadata,
        "content_sha256": content_sha256(raw.content),
    }


def _version_string(value: Any) -> str:
    return "1" if value is None else str(value)


class NoSkills:
    """The bare provider: selects nothing; identity ``{"provider": "none"}``."""

    @property
    def identity(self) -> dict[str, Any]:
        return {"provider": "none"}

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """Always the empty list."""
        return []

    def __repr__(self) -> str:
        return "NoSkills()"


class JsonSkillBank:
    """A frozen SkillBank injected into every episode, following the §11.3 selection rule."""

    def __init__(
        self, bank: SkillBank | Mapping[str, Any], *, max_skills: int | None = None, source: str = "<bank>"
    ) -> None:
        if max_skills is not None and (
            isinstance(max_skills, bool) or not isinstance(max_skills, int) or max_skills < 1
        ):
            raise ConfigError(f"skills.max_skills: must be an int >= 1 or null (got {max_skills!r})")
        self.bank: SkillBank = as_skillbank(bank, source)
        self.max_skills = max_skills
        self.source = source
        self._identity = {
            "provider": "json_skillbank",
            "schema_version": self.bank.schema_version,
            "bank_version": _version_string(self.bank.bank_version),
            "bank_sha256": bank_sha256(self.bank),
            "max_skills": max_skills,
        }

    @property
    def identity(self) -> dict[str, Any]:
        return dict(self._identity)

    def select(self, context: dict[str, Any]) -> list[dict[str, Any]]:
        """Select the skills for one episode: records in file order, at most ``max_skills``.

        Records with ``enabled: false`` and task records out of scope are skipped. Only
        ``context["task_id"]`` is consulted.
        """
        task_id = context.get("task_id")
        selected: list[dict[str, Any]] = []
        for raw in self.bank.skills:
            if raw.enabled is False:
                continue
            if raw.task_ids is not None:
                if task_id not in raw.task_ids:
                    continue
                scope = "task"
            else:
                scope = "global"
            selected.append(skill_record(raw, scope))
            if self.max_skills is not None and len(selected) >= self.max_skills:
                break
        return selected

    def __repr__(self) -> str:
        return f"JsonSkillBank(source={self.source!r}, max_skills={self.max_skills!r})"


def validate_skillbank(bank: Any, source: str = "<bank>") -> None:
    """Check a parsed SkillBank against §11.2.

    Raises:
        ConfigError: naming the file, the offending field (``skills[3].content``) and the rule.
    """
    if not isinstance(bank, dict):
        raise ConfigError(f"{source}: a SkillBank must be a JSON object")
    schema = bank.get("schema_version", SKILLBANK_SCHEMA)
    if schema != SKILLBANK_SCHEMA:
        raise ConfigError(f"{source}: schema_version: expected {SKILLBANK_SCHEMA!r} (got {schema!r})")
    skills = bank.get("skills")
    if not isinstance(skills, list):
        raise ConfigError(f"{source}: SkillBank must contain a skills list")
    if "metadata" in bank and bank["metadata"] is not None and not isinstance(bank["metadata"], dict):
        raise ConfigError(f"{source}: metadata: must be an object (got {type(bank['metadata']).__name__})")
    for i, raw in enumerate(skills):
        where = f"{source}: skills[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be an object")
        skill_id = raw.get("skill_id")
        if not isinstance(skill_id, str) or not skill_id:
            raise ConfigError(f"{where}.skill_id: must be a non-empty string (got {skill_id!r})")
        content = raw.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ConfigError(f"{where}.content: must be a non-blank string (skill {skill_id})")
        task_ids = raw.get("task_ids")
        if task_ids is not None:
            if not isinstance(task_ids, list) or any(isinstance(t, bool) or not isinstance(t, int) for t in task_ids):
                raise ConfigError(
                    f"{where}.task_ids: must be null (global) or a list of integer task ids (skill {skill_id})"
                )
        metadata = raw.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise ConfigError(f"{where}.metadata: must be an object (skill {skill_id})")


def as_skillbank(bank: SkillBank | Mapping[str, Any], source: str = "<bank>") -> SkillBank:
    """*bank* as its document model: a ``SkillBank`` as it is, a parsed JSON object checked and parsed.

    Raises:
        ConfigError: a §11.2 violation (message names *source* and the field).
    """
    from shopsimrl_core.documents._skills import SkillBank

    if isinstance(bank, SkillBank):
        return bank
    validate_skillbank(bank, source)
    return SkillBank.parse(bank, source)


def load_skillbank(path: Path | str) -> SkillBank:
    """Read and validate a ``shopsimrl-skillbank-v1`` file; return it as its document model.

    ``to_json()`` of the result is the parsed file unchanged (same keys, order and values), so its
    ``bank_sha256`` is the file's.

    Raises:
        ConfigError: unreadable file, invalid JSON or a §11.2 violation (message names file and field).
    """
    return as_skillbank(read_json_file(path, "SkillBank", fix="fix skills.path"), str(path))


def load_skill_provider(path: Path | str | None, max_skills: int | None = None) -> SkillProvider:
    """Return :class:`NoSkills` when *path* is None, else a :class:`JsonSkillBank` over the file.

    Raises:
        ConfigError: as :func:`load_skillbank`, or a bad *max_skills*.
    """
    if path is None:
        return NoSkills()
    return JsonSkillBank(load_skillbank(path), max_skills=max_skills, source=str(path))
