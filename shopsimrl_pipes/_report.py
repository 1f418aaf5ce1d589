"""What a trainer reports to the training round that started it: steps, checkpoints, the round's end.

Inside a Dagster Pipes process (``round_training`` started it) every report goes through Pipes: step
metrics as log lines and custom messages (the asset turns them into observations and metadata), the
round's end as the materialization's metadata. Outside one (a trainer started by hand) the same calls
print one line each, so an adapter calls the helper unconditionally.

Checkpoints are registered in the checkpoint registry the moment the trainer has written them, so the
registry sensor evaluates each on the val suite while the round still runs. The entry is written
atomically after the weights exist: a trainer killed at any point leaves either no entry or a whole one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["TrainerReport", "open_trainer_report", "EXTRAS_ENV", "checkpoint_id_for"]

#: a trainer started outside Pipes reads its extras from this variable (a JSON object)
EXTRAS_ENV = "SHOPSIMRL_ROUND_EXTRAS"
STEP_MESSAGE = "shopsimrl-trainer-step-v1"
CHECKPOINT_MESSAGE = "shopsimrl-trainer-checkpoint-v1"


def checkpoint_id_for(round_id: str, step: int) -> str:
    """The registry id of the checkpoint a round's trainer saved at *step* (``<round>-step-000400``)."""
    return f"{round_id}-step-{step:06d}"


def _finite(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name}: {value!r} is not a finite number; report a finite value or None")
    return number


class TrainerReport:
    """The trainer's side of a round (built by :func:`open_trainer_report`)."""

    def __init__(self, pipes: Any, extras: dict[str, Any]) -> None:
        self._pipes = pipes
        self.extras = extras
        """The round's values: ``round``, ``round_dir``, ``training_config``, ``out_dir``, ``checkpoint_dir``,
        ``resume_from`` (the last registered checkpoint's weights, or None), ``registry``."""
        self.steps: list[dict[str, Any]] = []
        self.checkpoints: list[dict[str, Any]] = []

    @property
    def under_dagster(self) -> bool:
        """Whether a Dagster run started this process (reports go through Pipes)."""
        return self._pipes is not None

    def log(self, message: str) -> None:
        """One line in the run's log (stderr outside Dagster)."""
        if self._pipes is not None:
            self._pipes.log.info(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def step(self, step: int, *, reward: float, success: float, frontier_share: float | None = None,
             tokens_per_s: float | None = None, **more: float) -> dict[str, Any]:
        """Report one optimizer step's rollout metrics; return the record sent.

        Raises:
            ValueError: a non-finite number (one line naming it).
        """
        record: dict[str, Any] = {"kind": STEP_MESSAGE, "step": int(step), "time": time.time(),
                                  "reward": _finite("reward", reward), "success": _finite("success", success),
                                  "frontier_share": _finite("frontier_share", frontier_share),
                                  "tokens_per_s": _finite("tokens_per_s", tokens_per_s)}
        record.update({key: _finite(key, value) for key, value in more.items()})
        self.steps.append(record)
        shown = ", ".join(f"{k}={v:.4g}" for k, v in record.items() if isinstance(v, float) and k != "time")
        self.log(f"trainer step {step}: {shown}")
        if self._pipes is not None:
            self._pipes.report_custom_message(record)
        return record

    def checkpoint(self, weights: str | os.PathLike[str], step: int, *, served_model: str | None = None) -> str:
        """Register the checkpoint the trainer has just written (*weights*, at training *step*); return its id.

        Call it only after the weights are complete on disk (write them to a temporary name and rename).

        Raises:
            ConfigError: the registry refuses the entry (e.g. the id is taken by other weights).
        """
        from shopsimrl_dagster.registry import Checkpoint, register_checkpoint

        registry = self.extras.get("registry")
        if not registry:
            raise ValueError("no registry in the round's extras; start the trainer from round_training or set "
                             f"{EXTRAS_ENV}")
        checkpoint_id = checkpoint_id_for(str(self.extras["round"]), int(step))
        path = register_checkpoint(registry, Checkpoint(checkpoint_id=checkpoint_id, step=int(step),
                                                        weights=str(Path(weights).resolve()),
                                                        served_model=served_model))
        record = {"kind": CHECKPOINT_MESSAGE, "checkpoint_id": checkpoint_id, "step": int(step),
                  "weights": str(Path(weights).resolve()), "entry": str(path)}
        self.checkpoints.append(record)
        self.log(f"registered checkpoint {checkpoint_id} (step {step}, weights {record['weights']})")
        if self._pipes is not None:
            self._pipes.report_custom_message(record)
        return checkpoint_id

    def finish(self, **metadata: Any) -> None:
        """Report the round's end: the last step's metrics, the checkpoints and *metadata* (JSON values)."""
        last = self.steps[-1] if self.steps else {}
        summary: dict[str, Any] = {
            "steps": len(self.steps),
            **{key: last[key] for key in ("reward", "success", "frontier_share", "tokens_per_s")
               if last.get(key) is not None},
            "checkpoints": [c["checkpoint_id"] for c in self.checkpoints],
            **metadata,
        }
        if self._pipes is not None:
            self._pipes.report_asset_materialization(metadata=summary)
        else:
            print(json.dumps(summary), flush=True)


@contextlib.contextmanager
def open_trainer_report() -> Iterator[TrainerReport]:
    """The round's report channel: Dagster Pipes when a run started this process, else print lines.

    Outside Pipes the extras come from ``$SHOPSIMRL_ROUND_EXTRAS`` (a JSON object), empty when unset.
    """
    from dagster_pipes import DAGSTER_PIPES_CONTEXT_ENV_VAR, open_dagster_pipes

    if os.environ.get(DAGSTER_PIPES_CONTEXT_ENV_VAR):  # set by the orchestrating Pipes client
        with open_dagster_pipes() as pipes:
            yield TrainerReport(pipes, dict(pipes.extras))
        return
    extras = json.loads(os.environ.get(EXTRAS_ENV) or "{}")
    yield TrainerReport(None, extras if isinstance(extras, dict) else {})
