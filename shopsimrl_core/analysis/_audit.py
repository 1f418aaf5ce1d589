"""The trace audit: one streaming pass over ``traces.jsonl`` answering a run's integrity questions.

- every line that is JSON validates against the ``shopsimrl-episode-v4`` contract (:func:`validate_trace`);
- no private-goal text (the persona's hidden ``__reasoning__``, the full instruction of a persona
  task, the goal object itself) appears in any model-visible message (:func:`goal_leaks`);
- and, on the side, the per-episode latest records a summary presentation needs (category, reward,
  success) and failures by stage.

A line that is not JSON at all is a torn write left by a killed process (runtime-semantics §6.5: the
store skips it and repairs the file on the next append). It is counted, not treated as invalid.
The pipeline's blocking checks are thin wrappers over :func:`audit_traces`.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shopsimrl_core._errors import TraceFormatError
from shopsimrl_core._hashing import json_object
from shopsimrl_core.episode._trace import is_complete, validate_trace
from shopsimrl_core.runs.storage._jsonl import iter_trace_lines

__all__ = ["EpisodeOutcome", "TraceAudit", "audit_traces", "goal_leaks"]

_VISIBLE_ROLES = {"system", "user", "tool"}
# Shorter texts match by accident (a two-character option value also appears in product pages).
_MIN_SECRET_CHARS = 8
_KEPT_PROBLEMS = 20


@dataclass
class EpisodeOutcome:
    """The latest record of one episode, reduced to what a summary presentation shows."""

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


def _goal_of(record: dict[str, Any]) -> dict[str, Any] | None:
    final = record.get("final")
    if isinstance(final, dict) and isinstance(final.get("goal"), dict) and final["goal"]:
        goal: dict[str, Any] = final["goal"]
        return goal
    for step in reversed(record.get("steps") or []):
        env = step.get("environment") if isinstance(step, dict) else None
        if isinstance(env, dict) and isinstance(env.get("goal"), dict) and env["goal"]:
            step_goal: dict[str, Any] = env["goal"]
            return step_goal
    return None


def _secrets(record: dict[str, Any], goal: dict[str, Any]) -> list[tuple[str, str]]:
    secrets: list[tuple[str, str]] = []
    persona = goal.get("user_persona")
    if isinstance(persona, dict):
        hidden = persona.get("__reasoning__")
        if isinstance(hidden, str) and len(hidden.strip()) >= _MIN_SECRET_CHARS:
            secrets.append(("goal.user_persona.__reasoning__", hidden.strip()))
    reset = json_object(record.get("reset"))
    full = goal.get("instruction_text")
    shown = reset.get("task_instruction")
    # In persona mode the agent sees the short request; the full instruction is the private goal.
    if (
        isinstance(full, str)
        and len(full.strip()) >= _MIN_SECRET_CHARS
        and isinstance(shown, str)
        and full.strip() != shown.strip()
    ):
        if full.strip() not in shown:
            secrets.append(("goal.instruction_text", full.strip()))
    return secrets


def _visible_texts(record: dict[str, Any]) -> list[tuple[str, str]]:
    texts: list[tuple[str, str]] = []
    for index, message in enumerate(record.get("conversation") or []):
        if (
            isinstance(message, dict)
            and message.get("role") in _VISIBLE_ROLES
            and isinstance(message.get("content"), str)
        ):
            texts.append((f"conversation.{index} ({message['role']})", message["content"]))
    for step in record.get("steps") or []:
        if isinstance(step, dict) and isinstance(step.get("observation"), str):
            texts.append((f"steps.{step.get('step_index')}.observation", step["observation"]))
    return texts


def goal_leaks(record: dict[str, Any]) -> list[str]:
    """Every model-visible place of one trace record that shows private-goal text.

    Looks at system/user/tool messages and step observations for the serialised goal object, the
    persona's hidden ``__reasoning__`` and (in persona mode) the full instruction. Returns
    ``"<episode_id>: <where> contains <what>"`` phrases; empty when nothing leaks.
    """
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


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _outcome(record: dict[str, Any]) -> EpisodeOutcome:
    final = json_object(record.get("final"))
    completed = is_complete(record)
    detail = json_object(final.get("reward_detail"))
    goal = _goal_of(record) or {}
    category = str(goal.get("category") or "unknown").split("›")[0].strip() or "unknown"
    error = json_object(record.get("error"))
    job = json_object(record.get("job"))
    return EpisodeOutcome(
        episode_id=record["episode_id"],
        task_id=job.get("task_id"),
        completed=completed,
        reward=_number(final.get("reward")),
        success=_number(detail.get("r_success")),
        category=category,
        error_stage=None if completed else (str(error.get("stage")) if error.get("stage") else None),
    )


def audit_traces(path: str | os.PathLike[str]) -> TraceAudit:
    """Read a traces file once, line by line, and report validity, torn lines, leaks and outcomes.

    Promises: never loads the whole file; a missing file gives an empty audit; the last valid line
    of an episode wins as its latest record (runtime-semantics §6.5); blank lines are not counted.
    """
    audit = TraceAudit(path=Path(path))
    for line in iter_trace_lines(audit.path):
        if line.blank:
            continue
        audit.lines += 1
        if not line.parsed:
            audit.torn_lines += 1
            continue
        record = line.value
        try:
            validate_trace(record)
        except TraceFormatError as exc:
            audit.invalid_count += 1
            if len(audit.invalid) < _KEPT_PROBLEMS:
                audit.invalid.append(f"line {line.number}: {exc.one_line()}")
            continue
        audit.leaks.extend(goal_leaks(record))
        audit.latest[record["episode_id"]] = _outcome(record)
    return audit
