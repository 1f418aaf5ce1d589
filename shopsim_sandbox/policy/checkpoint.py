"""Checkpoint files of the baseline policy: the "weights" a sandbox policy server is started on.

A checkpoint sets the policy's competence, i.e. its lapse rates, so the sandbox can stand in for a
series of trained checkpoints (``python -m shopsim_sandbox.policy serve --checkpoint FILE``)::

    {"format": "shopsim-policy-checkpoint-v1", "step": 100,
     "lapses": {"ignore_budget": 0.3, "first_option": 0.4, "impatient": 0.4, "terse_query": 0.5,
                "runner_up": 0.05}}

Every lapse key is optional (default: the ``LAPSE_*`` constants of ``decide``), each a probability
in [0, 1]; unknown keys are refused. ``load_policy_checkpoint`` reads a file and turns every problem
into a one-line ``CheckpointError`` naming the file and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError

from shopsim_sandbox.policy.decide import DEFAULT_LAPSE_RATES, LapseRates

__all__ = ["POLICY_CHECKPOINT_FORMAT", "CheckpointError", "PolicyCheckpoint", "load_policy_checkpoint"]

POLICY_CHECKPOINT_FORMAT: Final = "shopsim-policy-checkpoint-v1"
"""The ``format`` tag of the one checkpoint format this reader accepts."""


class CheckpointError(ValueError):
    """A policy checkpoint file is unreadable or invalid; the message is one line naming file and field."""


class PolicyCheckpoint(BaseModel):
    """A sandbox policy checkpoint (``shopsim-policy-checkpoint-v1``); field order is the file's."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["shopsim-policy-checkpoint-v1"] = POLICY_CHECKPOINT_FORMAT
    """Format tag; must be ``shopsim-policy-checkpoint-v1``."""
    step: StrictInt | None = Field(default=None, ge=0)
    """Training step the checkpoint stands for (informative; the policy does not read it)."""
    lapses: LapseRates = DEFAULT_LAPSE_RATES
    """Lapse probabilities; a missing key keeps its ``LAPSE_*`` default."""

    @classmethod
    def from_data(cls, data: Any, source: str = "<memory>") -> PolicyCheckpoint:
        """Validate a decoded JSON value as a checkpoint.

        Raises:
            CheckpointError: one line ``<source>: <field>: <problem>`` (several problems joined by
                ``; ``); a wrong ``format`` names the accepted one, an unknown key lists the valid keys.
        """
        if not isinstance(data, dict):
            raise CheckpointError(
                f"{source}: (top level): must be a JSON object (got {type(data).__name__}); "
                f'write {{"format": "{POLICY_CHECKPOINT_FORMAT}", "lapses": {{...}}}}'
            )
        if "format" not in data:
            raise CheckpointError(f'{source}: format: required field is missing; add "format": '
                                  f'"{POLICY_CHECKPOINT_FORMAT}"')
        if data["format"] != POLICY_CHECKPOINT_FORMAT:
            raise CheckpointError(f"{source}: format: is {_show(data['format'])}; this reader accepts "
                                  f"{POLICY_CHECKPOINT_FORMAT!r}")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(_describe(e) for e in exc.errors(include_url=False))
            raise CheckpointError(f"{source}: {problems}") from None


def load_policy_checkpoint(path: str | Path) -> PolicyCheckpoint:
    """Read and validate a policy checkpoint file.

    Raises:
        CheckpointError: the file is unreadable, not JSON, or not a valid
            ``shopsim-policy-checkpoint-v1`` document; one line naming the file and the field.
    """
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{source}: cannot read the checkpoint file ({exc}); pass a "
                              f"{POLICY_CHECKPOINT_FORMAT} JSON file") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise CheckpointError(f"{source}: not JSON ({exc}); a policy checkpoint is a JSON object with "
                              f'"format": "{POLICY_CHECKPOINT_FORMAT}"') from None
    return PolicyCheckpoint.from_data(data, source)


_LAPSE_KEYS = ", ".join(LapseRates.model_fields)
_TOP_KEYS = ", ".join(PolicyCheckpoint.model_fields)


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _describe(error: Any) -> str:
    loc = error.get("loc", ())
    where = ".".join(str(part) for part in loc) or "(top level)"
    kind = error.get("type")
    if kind == "extra_forbidden":
        valid = _LAPSE_KEYS if len(loc) > 1 and loc[0] == "lapses" else _TOP_KEYS
        return f"{where}: unknown key; valid keys: {valid}"
    if len(loc) == 2 and loc[0] == "lapses":
        return f"{where}: must be a probability in [0, 1] (got {_show(error.get('input'))})"
    if where == "lapses" and kind == "model_type":
        return f"lapses: must be an object of probabilities (got {_show(error.get('input'))})"
    if where == "step":
        return f"step: must be an integer >= 0 or null (got {_show(error.get('input'))})"
    return f"{where}: {error.get('msg', 'invalid')} (got {_show(error.get('input'))})"
