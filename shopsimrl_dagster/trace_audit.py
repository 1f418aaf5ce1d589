"""One streaming pass over a run's ``traces.jsonl`` that answers the pipeline's blocking checks.

- every line that is JSON validates against the ``shopsimrl-episode-v4`` contract
  (``shopsimrl_core.validate_trace``);
- no private-goal text (the persona's hidden ``__reasoning__``, the full instruction of a persona
  task, the goal object itself) appears in any model-visible message;
- and, on the side, the per-episode latest records the summary presentation needs
  (category, reward, success) and failures by stage.

A line that is not JSON at all is a torn write left by a killed process (runtime spec §6.5: the
store skips it and repairs the file on the next append). It is counted, not treated as invalid.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import shopsimrl_core as core

__all__ = ["EpisodeOutcome", "TraceAudit", "audit_traces"]

_VISIBLE_ROLES = {"system", "user", "tool"}
# Shorter texts match by accident (a two-character option value also appears in product pages).
_MIN_SECRET_CHARS = 8


@dataclass
class EpisodeOutcome:
    """The latest record of one episode, reduced to what the summary presentation shows."""

    episode_id: str
    task_id: int | None
    completed: bool
    reward: float | None
    success: float | None
    category: str
    error_stage: str | None


@dataclass
class TraceAudit:
    """What one pass over ``traces.jsonl`` found."""

    path: Path
    lines: int = 0
    torn_lines: int = 0
    invalid: list[str] = field(default_factory=list)
    """``line N: problem`` for every JSON line that does not validate (first 20 kept)."""
    invalid_count: int = 0
    leaks: list[str] = field(default_factory=list)
    """``<episode_id>: <where>`` for every model-visible message containing private-goal text."""
    latest: dict[str, EpisodeOutcome] = field(default_factory=dict)

    @property
    def failures_by_stage(self) -> dict[str, int]:
        """Failed latest records counted by ``error.stage`` (``unknown`` when missing)."""
        counts = Counter(o.error_stage or "unknown" for o in self.latest.values() if not o.completed)
        return dict(sorted(counts.items()))


def _validate(record: Any) -> str | None:
    # The trace contract lives in the core (shopsimrl_core.validate_trace); this only reports it.
    try:
        core.validate_trace(record)
    except core.TraceFormatError as exc:
        return exc.one_line()
    return None


def _goal_of(record: dict[str, Any]) -> dict[str, Any] | None:
    final = record.get("final")
    if isinstance(final, dict) and isinstance(final.get("goal"), dict) and final["goal"]:
        return final["goal"]
    for step in reversed(record.get("steps") or []):
        env = step.get("environment") if isinstance(step, dict) else None
        if isinstance(env, dict) and isinstance(env.get("goal"), dict) and env["goal"]:
            return env["goal"]
    return None


def _secrets(record: dict[str, Any], goal: dict[str, Any]) -> list[tuple[str, str]]:
    secrets: list[tuple[str, str]] = []
    persona = goal.get("user_persona")
    if isinstance(persona, dict):
        hidden = persona.get("__reasoning__")
        if isinstance(hidden, str) and len(hidden.strip()) >= _MIN_SECRET_CHARS:
            secrets.append(("goal.user_persona.__reasoning__", hidden.strip()))
    reset = record.get("reset") if isinstance(record.get("reset"), dict) else {}
    full = goal.get("instruction_text")
    shown = reset.get("task_instruction")
    # In persona mode the agent sees the short request; the full instruction is the private goal.
    if isinstance(full, str) and len(full.strip()) >= _MIN_SECRET_CHARS and isinstance(shown, str) and full.strip() != shown.strip():
        if full.strip() not in shown:
            secrets.append(("goal.instruction_text", full.strip()))
    return secrets


def _visible_texts(record: dict[str, Any]) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for index, message in enumerate(record.get("conversation") or []):
        if isinstance(message, dict) and message.get("role") in _VISIBLE_ROLES and isinstance(message.get("content"), str):
            texts.append((f"conversation.{index} ({message['role']})", message["content"]))
    for step in record.get("steps") or []:
        if isinstance(step, dict) and isinstance(step.get("observation"), str):
            texts.append((f"steps.{step.get('step_index')}.observation", step["observation"]))
    return texts


def _leaks(record: dict[str, Any]) -> list[str]:
    goal = _goal_of(record)
    found: list[str] = []
    texts = _visible_texts(record)
    for where, text in texts:
        if '"instruction_text"' in text or '"goal_options"' in text:
            found.append(f"{record['episode_id']}: {where} contains the serialised goal object")
    if goal is None:
        return found
    for label, secret in _secrets(record, goal):
        for where, text in texts:
            if secret in text:
                found.append(f"{record['episode_id']}: {where} contains {label}")
    return found


def _outcome(record: dict[str, Any]) -> EpisodeOutcome:
    final = record.get("final") if isinstance(record.get("final"), dict) else {}
    completed = record.get("status") == "completed" and final.get("done") is True
    detail = final.get("reward_detail") if isinstance(final.get("reward_detail"), dict) else {}
    goal = _goal_of(record) or {}
    category = str(goal.get("category") or "unknown").split("›")[0].strip() or "unknown"
    reward = final.get("reward")
    success = detail.get("r_success")
    error = record.get("error") if isinstance(record.get("error"), dict) else {}
    job = record.get("job") if isinstance(record.get("job"), dict) else {}
    number = (int, float)
    return EpisodeOutcome(
        episode_id=record["episode_id"],
        task_id=job.get("task_id"),
        completed=completed,
        reward=float(reward) if isinstance(reward, number) and not isinstance(reward, bool) else None,
        success=float(success) if isinstance(success, number) and not isinstance(success, bool) else None,
        category=category,
        error_stage=None if completed else (str(error.get("stage")) if error.get("stage") else None),
    )


def audit_traces(path: str | Path) -> TraceAudit:
    """Read ``traces.jsonl`` once, line by line, and return what the checks need.

    Promises: never loads the whole file; a missing file gives an empty audit; the last line of an
    episode wins as its latest record (spec §6.5).
    """
    audit = TraceAudit(path=Path(path))
    if not audit.path.exists():
        return audit
    with audit.path.open("r", encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            audit.lines += 1
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                audit.torn_lines += 1
                continue
            problem = _validate(record)
            if problem is not None:
                audit.invalid_count += 1
                if len(audit.invalid) < 20:
                    audit.invalid.append(f"line {number}: {problem}")
                continue
            audit.leaks.extend(_leaks(record))
            audit.latest[record["episode_id"]] = _outcome(record)
    return audit
