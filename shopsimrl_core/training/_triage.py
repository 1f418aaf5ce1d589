"""What a finished GRPO group says about the round (docs/training.md#triage).

Classes, first match wins:

1. ``environment_or_runtime_error`` — a sample (or the diagnostic retry) ended without a score: the environment or
   the runtime failed, so the group says nothing about the policy.
2. ``not_on_frontier`` — some sample succeeded: the task is within reach, GRPO learns from it; nothing to analyse.
3. ``retry_disabled`` — every sample was scored and failed, but the diagnostic retry is switched off (or there is
   no active skill to retry with).
4. ``not_internalized`` — every sample failed, and one retry with every active skill's text succeeded: the skills
   know what the policy has not learned yet.
5. ``full_skill_failure_pending_analysis`` — every sample failed and so did the retry with the full skill text:
   these episodes are what the analysts take as input for the next round's candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shopsimrl_core.documents._training import DiagnosticRetry, GroupMember, TriageClass

__all__ = ["classify_group", "needs_retry", "episode_outcome"]


def episode_outcome(record: dict[str, Any]) -> tuple[bool, float | None, bool | None]:
    """``(scored, reward, success)`` of a trace record: scored when it completed with a numeric reward.

    Success is ``reward_detail.r_success == 1`` where the environment reports it, else ``reward == 1``.
    """
    if record.get("status") != "completed" or not isinstance(record.get("final"), dict):
        return False, None, None
    final = record["final"]
    reward = final.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        return False, None, None
    detail = final.get("reward_detail")
    r_success = detail.get("r_success") if isinstance(detail, dict) else None
    if isinstance(r_success, (int, float)) and not isinstance(r_success, bool):
        return True, float(reward), float(r_success) == 1.0
    return True, float(reward), float(reward) == 1.0


def needs_retry(members: Sequence[GroupMember]) -> bool:
    """True when every sample was scored and none succeeded (the group is on the failure frontier)."""
    return bool(members) and all(m.scored and m.success is False for m in members)


def classify_group(
    members: Sequence[GroupMember], retry: DiagnosticRetry | None, *, retry_enabled: bool
) -> TriageClass:
    """The group's class (module docstring), from its members and its diagnostic retry (if one ran)."""
    if any(not m.scored for m in members):
        return "environment_or_runtime_error"
    if any(m.success for m in members):
        return "not_on_frontier"
    if retry is None or not retry_enabled:
        return "retry_disabled"
    if not retry.scored:
        return "environment_or_runtime_error"
    return "not_internalized" if retry.success else "full_skill_failure_pending_analysis"
